// LeaveGroup (key 13), v0-v5: members leave a classic group (v3+ in batches, naming static
// members by group.instance.id); the group rebalances, or becomes Empty and that is written
// before the answer. See brokerd/group/classic_group.h.
#include "brokerd/group/classic_group.h"
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {

using group::ClassicGroup;
using protocol::ErrorCode;
using protocol::LeaveGroupRequest;
using protocol::LeaveGroupResponse;
using protocol::ToWire;

void HandleLeaveGroup(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  LeaveGroupRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  std::shared_ptr<RequestContext> shared = std::move(ctx);
  const int16_t version = shared->header.api_version;
  // v0-v2 carry one member and answer with one error: the request's or that member's.
  auto answer = [shared, respond, version](ErrorCode error,
                                           std::vector<ClassicGroup::LeaveResult> members) {
    LeaveGroupResponse resp;
    resp.error_code = error;
    if (version >= 3) {
      for (auto& m : members) {
        LeaveGroupResponse::MemberResponse r;
        r.member_id = std::move(m.member_id);
        r.group_instance_id = std::move(m.group_instance_id);
        r.error_code = m.error;
        resp.members.push_back(std::move(r));
      }
    } else if (error == ErrorCode::kNone) {
      for (const auto& m : members) {
        if (m.error != ErrorCode::kNone) {
          resp.error_code = m.error;
          break;
        }
      }
    }
    respond(EncodeResponse(*shared, resp));
  };

  if (req.group_id.empty()) return answer(ErrorCode::kInvalidGroupId, {});
  auto route = broker.groups.RouteGroup(req.group_id);
  if (route.error != ErrorCode::kNone) return answer(route.error, {});
  group::GroupSlot* slot = route.shard->Find(req.group_id);
  if (slot == nullptr || !slot->classic) return answer(ErrorCode::kUnknownMemberId, {});

  std::vector<ClassicGroup::LeaveMember> members;
  if (version >= 3) {
    for (auto& m : req.members) {
      members.push_back({std::move(m.member_id), std::move(m.group_instance_id)});
    }
  } else {
    members.push_back({std::move(req.member_id), std::nullopt});
  }
  slot->classic->Leave(std::move(members), answer);
}

}  // namespace runnel::brokerd
