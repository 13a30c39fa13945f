// A partition of an internal topic that a coordinator keeps its state in (the transaction
// coordinator's __transaction_state): reading it from the start when the coordinator takes
// it over, and writing records to it.
//
// Load reads from offset 0 to the log end seen by the first read, 4 MiB per storaged Read
// with the bytes in the answer, retrying every second after a failure and restarting from
// the log start on OFFSET_OUT_OF_RANGE (retention or DeleteRecords moved it). Each batch,
// control batches included, goes to the caller in log order.
//
// Write appends records as one batch through the broker's AppendBatcher (the produce path),
// stamped with the partition's leader epoch, and answers once the batch is stored. Errors are
// what a coordinator's client is told (CoordinatorWriteError): NOT_COORDINATOR when the
// partition moved, COORDINATOR_NOT_AVAILABLE for the rest, timeouts included.
//
// Close answers pending writes NOT_COORDINATOR and stops the load; no callback runs after
// it. Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "brokerd/group/records.h"
#include "brokerd/net/uv_handle.h"
#include "common/protocol/error_code.h"
#include "common/record/batch.h"
#include "proto/runnel/storage.pb.h"

namespace runnel::brokerd {

struct BrokerContext;

// The partitions of internal topic `topic` that this broker leads and whose log storaged holds
// (with the topic's id): partition -> leader epoch. A coordinator has a shard for each.
std::map<int32_t, int32_t> LedPartitions(const BrokerContext& broker, const std::string& topic);

class InternalPartition {
 public:
  using OnBatch = std::function<void(const record::BatchView& batch)>;
  using WriteDone = std::function<void(protocol::ErrorCode error)>;

  InternalPartition(BrokerContext& broker, std::string topic, int32_t partition,
                    int32_t leader_epoch);
  ~InternalPartition();
  InternalPartition(const InternalPartition&) = delete;
  InternalPartition& operator=(const InternalPartition&) = delete;

  const std::string& topic() const { return topic_; }
  int32_t partition() const { return partition_; }
  int32_t leader_epoch() const { return leader_epoch_; }

  // Reads the partition (see the top of this file); `done` runs once every batch before the
  // end has been handed to `on_batch`, with that end offset.
  void Load(OnBatch on_batch, std::function<void(int64_t end)> done);

  // Appends `records` as one batch with timestamp `now_ms`; `done` runs later, never inside
  // this call.
  void Write(const std::vector<group::LogRecord>& records, int64_t now_ms,
             std::chrono::milliseconds timeout, WriteDone done);

  // See the top of this file. Idempotent.
  void Close();

 private:
  void ReadNext(int64_t offset);
  void OnRead(const grpc::Status& status, storage::ReadResponse& resp, int64_t offset);
  void RetryRead(int64_t offset);
  void Finish(uint64_t id, protocol::ErrorCode error);

  BrokerContext& broker_;
  std::string topic_;
  int32_t partition_;
  int32_t leader_epoch_;
  bool closed_ = false;

  OnBatch on_batch_;
  std::function<void(int64_t)> load_done_;
  int64_t load_end_ = -1;
  int load_restarts_ = 0;
  UvTimer retry_timer_;

  uint64_t next_write_ = 1;
  std::map<uint64_t, WriteDone> pending_writes_;

  // Callbacks from storage and the loop hold a weak reference: this may be gone when they run.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace runnel::brokerd
