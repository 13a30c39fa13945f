// DescribeProducers (key 61), v0: the active producers of partitions as their leader's
// producer state holds them (kafka-transactions.sh describe-producers, KIP-664): per
// producer its id, epoch, last sequence, last timestamp, the coordinator epoch of its last
// marker and the first offset of its ongoing transaction (-1 when none).
//
// Checks per partition, in Kafka's order: an invalid topic name (INVALID_TOPIC_EXCEPTION),
// an unknown topic or partition (UNKNOWN_TOPIC_OR_PARTITION), not led here or its log not
// in storaged (NOT_LEADER_OR_FOLLOWER). No authorizer yet, so no TOPIC_AUTHORIZATION_FAILED.
// The partitions that pass go to storaged in one call, which reads each one's producer
// state under its append lock (an offline log is KAFKA_STORAGE_ERROR there).
#include <memory>

#include "brokerd/handlers/fan_out.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"
#include "common/util/topic_name.h"

namespace runnel::brokerd {
namespace {

using protocol::DescribeProducersRequest;
using protocol::DescribeProducersResponse;
using protocol::ErrorCode;

constexpr std::chrono::milliseconds kStorageTimeout{15000};

// Per storaged partition, in call order: where its answer goes.
struct Slot {
  DescribeProducersResponse::PartitionResponse* out;
};

}  // namespace

void HandleDescribeProducers(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                             Respond respond) {
  DescribeProducersRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());

  auto pending = std::make_shared<StorageFanOut<DescribeProducersResponse, Slot>>();
  DescribeProducersResponse& resp = pending->resp;
  storage::DescribeProducersRequest call;
  resp.topics.reserve(req.topics.size());
  for (const auto& topic : req.topics) {
    DescribeProducersResponse::TopicResponse& t = resp.topics.emplace_back();
    t.name = topic.name;
    t.partitions.reserve(topic.partition_indexes.size());
    const std::string invalid = TopicNameError(topic.name);
    const TopicInfo* info = invalid.empty() ? broker.metadata.FindTopic(topic.name) : nullptr;
    for (int32_t index : topic.partition_indexes) {
      DescribeProducersResponse::PartitionResponse& out = t.partitions.emplace_back();
      out.partition_index = index;
      if (!invalid.empty()) {
        out.error_code = ErrorCode::kInvalidTopicException;
        out.error_message = invalid;
        continue;
      }
      const PartitionInfo* p = nullptr;
      if (ErrorCode e = CheckLocalPartition(broker, info, index, -1, &p); e != ErrorCode::kNone) {
        out.error_code = e;
        continue;
      }
      storage::DescribeProducersPartition* dp = call.add_partitions();
      dp->set_topic(topic.name);
      dp->set_partition(index);
      pending->slots.push_back({&out});
    }
  }

  pending->ctx = std::move(ctx);
  pending->respond = std::move(respond);
  if (pending->slots.empty()) return pending->Answer();
  auto fill = [](const Slot& slot, const storage::DescribeProducersPartitionResult& r) {
    slot.out->active_producers.reserve(r.producers_size());
    for (const storage::ProducerDescription& d : r.producers()) {
      DescribeProducersResponse::ProducerState& s = slot.out->active_producers.emplace_back();
      s.producer_id = ProducerId(d.producer_id());
      s.producer_epoch = d.producer_epoch();
      s.last_sequence = d.last_sequence();
      s.last_timestamp = d.last_timestamp();
      s.coordinator_epoch = d.coordinator_epoch();
      s.current_txn_start_offset = d.current_txn_start_offset();
    }
  };
  broker.storage.DescribeProducers(std::move(call), kStorageTimeout, FillThenAnswer(pending, fill));
}

}  // namespace runnel::brokerd
