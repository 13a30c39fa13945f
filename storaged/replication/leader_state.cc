#include "storaged/replication/leader_state.h"

#include <algorithm>

namespace runnel::storaged::replication {
namespace {

using protocol::ErrorCode;

bool Contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

LeaderState::LeaderState(int32_t self, const PartitionRegistration& partition,
                         int64_t log_end_offset, int64_t durable_end_offset, int64_t high_watermark,
                         int64_t now_ms, ReplicationConfig config)
    : self_(self),
      config_(config),
      replicas_(partition.replicas),
      isr_(partition.isr),
      leader_epoch_(partition.leader_epoch),
      partition_epoch_(partition.partition_epoch),
      epoch_start_offset_(log_end_offset),
      log_end_offset_(log_end_offset),
      durable_end_offset_(std::min(durable_end_offset, log_end_offset)),
      high_watermark_(std::clamp<int64_t>(high_watermark, 0, log_end_offset)) {
  for (int32_t r : replicas_) {
    if (r == self_) continue;
    Follower f;
    if (Contains(isr_, r)) f.last_caught_up_time_ms = now_ms;
    followers_[r] = f;
  }
  MaybeAdvanceHighWatermark(now_ms);
}

std::vector<int32_t> LeaderState::MaximalIsr() const {
  std::vector<int32_t> out = isr_;
  if (pending_) {
    for (int32_t r : pending_->new_isr) {
      if (!Contains(out, r)) out.push_back(r);
    }
  }
  return out;
}

bool LeaderState::InMaximalIsr(int32_t replica) const {
  return Contains(isr_, replica) || (pending_ && Contains(pending_->new_isr, replica));
}

size_t LeaderState::MaximalIsrSize() const {
  size_t n = isr_.size();
  if (pending_) {
    for (int32_t r : pending_->new_isr) n += Contains(isr_, r) ? 0 : 1;
  }
  return n;
}

const LeaderState::Follower* LeaderState::follower(int32_t replica) const {
  auto it = followers_.find(replica);
  return it == followers_.end() ? nullptr : &it->second;
}

bool LeaderState::OnLocalEnd(int64_t log_end_offset, int64_t durable_end_offset, int64_t now_ms) {
  log_end_offset_ = log_end_offset;
  durable_end_offset_ = std::min(durable_end_offset, log_end_offset);
  return MaybeAdvanceHighWatermark(now_ms);
}

ErrorCode LeaderState::CheckAppend(bool acks_all) const {
  if (acks_all && static_cast<int64_t>(isr_.size()) < config_.min_insync_replicas) {
    return ErrorCode::kNotEnoughReplicas;
  }
  return ErrorCode::kNone;
}

LeaderState::AckCheck LeaderState::CheckAcksAll(int64_t last_offset) const {
  if (high_watermark_ <= last_offset) return {};
  if (static_cast<int64_t>(MaximalIsrSize()) < config_.min_insync_replicas) {
    return {true, ErrorCode::kNotEnoughReplicasAfterAppend};
  }
  return {true, ErrorCode::kNone};
}

bool LeaderState::IsCaughtUp(const Follower& f, int64_t now_ms) const {
  return f.log_end_offset == log_end_offset_ ||
         now_ms - f.last_caught_up_time_ms <= config_.replica_lag_time_max_ms;
}

bool LeaderState::MaybeAdvanceHighWatermark(int64_t now_ms) {
  int64_t candidate = durable_end_offset_;
  for (const auto& [id, f] : followers_) {
    // Kafka also waits for a caught-up follower that is about to join the ISR.
    bool counts = InMaximalIsr(id) || (f.log_end_offset >= 0 && IsCaughtUp(f, now_ms));
    if (counts && f.log_end_offset < candidate) candidate = f.log_end_offset;
  }
  if (candidate <= high_watermark_) return false;
  high_watermark_ = candidate;
  return true;
}

FetchAnswer LeaderState::OnFollowerFetch(const FollowerFetch& fetch, const EpochHistory& epochs,
                                         int64_t log_start_offset, int64_t now_ms) {
  FetchAnswer answer;
  answer.high_watermark = high_watermark_;
  if (fetch.current_leader_epoch >= 0 && fetch.current_leader_epoch < leader_epoch_) {
    answer.error = ErrorCode::kFencedLeaderEpoch;
    return answer;
  }
  if (fetch.current_leader_epoch > leader_epoch_) {
    answer.error = ErrorCode::kUnknownLeaderEpoch;
    return answer;
  }
  auto it = followers_.find(fetch.replica);
  if (it == followers_.end()) {
    answer.error = ErrorCode::kNotLeaderOrFollower;
    return answer;
  }
  if (fetch.last_fetched_epoch >= 0) {
    std::optional<std::pair<int32_t, int64_t>> end =
        epochs.EndOffsetFor(fetch.last_fetched_epoch, log_end_offset_);
    // An epoch above every one we know: the follower has seen a newer leader than us.
    if (!end) {
      answer.error = ErrorCode::kUnknownLeaderEpoch;
      return answer;
    }
    if (end->first < fetch.last_fetched_epoch || end->second < fetch.fetch_offset) {
      answer.diverging_epoch = EpochEndOffset{end->first, end->second};
      return answer;
    }
  }
  if (fetch.fetch_offset < log_start_offset || fetch.fetch_offset > log_end_offset_) {
    answer.error = ErrorCode::kOffsetOutOfRange;
    return answer;
  }
  // Kafka's lastCaughtUpTimeMs: caught up now when the fetch reaches our end; caught up as
  // of the previous fetch when it reaches the end we had then.
  Follower& f = it->second;
  if (fetch.fetch_offset >= log_end_offset_) {
    f.last_caught_up_time_ms = std::max(f.last_caught_up_time_ms, now_ms);
  } else if (f.last_fetch_leader_end >= 0 && fetch.fetch_offset >= f.last_fetch_leader_end) {
    f.last_caught_up_time_ms = std::max(f.last_caught_up_time_ms, f.last_fetch_time_ms);
  }
  f.log_end_offset = fetch.fetch_offset;
  f.last_fetch_leader_end = log_end_offset_;
  f.last_fetch_time_ms = now_ms;

  // Expansion: in sync once at or past the high watermark and this epoch's start.
  if (!pending_ && !Contains(isr_, fetch.replica) && f.log_end_offset >= high_watermark_ &&
      f.log_end_offset >= epoch_start_offset_) {
    IsrProposal p{leader_epoch_, partition_epoch_, {}};
    for (int32_t r : replicas_) {
      if (Contains(isr_, r) || r == fetch.replica) p.new_isr.push_back(r);
    }
    pending_ = p;
    answer.proposal = p;
  }
  MaybeAdvanceHighWatermark(now_ms);
  answer.high_watermark = high_watermark_;
  answer.serve_records = true;
  return answer;
}

std::optional<IsrProposal> LeaderState::MaybeShrinkIsr(int64_t now_ms) {
  if (pending_) return std::nullopt;
  IsrProposal p{leader_epoch_, partition_epoch_, {}};
  bool shrinks = false;
  for (int32_t r : isr_) {
    auto it = followers_.find(r);
    if (r != self_ && it != followers_.end() && !IsCaughtUp(it->second, now_ms)) {
      shrinks = true;
    } else {
      p.new_isr.push_back(r);
    }
  }
  if (!shrinks) return std::nullopt;
  pending_ = p;
  return p;
}

LeaderState::RecordUpdate LeaderState::OnPartitionRecord(const PartitionRegistration& partition,
                                                         int64_t now_ms) {
  if (partition.leader_epoch < leader_epoch_) return RecordUpdate::kStale;
  if (partition.leader_epoch > leader_epoch_ || partition.leader != self_) {
    return RecordUpdate::kResigned;
  }
  if (partition.partition_epoch <= partition_epoch_) return RecordUpdate::kStale;
  partition_epoch_ = partition.partition_epoch;
  isr_ = partition.isr;
  for (int32_t r : partition.replicas) {
    if (r != self_ && !followers_.contains(r)) followers_[r] = Follower{};
  }
  // A replica reassigned away is no longer a follower (its fetches NOT_LEADER_OR_FOLLOWER).
  std::erase_if(followers_, [&](const auto& f) { return !Contains(partition.replicas, f.first); });
  replicas_ = partition.replicas;
  pending_.reset();
  MaybeAdvanceHighWatermark(now_ms);
  return RecordUpdate::kApplied;
}

void LeaderState::OnAlterPartitionError(ErrorCode error, const IsrProposal& proposal) {
  if (!pending_ || *pending_ != proposal) return;
  if (error == ErrorCode::kIneligibleReplica || error == ErrorCode::kInvalidRequest) {
    pending_.reset();
  }
}

}  // namespace runnel::storaged::replication
