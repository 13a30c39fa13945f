// DeleteRecords (key 21), v0-v2: moves a partition's log start offset up to the offset asked
// (-1 = the high watermark), as AdminClient.deleteRecords does; the answer's low watermark is
// the log start offset afterwards. An offset above the high watermark is
// OFFSET_OUT_OF_RANGE (storaged checks it under its append lock).
//
// Checks per partition, in Kafka's order: unknown topic or partition, an internal topic
// (INVALID_TOPIC_EXCEPTION), no local leader copy (NOT_LEADER_OR_FOLLOWER), a topic whose
// cleanup.policy lacks "delete" (POLICY_VIOLATION). Then one storaged call for all of them.
// Kafka waits up to timeout_ms for the followers to move their log start too; with a single
// replica there is nothing to wait for, so the timeout bounds the storaged call.
#include <algorithm>
#include <memory>

#include "brokerd/handlers/fan_out.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"

namespace runnel::brokerd {
namespace {

using protocol::DeleteRecordsRequest;
using protocol::DeleteRecordsResponse;
using protocol::ErrorCode;

constexpr std::chrono::milliseconds kMinStorageTimeout{1000};

// Whether the topic's cleanup.policy (its own, else the node's log.cleanup.policy) lets
// records be deleted.
bool PolicyAllowsDelete(const BrokerContext& broker, const TopicInfo& topic) {
  auto it = topic.configs.find("cleanup.policy");
  std::vector<std::string> policy = it == topic.configs.end()
                                        ? broker.config.GetList("log.cleanup.policy")
                                        : config::SplitList(it->second);
  return std::find(policy.begin(), policy.end(), "delete") != policy.end();
}

// Per storaged partition, in call order: where its answer goes.
struct Slot {
  DeleteRecordsResponse::DeleteRecordsPartitionResult* out;
};

}  // namespace

void HandleDeleteRecords(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                         Respond respond) {
  DeleteRecordsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());

  auto pending = std::make_shared<StorageFanOut<DeleteRecordsResponse, Slot>>();
  DeleteRecordsResponse& resp = pending->resp;
  storage::DeleteRecordsRequest call;
  resp.topics.reserve(req.topics.size());
  for (const auto& topic : req.topics) {
    DeleteRecordsResponse::DeleteRecordsTopicResult& t = resp.topics.emplace_back();
    t.name = topic.name;
    t.partitions.reserve(topic.partitions.size());
    const TopicInfo* info = broker.metadata.FindTopic(topic.name);
    for (const auto& partition : topic.partitions) {
      DeleteRecordsResponse::DeleteRecordsPartitionResult& out = t.partitions.emplace_back();
      out.partition_index = partition.partition_index;
      out.low_watermark = -1;
      auto fail = [&out](ErrorCode error) { out.error_code = error; };
      const PartitionInfo* p = nullptr;
      ErrorCode error = CheckLocalPartition(broker, info, partition.partition_index, -1, &p);
      // Kafka refuses internal topics before looking at leadership.
      if (p != nullptr && info->internal()) error = ErrorCode::kInvalidTopicException;
      if (error != ErrorCode::kNone) {
        fail(error);
        continue;
      }
      if (!PolicyAllowsDelete(broker, *info)) {
        fail(ErrorCode::kPolicyViolation);
        continue;
      }
      storage::DeleteRecordsPartition* dp = call.add_partitions();
      dp->set_topic(topic.name);
      dp->set_partition(partition.partition_index);
      dp->set_offset(partition.offset);
      pending->slots.push_back({&out});
    }
  }

  pending->ctx = std::move(ctx);
  pending->respond = std::move(respond);
  if (pending->slots.empty()) return pending->Answer();
  const auto timeout =
      std::max(std::chrono::milliseconds(std::max(req.timeout_ms, 0)), kMinStorageTimeout);
  auto fill = [&broker](const Slot& slot, const storage::DeleteRecordsPartitionResult& r) {
    slot.out->low_watermark = r.low_watermark();
    // Before the client hears of it, so no fetch after it is answered from below it (the
    // watch stream's message about it may come later).
    broker.partitions.RaiseLogStart(r.topic(), r.partition(), r.low_watermark());
  };
  broker.storage.DeleteRecords(std::move(call), timeout, FillThenAnswer(pending, fill));
}

}  // namespace runnel::brokerd
