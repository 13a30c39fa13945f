// OffsetForLeaderEpoch (key 23), v2-v4 (v0-v1 are not served, as in Kafka 4): where a
// leader epoch ends in the partition's log, which a consumer asks after a leader change to
// find whether its position was truncated away (KIP-320), and a follower asks to truncate.
// storaged answers from the partition's leader epoch cache, by Kafka's rules (see
// OffsetsForLeaderEpoch in proto/runnel/storage.proto); an epoch it cannot place is
// answered with no error and leader epoch / end offset -1.
//
// Checks per partition, in Kafka's order: unknown topic or partition, no local copy, the
// current leader epoch (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), leadership. The replica
// id (v3+: -1 for consumers, -2 when unset) does not change the answer: Kafka uses it only
// to authorize.
#include <memory>

#include "brokerd/handlers/fan_out.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::OffsetForLeaderEpochRequest;
using protocol::OffsetForLeaderEpochResponse;

constexpr std::chrono::milliseconds kStorageTimeout{15000};

// Per storaged partition, in call order: where its answer goes.
struct Slot {
  OffsetForLeaderEpochResponse::EpochEndOffset* out;
};

}  // namespace

void HandleOffsetForLeaderEpoch(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                                Respond respond) {
  OffsetForLeaderEpochRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());

  auto pending = std::make_shared<StorageFanOut<OffsetForLeaderEpochResponse, Slot>>();
  OffsetForLeaderEpochResponse& resp = pending->resp;
  storage::OffsetsForLeaderEpochRequest call;
  resp.topics.reserve(req.topics.size());
  for (const auto& topic : req.topics) {
    OffsetForLeaderEpochResponse::OffsetForLeaderTopicResult& t = resp.topics.emplace_back();
    t.topic = topic.topic;
    t.partitions.reserve(topic.partitions.size());
    const TopicInfo* info = broker.metadata.FindTopic(topic.topic);
    for (const auto& partition : topic.partitions) {
      OffsetForLeaderEpochResponse::EpochEndOffset& out = t.partitions.emplace_back();
      out.partition = partition.partition;
      out.leader_epoch = -1;
      out.end_offset = -1;
      auto fail = [&out](ErrorCode error) { out.error_code = error; };
      const PartitionInfo* p = nullptr;
      if (ErrorCode e = CheckLocalPartition(broker, info, partition.partition,
                                            partition.current_leader_epoch, &p);
          e != ErrorCode::kNone) {
        fail(e);
        continue;
      }
      storage::OffsetsForLeaderEpochPartition* op = call.add_partitions();
      op->set_topic(topic.topic);
      op->set_partition(partition.partition);
      op->set_leader_epoch(partition.leader_epoch);
      pending->slots.push_back({&out});
    }
  }

  pending->ctx = std::move(ctx);
  pending->respond = std::move(respond);
  if (pending->slots.empty()) return pending->Answer();
  auto fill = [](const Slot& slot, const storage::OffsetsForLeaderEpochPartitionResult& r) {
    slot.out->leader_epoch = r.leader_epoch();
    slot.out->end_offset = r.end_offset();
  };
  broker.storage.OffsetsForLeaderEpoch(std::move(call), kStorageTimeout,
                                       FillThenAnswer(pending, fill));
}

}  // namespace runnel::brokerd
