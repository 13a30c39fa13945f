// WriteTxnMarkers (key 27), v1-v2: writes COMMIT or ABORT markers for producers to
// partitions this broker leads. A transaction coordinator sends it to end a transaction on
// another broker; `kafka-transactions.sh abort` (Admin.abortTransaction) sends one to a
// partition's leader to abort a hanging transaction. v2 adds TransactionVersion (2: the
// coordinator bumped the epoch for the marker).
//
// Each partition of each marker is written by TxnMarkerWriter (brokerd/txn/marker_writer.h)
// and answered with its own error, in Kafka's order: UNKNOWN_TOPIC_OR_PARTITION,
// NOT_LEADER_OR_FOLLOWER, then storaged's answer to the coordinator-origin append
// (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, ...). The answer lists the
// markers, topics and partitions in the request's order. Kafka refuses the request without
// ClusterAction permission; Runnel has no authorization yet.
#include <memory>

#include "brokerd/handlers/handler.h"
#include "brokerd/txn/marker_writer.h"

namespace runnel::brokerd {

using protocol::ErrorCode;
using protocol::WriteTxnMarkersRequest;
using protocol::WriteTxnMarkersResponse;

void HandleWriteTxnMarkers(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                           Respond respond) {
  WriteTxnMarkersRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  auto resp = std::make_shared<WriteTxnMarkersResponse>();
  std::vector<TxnMarker> markers;
  // Where each marker's error goes, in the order of `markers`.
  std::vector<ErrorCode*> outs;
  resp->markers.reserve(req.markers.size());
  for (const WriteTxnMarkersRequest::WritableTxnMarker& m : req.markers) {
    WriteTxnMarkersResponse::WritableTxnMarkerResult& result = resp->markers.emplace_back();
    result.producer_id = m.producer_id;
    result.topics.reserve(m.topics.size());
    for (const WriteTxnMarkersRequest::WritableTxnMarkerTopic& topic : m.topics) {
      WriteTxnMarkersResponse::WritableTxnMarkerTopicResult& t = result.topics.emplace_back();
      t.name = topic.name;
      t.partitions.reserve(topic.partition_indexes.size());
      for (int32_t partition : topic.partition_indexes) {
        t.partitions.emplace_back().partition_index = partition;
        markers.push_back(TxnMarker{.topic = topic.name,
                                    .partition = partition,
                                    .producer_id = m.producer_id.value(),
                                    .producer_epoch = m.producer_epoch,
                                    .commit = m.transaction_result,
                                    .coordinator_epoch = m.coordinator_epoch,
                                    .transaction_version = m.transaction_version});
      }
    }
  }
  // The vectors are reserved above: the pointers stay valid.
  for (auto& result : resp->markers) {
    for (auto& t : result.topics) {
      for (auto& p : t.partitions) outs.push_back(&p.error_code);
    }
  }
  auto shared_ctx = std::shared_ptr<RequestContext>(std::move(ctx));
  broker.txn_markers.Write(std::move(markers),
                           [resp, outs = std::move(outs), shared_ctx,
                            respond = std::move(respond)](std::vector<ErrorCode> errors) {
                             for (size_t i = 0; i < outs.size() && i < errors.size(); ++i)
                               *outs[i] = errors[i];
                             respond(EncodeResponse(*shared_ctx, *resp));
                           });
}

}  // namespace runnel::brokerd
