// A shard's load: reading its __consumer_offsets partition from the start and replaying the
// records into groups and offsets.
#include <algorithm>
#include <chrono>

#include "brokerd/group/coordinator.h"
#include "brokerd/group/coordinator_internal.h"
#include "brokerd/handlers/handler.h"
#include "common/protocol/error_code.h"
#include "common/record/batch.h"
#include "common/record/control.h"

namespace runnel::brokerd::group {

using internal::kLog;

namespace {

constexpr int32_t kLoadReadBytes = 4 << 20;
constexpr std::chrono::milliseconds kReadTimeout{30000};
constexpr int64_t kLoadRetryMs = 1000;
constexpr int kMaxLoadRestarts = 100;
// Markers stored while loading make the load read on to the new log end, this many times at
// most (nothing but markers is appended to a loading shard's partition).
constexpr int kMaxLoadExtensions = 100;

}  // namespace

// ---- Loading -------------------------------------------------------------------------------

void Shard::Load(std::function<void()> done) {
  load_done_ = std::move(done);
  kLog()->debug("loading __consumer_offsets-{} (leader epoch {})", partition_, leader_epoch_);
  ReadNext(0);
}

void Shard::ReadNext(int64_t offset) {
  if (state_ != State::kLoading) return;
  storage::ReadRequest req;
  req.set_want_bytes(true);
  storage::ReadPartition* p = req.add_partitions();
  p->set_topic(std::string(kOffsetsTopic));
  p->set_partition(partition_);
  p->set_offset(offset);
  p->set_max_bytes(kLoadReadBytes);
  p->set_min_one_batch(true);
  std::weak_ptr<bool> alive = alive_;
  broker_.storage.Read(
      std::move(req), kReadTimeout,
      [this, alive, offset](const grpc::Status& status, storage::ReadResponse& resp) {
        if (alive.expired()) return;
        OnRead(status, resp, offset);
      });
}

void Shard::RetryRead(int64_t offset) {
  StartTimer(kLoadRetryMs, [this, offset] { ReadNext(offset); });
}

void Shard::OnRead(const grpc::Status& status, storage::ReadResponse& resp, int64_t offset) {
  if (state_ != State::kLoading) return;
  if (!status.ok() || resp.partitions_size() != 1) {
    kLog()->warn("__consumer_offsets-{}: load read failed: {}; retrying", partition_,
                 status.ok() ? "no result" : status.error_message());
    return RetryRead(offset);
  }
  storage::ReadPartitionResult& r = *resp.mutable_partitions(0);
  if (protocol::ErrorFromWire(r.error_code()) == ErrorCode::kOffsetOutOfRange &&
      ++load_restarts_ <= kMaxLoadRestarts) {
    // Below the log start (retention, DeleteRecords) or the start moved during the load.
    return ReadNext(std::max<int64_t>(r.log_start_offset(), 0));
  }
  if (r.error_code() != 0) {
    kLog()->warn("__consumer_offsets-{}: load read at {} failed: error {} {}; retrying", partition_,
                 offset, r.error_code(), r.error_message());
    return RetryRead(offset);
  }
  if (load_end_ < 0) load_end_ = r.log_end_offset();

  const std::string& bytes = r.records();
  StatusOr<std::vector<record::BatchView>> batches = record::SplitBatches(
      record::ByteSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  if (!batches.ok()) {
    kLog()->error("__consumer_offsets-{}: unreadable batches at {}: {}; retrying", partition_,
                  offset, batches.status().ToString());
    return RetryRead(offset);
  }
  int64_t next = offset;
  for (const record::BatchView& batch : *batches) {
    if (batch.base_offset() >= load_end_) break;
    next = std::max(next, batch.last_offset() + 1);
    if (batch.is_control()) {
      // A transaction marker ends the producer's pending offsets here (Kafka's
      // replayEndTransactionMarker); other control records mean nothing to groups.
      std::optional<record::EndTxnMarker> marker;
      protocol::KafkaError error = record::ReadEndTxnMarker(batch, &marker);
      if (!error.ok()) {
        kLog()->debug("__consumer_offsets-{}: skipping the control batch at {}: {}", partition_,
                      batch.base_offset(), error.message);
      } else if (marker.has_value()) {
        EndTransaction(batch.producer_id(), marker->commit);
      }
      continue;
    }
    const int64_t producer_id = batch.is_transactional() ? batch.producer_id() : -1;
    Status st = record::ForEachRecord(batch, [&](const record::Record& rec) {
      if (!rec.key.has_value()) return true;
      StatusOr<ParsedRecord> parsed = ParseRecord(*rec.key, rec.value);
      if (!parsed.ok()) {
        if (parsed.status().code() != absl::StatusCode::kNotFound) {
          kLog()->warn("__consumer_offsets-{}: skipping a record at {}: {}", partition_,
                       batch.base_offset() + rec.offset_delta, parsed.status().ToString());
        }
        return true;
      }
      Replay(*parsed, batch.base_offset() + rec.offset_delta, producer_id);
      return true;
    });
    if (!st.ok()) {
      kLog()->warn("__consumer_offsets-{}: skipping the batch at {}: {}", partition_,
                   batch.base_offset(), st.ToString());
    }
  }
  // Done at the end seen when the load began, or when a read brings nothing new (only batches
  // at or past that end): reading the same offset again would loop. A marker stored meanwhile
  // may end transactions whose offsets were just replayed: read on to the new end for it.
  if (batches->empty() || next >= load_end_ || next == offset) {
    if (!marker_during_load_ || ++load_extensions_ > kMaxLoadExtensions) return FinishLoad();
    marker_during_load_ = false;
    load_end_ = -1;  // the next read's log end
    return ReadNext(std::max(next, offset));
  }
  ReadNext(next);
}

void Shard::ReplayOffset(const ParsedOffset& o, int64_t record_offset, int64_t producer_id) {
  const TopicPartition tp{o.key.topic, o.key.partition};
  if (!o.value.has_value()) {
    // A tombstone deletes the committed offset and those of open transactions (Kafka).
    if (GroupSlot* slot = Find(o.key.group)) {
      slot->offsets.erase(tp);
      DropPendingTxnOffsets(*slot, tp);
    }
    return;
  }
  GroupSlot& slot = groups_[o.key.group];
  CommittedOffset c;
  c.offset = o.value->offset;
  c.leader_epoch = o.value->leader_epoch;
  c.metadata = o.value->metadata;
  c.commit_timestamp_ms = o.value->commit_timestamp_ms;
  c.expire_timestamp_ms = o.value->expire_timestamp_ms;
  c.record_offset = record_offset;
  if (producer_id < 0) {
    slot.offsets[tp] = std::move(c);
    return;
  }
  slot.pending_txn_offsets[producer_id][tp] = std::move(c);
  txn_groups_[producer_id].insert(o.key.group);
}

void Shard::Replay(const ParsedRecord& record, int64_t record_offset, int64_t producer_id) {
  if (const auto* o = std::get_if<ParsedOffset>(&record)) {
    return ReplayOffset(*o, record_offset, producer_id);
  }
  if (const auto* g = std::get_if<ParsedClassicGroup>(&record)) {
    if (g->value.has_value()) {
      loaded_classic_[g->group] = *g->value;
    } else {
      loaded_classic_.erase(g->group);
    }
    return;
  }
  // KIP-848 records: the group is created by its first record and removed by the tombstone
  // of its metadata record (key 3), which Kafka writes last when deleting it.
  std::visit(
      [&](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (!std::is_same_v<T, ParsedOffset> && !std::is_same_v<T, ParsedClassicGroup>) {
          GroupSlot* slot = Find(r.group);
          constexpr bool kIsMetadata = std::is_same_v<T, ParsedGroupRecord<ConsumerGroupMetadata>>;
          if (!r.value.has_value()) {
            if (slot == nullptr || !slot->consumer) return;
            if (kIsMetadata) {
              slot->consumer.reset();
              return;
            }
            slot->consumer->Replay(record);
            return;
          }
          if (slot == nullptr) slot = &groups_[r.group];
          if (!slot->consumer) {
            slot->consumer = std::make_unique<ConsumerGroup>(r.group, *this, topics_);
          }
          slot->consumer->Replay(record);
        }
      },
      record);
}

void Shard::FinishLoad() {
  for (auto& [id, value] : loaded_classic_) {
    GroupSlot& slot = groups_[id];
    if (slot.consumer) {
      kLog()->warn("group {}: both classic and consumer group records; keeping the consumer group",
                   id);
      continue;
    }
    slot.classic = std::make_unique<ClassicGroup>(id, *this);
  }
  // Active before the groups start, so what they schedule on load (session timers, writes)
  // goes through.
  state_ = State::kActive;
  for (auto& [id, value] : loaded_classic_) {
    GroupSlot& slot = groups_[id];
    if (slot.classic) slot.classic->Load(value);
  }
  loaded_classic_.clear();
  size_t offsets = 0;
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (it->second.consumer) it->second.consumer->OnLoaded();
    offsets += it->second.offsets.size();
    if (it->second.Unused()) {
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
  kLog()->log(groups_.empty() ? spdlog::level::debug : spdlog::level::info,
              "loaded __consumer_offsets-{}: {} group(s), {} offset(s) up to offset {}", partition_,
              groups_.size(), offsets, load_end_);
  ScheduleExpiry();
  if (load_done_) {
    auto done = std::move(load_done_);
    load_done_ = nullptr;
    done();
  }
}
}  // namespace runnel::brokerd::group
