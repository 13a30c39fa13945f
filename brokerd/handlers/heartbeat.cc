// Heartbeat (key 12), v0-v4: a classic group member's liveness signal; the answer tells it
// when to rejoin (REBALANCE_IN_PROGRESS). See brokerd/group/classic_group.h.
#include "brokerd/group/classic_group.h"
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {

using protocol::ErrorCode;
using protocol::HeartbeatRequest;
using protocol::HeartbeatResponse;
using protocol::ToWire;

void HandleHeartbeat(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  HeartbeatRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  HeartbeatResponse resp;
  if (req.group_id.empty()) {
    resp.error_code = ErrorCode::kInvalidGroupId;
    return respond(EncodeResponse(*ctx, resp));
  }
  auto route = broker.groups.RouteGroup(req.group_id);
  if (route.error != ErrorCode::kNone) {
    resp.error_code = route.error;
    return respond(EncodeResponse(*ctx, resp));
  }
  group::GroupSlot* slot = route.shard->Find(req.group_id);
  if (slot == nullptr || !slot->classic) {
    resp.error_code = ErrorCode::kUnknownMemberId;
  } else {
    resp.error_code =
        slot->classic->Heartbeat(req.member_id, req.group_instance_id, req.generation_id);
  }
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
