#include "brokerd/storage/append_batcher.h"

#include <algorithm>
#include <unordered_set>

namespace runnel::brokerd {
namespace {

// The record bytes of an append, in the message or shared.
uint64_t RecordBytes(const storage::AppendPartition& p) {
  return p.has_shared() ? p.shared().length() : p.records().size();
}

}  // namespace

AppendBatcher::AppendBatcher(EventLoop& loop, StorageClient& storage, PartitionView& view,
                             size_t max_calls_in_flight, size_t max_bytes_per_call,
                             uint64_t shared_bytes, AppendStream* stream)
    : loop_(loop),
      storage_(storage),
      view_(view),
      stream_(stream),
      arena_(shared_bytes),
      max_calls_in_flight_(max_calls_in_flight),
      max_bytes_per_call_(max_bytes_per_call) {}

void AppendBatcher::Append(storage::AppendPartition partition, std::span<const uint8_t> records,
                           std::chrono::milliseconds timeout, Done done,
                           const std::shared_ptr<PlacedFrame>& within) {
  PartitionKey key(partition.topic(), partition.partition());
  partition.clear_records();
  AppendArena::Block block = arena_.Put(records, &partition, within);
  pending_.push_back(Entry{std::move(key), std::move(partition), std::move(block),
                           std::chrono::steady_clock::now() + timeout, std::move(done)});
  ScheduleFlush();
}

void AppendBatcher::Append(storage::AppendPartition partition, std::chrono::milliseconds timeout,
                           Done done) {
  std::string records = std::move(*partition.mutable_records());
  Append(std::move(partition),
         std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(records.data()), records.size()),
         timeout, std::move(done));
}

void AppendBatcher::ScheduleFlush() {
  if (flush_scheduled_) return;
  flush_scheduled_ = true;
  // Posted, so every request read in this pass of the loop joins the same call.
  loop_.Post([this] {
    flush_scheduled_ = false;
    Flush();
  });
}

void AppendBatcher::Flush() {
  while (!pending_.empty() && calls_in_flight_ < max_calls_in_flight_) {
    auto entries = std::make_shared<std::vector<Entry>>();
    storage::AppendRequest req;
    size_t bytes = 0;
    auto deadline = std::chrono::steady_clock::time_point::min();
    // Partitions blocked by a call in flight stay queued, and so does every later entry of
    // theirs, which keeps each partition's appends in order.
    std::unordered_set<PartitionKey, PartitionKeyHash> blocked;
    std::deque<Entry> kept;
    while (!pending_.empty()) {
      Entry& e = pending_.front();
      bool full = !entries->empty() && bytes + RecordBytes(e.partition) > max_bytes_per_call_;
      if (full || blocked.count(e.key) != 0 || in_flight_.count(e.key) != 0) {
        blocked.insert(e.key);
        kept.push_back(std::move(e));
        pending_.pop_front();
        continue;
      }
      bytes += RecordBytes(e.partition);
      deadline = std::max(deadline, e.deadline);
      *req.add_partitions() = std::move(e.partition);
      entries->push_back(std::move(e));
      pending_.pop_front();
    }
    pending_ = std::move(kept);
    if (entries->empty()) return;
    for (const Entry& e : *entries) ++in_flight_[e.key];
    ++calls_in_flight_;
    auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto answered = [this, entries](const grpc::Status& status, storage::AppendResponse& resp) {
      --calls_in_flight_;
      for (const Entry& e : *entries) {
        auto it = in_flight_.find(e.key);
        if (it != in_flight_.end() && --it->second <= 0) in_flight_.erase(it);
      }
      grpc::Status short_answer(grpc::StatusCode::INTERNAL, "storaged answered too few partitions");
      storage::AppendPartitionResult none;
      for (size_t i = 0; i < entries->size(); ++i) {
        Entry& e = (*entries)[i];
        if (!status.ok()) {
          arena_.Abandon(e.block, status.error_code() == grpc::StatusCode::FAILED_PRECONDITION,
                         status.error_message());
          e.done(status, none);
          continue;
        }
        arena_.Release(e.block);
        if (i >= static_cast<size_t>(resp.partitions_size())) {
          e.done(short_answer, none);
        } else {
          const storage::AppendPartitionResult& r = resp.partitions(static_cast<int>(i));
          view_.AppendAnswered(r);
          e.done(status, r);
        }
      }
      Flush();
    };
    timeout = std::max(timeout, std::chrono::milliseconds(1));
    if (stream_ != nullptr && stream_->connected()) {
      stream_->Append(std::move(req), timeout, std::move(answered));
    } else {
      storage_.Append(std::move(req), timeout, std::move(answered));
    }
  }
}

}  // namespace runnel::brokerd
