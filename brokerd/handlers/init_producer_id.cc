// InitProducerId (key 22), v0-v5: a producer id and epoch for an idempotent producer.
//
// With no transactional id, Kafka hands out a new producer id with epoch 0 every time, also
// to a producer that names its current id and epoch (KIP-360's re-init of an idempotent
// producer gets a fresh id); the ids come from blocks the controller allocates
// (txn/producer_id_manager.h). A transactional id belongs to the transaction coordinator,
// which brokerd does not have yet: it is answered COORDINATOR_NOT_AVAILABLE, as
// FindCoordinator answers for the key type of transactions.
#include "brokerd/handlers/handler.h"
#include "brokerd/txn/producer_id_manager.h"

namespace runnel::brokerd {

using protocol::ErrorCode;
using protocol::InitProducerIdRequest;
using protocol::InitProducerIdResponse;

namespace {

constexpr int64_t kNoProducerId = -1;
constexpr int16_t kNoProducerEpoch = -1;

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
  if (req.transactional_id.has_value()) {
    return respond(EncodeResponse(*ctx, Failed(ErrorCode::kCoordinatorNotAvailable)));
  }
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
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
