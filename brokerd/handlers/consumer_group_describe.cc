// ConsumerGroupDescribe (key 69), v0-v1: KIP-848 groups with their members, assignments and
// target assignments; v1 adds each member's type (KIP-1099: 1, a consumer-protocol member).
#include <memory>
#include <string>

#include "brokerd/group/consumer_group.h"
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using protocol::ConsumerGroupDescribeRequest;
using protocol::ConsumerGroupDescribeResponse;
using protocol::ErrorCode;

// READ, DELETE and DESCRIBE: every operation a group resource has, with no authorizer.
constexpr int32_t kAllGroupOperations = (1 << 3) | (1 << 6) | (1 << 8);

}  // namespace

void HandleConsumerGroupDescribe(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                                 Respond respond) {
  ConsumerGroupDescribeRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());

  ConsumerGroupDescribeResponse resp;
  for (const std::string& group_id : req.group_ids) {
    ConsumerGroupDescribeResponse::DescribedGroup out;
    out.group_id = group_id;
    auto route = broker.groups.RouteGroup(group_id);
    group::GroupSlot* slot =
        route.error == ErrorCode::kNone ? route.shard->Find(group_id) : nullptr;
    if (route.error != ErrorCode::kNone) {
      out.error_code = route.error;
    } else if (slot == nullptr || !slot->consumer || slot->consumer->deleted()) {
      out.error_code = ErrorCode::kGroupIdNotFound;
      out.error_message = slot != nullptr && slot->classic
                              ? fmt::format("Group {} is not a consumer group.", group_id)
                              : fmt::format("Group {} not found.", group_id);
    } else {
      slot->consumer->Describe(&out);
      if (req.include_authorized_operations) out.authorized_operations = kAllGroupOperations;
    }
    resp.groups.push_back(std::move(out));
  }
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
