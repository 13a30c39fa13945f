// ConsumerGroupHeartbeat (key 68), v0-v1: the KIP-848 consumer protocol. Join, heartbeat and
// leave of a member of a consumer group (brokerd/group/consumer_group.h).
#include <memory>
#include <string>
#include <utility>

#include "brokerd/group/consumer_group.h"
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using protocol::ConsumerGroupHeartbeatRequest;
using protocol::ConsumerGroupHeartbeatResponse;
using protocol::ErrorCode;

// Kafka's client host: the peer's address as InetAddress.toString() gives it ("/1.2.3.4").
std::string ClientHost(const std::string& peer) {
  std::string host = peer;
  size_t colon = host.rfind(':');
  if (colon != std::string::npos) host.resize(colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return "/" + host;
}

}  // namespace

void HandleConsumerGroupHeartbeat(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                                  Respond respond) {
  ConsumerGroupHeartbeatRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  auto answer = [&ctx, &respond](ErrorCode error, std::string message) {
    ConsumerGroupHeartbeatResponse resp;
    resp.error_code = error;
    if (!message.empty()) resp.error_message = std::move(message);
    respond(EncodeResponse(*ctx, resp));
  };

  auto route = broker.groups.RouteGroup(req.group_id);
  if (route.error != ErrorCode::kNone) return answer(route.error, "");
  group::Shard& shard = *route.shard;
  if (!shard.config().consumer_enabled) {
    return answer(ErrorCode::kUnsupportedVersion,
                  "The consumer group protocol is not enabled on this broker.");
  }
  std::string message;
  ErrorCode invalid = group::ConsumerGroup::ValidateHeartbeat(req, ctx->header.api_version,
                                                              shard.config(), &message);
  if (invalid != ErrorCode::kNone) return answer(invalid, std::move(message));

  const bool joining = req.member_epoch == 0;
  group::GroupSlot* slot = shard.Find(req.group_id);
  std::vector<group::LogRecord> prefix;
  if (slot != nullptr && slot->classic) {
    // A classic group with members keeps its id; an empty one gives way to the new consumer
    // group on a join (its offsets stay), as Kafka does.
    if (!joining || !slot->classic->empty()) {
      return answer(ErrorCode::kGroupIdNotFound,
                    fmt::format("Group {} is not a consumer group.", req.group_id));
    }
    prefix.push_back(group::ClassicGroupTombstone(req.group_id));
    slot->classic->Shutdown(ErrorCode::kGroupIdNotFound);
    slot->classic.reset();
  }
  if (slot == nullptr || !slot->consumer) {
    if (!joining) {
      return answer(ErrorCode::kGroupIdNotFound, fmt::format("Group {} not found.", req.group_id));
    }
    if (slot == nullptr) slot = &shard.FindOrCreate(req.group_id);
    slot->consumer = std::make_unique<group::ConsumerGroup>(req.group_id, shard, shard.topics());
  }

  group::ConsumerGroup& cg = *slot->consumer;
  const RequestContext& request = *ctx;
  auto shared_ctx = std::shared_ptr<RequestContext>(std::move(ctx));
  cg.Heartbeat(
      req, request.header.client_id.value_or(""), ClientHost(request.peer),
      [shared_ctx, respond](const ConsumerGroupHeartbeatResponse& resp) {
        respond(EncodeResponse(*shared_ctx, resp));
      },
      std::move(prefix));
  // A join refused before any change leaves a group that never existed: drop it.
  if (cg.pristine()) {
    group::GroupSlot* s = shard.Find(req.group_id);
    if (s != nullptr && s->consumer.get() == &cg) s->consumer.reset();
  }
}

}  // namespace runnel::brokerd
