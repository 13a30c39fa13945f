// Metadata (key 3), v0-v13: answered from the local metadata cache; unknown topics are created
// through the controller when the client and auto.create.topics.enable allow it. v13's
// top-level ErrorCode (KIP-1102: REBOOTSTRAP_REQUIRED) is 0, as Kafka 4.4 answers it.
#include <set>

#include "brokerd/handlers/handler.h"
#include "common/util/topic_name.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::MetadataRequest;
using protocol::MetadataResponse;

// The controller call of an auto-creation; the Metadata answer waits for it.
constexpr std::chrono::milliseconds kAutoCreateTimeout{10000};

bool BrokerIsLive(const MetadataCache& cache, int32_t id) {
  auto it = cache.brokers().find(id);
  return it != cache.brokers().end() && !it->second.fenced;
}

void FillTopic(const MetadataCache& cache, const TopicInfo& topic, const std::string& listener,
               const LocalLogs& local, bool with_operations,
               MetadataResponse::MetadataResponseTopic* out) {
  out->error_code = ErrorCode::kNone;
  out->name = topic.name;
  out->topic_id = topic.id;
  out->is_internal = topic.internal();
  if (with_operations) out->topic_authorized_operations = kAllTopicOperations;
  for (const auto& [id, p] : topic.partitions) {
    MetadataResponse::MetadataResponsePartition part;
    const bool leader_here = FillPartitionReplicas(cache, topic.name, p, listener, local, &part);
    bool leader_live = leader_here && p.leader >= 0 && BrokerIsLive(cache, p.leader);
    part.error_code = leader_live ? ErrorCode::kNone : ErrorCode::kLeaderNotAvailable;
    part.leader_id = NodeId(leader_live ? p.leader : -1);
    out->partitions.push_back(std::move(part));
  }
}

}  // namespace

void HandleMetadata(BrokerContext& broker, std::unique_ptr<RequestContext> ctx, Respond respond) {
  MetadataRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;
  const MetadataCache& cache = broker.metadata;
  const LocalLogs local{&broker.partitions, broker.node_id};

  MetadataResponse resp;
  std::vector<BrokerAddress> brokers = BrokersOnListener(cache, ctx->listener);
  resp.controller_id = NodeId(ControllerIdForClients(cache, brokers, broker.node_id));
  for (BrokerAddress& b : brokers) {
    MetadataResponse::MetadataResponseBroker out;
    out.node_id = NodeId(b.id);
    out.host = std::move(b.host);
    out.port = b.port;
    out.rack = std::move(b.rack);
    resp.brokers.push_back(std::move(out));
  }
  resp.cluster_id = cache.cluster_id();
  if (version >= 8 && version <= 10 && req.include_cluster_authorized_operations) {
    resp.cluster_authorized_operations = kAllClusterOperations;
  }
  const bool with_topic_ops = req.include_topic_authorized_operations;

  // v0 asks for every topic with an empty list; v1+ with a null one.
  bool all_topics = !req.topics.has_value() || (version == 0 && req.topics->empty());
  if (all_topics) {
    for (const auto& [name, topic] : cache.topics()) {
      MetadataResponse::MetadataResponseTopic out;
      FillTopic(cache, topic, ctx->listener, local, with_topic_ops, &out);
      resp.topics.push_back(std::move(out));
    }
    return respond(EncodeResponse(*ctx, resp));
  }

  // Kafka creates unknown topics when the client allows it (always before v4, where the
  // field defaults to true) and auto.create.topics.enable is on.
  const bool auto_create =
      req.allow_auto_topic_creation && broker.config.GetBool("auto.create.topics.enable");
  runnel::controller::CreateTopicsRequest to_create;
  std::vector<size_t> created_at;  // index in resp.topics of each topic in to_create
  std::set<std::string> seen_names;
  std::set<std::string> seen_ids;
  for (const MetadataRequest::MetadataRequestTopic& want : *req.topics) {
    MetadataResponse::MetadataResponseTopic out;
    if (!want.name.has_value() || want.name->empty()) {
      // Asked by topic id (v10+): never created.
      if (!seen_ids.insert(want.topic_id.ToString()).second) continue;
      const TopicInfo* topic =
          want.topic_id.IsZero() ? nullptr : cache.FindTopicById(want.topic_id);
      if (topic == nullptr) {
        out.error_code = ErrorCode::kUnknownTopicId;
        out.name = std::nullopt;
        out.topic_id = want.topic_id;
      } else {
        FillTopic(cache, *topic, ctx->listener, local, with_topic_ops, &out);
      }
      resp.topics.push_back(std::move(out));
      continue;
    }
    const std::string& name = *want.name;
    if (!seen_names.insert(name).second) continue;
    out.name = name;
    out.is_internal = IsInternalTopicName(name);
    if (!TopicNameError(name).empty()) {
      out.error_code = ErrorCode::kInvalidTopicException;
    } else if (const TopicInfo* topic = cache.FindTopic(name)) {
      FillTopic(cache, *topic, ctx->listener, local, with_topic_ops, &out);
    } else if (auto_create && !out.is_internal) {
      // With the broker defaults (num.partitions, default.replication.factor); the answer
      // waits for the controller's.
      auto* t = to_create.add_topics();
      t->set_name(name);
      t->set_num_partitions(-1);
      t->set_replication_factor(-1);
      created_at.push_back(resp.topics.size());
      out.error_code = ErrorCode::kLeaderNotAvailable;
    } else {
      // The coordinators' internal topics are created by the coordinators, with their own
      // partition count and configs (offsets.topic.*, transaction.state.log.* in Kafka), not
      // with the defaults of an ordinary topic.
      out.error_code = ErrorCode::kUnknownTopicOrPartition;
    }
    resp.topics.push_back(std::move(out));
  }
  if (to_create.topics_size() == 0) return respond(EncodeResponse(*ctx, resp));

  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  auto shared_resp = std::make_shared<MetadataResponse>(std::move(resp));
  broker.controller.CreateTopics(
      to_create, kAutoCreateTimeout,
      [shared_ctx, shared_resp, created_at, respond](
          const grpc::Status& status, const runnel::controller::CreateTopicsResponse& result) {
        if (!status.ok() || static_cast<size_t>(result.topics_size()) != created_at.size()) {
          // Not being created after all: the client retries on this retriable error.
          KafkaLog()->warn("auto topic creation failed: {}",
                           status.ok() ? "wrong number of results" : status.error_message());
          for (size_t i : created_at) {
            shared_resp->topics[i].error_code = ErrorCode::kUnknownTopicOrPartition;
          }
          return respond(EncodeResponse(*shared_ctx, *shared_resp));
        }
        for (size_t k = 0; k < created_at.size(); ++k) {
          const auto& t = result.topics(static_cast<int>(k));
          auto& out = shared_resp->topics[created_at[k]];
          if (t.error_code() == 0) {
            KafkaLog()->info("auto-created topic {} with {} partition(s)", t.name(),
                             t.num_partitions());
          } else if (t.error_code() != static_cast<int32_t>(ErrorCode::kTopicAlreadyExists)) {
            // As Kafka: a creation error (say a replication factor above the live brokers)
            // is the topic's error; "already exists" means another request just created it.
            KafkaLog()->warn("auto creation of topic {} failed: {}", t.name(), t.error_message());
            out.error_code = protocol::ErrorFromWire(t.error_code());
          }
        }
        respond(EncodeResponse(*shared_ctx, *shared_resp));
      });
}

}  // namespace runnel::brokerd
