// OffsetCommit (key 8), v2-v10: a group's committed offsets, written to its partition of
// __consumer_offsets and answered once durable. v10 (KIP-848) names topics by id instead of
// by name, in the request and the answer; an id this broker does not know is UNKNOWN_TOPIC_ID
// for every partition of the topic, as Kafka. Offsets are kept by topic name either way.
//
// As Kafka: partitions of unknown topics are UNKNOWN_TOPIC_OR_PARTITION (and never reach
// the group); the group then checks the committer (generation/member for classic groups,
// member epoch for KIP-848 groups, v9+); a commit with generation -1 to a group that does
// not exist creates an offsets-only ("simple") group; an oversized metadata string is
// OFFSET_METADATA_TOO_LARGE for its partition alone. A group-level error goes on every
// partition that reached the group.
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/commit_topics.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::OffsetCommitRequest;
using protocol::OffsetCommitResponse;

constexpr int16_t kFirstGroupIdNotFoundVersion = 9;
constexpr int16_t kFirstLeaderEpochVersion = 6;
constexpr int16_t kLastRetentionTimeVersion = 4;
constexpr int16_t kFirstTopicIdVersion = 10;

// Kafka's checks of the committer against the group (OffsetMetadataManager's
// validateOffsetCommit): 0 or the group-level error.
ErrorCode ValidateCommitter(group::GroupSlot* slot, const OffsetCommitRequest& req,
                            int16_t version) {
  const int32_t generation = req.generation_id_or_member_epoch;
  if (slot == nullptr) {
    // No group: generation -1 is the admin client or a consumer using assign().
    if (generation < 0) return ErrorCode::kNone;
    return version >= kFirstGroupIdNotFoundVersion ? ErrorCode::kGroupIdNotFound
                                                   : ErrorCode::kIllegalGeneration;
  }
  if (slot->classic) {
    return slot->classic->ValidateOffsetCommit(req.member_id, req.group_instance_id, generation);
  }
  if (slot->consumer) {
    return slot->consumer->ValidateOffsetCommit(req.member_id, generation, version,
                                                /*transactional=*/false);
  }
  // An offsets-only group is Kafka's Empty "simple" classic group: anyone with generation
  // -1; a member of it otherwise, and it has none.
  return generation < 0 ? ErrorCode::kNone : ErrorCode::kUnknownMemberId;
}

}  // namespace

void HandleOffsetCommit(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                        Respond respond) {
  OffsetCommitRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;

  auto resp = std::make_shared<OffsetCommitResponse>();
  using Item = CommitItem;
  const std::vector<Item> valid = CheckCommitTopics(
      broker.metadata, version >= kFirstTopicIdVersion, req.topics, &resp->topics);
  auto set_all = [&resp, &valid](ErrorCode error) {
    for (const Item& it : valid) resp->topics[it.topic].partitions[it.partition].error_code = error;
  };
  if (valid.empty()) return respond(EncodeResponse(*ctx, *resp));

  group::Coordinator::Route route = broker.groups.RouteGroup(req.group_id);
  if (route.error != ErrorCode::kNone) {
    set_all(route.error);
    return respond(EncodeResponse(*ctx, *resp));
  }
  group::Shard& shard = *route.shard;
  if (ErrorCode error = ValidateCommitter(shard.Find(req.group_id), req, version);
      error != ErrorCode::kNone) {
    set_all(error);
    return respond(EncodeResponse(*ctx, *resp));
  }

  const int64_t now = shard.NowMs();
  // A retention beyond the clock's range saturates rather than overflow.
  const int64_t expire_at =
      version <= kLastRetentionTimeVersion && req.retention_time_ms != -1
          ? (req.retention_time_ms > INT64_MAX - now ? INT64_MAX : now + req.retention_time_ms)
          : -1;
  std::vector<Item> written;
  std::vector<group::Shard::Commit> commits =
      CommitsOf(valid, req.topics, resp->topics, shard, version >= kFirstLeaderEpochVersion, now,
                expire_at, &written);
  if (commits.empty()) return respond(EncodeResponse(*ctx, *resp));

  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  shard.CommitOffsets(req.group_id, std::move(commits),
                      [resp, written, shared_ctx, respond](ErrorCode error) {
                        for (const Item& it : written) {
                          resp->topics[it.topic].partitions[it.partition].error_code = error;
                        }
                        respond(EncodeResponse(*shared_ctx, *resp));
                      });
}

}  // namespace runnel::brokerd
