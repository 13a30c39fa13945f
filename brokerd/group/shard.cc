// A shard of the group coordinator: its timers, its writes to __consumer_offsets, its group
// slots, unloading. Loading is in shard_loading.cc, offsets in shard_offsets.cc.
#include <algorithm>
#include <chrono>

#include "brokerd/error_mapping.h"
#include "brokerd/group/coordinator.h"
#include "brokerd/group/coordinator_internal.h"
#include "brokerd/handlers/handler.h"
#include "common/protocol/error_code.h"
#include "common/record/batch.h"

namespace runnel::brokerd::group {

using internal::kLog;

namespace {

record::Compression CompressionFor(int32_t codec) {
  switch (codec) {
    case 1:
      return record::Compression::kGzip;
    case 2:
      return record::Compression::kSnappy;
    case 3:
      return record::Compression::kLz4;
    case 4:
      return record::Compression::kZstd;
    default:
      return record::Compression::kNone;
  }
}

}  // namespace

// ---- Shard ---------------------------------------------------------------------------------

Shard::Shard(BrokerContext& broker, int32_t partition, int32_t leader_epoch,
             const GroupConfig& config)
    : broker_(broker),
      partition_(partition),
      leader_epoch_(leader_epoch),
      config_(config),
      topics_(broker) {}

Shard::~Shard() { Unload(); }

int64_t Shard::NowMs() {
  if (clock_) return clock_();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

GroupEnv::TimerId Shard::StartTimer(int64_t delay_ms, std::function<void()> fn) {
  const TimerId id = next_timer_++;
  if (state_ == State::kUnloaded) return id;  // never runs
  UvTimer& timer = timers_[id];
  timer.Init(broker_.loop.raw());
  timer.Start(static_cast<uint64_t>(std::max<int64_t>(delay_ms, 0)), 0,
              [this, id, fn = std::move(fn)] {
                CancelTimer(id);  // closes the timer; this runs on a copy of the callback
                fn();
              });
  return id;
}

void Shard::CancelTimer(TimerId id) {
  timers_.erase(id);  // the timer's destructor closes it
}

void Shard::Write(std::vector<LogRecord> records, std::function<void(ErrorCode error)> done) {
  Append(records, std::nullopt, [done = std::move(done)](ErrorCode error, ErrorCode, int64_t) {
    if (done) done(error);
  });
}

void Shard::Append(const std::vector<LogRecord>& records, std::optional<TxnProducer> producer,
                   AppendDone done) {
  const uint64_t id = next_write_++;
  pending_writes_.emplace(id, std::move(done));
  if (state_ != State::kActive) return PostWriteResult(id, ErrorCode::kNotCoordinator);
  if (records.empty()) return PostWriteResult(id, ErrorCode::kNone);

  record::BatchBuilder::Options options;
  options.compression = CompressionFor(config_.offsets_compression_codec);
  options.partition_leader_epoch = leader_epoch_;
  if (producer.has_value()) {
    // Kafka's transactional offset commit: the producer's id and epoch, no sequence.
    options.producer_id = producer->id;
    options.producer_epoch = producer->epoch;
    options.base_sequence = -1;
    options.transactional = true;
  }
  record::BatchBuilder builder(options);
  const int64_t now = NowMs();
  for (const LogRecord& r : records) {
    std::optional<record::ByteSpan> value;
    if (r.value.has_value()) value = record::ByteSpan(r.value->data(), r.value->size());
    builder.Add(now, record::ByteSpan(r.key.data(), r.key.size()), value);
  }
  StatusOr<std::vector<uint8_t>> batch = builder.Build();
  if (!batch.ok()) {
    kLog()->error("__consumer_offsets-{}: cannot build a batch: {}", partition_,
                  batch.status().ToString());
    return PostWriteResult(id, ErrorCode::kCoordinatorNotAvailable);
  }
  storage::AppendPartition append;
  append.set_topic(std::string(kOffsetsTopic));
  append.set_partition(partition_);
  append.set_leader_epoch(leader_epoch_);
  append.set_records(batch->data(), batch->size());
  // A coordinator's batch (Kafka's AppendOrigin COORDINATOR): storaged takes a transactional
  // batch without sequence from it, checking the producer epoch only.
  append.set_coordinator_origin(producer.has_value());
  std::weak_ptr<bool> alive = alive_;
  broker_.appends.Append(
      std::move(append), std::chrono::milliseconds(config_.offsets_commit_timeout_ms),
      [this, alive, id](const grpc::Status& status, const storage::AppendPartitionResult& r) {
        if (alive.expired()) return;
        ErrorCode append_error = ErrorCode::kNone;
        ErrorCode error = ErrorCode::kNone;
        if (!status.ok()) {
          error = CoordinatorWriteError(StorageCallError(status));
        } else {
          append_error = protocol::ErrorFromWire(r.error_code());
          error = CoordinatorWriteError(append_error);
        }
        if (error != ErrorCode::kNone) {
          kLog()->warn("__consumer_offsets-{}: write failed: {} {}", partition_,
                       status.ok() ? std::to_string(r.error_code()) : status.error_message(),
                       r.error_message());
        }
        CompleteWrite(id, error, append_error, error == ErrorCode::kNone ? r.base_offset() : -1);
      });
}

void Shard::PostWriteResult(uint64_t id, ErrorCode error) {
  std::weak_ptr<bool> alive = alive_;
  broker_.loop.Post([this, alive, id, error] {
    if (!alive.expired()) CompleteWrite(id, error, ErrorCode::kNone, -1);
  });
}

void Shard::CompleteWrite(uint64_t id, ErrorCode error, ErrorCode append_error,
                          int64_t base_offset) {
  auto it = pending_writes_.find(id);
  if (it == pending_writes_.end()) return;  // answered at unload
  AppendDone done = std::move(it->second);
  pending_writes_.erase(it);
  if (done) done(error, append_error, base_offset);
}

void Shard::FailPendingWrites() {
  // A callback may write again (it gets NOT_COORDINATOR too); bounded rounds.
  for (int round = 0; round < 100 && !pending_writes_.empty(); ++round) {
    auto writes = std::move(pending_writes_);
    pending_writes_.clear();
    for (auto& [id, done] : writes) {
      if (done) done(ErrorCode::kNotCoordinator, ErrorCode::kNone, -1);
    }
  }
  pending_writes_.clear();
}

void Shard::Unload() {
  if (state_ == State::kUnloaded) return;
  state_ = State::kUnloaded;
  FailPendingWrites();
  for (auto& [id, slot] : groups_) {
    if (slot.classic) slot.classic->Shutdown(ErrorCode::kNotCoordinator);
    if (slot.consumer) slot.consumer->Shutdown(ErrorCode::kNotCoordinator);
  }
  FailPendingWrites();
  groups_.clear();  // the groups' destructors cancel their timers
  loaded_classic_.clear();
  txn_groups_.clear();  // pending transactional offsets come back with the next load
  timers_.clear();
  load_done_ = nullptr;
  kLog()->debug("unloaded __consumer_offsets-{}", partition_);
}

GroupSlot* Shard::Find(const std::string& group_id) {
  auto it = groups_.find(group_id);
  return it == groups_.end() ? nullptr : &it->second;
}

GroupSlot& Shard::FindOrCreate(const std::string& group_id) { return groups_[group_id]; }

void Shard::Remove(const std::string& group_id) {
  auto it = groups_.find(group_id);
  if (it == groups_.end()) return;
  // Out of the map first: Shutdown answers parked requests, whose callbacks may look the
  // group up again.
  GroupSlot slot = std::move(it->second);
  groups_.erase(it);
  if (slot.classic) slot.classic->Shutdown(ErrorCode::kCoordinatorNotAvailable);
  if (slot.consumer) slot.consumer->Shutdown(ErrorCode::kCoordinatorNotAvailable);
}
}  // namespace runnel::brokerd::group
