// EndTxn (key 26), v0-v5: a producer commits or aborts its transaction, at the transactional
// id's coordinator (txn/txn_coordinator.h). The answer comes once PrepareCommit or
// PrepareAbort is stored; the markers follow. A retry of an end already made the same way is
// NONE, the other way INVALID_TXN_STATE; one while the markers are still being written is
// CONCURRENT_TRANSACTIONS (the client retries). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
// before v2. v5 is a transaction.version 2 client's (KIP-890 part 2): every end bumps the
// epoch, and the answer carries the producer id and epoch the client goes on with.
#include "brokerd/handlers/handler.h"
#include "brokerd/txn/txn_coordinator.h"

namespace runnel::brokerd {

using protocol::EndTxnRequest;
using protocol::EndTxnResponse;
using protocol::ErrorCode;

namespace {
constexpr int16_t kFencedSince = 2;
constexpr int16_t kFirstV2Version = 5;
}  // namespace

void HandleEndTxn(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  EndTxnRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  auto answer = [shared_ctx, respond](ErrorCode error, int64_t producer_id,
                                      int16_t producer_epoch) {
    EndTxnResponse resp;
    resp.error_code = txn::FencedForVersion(error, shared_ctx->header.api_version, kFencedSince);
    resp.producer_id = ProducerId(producer_id);
    resp.producer_epoch = producer_epoch;
    respond(EncodeResponse(*shared_ctx, resp));
  };
  if (req.transactional_id.empty()) {
    return answer(ErrorCode::kInvalidRequest, txn::kNoProducerId, txn::kNoProducerEpoch);
  }
  txn::TxnCoordinator::Route route = broker.txns.RouteId(req.transactional_id);
  if (route.error != ErrorCode::kNone) {
    return answer(route.error, txn::kNoProducerId, txn::kNoProducerEpoch);
  }
  const int16_t client_version =
      shared_ctx->header.api_version >= kFirstV2Version ? txn::kTransactionVersion2 : 0;
  route.shard->EndTxn(req.transactional_id, req.producer_id.value(), req.producer_epoch,
                      req.committed, client_version, answer);
}

}  // namespace runnel::brokerd
