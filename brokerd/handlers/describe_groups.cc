// DescribeGroups (key 15), v0-v5: classic groups as ClassicGroup::Describe gives them.
//
// As Kafka (v0-v5): a group that does not exist is answered with state "Dead" and no
// error; so is a KIP-848 consumer group, which this API does not describe
// (ConsumerGroupDescribe does); a group holding only offsets is an Empty group with no
// protocol type. Routing errors are per group.
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
    if (slot == nullptr || slot->consumer) {
      g.group_state = "Dead";
    } else if (slot->classic) {
      slot->classic->Describe(&g);
      g.group_id = id;
    } else {
      g.group_state = "Empty";
    }
    if (version >= 3 && req.include_authorized_operations) {
      g.authorized_operations = kAllGroupOperations;
    }
  }
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
