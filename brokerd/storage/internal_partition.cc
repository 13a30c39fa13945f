#include "brokerd/storage/internal_partition.h"

#include <algorithm>

#include "brokerd/error_mapping.h"
#include "brokerd/handlers/handler.h"
#include "common/log/log.h"
#include "common/record/batch.h"

namespace runnel::brokerd {

using protocol::ErrorCode;

namespace {

constexpr int32_t kLoadReadBytes = 4 << 20;
constexpr std::chrono::milliseconds kReadTimeout{30000};
constexpr uint64_t kLoadRetryMs = 1000;
constexpr int kMaxLoadRestarts = 100;

// The log of the coordinator owning the partition is the caller's; loads and writes log here.
const log::ModuleLogger kLog("brokerd.internal");

}  // namespace

std::map<int32_t, int32_t> LedPartitions(const BrokerContext& broker, const std::string& topic) {
  std::map<int32_t, int32_t> led;
  const TopicInfo* info = broker.metadata.FindTopic(topic);
  if (info == nullptr || !broker.partitions.ready()) return led;
  const std::string topic_id = info->id.ToString();
  for (const auto& [index, p] : info->partitions) {
    if (p.leader != broker.node_id) continue;
    const StoredPartition* stored = broker.partitions.Find(info->name, index);
    if (stored == nullptr || stored->topic_id != topic_id) continue;
    led[index] = p.leader_epoch;
  }
  return led;
}

InternalPartition::InternalPartition(BrokerContext& broker, std::string topic, int32_t partition,
                                     int32_t leader_epoch)
    : broker_(broker),
      topic_(std::move(topic)),
      partition_(partition),
      leader_epoch_(leader_epoch) {}

InternalPartition::~InternalPartition() { Close(); }

void InternalPartition::Close() {
  if (closed_) return;
  closed_ = true;
  alive_.reset();
  retry_timer_.Close();
  on_batch_ = nullptr;
  load_done_ = nullptr;
  // A callback may write again (it is answered at once, closed); bounded rounds.
  for (int round = 0; round < 100 && !pending_writes_.empty(); ++round) {
    auto writes = std::move(pending_writes_);
    pending_writes_.clear();
    for (auto& [id, done] : writes) {
      if (done) done(ErrorCode::kNotCoordinator);
    }
  }
  pending_writes_.clear();
}

// ---- Load ----------------------------------------------------------------------------------

void InternalPartition::Load(OnBatch on_batch, std::function<void(int64_t end)> done) {
  on_batch_ = std::move(on_batch);
  load_done_ = std::move(done);
  load_end_ = -1;
  ReadNext(0);
}

void InternalPartition::ReadNext(int64_t offset) {
  if (closed_) return;
  storage::ReadRequest req;
  req.set_want_bytes(true);
  storage::ReadPartition* p = req.add_partitions();
  p->set_topic(topic_);
  p->set_partition(partition_);
  p->set_offset(offset);
  p->set_max_bytes(kLoadReadBytes);
  p->set_min_one_batch(true);
  std::weak_ptr<bool> alive = alive_;
  broker_.storage.Read(std::move(req), kReadTimeout,
                       [this, alive, offset](const grpc::Status& status, storage::ReadResponse& r) {
                         if (alive.expired()) return;
                         OnRead(status, r, offset);
                       });
}

void InternalPartition::RetryRead(int64_t offset) {
  if (closed_) return;
  if (!retry_timer_.open()) retry_timer_.Init(broker_.loop.raw());
  retry_timer_.Start(kLoadRetryMs, 0, [this, offset] { ReadNext(offset); });
}

void InternalPartition::OnRead(const grpc::Status& status, storage::ReadResponse& resp,
                               int64_t offset) {
  if (closed_ || !load_done_) return;
  if (!status.ok() || resp.partitions_size() != 1) {
    kLog()->warn("{}-{}: load read failed: {}; retrying", topic_, partition_,
                 status.ok() ? "no result" : status.error_message());
    return RetryRead(offset);
  }
  storage::ReadPartitionResult& r = *resp.mutable_partitions(0);
  if (protocol::ErrorFromWire(r.error_code()) == ErrorCode::kOffsetOutOfRange &&
      ++load_restarts_ <= kMaxLoadRestarts) {
    return ReadNext(std::max<int64_t>(r.log_start_offset(), 0));
  }
  if (r.error_code() != 0) {
    kLog()->warn("{}-{}: load read at {} failed: error {} {}; retrying", topic_, partition_, offset,
                 r.error_code(), r.error_message());
    return RetryRead(offset);
  }
  if (load_end_ < 0) load_end_ = r.log_end_offset();
  const std::string& bytes = r.records();
  StatusOr<std::vector<record::BatchView>> batches = record::SplitBatches(
      record::ByteSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  if (!batches.ok()) {
    kLog()->error("{}-{}: unreadable batches at {}: {}; retrying", topic_, partition_, offset,
                  batches.status().ToString());
    return RetryRead(offset);
  }
  int64_t next = offset;
  std::weak_ptr<bool> alive = alive_;
  for (const record::BatchView& batch : *batches) {
    if (batch.base_offset() >= load_end_) break;
    next = std::max(next, batch.last_offset() + 1);
    on_batch_(batch);
    if (alive.expired() || closed_) return;
  }
  // Done at the end seen when the load began, or when a read brings nothing new.
  if (batches->empty() || next >= load_end_ || next == offset) {
    auto done = std::move(load_done_);
    load_done_ = nullptr;
    on_batch_ = nullptr;
    return done(load_end_);
  }
  ReadNext(next);
}

// ---- Write ---------------------------------------------------------------------------------

void InternalPartition::Write(const std::vector<group::LogRecord>& records, int64_t now_ms,
                              std::chrono::milliseconds timeout, WriteDone done) {
  if (closed_) {
    broker_.loop.Post([done = std::move(done)] {
      if (done) done(ErrorCode::kNotCoordinator);
    });
    return;
  }
  const uint64_t id = next_write_++;
  pending_writes_.emplace(id, std::move(done));
  const auto post = [this, id](ErrorCode error) {
    std::weak_ptr<bool> alive = alive_;
    broker_.loop.Post([this, alive, id, error] {
      if (!alive.expired()) Finish(id, error);
    });
  };
  record::BatchBuilder::Options options;
  options.partition_leader_epoch = leader_epoch_;
  record::BatchBuilder builder(options);
  for (const group::LogRecord& r : records) {
    std::optional<record::ByteSpan> value;
    if (r.value.has_value()) value = record::ByteSpan(r.value->data(), r.value->size());
    builder.Add(now_ms, record::ByteSpan(r.key.data(), r.key.size()), value);
  }
  StatusOr<std::vector<uint8_t>> batch = builder.Build();
  if (!batch.ok()) {
    kLog()->error("{}-{}: cannot build a batch: {}", topic_, partition_, batch.status().ToString());
    return post(ErrorCode::kCoordinatorNotAvailable);
  }
  storage::AppendPartition append;
  append.set_topic(topic_);
  append.set_partition(partition_);
  append.set_leader_epoch(leader_epoch_);
  append.set_records(batch->data(), batch->size());
  std::weak_ptr<bool> alive = alive_;
  broker_.appends.Append(
      std::move(append), timeout,
      [this, alive, id](const grpc::Status& status, const storage::AppendPartitionResult& r) {
        if (alive.expired()) return;
        const ErrorCode error = CoordinatorWriteError(
            status.ok() ? protocol::ErrorFromWire(r.error_code()) : StorageCallError(status));
        if (error != ErrorCode::kNone) {
          kLog()->warn("{}-{}: write failed: {} {}", topic_, partition_,
                       status.ok() ? std::to_string(r.error_code()) : status.error_message(),
                       r.error_message());
        }
        Finish(id, error);
      });
}

void InternalPartition::Finish(uint64_t id, ErrorCode error) {
  auto it = pending_writes_.find(id);
  if (it == pending_writes_.end()) return;
  WriteDone done = std::move(it->second);
  pending_writes_.erase(it);
  if (done) done(error);
}

}  // namespace runnel::brokerd
