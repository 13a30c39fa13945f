// SyncGroup (key 14), v0-v5: the classic protocol's assignment phase. The leader's answer
// carries every member's assignment; the group is written and then each member gets its own
// (brokerd/group/classic_group.h).
#include "brokerd/group/classic_group.h"
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {

using group::ClassicGroup;
using protocol::ErrorCode;
using protocol::SyncGroupRequest;
using protocol::SyncGroupResponse;

void HandleSyncGroup(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  SyncGroupRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  std::shared_ptr<RequestContext> shared = std::move(ctx);
  auto answer = [shared, respond](const SyncGroupResponse& r) {
    respond(EncodeResponse(*shared, r));
  };
  auto fail = [&](ErrorCode error) {
    SyncGroupResponse r;
    r.error_code = error;
    answer(r);
  };
  // From v5 the client must name the protocol type and name it synced for.
  if (shared->header.api_version >= 5 && (!req.protocol_type || !req.protocol_name)) {
    return fail(ErrorCode::kInconsistentGroupProtocol);
  }
  if (req.group_id.empty()) return fail(ErrorCode::kInvalidGroupId);

  auto route = broker.groups.RouteGroup(req.group_id);
  if (route.error != ErrorCode::kNone) return fail(static_cast<ErrorCode>(route.error));
  group::GroupSlot* slot = route.shard->Find(req.group_id);
  if (slot == nullptr || !slot->classic) return fail(ErrorCode::kUnknownMemberId);

  ClassicGroup::SyncParams params;
  params.member_id = std::move(req.member_id);
  params.group_instance_id = std::move(req.group_instance_id);
  params.generation_id = req.generation_id;
  params.protocol_type = std::move(req.protocol_type);
  params.protocol_name = std::move(req.protocol_name);
  for (auto& a : req.assignments) {
    params.assignments.emplace_back(std::move(a.member_id), std::move(a.assignment));
  }
  slot->classic->Sync(std::move(params), answer);
}

}  // namespace runnel::brokerd
