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

// A transactional write's error for TxnOffsetCommit: the producer's own errors from the
// append go to the client as they are (Kafka passes them through), everything else as any
// coordinator write.
ErrorCode TxnWriteError(ErrorCode error, ErrorCode append_error) {
  switch (append_error) {
    case ErrorCode::kInvalidProducerEpoch:
    case ErrorCode::kProducerFenced:
    case ErrorCode::kInvalidProducerIdMapping:
    case ErrorCode::kInvalidTxnState:
    case ErrorCode::kTransactionCoordinatorFenced:
    case ErrorCode::kTransactionAbortable:
      return append_error;
    default:
      return error;
  }
}

// A commit of `tp` is no longer in flight.
void EndPendingCommit(GroupSlot& slot, const TopicPartition& tp) {
  auto it = slot.pending_partitions.find(tp);
  if (it != slot.pending_partitions.end() && --it->second <= 0) slot.pending_partitions.erase(it);
}

void FillOffset(const OffsetValue& value, int64_t record_offset, CommittedOffset* o) {
  o->offset = value.offset;
  o->leader_epoch = value.leader_epoch;
  o->metadata = value.metadata;
  o->commit_timestamp_ms = value.commit_timestamp_ms;
  o->expire_timestamp_ms = value.expire_timestamp_ms;
  o->record_offset = record_offset;
}

}  // namespace

// ---- Offsets -------------------------------------------------------------------------------

std::vector<LogRecord> Shard::StartCommits(const std::string& group_id,
                                           const std::vector<Commit>& commits) {
  std::vector<LogRecord> records;
  records.reserve(commits.size());
  GroupSlot& slot = FindOrCreate(group_id);
  for (const Commit& c : commits) {
    records.push_back(OffsetCommitRecord(OffsetKey{group_id, c.topic, c.partition}, c.value));
    ++slot.pending_partitions[{c.topic, c.partition}];
  }
  ++slot.pending_commits;
  return records;
}

void Shard::CommitOffsets(const std::string& group_id, std::vector<Commit> commits,
                          std::function<void(ErrorCode error)> done) {
  std::vector<LogRecord> records = StartCommits(group_id, commits);
  auto shared = std::make_shared<std::vector<Commit>>(std::move(commits));
  Append(records, std::nullopt,
         [this, group_id, shared, done = std::move(done)](ErrorCode error, ErrorCode,
                                                          int64_t base_offset) {
           if (GroupSlot* slot = Find(group_id)) {
             --slot->pending_commits;
             for (size_t i = 0; i < shared->size(); ++i) {
               const Commit& c = (*shared)[i];
               const TopicPartition tp{c.topic, c.partition};
               EndPendingCommit(*slot, tp);
               if (error != ErrorCode::kNone || state_ != State::kActive) continue;
               // Record i of the batch is at base_offset + i. A committed transaction's offset
               // from later in the log stays (completions come in log order, so only a
               // misordered one would lose here, as its replay would).
               const int64_t record_offset = base_offset + static_cast<int64_t>(i);
               CommittedOffset& o = slot->offsets[tp];
               if (o.record_offset > record_offset) continue;
               FillOffset(c.value, record_offset, &o);
             }
             if (slot->Unused() && state_ == State::kActive) groups_.erase(group_id);
           }
           done(error);
         });
}

void Shard::CommitTxnOffsets(const std::string& group_id, int64_t producer_id,
                             int16_t producer_epoch, std::vector<Commit> commits,
                             std::function<void(ErrorCode error)> done) {
  std::vector<LogRecord> records = StartCommits(group_id, commits);
  auto shared = std::make_shared<std::vector<Commit>>(std::move(commits));
  Append(records, TxnProducer{producer_id, producer_epoch},
         [this, group_id, producer_id, shared, done = std::move(done)](
             ErrorCode error, ErrorCode append_error, int64_t base_offset) {
           const ErrorCode result = TxnWriteError(error, append_error);
           if (GroupSlot* slot = Find(group_id)) {
             --slot->pending_commits;
             for (size_t i = 0; i < shared->size(); ++i) {
               const Commit& c = (*shared)[i];
               const TopicPartition tp{c.topic, c.partition};
               EndPendingCommit(*slot, tp);
               if (error != ErrorCode::kNone || state_ != State::kActive) continue;
               // Pending until the transaction's marker (EndTransaction); a later commit of
               // the same partition in this transaction replaces it, as in Kafka.
               FillOffset(c.value, base_offset + static_cast<int64_t>(i),
                          &slot->pending_txn_offsets[producer_id][tp]);
               txn_groups_[producer_id].insert(group_id);
             }
             if (slot->Unused() && state_ == State::kActive) groups_.erase(group_id);
           }
           done(result);
         });
}

