// EndTxn (key 26), v0-v4: a producer commits or aborts its transaction, at the transactional
// id's coordinator (txn/txn_coordinator.h). The answer comes once PrepareCommit or
// PrepareAbort is stored; the markers follow. A retry of an end already made the same way is
// NONE, the other way INVALID_TXN_STATE; one while the markers are still being written is
// CONCURRENT_TRANSACTIONS (the client retries). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
// before v2. v5 (transaction.version 2, an epoch bump per transaction) is not served yet.
#include "brokerd/handlers/handler.h"
#include "brokerd/txn/txn_coordinator.h"

namespace runnel::brokerd {

using protocol::EndTxnRequest;
using protocol::EndTxnResponse;
using protocol::ErrorCode;

namespace {
constexpr int16_t kFencedSince = 2;
}  // namespace

void HandleEndTxn(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  EndTxnRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  auto answer = [shared_ctx, respond](ErrorCode error) {
    EndTxnResponse resp;
    resp.error_code = txn::FencedForVersion(error, shared_ctx->header.api_version, kFencedSince);
    respond(EncodeResponse(*shared_ctx, resp));
  };
  if (req.transactional_id.empty()) return answer(ErrorCode::kInvalidRequest);
  txn::TxnCoordinator::Route route = broker.txns.RouteId(req.transactional_id);
  if (route.error != ErrorCode::kNone) return answer(route.error);
  route.shard->EndTxn(req.transactional_id, req.producer_id.value(), req.producer_epoch,
                      req.committed, answer);
}

}  // namespace runnel::brokerd
