// FindCoordinator (key 10), v0-v6: the broker leading a group's partition of
// __consumer_offsets (key type 0) or a transactional id's partition of __transaction_state
// (key type 1), as clients reach it through the listener the request came in on. As in
// Kafka, asking creates the topic when it does not exist yet (this answer waits for it);
// other key types are INVALID_REQUEST. v4+ asks for several keys at once. An answer naming
// this broker waits (boundedly) until the key's shard has loaded, so the client's next
// request does not meet COORDINATOR_LOAD_IN_PROGRESS.
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/txn/txn_coordinator.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::FindCoordinatorRequest;
using protocol::FindCoordinatorResponse;

constexpr int8_t kGroupKey = 0;
constexpr int8_t kTransactionKey = 1;
// How long an answer naming this broker may wait for the key's shard to finish loading.
constexpr int64_t kLoadWaitMs = 10000;

struct Answer {
  ErrorCode error = ErrorCode::kNone;
  std::optional<std::string> message;
  int32_t node_id = -1;
  std::string host;
  int32_t port = -1;
};

// Kafka's error_message: the error's default message ("NONE" when there is none).
std::string DefaultMessage(ErrorCode error) {
  return std::string(protocol::ErrorName(static_cast<ErrorCode>(error)));
}

Answer Locate(BrokerContext& broker, const std::string& listener, int8_t key_type,
              const std::string& key, ErrorCode ensure_error) {
  Answer a;
  if (key_type != kGroupKey && key_type != kTransactionKey) {
    a.error = ErrorCode::kInvalidRequest;
    a.message = fmt::format("Unknown coordinator key type {}", key_type);
    return a;
  }
  const bool group = key_type == kGroupKey;
  const TopicInfo* topic =
      broker.metadata.FindTopic(std::string(group ? group::kOffsetsTopic : txn::kTxnTopic));
  if (ensure_error != ErrorCode::kNone || topic == nullptr) {
    a.error = ErrorCode::kCoordinatorNotAvailable;
    return a;
  }
  auto p = topic->partitions.find(group ? broker.groups.PartitionFor(key)
                                        : broker.txns.PartitionFor(key));
  if (p == topic->partitions.end() || p->second.leader < 0) {
    a.error = ErrorCode::kCoordinatorNotAvailable;
    return a;
  }
  for (BrokerAddress& b : BrokersOnListener(broker.metadata, listener)) {
    if (b.id != p->second.leader) continue;
    a.node_id = b.id;
    a.host = std::move(b.host);
    a.port = b.port;
    return a;
  }
  // The leader is fenced or has no endpoint on this listener.
  a.error = ErrorCode::kCoordinatorNotAvailable;
  return a;
}

}  // namespace

void HandleFindCoordinator(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                           Respond respond) {
  auto req = std::make_shared<FindCoordinatorRequest>();
  if (!DecodeRequest(*ctx, req.get())) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;
  if (version < 4) req->coordinator_keys = {req->key};

  const bool known_type = req->key_type == kGroupKey || req->key_type == kTransactionKey;
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  auto answer = [&broker, shared_ctx, req, respond, version](ErrorCode ensure_error) {
    FindCoordinatorResponse resp;
    for (const std::string& key : req->coordinator_keys) {
      Answer a = Locate(broker, shared_ctx->listener, req->key_type, key, ensure_error);
      if (version < 4) {
        resp.error_code = a.error;
        resp.error_message = a.message.has_value() ? a.message : DefaultMessage(a.error);
        resp.node_id = NodeId(a.node_id);
        resp.host = std::move(a.host);
        resp.port = a.port;
        break;
      }
      FindCoordinatorResponse::Coordinator c;
      c.key = key;
      c.error_code = a.error;
      c.error_message = a.message;
      c.node_id = NodeId(a.node_id);
      c.host = std::move(a.host);
      c.port = a.port;
      resp.coordinators.push_back(std::move(c));
    }
    respond(EncodeResponse(*shared_ctx, resp));
  };
  if (!known_type || req->coordinator_keys.empty()) return answer(ErrorCode::kNone);
  if (req->key_type == kTransactionKey) {
    return broker.txns.EnsureTopic([&broker, req, answer](ErrorCode error) {
      if (error != ErrorCode::kNone) return answer(error);
      broker.txns.WaitUntilLoaded(req->coordinator_keys, kLoadWaitMs,
                                  [answer] { answer(ErrorCode::kNone); });
    });
  }
  broker.groups.EnsureOffsetsTopic([&broker, req, answer](ErrorCode error) {
    if (error != ErrorCode::kNone) return answer(error);
    broker.groups.WaitUntilLoaded(req->coordinator_keys, kLoadWaitMs,
                                  [answer] { answer(ErrorCode::kNone); });
  });
}

}  // namespace runnel::brokerd
