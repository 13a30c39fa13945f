#include "storaged/replication/follower_state.h"

#include <algorithm>

namespace runnel::storaged::replication {

FollowerState::FollowerState(int32_t self, int32_t leader, int32_t leader_epoch,
                             int64_t high_watermark, int64_t log_end_offset)
    : self_(self),
      leader_(leader),
      leader_epoch_(leader_epoch),
      high_watermark_(std::clamp<int64_t>(high_watermark, 0, log_end_offset)) {}

FollowerFetch FollowerState::NextFetch(const EpochHistory& epochs, int64_t log_end_offset) const {
  FollowerFetch f;
  f.replica = self_;
  f.current_leader_epoch = leader_epoch_;
  f.fetch_offset = log_end_offset;
  std::optional<EpochEntry> latest = epochs.Latest();
  f.last_fetched_epoch = latest ? latest->epoch : -1;
  return f;
}

bool FollowerState::IsCurrent(const FollowerFetch& answered, const EpochHistory& epochs,
                              int64_t log_end_offset) const {
  FollowerFetch now = NextFetch(epochs, log_end_offset);
  return answered.replica == now.replica &&
         answered.current_leader_epoch == now.current_leader_epoch &&
         answered.fetch_offset == now.fetch_offset &&
         answered.last_fetched_epoch == now.last_fetched_epoch;
}

FollowerState::Truncation FollowerState::TruncationFor(const EpochEndOffset& diverging,
                                                       const EpochHistory& epochs,
                                                       int64_t log_end_offset) {
  std::optional<std::pair<int32_t, int64_t>> ours =
      epochs.EndOffsetFor(diverging.epoch, log_end_offset);
  if (!ours) {
    // We hold no epoch at or below the leader's: its end offset is where we part.
    return {std::min(diverging.end_offset, log_end_offset), true};
  }
  if (ours->first != diverging.epoch) {
    // We do not know the leader's epoch: cut to the end of our largest epoch below it and
    // ask again with that one.
    return {std::min(ours->second, log_end_offset), false};
  }
  return {std::min({ours->second, diverging.end_offset, log_end_offset}), true};
}

void FollowerState::OnTruncated(int64_t log_end_offset) {
  high_watermark_ = std::min(high_watermark_, log_end_offset);
}

int64_t FollowerState::OnFetchAnswer(int64_t leader_high_watermark, int64_t log_end_offset) {
  high_watermark_ = std::max<int64_t>(0, std::min(leader_high_watermark, log_end_offset));
  return high_watermark_;
}

}  // namespace runnel::storaged::replication
