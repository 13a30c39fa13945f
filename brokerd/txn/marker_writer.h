// Writes transaction markers (COMMIT / ABORT control batches, common/record/control.h) to
// partitions this broker leads: what the transaction coordinator does to end a
// transaction, and what WriteTxnMarkers (key 27) asks of a partition leader.
//
// Each marker is a coordinator-origin append (storage.proto's AppendPartition
// coordinator_origin) through the AppendBatcher, so storaged checks it as Kafka's
// AppendOrigin.COORDINATOR (epochs, not sequences), indexes an abort in the segment's
// .txnindex and moves the partition's last stable offset; the append's answer moves
// PartitionView at once, so a read_committed fetch waiting on the partition wakes.
//
// Errors per marker, in Kafka's order: a topic or partition unknown to the metadata is
// UNKNOWN_TOPIC_OR_PARTITION; one this broker does not lead, or whose log storaged does not
// hold, NOT_LEADER_OR_FOLLOWER; then storaged's answer (INVALID_PRODUCER_EPOCH,
// TRANSACTION_COORDINATOR_FENCED, KAFKA_STORAGE_ERROR, ...), or the failed call's error.
//
// Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "brokerd/controller/metadata_cache.h"
#include "brokerd/storage/append_batcher.h"
#include "brokerd/storage/partition_view.h"
#include "common/protocol/error_code.h"

namespace runnel::brokerd {

struct TxnMarker {
  std::string topic;
  int32_t partition = 0;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  bool commit = false;
  int32_t coordinator_epoch = 0;
  // WriteTxnMarkers' TransactionVersion: 2 when the coordinator bumped the producer epoch for
  // this marker (it must then be above the partition's), 0 before.
  int8_t transaction_version = 0;
};

class TxnMarkerWriter {
 public:
  using Done = std::function<void(std::vector<protocol::ErrorCode>)>;
  using Observer = std::function<void(const TxnMarker&)>;

  static constexpr std::chrono::milliseconds kAppendTimeout{30000};

  TxnMarkerWriter(MetadataCache& metadata, PartitionView& partitions, AppendBatcher& appends,
                  int32_t node_id, std::function<int64_t()> now_ms = nullptr);
  virtual ~TxnMarkerWriter() = default;

  // Writes every marker (those of one partition in order) and calls `done` once, on the
  // loop, with one error code per marker in the same order (NONE when stored). Virtual for
  // the transaction coordinator's tests.
  virtual void Write(std::vector<TxnMarker> markers, Done done);
  // Runs `observer` on the loop after each marker is stored (not for failed ones), before
  // `done` of its Write.
  void AddObserver(Observer observer) { observers_.push_back(std::move(observer)); }

 private:
  // The metadata checks of one marker; sets `*leader_epoch` when they pass.
  protocol::ErrorCode Check(const TxnMarker& marker, int32_t* leader_epoch) const;

  MetadataCache& metadata_;
  PartitionView& partitions_;
  AppendBatcher& appends_;
  int32_t node_id_;
  std::function<int64_t()> now_ms_;
  std::vector<Observer> observers_;
};

}  // namespace runnel::brokerd
