// A shard's offsets: commits, deletes, deleting a group, and expiry (KIP-211).
#include <algorithm>

#include "brokerd/group/coordinator.h"
#include "brokerd/group/coordinator_internal.h"
#include "brokerd/handlers/handler.h"
#include "common/protocol/error_code.h"
#include "common/util/big_endian.h"

namespace runnel::brokerd::group {

using internal::kLog;

namespace {

// The topics of a consumer-protocol subscription (ConsumerProtocolSubscription: version
// int16, then topics as an int32 count of int16-length strings; later versions only append
// fields). nullopt when the bytes do not parse.
std::optional<std::vector<std::string>> SubscriptionTopics(const std::vector<uint8_t>& b) {
  size_t pos = 0;
  auto need = [&](size_t n) { return pos + n <= b.size(); };
  if (!need(2)) return std::nullopt;
  const auto version = static_cast<int16_t>(LoadBigEndian16(b.data()));
  if (version < 0) return std::nullopt;
  pos = 2;
  if (!need(4)) return std::nullopt;
  const auto count = static_cast<int32_t>(LoadBigEndian32(&b[pos]));
  pos += 4;
  if (count < 0 || static_cast<size_t>(count) > (b.size() - pos) / 2) return std::nullopt;
  std::vector<std::string> topics;
  for (int32_t i = 0; i < count; ++i) {
    if (!need(2)) return std::nullopt;
    const auto len = static_cast<int16_t>(LoadBigEndian16(&b[pos]));
    pos += 2;
    if (len < 0 || !need(static_cast<size_t>(len))) return std::nullopt;
    topics.emplace_back(reinterpret_cast<const char*>(b.data() + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
  }
  return topics;
}

}  // namespace

// ---- Offsets -------------------------------------------------------------------------------

void Shard::CommitOffsets(const std::string& group_id, std::vector<Commit> commits,
                          std::function<void(ErrorCode error)> done) {
  std::vector<LogRecord> records;
  records.reserve(commits.size());
  GroupSlot& slot = FindOrCreate(group_id);
  for (const Commit& c : commits) {
    records.push_back(OffsetCommitRecord(OffsetKey{group_id, c.topic, c.partition}, c.value));
    ++slot.pending_partitions[{c.topic, c.partition}];
  }
  ++slot.pending_commits;
  auto shared = std::make_shared<std::vector<Commit>>(std::move(commits));
  Write(std::move(records), [this, group_id, shared, done = std::move(done)](ErrorCode error) {
    if (GroupSlot* slot = Find(group_id)) {
      --slot->pending_commits;
      for (const Commit& c : *shared) {
        auto it = slot->pending_partitions.find({c.topic, c.partition});
        if (it != slot->pending_partitions.end() && --it->second <= 0) {
          slot->pending_partitions.erase(it);
        }
        if (error != ErrorCode::kNone || state_ != State::kActive) continue;
        CommittedOffset& o = slot->offsets[{c.topic, c.partition}];
        o.offset = c.value.offset;
        o.leader_epoch = c.value.leader_epoch;
        o.metadata = c.value.metadata;
        o.commit_timestamp_ms = c.value.commit_timestamp_ms;
        o.expire_timestamp_ms = c.value.expire_timestamp_ms;
      }
      if (slot->Unused() && state_ == State::kActive) groups_.erase(group_id);
    }
    done(error);
  });
}

void Shard::DeleteOffsets(const std::string& group_id,
                          const std::vector<TopicPartition>& partitions,
                          std::function<void(ErrorCode error)> done) {
  std::vector<LogRecord> records;
  std::vector<TopicPartition> deleted;
  if (GroupSlot* slot = Find(group_id)) {
    for (const TopicPartition& tp : partitions) {
      if (slot->offsets.count(tp) == 0) continue;
      if (std::find(deleted.begin(), deleted.end(), tp) != deleted.end()) continue;
      records.push_back(OffsetTombstone(OffsetKey{group_id, tp.first, tp.second}));
      deleted.push_back(tp);
    }
  }
  Write(std::move(records), [this, group_id, deleted, done = std::move(done)](ErrorCode error) {
    if (error == ErrorCode::kNone) {
      if (GroupSlot* slot = Find(group_id)) {
        for (const TopicPartition& tp : deleted) slot->offsets.erase(tp);
        if (slot->Unused()) groups_.erase(group_id);
      }
    }
    done(error);
  });
}

std::vector<LogRecord> Shard::GroupTombstones(const std::string& group_id, const GroupSlot& slot) {
  std::vector<LogRecord> records;
  if (slot.consumer) {
    records = slot.consumer->TombstoneRecords();
  } else {
    records.push_back(ClassicGroupTombstone(group_id));
  }
  return records;
}

void Shard::DeleteGroup(const std::string& group_id, std::function<void(ErrorCode error)> done) {
  GroupSlot* slot = Find(group_id);
  std::vector<LogRecord> records;
  if (slot != nullptr) {
    std::set<TopicPartition> partitions;
    for (const auto& [tp, offset] : slot->offsets) partitions.insert(tp);
    // Commits still being written land before these tombstones (one partition's appends
    // keep their order), so they are deleted too.
    for (const auto& [tp, count] : slot->pending_partitions) partitions.insert(tp);
    for (const TopicPartition& tp : partitions) {
      records.push_back(OffsetTombstone(OffsetKey{group_id, tp.first, tp.second}));
    }
    for (LogRecord& r : GroupTombstones(group_id, *slot)) records.push_back(std::move(r));
    // Gone at once, as Kafka marks the group Dead: a join or commit arriving while the
    // tombstones are written starts a new group, whose records follow them in the log.
    Remove(group_id);
  }
  Write(std::move(records), std::move(done));
}

std::optional<std::set<std::string>> Shard::SubscribedTopics(const GroupSlot& slot) const {
  if (slot.consumer) {
    std::set<std::string> topics;
    for (const auto& [name, info] : slot.consumer->subscription_metadata()) topics.insert(name);
    for (const auto& [member_id, m] : slot.consumer->members()) {
      topics.insert(m.subscribed_topic_names.begin(), m.subscribed_topic_names.end());
    }
    return topics;
  }
  if (!slot.classic || slot.classic->protocol_type() != "consumer") return std::set<std::string>();
  // Kafka parses each member's metadata for the chosen protocol; when it cannot, the group
  // counts as subscribed to every topic.
  std::set<std::string> topics;
  if (slot.classic->empty()) return topics;
  if (!slot.classic->protocol().has_value()) return std::nullopt;
  for (const ClassicMemberValue& m : slot.classic->ToValue().members) {
    std::optional<std::vector<std::string>> t = SubscriptionTopics(m.subscription);
    if (!t.has_value()) return std::nullopt;
    topics.insert(t->begin(), t->end());
  }
  return topics;
}

void Shard::ScheduleExpiry() {
  if (state_ != State::kActive) return;
  expiry_timer_ = StartTimer(config_.offsets_retention_check_interval_ms, [this] {
    expiry_timer_ = 0;
    ExpireOffsets();
    ScheduleExpiry();
  });
}

void Shard::ExpireOffsets(std::function<void()> done) {
  if (state_ != State::kActive) {
    if (done) done();
    return;
  }
  const int64_t now = NowMs();
  struct Expired {
    std::string group;
    std::vector<TopicPartition> partitions;
    bool remove_group = false;
  };
  std::vector<Expired> expired;
  std::vector<LogRecord> records;
  for (auto& [id, slot] : groups_) {
    if (slot.pending_commits > 0) continue;  // a commit in flight decides
    // Kafka's OffsetExpirationCondition: which timestamp an offset's age counts from, or none
    // while the group has members (classic groups other than "consumer" ones with known
    // subscriptions).
    enum class Base { kNone, kCommit, kStateTimestamp } base = Base::kCommit;
    int64_t state_ts = -1;
    bool has_members = false;
    if (slot.classic) {
      has_members = !slot.classic->empty();
      if (slot.classic->state() == ClassicGroup::State::kDead) continue;
      if (!slot.classic->protocol_type().empty()) {
        if (slot.classic->state() == ClassicGroup::State::kEmpty) {
          base = Base::kStateTimestamp;
          state_ts = slot.classic->current_state_timestamp_ms();
        } else if (slot.classic->protocol_type() == "consumer" &&
                   slot.classic->state() == ClassicGroup::State::kStable) {
          base = Base::kCommit;
        } else {
          base = Base::kNone;
        }
      }
    } else if (slot.consumer) {
      has_members = !slot.consumer->empty();
    }
    if (base == Base::kNone) continue;
    // Offsets of topics the group is subscribed to never expire while it is.
    std::optional<std::set<std::string>> subscribed;
    if (has_members) {
      subscribed = SubscribedTopics(slot);
      if (!subscribed.has_value()) continue;  // subscribed to everything
    }
    Expired e{id, {}, false};
    bool all_expired = true;
    for (const auto& [tp, offset] : slot.offsets) {
      if (subscribed.has_value() && subscribed->count(tp.first) > 0) {
        all_expired = false;
        continue;
      }
      bool is_expired;
      if (offset.expire_timestamp_ms >= 0) {
        is_expired = now >= offset.expire_timestamp_ms;
      } else {
        const int64_t from =
            base == Base::kStateTimestamp && state_ts >= 0 ? state_ts : offset.commit_timestamp_ms;
        is_expired = now - from >= config_.offsets_retention_ms;
      }
      if (is_expired) {
        e.partitions.push_back(tp);
        records.push_back(OffsetTombstone(OffsetKey{id, tp.first, tp.second}));
      } else {
        all_expired = false;
      }
    }
    // A group with no members and nothing left goes, with its tombstone (Kafka's
    // cleanupGroupMetadata).
    if (all_expired && !has_members && (slot.classic || slot.consumer)) {
      e.remove_group = true;
      for (LogRecord& r : GroupTombstones(id, slot)) records.push_back(std::move(r));
    } else if (all_expired && !has_members && !e.partitions.empty()) {
      e.remove_group = true;  // offsets-only: the slot goes with its last offset
    }
    if (!e.partitions.empty() || e.remove_group) expired.push_back(std::move(e));
  }
  if (records.empty()) {
    if (done) done();
    return;
  }
  size_t count = 0;
  for (const Expired& e : expired) count += e.partitions.size();
  Write(std::move(records),
        [this, expired = std::move(expired), count, done = std::move(done)](ErrorCode error) {
          if (error != ErrorCode::kNone) {
            kLog()->warn("__consumer_offsets-{}: expiry write failed with error {}", partition_,
                         protocol::ErrorName(error));
          } else if (state_ == State::kActive) {
            for (const Expired& e : expired) {
              GroupSlot* slot = Find(e.group);
              if (slot == nullptr) continue;
              for (const TopicPartition& tp : e.partitions) slot->offsets.erase(tp);
              // Remove only what is still empty: a member may have joined meanwhile (its
              // records follow the tombstone in the log, so a reload agrees).
              bool still_empty = slot->offsets.empty() && slot->pending_commits == 0 &&
                                 (!slot->classic || slot->classic->empty()) &&
                                 (!slot->consumer || slot->consumer->empty());
              if (e.remove_group && still_empty) Remove(e.group);
            }
            kLog()->info("__consumer_offsets-{}: expired {} offset(s)", partition_, count);
          }
          if (done) done();
        });
}
}  // namespace runnel::brokerd::group
