#include "brokerd/txn/marker_writer.h"

#include <memory>
#include <utility>

#include "brokerd/error_mapping.h"
#include "common/record/control.h"

namespace runnel::brokerd {

using protocol::ErrorCode;

TxnMarkerWriter::TxnMarkerWriter(MetadataCache& metadata, PartitionView& partitions,
                                 AppendBatcher& appends, int32_t node_id,
                                 std::function<int64_t()> now_ms)
    : metadata_(metadata),
      partitions_(partitions),
      appends_(appends),
      node_id_(node_id),
      now_ms_(std::move(now_ms)) {
  if (!now_ms_) {
    now_ms_ = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
}

ErrorCode TxnMarkerWriter::Check(const TxnMarker& marker, int32_t* leader_epoch) const {
  const TopicInfo* topic = metadata_.FindTopic(marker.topic);
  if (topic == nullptr) return ErrorCode::kUnknownTopicOrPartition;
  auto p = topic->partitions.find(marker.partition);
  if (p == topic->partitions.end()) return ErrorCode::kUnknownTopicOrPartition;
  if (p->second.leader != node_id_ || partitions_.Find(marker.topic, marker.partition) == nullptr) {
    return ErrorCode::kNotLeaderOrFollower;
  }
  *leader_epoch = p->second.leader_epoch;
  return ErrorCode::kNone;
}

void TxnMarkerWriter::Write(std::vector<TxnMarker> markers, Done done) {
  struct Pending {
    std::vector<TxnMarker> markers;
    std::vector<ErrorCode> errors;
    size_t outstanding = 1;  // one for the loop below, so `done` runs once, after it
    Done done;
    void Finish() {
      if (--outstanding == 0) done(std::move(errors));
    }
  };
  auto pending = std::make_shared<Pending>();
  pending->errors.assign(markers.size(), ErrorCode::kNone);
  pending->markers = std::move(markers);
  pending->done = std::move(done);
  for (size_t i = 0; i < pending->markers.size(); ++i) {
    const TxnMarker& m = pending->markers[i];
    int32_t leader_epoch = -1;
    if (ErrorCode e = Check(m, &leader_epoch); e != ErrorCode::kNone) {
      pending->errors[i] = e;
      continue;
    }
    storage::AppendPartition append;
    append.set_topic(m.topic);
    append.set_partition(m.partition);
    append.set_leader_epoch(leader_epoch);
    append.set_coordinator_origin(true);
    append.set_transaction_version(m.transaction_version);
    std::vector<uint8_t> batch = record::BuildEndTxnMarkerBatch(
        m.producer_id, m.producer_epoch, {m.commit, m.coordinator_epoch}, now_ms_());
    append.set_records(reinterpret_cast<const char*>(batch.data()), batch.size());
    ++pending->outstanding;
    appends_.Append(
        std::move(append), kAppendTimeout,
        [this, pending, i](const grpc::Status& status, const storage::AppendPartitionResult& r) {
          ErrorCode error =
              status.ok() ? protocol::ErrorFromWire(r.error_code()) : StorageCallError(status);
          pending->errors[i] = error;
          if (error == ErrorCode::kNone) {
            for (const Observer& observer : observers_) {
              observer(pending->markers[i]);
            }
          }
          pending->Finish();
        });
  }
  pending->Finish();
}

}  // namespace runnel::brokerd
