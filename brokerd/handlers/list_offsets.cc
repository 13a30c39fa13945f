// ListOffsets (key 2), v1-v11: per partition, the offset of a timestamp (the first record
// with a timestamp >= it; none: offset -1, timestamp -1) or of a special one: -1 latest,
// -2 earliest, -3 max timestamp (v7+), -4 earliest local (v8+; the earliest here, with no
// tiered storage), -5 latest tiered (v9+, KIP-1005) and -6 earliest pending upload (v11+,
// KIP-1023): with nothing tiered, storaged answers both offset -1, timestamp -1, leader epoch
// -1, as Kafka does for a topic without remote storage. v10 adds TimeoutMs, which bounds
// Kafka's wait for remote storage; there is none here, so it is read and not needed. v0
// (several offsets per partition) is not served, as in Kafka 4: every client in use sends v1
// or later.
//
// Checks per partition, in Kafka's order: a partition named twice in one request is
// INVALID_REQUEST (every copy), then unknown topic or partition, no local copy, the current
// leader epoch (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), leadership (a debugging client,
// replica id -2, may ask any local copy). Then one storaged call for all partitions.
//
// What a consumer (replica id -1) may see ends at the high watermark (the log end offset on
// a single replica), or at the last stable offset for read_committed (isolation level 1,
// v2+): storaged answers "latest" with it then, and a timestamp lookup (max timestamp
// included) that finds an offset at or past it finds none (-1, -1), Kafka's rule. Kafka
// answers "latest" with the partition's current leader epoch, which is taken from the
// metadata here.
#include <map>
#include <memory>

#include "brokerd/handlers/fan_out.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::ListOffsetsRequest;
using protocol::ListOffsetsResponse;

constexpr int32_t kDebuggingReplicaId = -2;
constexpr int64_t kLatestTimestamp = -1;
constexpr int16_t kFirstLeaderEpochVersion = 4;
constexpr std::chrono::milliseconds kStorageTimeout{15000};

// Per storaged partition, in call order: where its answer goes and, for "latest", the
// leader epoch to answer with.
struct Slot {
  ListOffsetsResponse::ListOffsetsPartitionResponse* out;
  int64_t timestamp;
  int32_t leader_epoch;
};

}  // namespace

void HandleListOffsets(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                       Respond respond) {
  ListOffsetsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;
  const bool leader_only = req.replica_id.value() != kDebuggingReplicaId;

  std::map<PartitionKey, int> times_named;
  for (const auto& topic : req.topics) {
    for (const auto& partition : topic.partitions) {
      ++times_named[{topic.name, partition.partition_index}];
    }
  }

  auto pending = std::make_shared<StorageFanOut<ListOffsetsResponse, Slot>>();
  ListOffsetsResponse& resp = pending->resp;
  storage::ListOffsetsRequest call;
  resp.topics.reserve(req.topics.size());
  for (const auto& topic : req.topics) {
    ListOffsetsResponse::ListOffsetsTopicResponse& t = resp.topics.emplace_back();
    t.name = topic.name;
    t.partitions.reserve(topic.partitions.size());
    const TopicInfo* info = broker.metadata.FindTopic(topic.name);
    for (const auto& partition : topic.partitions) {
      ListOffsetsResponse::ListOffsetsPartitionResponse& out = t.partitions.emplace_back();
      out.partition_index = partition.partition_index;
      out.timestamp = -1;
      out.offset = -1;
      out.leader_epoch = -1;
      auto fail = [&out](ErrorCode error) { out.error_code = error; };
      if (times_named[{topic.name, partition.partition_index}] > 1) {
        fail(ErrorCode::kInvalidRequest);
        continue;
      }
      const PartitionInfo* p = nullptr;
      if (ErrorCode e = CheckLocalPartition(broker, info, partition.partition_index,
                                            partition.current_leader_epoch, &p, leader_only);
          e != ErrorCode::kNone) {
        fail(e);
        continue;
      }
      storage::ListOffsetsPartition* lp = call.add_partitions();
      lp->set_topic(topic.name);
      lp->set_partition(partition.partition_index);
      lp->set_timestamp(partition.timestamp);
      lp->set_isolation_level(req.isolation_level);
      pending->slots.push_back({&out, partition.timestamp, p->leader_epoch});
    }
  }

  pending->ctx = std::move(ctx);
  pending->respond = std::move(respond);
  if (pending->slots.empty()) return pending->Answer();
  auto fill = [version](const Slot& slot, const storage::ListOffsetsPartitionResult& r) {
    slot.out->offset = r.offset();
    slot.out->timestamp = r.timestamp();
    if (version >= kFirstLeaderEpochVersion) {
      slot.out->leader_epoch =
          slot.timestamp == kLatestTimestamp ? slot.leader_epoch : r.leader_epoch();
    }
  };
  broker.storage.ListOffsets(std::move(call), kStorageTimeout, FillThenAnswer(pending, fill));
}

}  // namespace runnel::brokerd
