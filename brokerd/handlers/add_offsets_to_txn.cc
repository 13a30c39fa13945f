// AddOffsetsToTxn (key 25), v0-v4: a consumer group's offsets joining a producer's
// transaction (sendOffsetsToTransaction). As in Kafka, the group's partition of
// __consumer_offsets is added to the transaction like any partition, so the transaction's
// markers reach it and its transactional offsets (TxnOffsetCommit) commit or abort with it.
// An empty group id is INVALID_GROUP_ID; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/txn/txn_coordinator.h"

namespace runnel::brokerd {

using protocol::AddOffsetsToTxnRequest;
using protocol::AddOffsetsToTxnResponse;
using protocol::ErrorCode;

namespace {
constexpr int16_t kFencedSince = 2;
}  // namespace

void HandleAddOffsetsToTxn(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                           Respond respond) {
  AddOffsetsToTxnRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  auto answer = [shared_ctx, respond](ErrorCode error) {
    AddOffsetsToTxnResponse resp;
    resp.error_code = txn::FencedForVersion(error, shared_ctx->header.api_version, kFencedSince);
    respond(EncodeResponse(*shared_ctx, resp));
  };
  if (req.transactional_id.empty()) return answer(ErrorCode::kInvalidRequest);
  if (req.group_id.empty()) return answer(ErrorCode::kInvalidGroupId);
  txn::TxnCoordinator::Route route = broker.txns.RouteId(req.transactional_id);
  if (route.error != ErrorCode::kNone) return answer(route.error);
  txn::TxnPartitions partitions;
  partitions.emplace(std::string(group::kOffsetsTopic), broker.groups.PartitionFor(req.group_id));
  // transaction.version 2 clients never send AddOffsetsToTxn (TxnOffsetCommit v5+ adds the
  // group's partition): Kafka takes it as version 0.
  route.shard->AddPartitions(req.transactional_id, req.producer_id.value(), req.producer_epoch,
                             partitions, /*client_transaction_version=*/0, answer);
}

}  // namespace runnel::brokerd
