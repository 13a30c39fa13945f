// InitProducerId (key 22), v0-v5: a producer id and epoch for an idempotent or a
// transactional producer.
//
// With no transactional id, Kafka hands out a new producer id with epoch 0 every time, also
// to a producer that names its current id and epoch (KIP-360's re-init of an idempotent
// producer gets a fresh id); the ids come from blocks the controller allocates
// (txn/producer_id_manager.h). With one, the transaction coordinator answers
// (txn/txn_coordinator.h): the id's producer id with its epoch bumped, fencing the previous
// instance; an empty id is INVALID_REQUEST, a timeout of 0 or above
// transaction.max.timeout.ms INVALID_TRANSACTION_TIMEOUT.
#include "brokerd/handlers/handler.h"
#include "brokerd/txn/producer_id_manager.h"
#include "brokerd/txn/txn_coordinator.h"

namespace runnel::brokerd {

using protocol::ErrorCode;
using protocol::InitProducerIdRequest;
using protocol::InitProducerIdResponse;

namespace {

constexpr int64_t kNoProducerId = -1;
constexpr int16_t kNoProducerEpoch = -1;

// PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4.
constexpr int16_t kFencedSince = 4;

InitProducerIdResponse Failed(ErrorCode error) {
  InitProducerIdResponse resp;
  resp.error_code = error;
  resp.producer_id = ProducerId(kNoProducerId);
  resp.producer_epoch = kNoProducerEpoch;
  return resp;
}

}  // namespace

void HandleInitProducerId(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                          Respond respond) {
  InitProducerIdRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  // v3+ may name the producer's current id and epoch: both or neither (Kafka's rule).
  if ((req.producer_id.value() == kNoProducerId) != (req.producer_epoch == kNoProducerEpoch)) {
    return respond(EncodeResponse(*ctx, Failed(ErrorCode::kInvalidRequest)));
  }
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  if (req.transactional_id.has_value()) {
    const std::string& id = *req.transactional_id;
    if (id.empty()) return respond(EncodeResponse(*shared_ctx, Failed(ErrorCode::kInvalidRequest)));
    if (req.transaction_timeout_ms <= 0 ||
        req.transaction_timeout_ms > broker.txns.config().max_timeout_ms) {
      return respond(EncodeResponse(*shared_ctx, Failed(ErrorCode::kInvalidTransactionTimeout)));
    }
    txn::TxnCoordinator::Route route = broker.txns.RouteId(id);
    if (route.error != ErrorCode::kNone) {
      return respond(EncodeResponse(*shared_ctx, Failed(route.error)));
    }
    std::optional<txn::ProducerIdAndEpoch> expected;
    if (req.producer_id.value() != kNoProducerId) {
      expected = txn::ProducerIdAndEpoch{req.producer_id.value(), req.producer_epoch};
    }
    return route.shard->InitProducerId(
        id, req.transaction_timeout_ms, expected,
        [shared_ctx, respond](ErrorCode error, int64_t producer_id, int16_t epoch) {
          if (error != ErrorCode::kNone) {
            error = txn::FencedForVersion(error, shared_ctx->header.api_version, kFencedSince);
            return respond(EncodeResponse(*shared_ctx, Failed(error)));
          }
          InitProducerIdResponse resp;
          resp.producer_id = ProducerId(producer_id);
          resp.producer_epoch = epoch;
          respond(EncodeResponse(*shared_ctx, resp));
        });
  }
  broker.producer_ids.Next([shared_ctx, respond](ErrorCode error, int64_t producer_id) {
    if (error != ErrorCode::kNone) return respond(EncodeResponse(*shared_ctx, Failed(error)));
    InitProducerIdResponse resp;
    resp.error_code = ErrorCode::kNone;
    resp.producer_id = ProducerId(producer_id);
    resp.producer_epoch = 0;
    respond(EncodeResponse(*shared_ctx, resp));
  });
}

}  // namespace runnel::brokerd
