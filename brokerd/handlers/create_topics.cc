// CreateTopics (key 19), v2-v7: validated and written by controllerd; answered once this
// broker's metadata cache shows the new topics and storaged holds their logs here (or the
// request's timeout passes). A topic whose logs here could not all be created (a full disk,
// a resource limit) is deleted again and answered KAFKA_STORAGE_ERROR with the reason.
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"

namespace runnel::brokerd {
namespace {

using protocol::CreateTopicsRequest;
using protocol::CreateTopicsResponse;
using protocol::ErrorCode;
namespace ctl = runnel::controller;

ctl::CreateTopicsRequest ToController(const CreateTopicsRequest& req) {
  ctl::CreateTopicsRequest out;
  out.set_validate_only(req.validate_only);
  for (const auto& t : req.topics) {
    ctl::CreatableTopic* topic = out.add_topics();
    topic->set_name(t.name);
    topic->set_num_partitions(t.num_partitions);
    topic->set_replication_factor(t.replication_factor);
    for (const auto& a : t.assignments) {
      ctl::CreatableReplicaAssignment* assignment = topic->add_assignments();
      assignment->set_partition_index(a.partition_index);
      for (NodeId b : a.broker_ids) assignment->add_broker_ids(b.value());
    }
    for (const auto& c : t.configs) {
      ctl::CreatableTopicConfig* config = topic->add_configs();
      config->set_name(c.name);
      if (c.value.has_value()) config->set_value(*c.value);
    }
  }
  return out;
}

int8_t WireConfigSource(ctl::ConfigSource source) {
  return source == ctl::CONFIG_SOURCE_UNKNOWN ? -1 : static_cast<int8_t>(source);
}

CreateTopicsResponse FromController(const ctl::CreateTopicsResponse& in) {
  CreateTopicsResponse out;
  for (const auto& t : in.topics()) {
    CreateTopicsResponse::CreatableTopicResult r;
    r.name = t.name();
    r.topic_id = UuidFromBytes(t.topic_id());
    r.error_code = protocol::ErrorFromWire(t.error_code());
    // A created topic has a null message in Kafka.
    if (t.has_error_message() && r.error_code != ErrorCode::kNone) {
      r.error_message = t.error_message();
    }
    r.num_partitions = t.num_partitions();
    r.replication_factor = static_cast<int16_t>(t.replication_factor());
    std::vector<CreateTopicsResponse::CreatableTopicConfigs> configs;
    for (const auto& c : t.configs()) {
      CreateTopicsResponse::CreatableTopicConfigs config;
      config.name = c.name();
      if (c.has_value()) config.value = c.value();
      config.read_only = c.read_only();
      config.config_source = WireConfigSource(c.config_source());
      config.is_sensitive = c.is_sensitive();
      configs.push_back(std::move(config));
    }
    r.configs = std::move(configs);
    out.topics.push_back(std::move(r));
  }
  return out;
}

// The answer when the controller call failed: every topic gets its error.
CreateTopicsResponse CallFailedResponse(const CreateTopicsRequest& req,
                                        const grpc::Status& status) {
  CreateTopicsResponse resp;
  for (const auto& t : req.topics) {
    CreateTopicsResponse::CreatableTopicResult r;
    r.name = t.name;
    r.error_code = ControllerCallError(status);
    r.error_message = status.error_message();
    resp.topics.push_back(std::move(r));
  }
  return resp;
}

// The topics the controller created (none when the request only validated).
std::vector<std::string> CreatedTopics(const CreateTopicsRequest& req,
                                       const CreateTopicsResponse& resp) {
  std::vector<std::string> created;
  if (!req.validate_only) {
    for (const auto& t : resp.topics) {
      if (t.error_code == ErrorCode::kNone) created.push_back(t.name);
    }
  }
  return created;
}

// The first partition of `topic` placed here whose log storaged refused to create, with
// storaged's reason; nullopt when there is none.
std::optional<std::pair<int32_t, std::string>> FailedLogHere(const BrokerContext& broker,
                                                             const TopicInfo& topic) {
  for (const auto& [index, p] : topic.partitions) {
    if (const std::string* why = broker.partitions.CreateFailure(topic.name, index)) {
      return std::make_pair(index, *why);
    }
  }
  return std::nullopt;
}

// A topic whose logs could not all be created is not kept half there: it is deleted again
// through the controller (the reconciler then removes the logs that were made) and the
// client is told KAFKA_STORAGE_ERROR with storaged's reason. Runs `then` once the deletes
// are answered.
void RollBackFailedTopics(BrokerContext& broker, CreateTopicsResponse& resp,
                          std::function<void()> then) {
  ctl::DeleteTopicsRequest deletes;
  for (auto& r : resp.topics) {
    if (r.error_code != ErrorCode::kNone) continue;
    const TopicInfo* topic = broker.metadata.FindTopic(r.name);
    if (topic == nullptr) continue;
    std::optional<std::pair<int32_t, std::string>> failed = FailedLogHere(broker, *topic);
    if (!failed) continue;
    KafkaLog()->warn("CreateTopics: the log of {}-{} cannot be created ({}): deleting topic {}",
                     r.name, failed->first, failed->second, r.name);
    r.error_code = ErrorCode::kKafkaStorageError;
    r.error_message = fmt::format("the log of partition {} cannot be created on broker {}: {}",
                                  failed->first, broker.node_id, failed->second);
    r.topic_id = protocol::Uuid();
    r.num_partitions = -1;
    r.replication_factor = -1;
    r.configs.reset();
    deletes.add_topics()->set_name(r.name);
  }
  if (deletes.topics().empty()) return then();
  broker.controller.DeleteTopics(
      deletes, std::chrono::milliseconds(10000),
      [then = std::move(then)](const grpc::Status& status, const ctl::DeleteTopicsResponse&) {
        if (!status.ok()) {
          KafkaLog()->warn("CreateTopics: deleting the topics whose logs failed: {}",
                           status.error_message());
        }
        then();
      });
}

// Answers `resp` once the created topics are visible here and their logs exist (or have
// failed: such a topic is rolled back), so the client's next Metadata request sees them and
// produce finds them (or after `timeout_ms`).
void AnswerOnceVisible(BrokerContext& broker, std::shared_ptr<RequestContext> ctx,
                       std::shared_ptr<CreateTopicsResponse> resp, std::vector<std::string> names,
                       int64_t timeout_ms, Respond respond) {
  auto created = std::make_shared<std::vector<std::string>>(std::move(names));
  WaitForMetadata(
      broker,
      [&broker, created] {
        for (const auto& name : *created) {
          const TopicInfo* topic = broker.metadata.FindTopic(name);
          if (topic == nullptr || !PartitionsReadyHere(broker, *topic)) return false;
        }
        return true;
      },
      timeout_ms,
      [&broker, ctx = std::move(ctx), resp = std::move(resp), respond = std::move(respond)] {
        RollBackFailedTopics(broker, *resp,
                             [ctx, resp, respond] { respond(EncodeResponse(*ctx, *resp)); });
      });
}

}  // namespace

void HandleCreateTopics(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                        Respond respond) {
  CreateTopicsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  if (req.topics.empty()) return respond(EncodeResponse(*ctx, CreateTopicsResponse()));

  const int64_t timeout_ms = std::max<int32_t>(req.timeout_ms, 0);
  // The controller gets at least a moment even when the client asked for no wait.
  const auto call_timeout = std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 5000));
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  broker.controller.CreateTopics(
      ToController(req), call_timeout,
      [&broker, shared_ctx, req, respond, timeout_ms](const grpc::Status& status,
                                                      const ctl::CreateTopicsResponse& result) {
        if (!status.ok()) {
          KafkaLog()->warn("CreateTopics: controller call failed: {}", status.error_message());
          return respond(EncodeResponse(*shared_ctx, CallFailedResponse(req, status)));
        }
        auto resp = std::make_shared<CreateTopicsResponse>(FromController(result));
        AnswerOnceVisible(broker, shared_ctx, resp, CreatedTopics(req, *resp), timeout_ms, respond);
      });
}

}  // namespace runnel::brokerd
