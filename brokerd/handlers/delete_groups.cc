// DeleteGroups (key 42), v0-v3: removes groups without members, with their offsets, by
// writing tombstones for every offset and for the group.
//
// As Kafka: a group with members is NON_EMPTY_GROUP; one that does not exist is
// GROUP_ID_NOT_FOUND; routing and write errors are per group. v3 adds a per-group
// ErrorMessage (KIP-1043), which Kafka 4.4 fills only for a streams group's topology errors:
// it stays null here, as Kafka leaves it for every error Runnel can give.
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using protocol::DeleteGroupsRequest;
using protocol::DeleteGroupsResponse;
using protocol::ErrorCode;

// NONE when the group can be deleted, else its error.
ErrorCode CheckDeletable(const group::GroupSlot* slot) {
  if (slot == nullptr) return ErrorCode::kGroupIdNotFound;
  if (slot->classic) {
    if (slot->classic->state() == group::ClassicGroup::State::kDead) {
      return ErrorCode::kGroupIdNotFound;
    }
    if (slot->classic->state() != group::ClassicGroup::State::kEmpty) {
      return ErrorCode::kNonEmptyGroup;
    }
  }
  if (slot->consumer && !slot->consumer->empty()) return ErrorCode::kNonEmptyGroup;
  return ErrorCode::kNone;
}

struct Pending {
  std::shared_ptr<RequestContext> ctx;
  Respond respond;
  DeleteGroupsResponse resp;
  int outstanding = 1;

  void Done() {
    if (--outstanding == 0) respond(EncodeResponse(*ctx, resp));
  }
};

}  // namespace

void HandleDeleteGroups(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                        Respond respond) {
  DeleteGroupsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());

  auto pending = std::make_shared<Pending>();
  pending->ctx = std::move(ctx);
  pending->respond = std::move(respond);
  pending->resp.results.reserve(req.groups_names.size());
  for (const std::string& id : req.groups_names) {
    DeleteGroupsResponse::DeletableGroupResult& r = pending->resp.results.emplace_back();
    r.group_id = id;
    group::Coordinator::Route route = broker.groups.RouteGroup(id);
    if (route.error != ErrorCode::kNone) {
      r.error_code = route.error;
      continue;
    }
    if (ErrorCode error = CheckDeletable(route.shard->Find(id)); error != ErrorCode::kNone) {
      r.error_code = error;
      continue;
    }
    const size_t index = pending->resp.results.size() - 1;
    ++pending->outstanding;
    route.shard->DeleteGroup(id, [pending, index](ErrorCode error) {
      pending->resp.results[index].error_code = error;
      pending->Done();
    });
  }
  pending->Done();
}

}  // namespace runnel::brokerd