void Shard::EndTransaction(int64_t producer_id, bool commit) {
  auto it = txn_groups_.find(producer_id);
  if (it == txn_groups_.end()) return;  // no offsets of this transaction here
  const std::set<std::string> group_ids = std::move(it->second);
  txn_groups_.erase(it);
  for (const std::string& group_id : group_ids) {
    GroupSlot* slot = Find(group_id);
    if (slot == nullptr) continue;
    auto txn = slot->pending_txn_offsets.find(producer_id);
    if (txn == slot->pending_txn_offsets.end()) continue;
    std::map<TopicPartition, CommittedOffset> offsets = std::move(txn->second);
    slot->pending_txn_offsets.erase(txn);
    if (commit) {
      for (auto& [tp, o] : offsets) {
        auto cur = slot->offsets.find(tp);
        if (cur != slot->offsets.end() && cur->second.record_offset >= o.record_offset) {
          kLog()->debug(
              "group {}: transactional offset of {}-{} at record {} (producer {}) is older than "
              "the committed one at {}; kept the latter",
              group_id, tp.first, tp.second, o.record_offset, producer_id,
              cur->second.record_offset);
          continue;
        }
        slot->offsets[tp] = std::move(o);
      }
    }
    if (state_ == State::kActive && slot->Unused()) groups_.erase(group_id);
  }
}

void Shard::DropPendingTxnOffsets(GroupSlot& slot, const TopicPartition& tp) {
  for (auto it = slot.pending_txn_offsets.begin(); it != slot.pending_txn_offsets.end();) {
    it->second.erase(tp);
    if (it->second.empty()) {
      it = slot.pending_txn_offsets.erase(it);
    } else {
      ++it;
    }
  }
}

void Shard::DeleteOffsets(const std::string& group_id,
                          const std::vector<TopicPartition>& partitions,
                          std::function<void(ErrorCode error)> done) {
  std::vector<LogRecord> records;
  std::vector<TopicPartition> deleted;
  if (GroupSlot* slot = Find(group_id)) {
    for (const TopicPartition& tp : partitions) {
      // Kafka writes the tombstone for a committed offset or a pending transactional one.
      if (slot->offsets.count(tp) == 0 && !slot->HasPendingTxnOffset(tp)) continue;
      if (std::find(deleted.begin(), deleted.end(), tp) != deleted.end()) continue;
      records.push_back(OffsetTombstone(OffsetKey{group_id, tp.first, tp.second}));
      deleted.push_back(tp);
    }
  }
  Write(std::move(records), [this, group_id, deleted, done = std::move(done)](ErrorCode error) {
    if (error == ErrorCode::kNone) {
      if (GroupSlot* slot = Find(group_id)) {
        for (const TopicPartition& tp : deleted) {
          slot->offsets.erase(tp);
          DropPendingTxnOffsets(*slot, tp);
        }
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
    // And the offsets of open transactions: the tombstones end them too (Kafka's
    // deleteAllOffsets); the slot and its pending offsets go below.
    for (const auto& [producer_id, txn] : slot->pending_txn_offsets) {
      for (const auto& [tp, offset] : txn) partitions.insert(tp);
    }
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
      // Not while a transaction has an offset for the partition (Kafka).
      if (is_expired && !slot.HasPendingTxnOffset(tp)) {
        e.partitions.push_back(tp);
        records.push_back(OffsetTombstone(OffsetKey{id, tp.first, tp.second}));
      } else {
        all_expired = false;
      }
    }
    // A group with no members and nothing left goes, with its tombstone (Kafka's
    // cleanupGroupMetadata).
    // Nor the group while it has open transactions.
    if (!slot.pending_txn_offsets.empty()) all_expired = false;
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
                                 slot->pending_txn_offsets.empty() &&
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
