// Appends from every produce request on every connection, gathered into few storaged calls.
//
// One gRPC call per produce request would cap the node near the rate of unary calls
// (a few thousand per second), so the appends queued during one pass of the loop go out as
// one AppendRequest, with several calls in flight. Order within a partition is kept: a
// partition with an append in flight waits until that call returns before its next append
// is sent (storaged applies the entries of one call in order).
//
// The record bytes of an append go to storaged through AppendArena's shared memory when
// there is room (where they are, when the request was read into it), and in the message
// otherwise. A call goes over the append stream
// (append_stream.h) when one is given and connected, and as a gRPC Append otherwise.
//
// Every answer is reported to the partition view (PartitionView::AppendAnswered) before the
// caller hears of it, so that fetches waiting for the records answer at once and from where
// the answer says they lie; callers (produce, the group coordinator) need not remember to.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <span>
#include <unordered_map>

#include "brokerd/net/event_loop.h"
#include "brokerd/storage/append_arena.h"
#include "brokerd/storage/append_stream.h"
#include "brokerd/storage/partition_key.h"
#include "brokerd/storage/partition_view.h"
#include "brokerd/storage/storage_client.h"

namespace runnel::brokerd {

class AppendBatcher {
 public:
  // Runs on the loop with the partition's result, or with a failed call's status.
  using Done = std::function<void(const grpc::Status&, const storage::AppendPartitionResult&)>;

  static constexpr size_t kDefaultCallsInFlight = 8;
  static constexpr size_t kDefaultBytesPerCall = 16 << 20;
  static constexpr uint64_t kDefaultSharedBytes = 64 << 20;

  // `view`: told of every answer; it must outlive this.
  // `shared_bytes`: the size of the shared memory region for record bytes, 0 for none.
  // `stream`: the append stream to prefer over gRPC, or nullptr; it must outlive this.
  AppendBatcher(EventLoop& loop, StorageClient& storage, PartitionView& view,
                size_t max_calls_in_flight = kDefaultCallsInFlight,
                size_t max_bytes_per_call = kDefaultBytesPerCall,
                uint64_t shared_bytes = kDefaultSharedBytes, AppendStream* stream = nullptr);

  // Appends `records` to the partition `partition` names; its own records field is not
  // used, its other fields (leader epoch, coordinator_origin, transaction_version) go to
  // storaged as they are. The bytes are copied before this returns, unless they lie in `within`, a
  // block ReserveFrame gave (then they are named where they are, and must not change).
  void Append(storage::AppendPartition partition, std::span<const uint8_t> records,
              std::chrono::milliseconds timeout, Done done,
              const std::shared_ptr<PlacedFrame>& within = nullptr);
  // The same with the bytes in partition.records().
  void Append(storage::AppendPartition partition, std::chrono::milliseconds timeout, Done done);

  // Shared memory to read a produce request of `size` bytes into, so that its records reach
  // storaged without a copy; nullptr when there is none to spare (the request is then read
  // into brokerd's memory and its records copied). Frames have a region of their own, so a
  // slow client's frame never holds up the copies; a request over an eighth of the region
  // is not placed, so that one alone cannot take most of the frames' region.
  std::shared_ptr<PlacedFrame> ReserveFrame(size_t size) {
    if (size > arena_.region_bytes() / kPlacedFrameShare) return nullptr;
    return arena_.ReserveFrame(size);
  }
  static constexpr uint64_t kPlacedFrameShare = 8;

 private:
  struct Entry {
    PartitionKey key;
    storage::AppendPartition partition;
    AppendArena::Block block;  // where partition.shared points, if it does
    std::chrono::steady_clock::time_point deadline;
    Done done;
  };
  void ScheduleFlush();
  void Flush();

  EventLoop& loop_;
  StorageClient& storage_;
  PartitionView& view_;
  AppendStream* stream_;
  AppendArena arena_;
  size_t max_calls_in_flight_;
  size_t max_bytes_per_call_;
  std::deque<Entry> pending_;
  std::unordered_map<PartitionKey, int, PartitionKeyHash> in_flight_;  // calls per partition
  size_t calls_in_flight_ = 0;
  bool flush_scheduled_ = false;
};

}  // namespace runnel::brokerd
