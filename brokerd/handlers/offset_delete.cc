// OffsetDelete (key 47), v0: removes committed offsets of a group (kafka-consumer-groups
// --delete-offsets), writing their tombstones.
//
// As Kafka: an unknown group is GROUP_ID_NOT_FOUND; a classic group with members that does
// not use the "consumer" protocol is NON_EMPTY_GROUP; partitions of a topic the group is
// subscribed to answer GROUP_SUBSCRIBED_TO_TOPIC and keep their offsets; the others are
// deleted (answering no error also when nothing was committed).
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::OffsetDeleteRequest;
using protocol::OffsetDeleteResponse;

}  // namespace

void HandleOffsetDelete(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                        Respond respond) {
  OffsetDeleteRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());

  auto resp = std::make_shared<OffsetDeleteResponse>();
  auto fail = [&](ErrorCode error) {
    resp->error_code = error;
    respond(EncodeResponse(*ctx, *resp));
  };
  if (req.group_id.empty()) return fail(ErrorCode::kInvalidGroupId);
  group::Coordinator::Route route = broker.groups.RouteGroup(req.group_id);
  if (route.error != ErrorCode::kNone) return fail(route.error);
  group::Shard& shard = *route.shard;
  group::GroupSlot* slot = shard.Find(req.group_id);
  if (slot == nullptr) return fail(ErrorCode::kGroupIdNotFound);
  if (slot->classic) {
    const auto state = slot->classic->state();
    if (state == group::ClassicGroup::State::kDead) return fail(ErrorCode::kGroupIdNotFound);
    if (state != group::ClassicGroup::State::kEmpty &&
        slot->classic->protocol_type() != "consumer") {
      return fail(ErrorCode::kNonEmptyGroup);
    }
  }
  // nullopt: subscribed to every topic (member metadata Kafka could not parse either).
  const std::optional<std::set<std::string>> subscribed = shard.SubscribedTopics(*slot);
  std::vector<group::TopicPartition> to_delete;
  for (const auto& topic : req.topics) {
    OffsetDeleteResponse::OffsetDeleteResponseTopic& out = resp->topics.emplace_back();
    out.name = topic.name;
    const bool is_subscribed = !subscribed.has_value() || subscribed->count(topic.name) > 0;
    for (const auto& p : topic.partitions) {
      OffsetDeleteResponse::OffsetDeleteResponsePartition& op = out.partitions.emplace_back();
      op.partition_index = p.partition_index;
      if (is_subscribed) {
        op.error_code = ErrorCode::kGroupSubscribedToTopic;
      } else {
        to_delete.emplace_back(topic.name, p.partition_index);
      }
    }
  }
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  shard.DeleteOffsets(req.group_id, to_delete, [resp, shared_ctx, respond](ErrorCode error) {
    if (error != ErrorCode::kNone) {
      // Kafka answers a failed write with the top-level error alone.
      OffsetDeleteResponse failed;
      failed.error_code = error;
      return respond(EncodeResponse(*shared_ctx, failed));
    }
    respond(EncodeResponse(*shared_ctx, *resp));
  });
}

}  // namespace runnel::brokerd
