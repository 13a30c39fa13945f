// JoinGroup (key 11), v0-v9: the classic rebalance protocol's join phase. The group's state
// machine is ClassicGroup (brokerd/group/classic_group.h); this file routes the request to
// the group's coordinator shard and answers in the request's version's shape. The answer
// may come much later, when the group's join phase completes.
#include <set>

#include "brokerd/group/classic_group.h"
#include "brokerd/group/consumer_group.h"
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using group::ClassicGroup;
using protocol::ErrorCode;
using protocol::JoinGroupRequest;
using protocol::JoinGroupResponse;

// Kafka records a member's host as InetAddress.toString() of the connection: "/ip".
std::string ClientHost(const std::string& peer) {
  size_t colon = peer.rfind(':');
  return "/" + (colon == std::string::npos ? peer : peer.substr(0, colon));
}

ClassicGroup::JoinParams ToParams(const RequestContext& ctx, JoinGroupRequest& req) {
  ClassicGroup::JoinParams p;
  p.api_version = ctx.header.api_version;
  p.member_id = req.member_id;
  p.group_instance_id = req.group_instance_id;
  p.client_id = ctx.header.client_id.value_or("");
  p.client_host = ClientHost(ctx.peer);
  p.session_timeout_ms = req.session_timeout_ms;
  // v0 has no rebalance timeout: the session timeout serves as one, as in Kafka.
  p.rebalance_timeout_ms =
      ctx.header.api_version == 0 ? req.session_timeout_ms : req.rebalance_timeout_ms;
  p.protocol_type = req.protocol_type;
  // Kafka keys the protocols by name: a repeated name counts once (its first entry).
  std::set<std::string> seen;
  for (auto& proto : req.protocols) {
    if (!seen.insert(proto.name).second) continue;
    p.protocols.push_back(ClassicGroup::Protocol{proto.name, std::move(proto.metadata)});
  }
  return p;
}

void JoinClassic(BrokerContext& broker, const std::shared_ptr<RequestContext>& ctx,
                 const std::shared_ptr<JoinGroupRequest>& req, Respond respond);

}  // namespace

void HandleJoinGroup(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  auto req = std::make_shared<JoinGroupRequest>();
  if (!DecodeRequest(*ctx, req.get())) return respond(Response::Close());
  JoinClassic(broker, std::move(ctx), req, std::move(respond));
}

namespace {

void JoinClassic(BrokerContext& broker, const std::shared_ptr<RequestContext>& ctx,
                 const std::shared_ptr<JoinGroupRequest>& req, Respond respond) {
  auto answer = [ctx, respond](const JoinGroupResponse& r) { respond(EncodeResponse(*ctx, r)); };
  auto fail = [&](ErrorCode error, std::string member_id) {
    JoinGroupResponse r;
    r.error_code = error;
    r.member_id = std::move(member_id);
    answer(r);
  };
  if (req->group_id.empty()) return fail(ErrorCode::kInvalidGroupId, req->member_id);

  auto route = broker.groups.RouteGroup(req->group_id);
  if (route.error != ErrorCode::kNone) return fail(route.error, "");
  group::Shard& shard = *route.shard;
  group::GroupSlot& slot = shard.FindOrCreate(req->group_id);

  if (slot.consumer) {
    if (!slot.consumer->empty()) {
      // A KIP-848 group with members: classic members cannot join it here.
      return fail(ErrorCode::kInconsistentGroupProtocol, "");
    }
    // An empty consumer group is replaced by a classic one, as in Kafka: its records are
    // deleted first (none to delete when it never wrote any).
    std::vector<group::LogRecord> tombstones;
    if (!slot.consumer->pristine()) tombstones = slot.consumer->TombstoneRecords();
    slot.consumer->Shutdown(ErrorCode::kNotCoordinator);
    slot.consumer.reset();
    if (!tombstones.empty()) {
      shard.Write(std::move(tombstones), [&broker, ctx, req, respond](ErrorCode error) {
        if (error != ErrorCode::kNone) {
          JoinGroupResponse r;
          r.error_code =
              error == ErrorCode::kRequestTimedOut ? ErrorCode::kCoordinatorNotAvailable : error;
          return respond(EncodeResponse(*ctx, r));
        }
        JoinClassic(broker, ctx, req, respond);
      });
      return;
    }
  }

  const bool created = !slot.classic;
  if (created) {
    // A known member id for a group that does not exist: Kafka's GROUP_ID_NOT_FOUND path.
    if (!req->member_id.empty()) {
      if (slot.offsets.empty() && slot.pending_commits == 0) shard.Remove(req->group_id);
      return fail(ErrorCode::kUnknownMemberId, req->member_id);
    }
    slot.classic = std::make_unique<ClassicGroup>(req->group_id, shard);
  }
  ClassicGroup& group = *slot.classic;
  group.Join(ToParams(*ctx, *req), answer);
  // A group this request created and left with nothing (the join was refused) is dropped
  // again rather than listed as an empty group.
  if (created && group.empty() && group.pending_member_count() == 0 && group.generation() == 0 &&
      slot.offsets.empty() && slot.pending_commits == 0) {
    shard.Remove(req->group_id);
  }
}

}  // namespace
}  // namespace runnel::brokerd
