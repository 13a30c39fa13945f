// Metadata (key 3), v0-v12: answered from the local metadata cache.
#include <set>

#include "brokerd/handlers/handler.h"
#include "common/util/topic_name.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::MetadataRequest;
using protocol::MetadataResponse;

bool BrokerIsLive(const MetadataCache& cache, int32_t id) {
  auto it = cache.brokers().find(id);
  return it != cache.brokers().end() && !it->second.fenced;
}

void FillTopic(const MetadataCache& cache, const TopicInfo& topic, bool with_operations,
               MetadataResponse::MetadataResponseTopic* out) {
  out->error_code = static_cast<int16_t>(ErrorCode::kNone);
  out->name = topic.name;
  out->topic_id = topic.id;
  out->is_internal = topic.internal();
  if (with_operations) out->topic_authorized_operations = kAllTopicOperations;
  for (const auto& [id, p] : topic.partitions) {
    MetadataResponse::MetadataResponsePartition part;
    bool leader_live = p.leader >= 0 && BrokerIsLive(cache, p.leader);
    part.error_code = static_cast<int16_t>(leader_live ? ErrorCode::kNone
                                                       : ErrorCode::kLeaderNotAvailable);
    part.partition_index = p.id;
    part.leader_id = NodeId(leader_live ? p.leader : -1);
    part.leader_epoch = p.leader_epoch;
    for (int32_t r : p.replicas) {
      part.replica_nodes.push_back(NodeId(r));
      if (!BrokerIsLive(cache, r)) part.offline_replicas.push_back(NodeId(r));
    }
    for (int32_t r : p.isr) part.isr_nodes.push_back(NodeId(r));
    out->partitions.push_back(std::move(part));
  }
}

}  // namespace

void HandleMetadata(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  MetadataRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;
  const MetadataCache& cache = broker.metadata;

  MetadataResponse resp;
  for (BrokerAddress& b : BrokersOnListener(cache, ctx->listener)) {
    MetadataResponse::MetadataResponseBroker out;
    out.node_id = NodeId(b.id);
    out.host = std::move(b.host);
    out.port = b.port;
    out.rack = std::move(b.rack);
    resp.brokers.push_back(std::move(out));
  }
  resp.cluster_id = cache.cluster_id();
  resp.controller_id = NodeId(broker.node_id);
  if (version >= 8 && version <= 10 && req.include_cluster_authorized_operations) {
    resp.cluster_authorized_operations = kAllClusterOperations;
  }
  const bool with_topic_ops = req.include_topic_authorized_operations;

  // v0 asks for every topic with an empty list; v1+ with a null one.
  bool all_topics = !req.topics.has_value() || (version == 0 && req.topics->empty());
  if (all_topics) {
    for (const auto& [name, topic] : cache.topics()) {
      MetadataResponse::MetadataResponseTopic out;
      FillTopic(cache, topic, with_topic_ops, &out);
      resp.topics.push_back(std::move(out));
    }
    return respond(EncodeResponse(*ctx, resp));
  }

  const bool auto_create =
      req.allow_auto_topic_creation && broker.config.GetBool("auto.create.topics.enable");
  runnel::controller::CreateTopicsRequest to_create;
  std::set<std::string> seen_names;
  std::set<std::string> seen_ids;
  for (const MetadataRequest::MetadataRequestTopic& want : *req.topics) {
    MetadataResponse::MetadataResponseTopic out;
    if (!want.name.has_value() || want.name->empty()) {
      // Asked by topic id (v10+).
      if (!seen_ids.insert(want.topic_id.ToString()).second) continue;
      const TopicInfo* topic = want.topic_id.IsZero() ? nullptr : cache.FindTopicById(want.topic_id);
      if (topic == nullptr) {
        out.error_code = static_cast<int16_t>(ErrorCode::kUnknownTopicId);
        out.name = std::nullopt;
        out.topic_id = want.topic_id;
      } else {
        FillTopic(cache, *topic, with_topic_ops, &out);
      }
      resp.topics.push_back(std::move(out));
      continue;
    }
    const std::string& name = *want.name;
    if (!seen_names.insert(name).second) continue;
    out.name = name;
    if (!TopicNameError(name).empty()) {
      out.error_code = static_cast<int16_t>(ErrorCode::kInvalidTopicException);
    } else if (const TopicInfo* topic = cache.FindTopic(name)) {
      FillTopic(cache, *topic, with_topic_ops, &out);
    } else if (auto_create) {
      // As Kafka: the topic is being created with the broker defaults; the client retries
      // on LEADER_NOT_AVAILABLE until it shows up.
      auto* t = to_create.add_topics();
      t->set_name(name);
      t->set_num_partitions(-1);
      t->set_replication_factor(-1);
      out.error_code = static_cast<int16_t>(ErrorCode::kLeaderNotAvailable);
    } else {
      out.error_code = static_cast<int16_t>(ErrorCode::kUnknownTopicOrPartition);
    }
    resp.topics.push_back(std::move(out));
  }
  if (to_create.topics_size() > 0) {
    broker.controller.CreateTopics(
        to_create, std::chrono::seconds(30),
        [](const grpc::Status& status, const runnel::controller::CreateTopicsResponse& result) {
          if (!status.ok()) {
            KafkaLog()->warn("auto topic creation failed: {}", status.error_message());
            return;
          }
          for (const auto& t : result.topics()) {
            if (t.error_code() != 0 &&
                t.error_code() != static_cast<int32_t>(ErrorCode::kTopicAlreadyExists)) {
              KafkaLog()->warn("auto creation of topic {} failed: {}", t.name(),
                               t.error_message());
            } else if (t.error_code() == 0) {
              KafkaLog()->info("auto-created topic {} with {} partition(s)", t.name(),
                               t.num_partitions());
            }
          }
        });
  }
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
