// DescribeGroups (key 15), v0-v6: classic groups as ClassicGroup::Describe gives them.
//
// As Kafka: a group that does not exist is answered with state "Dead", and so is a KIP-848
// consumer group, which this API does not describe (ConsumerGroupDescribe does); before v6
// with no error, from v6 (KIP-1043) with GROUP_ID_NOT_FOUND and Kafka's message ("Group g
// not found." / "Group g is not a classic group."). A group holding only offsets is an
// Empty group with no protocol type. Routing errors are per group.
#include "brokerd/group/classic_group.h"
#include "brokerd/group/consumer_group.h"
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using protocol::DescribeGroupsRequest;
using protocol::DescribeGroupsResponse;
using protocol::ErrorCode;

// Every operation Kafka's group resource has: READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS,
// ALTER_CONFIGS (1 << AclOperation code).
constexpr int32_t kAllGroupOperations = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11);
constexpr int16_t kFirstNotFoundVersion = 6;

}  // namespace

void HandleDescribeGroups(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                          Respond respond) {
  DescribeGroupsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;

  DescribeGroupsResponse resp;
  for (const std::string& id : req.groups) {
    DescribeGroupsResponse::DescribedGroup& g = resp.groups.emplace_back();
    g.group_id = id;
    group::Coordinator::Route route = broker.groups.RouteGroup(id);
    if (route.error != ErrorCode::kNone) {
      g.error_code = route.error;
      continue;
    }
    const group::GroupSlot* slot = route.shard->Find(id);
    const bool consumer_group = slot != nullptr && slot->consumer && !slot->consumer->deleted();
    const bool gone =
        slot == nullptr || (slot->consumer && !consumer_group) ||
        (slot->classic && slot->classic->state() == group::ClassicGroup::State::kDead);
    if (version >= kFirstNotFoundVersion && (gone || consumer_group)) {
      g.group_state = "Dead";
      g.error_code = ErrorCode::kGroupIdNotFound;
      g.error_message = consumer_group ? fmt::format("Group {} is not a classic group.", id)
                                       : fmt::format("Group {} not found.", id);
    } else if (slot == nullptr || slot->consumer) {
      g.group_state = "Dead";
    } else if (slot->classic) {
      slot->classic->Describe(&g);
      g.group_id = id;
    } else {
      g.group_state = "Empty";
    }
    if (version >= 3 && req.include_authorized_operations && g.error_code == ErrorCode::kNone) {
      g.authorized_operations = kAllGroupOperations;
    }
  }
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
