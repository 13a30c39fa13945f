// Controller writes of configs: AlterConfigs, legacy and incremental, for topics and brokers.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "common/config/config.h"
#include "common/config/synonyms.h"
#include "common/config/topic_config.h"
#include "common/protocol/error_code.h"
#include "common/util/topic_name.h"
#include "controllerd/controller.h"
#include "controllerd/controller_internal.h"

namespace runnel::controllerd {

using internal::kLog;
using protocol::ErrorCode;

// ---- AlterConfigs -----------------------------------------------------------------------

namespace {

// Kafka's AlterConfigOp.OpType ids.
constexpr int32_t kOpSet = 0;
constexpr int32_t kOpDelete = 1;
constexpr int32_t kOpAppend = 2;
constexpr int32_t kOpSubtract = 3;

std::string Join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

metadata::ConfigRecord MakeConfigRecord(int32_t type, const std::string& resource,
                                        const std::string& key, std::optional<std::string> value) {
  metadata::ConfigRecord c;
  c.set_resource_type(static_cast<metadata::ConfigResourceType>(type));
  c.set_resource_name(resource);
  c.set_name(key);
  if (value) c.set_value(std::move(*value));
  return c;
}

}  // namespace

std::optional<protocol::KafkaError> Controller::AlterResourceLocked(
    const controller::AlterConfigsResource& resource, bool incremental,
    std::vector<metadata::ConfigRecord>* records) const {
  auto invalid_request = [](std::string message) {
    return protocol::KafkaError{ErrorCode::kInvalidRequest, std::move(message)};
  };
  const auto& configs = resource.configs();
  const int32_t type = resource.resource_type();
  const std::string& name = resource.resource_name();

  // The request's shape, checked as Kafka's broker does before the controller sees it.
  std::set<std::string> keys;
  for (const auto& c : configs) {
    if (!keys.insert(c.name()).second) return invalid_request("Error due to duplicate config keys");
  }
  std::vector<std::string> nulls;
  for (const auto& c : configs) {
    if (!c.has_value() && !(incremental && c.operation() == kOpDelete)) nulls.push_back(c.name());
  }
  if (!nulls.empty()) {
    return invalid_request(fmt::format("Null value not supported for : {}", Join(nulls, ", ")));
  }
  const bool is_topic = type == metadata::CONFIG_RESOURCE_TOPIC;
  if (!is_topic && type != metadata::CONFIG_RESOURCE_BROKER) {
    return invalid_request(fmt::format("Unknown resource type {}", type));
  }
  for (const auto& c : configs) {
    if (incremental && (c.operation() < kOpSet || c.operation() > kOpSubtract)) {
      return invalid_request(fmt::format("Unknown operations type {}", c.operation()));
    }
  }

  // The resource and its current explicit configs.
  static const std::map<std::string, std::string> kNone;
  const std::map<std::string, std::string>* current = &kNone;
  const MetadataImage::Topic* topic = nullptr;
  int32_t broker_id = -1;
  if (is_topic) {
    if (name.empty()) return invalid_request("Default topic resources are not allowed.");
    if (std::string why = TopicNameError(name); !why.empty()) {
      return protocol::KafkaError{ErrorCode::kInvalidTopicException, why};
    }
    topic = image_.TopicByName(name);
    if (topic != nullptr) current = &topic->configs;
  } else {
    if (!name.empty()) {
      auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), broker_id);
      if (ec != std::errc() || ptr != name.data() + name.size()) {
        return invalid_request("Unable to parse broker name as a base 10 number.");
      }
      if (broker_id < 0) return invalid_request("Invalid negative broker ID.");
    }
    auto it = image_.broker_configs().find(name);
    if (it != image_.broker_configs().end()) current = &it->second;
  }

  // The explicit configs after the change: legacy AlterConfigs replaces them all.
  std::map<std::string, std::string> next;
  if (incremental) next = *current;
  for (const auto& c : configs) {
    if (!incremental || c.operation() == kOpSet) {
      next[c.name()] = c.value();
      continue;
    }
    if (c.operation() == kOpDelete) {
      next.erase(c.name());
      continue;
    }
    const bool append = c.operation() == kOpAppend;
    const config::KeyDef* def =
        is_topic ? config::FindTopicKey(c.name()) : config::FindKey(c.name());
    if (def == nullptr || def->type != config::KeyType::kList) {
      return protocol::KafkaError{ErrorCode::kInvalidConfig,
                                  fmt::format("Can't {} to key {} because its type is not LIST.",
                                              append ? "APPEND" : "SUBTRACT", c.name())};
    }
    // Without an explicit value the list starts from the declared default, as in Kafka.
    auto it = next.find(c.name());
    std::vector<std::string> items =
        config::SplitList(it != next.end() ? it->second : std::string(def->default_value));
    for (const std::string& item : config::SplitList(c.value())) {
      auto pos = std::find(items.begin(), items.end(), item);
      if (append && pos == items.end()) items.push_back(item);
      if (!append && pos != items.end()) items.erase(pos);
    }
    next[c.name()] = Join(items, ",");
  }

  // The resulting set is checked whole, as Kafka's validators do.
  if (is_topic) {
    if (Status st = config::ValidateTopicConfigs(next); !st.ok()) {
      return protocol::KafkaError{ErrorCode::kInvalidConfig, std::string(st.message())};
    }
    if (topic == nullptr) {
      return protocol::KafkaError{ErrorCode::kUnknownTopicOrPartition,
                                  fmt::format("The topic '{}' does not exist.", name)};
    }
  } else {
    // Kafka answers a key that cannot change at runtime, and a bad value, with INVALID_REQUEST
    // (KAFKA-13609 keeps that code for compatibility).
    std::vector<std::string> fixed;
    for (const auto& [key, value] : next) {
      if (!config::IsDynamicNodeKey(key)) fixed.push_back(key);
    }
    if (!fixed.empty()) {
      return invalid_request(
          fmt::format("Cannot update these configs dynamically: Set({})", Join(fixed, ", ")));
    }
    for (const auto& [key, value] : next) {
      if (std::string why = config::CheckValue(*config::FindKey(key), value); !why.empty()) {
        return invalid_request(
            fmt::format("Invalid value {} for configuration {}: {}", value, key, why));
      }
    }
    if (!name.empty() && !image_.brokers().count(broker_id) && broker_id != options_.node_id) {
      return protocol::KafkaError{ErrorCode::kBrokerIdNotRegistered,
                                  fmt::format("No node with id {} found.", broker_id)};
    }
  }

  for (const auto& [key, value] : next) {
    auto it = current->find(key);
    if (it == current->end() || it->second != value) {
      records->push_back(MakeConfigRecord(type, name, key, value));
    }
  }
  for (const auto& [key, value] : *current) {
    if (!next.count(key)) records->push_back(MakeConfigRecord(type, name, key, std::nullopt));
  }
  return std::nullopt;
}

StatusOr<controller::AlterConfigsResponse> Controller::AlterConfigs(
    const controller::AlterConfigsRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());

  std::map<std::pair<int32_t, std::string>, int> resource_counts;
  for (const auto& res : request.resources()) {
    ++resource_counts[{res.resource_type(), res.resource_name()}];
  }
  controller::AlterConfigsResponse response;
  response.set_metadata_offset(-1);
  metadata::MetadataRecordBatch batch;
  std::vector<std::string> changes;  // for the log line
  for (const controller::AlterConfigsResource& res : request.resources()) {
    controller::AlterConfigsResult* r = response.add_results();
    r->set_resource_type(res.resource_type());
    r->set_resource_name(res.resource_name());
    if (resource_counts[{res.resource_type(), res.resource_name()}] > 1) {
      r->set_error_code(static_cast<int32_t>(ErrorCode::kInvalidRequest));
      r->set_error_message("Each resource must appear at most once.");
      continue;
    }
    std::vector<metadata::ConfigRecord> records;
    if (std::optional<protocol::KafkaError> error =
            AlterResourceLocked(res, request.incremental(), &records)) {
      r->set_error_code(static_cast<int32_t>(error->code));
      r->set_error_message(std::move(error->message));
      continue;
    }
    r->set_error_code(0);
    if (request.validate_only()) continue;
    for (metadata::ConfigRecord& c : records) {
      std::string what = c.resource_type() == metadata::CONFIG_RESOURCE_TOPIC
                             ? fmt::format("topic {}", c.resource_name())
                         : c.resource_name().empty() ? std::string("cluster default")
                                                     : fmt::format("broker {}", c.resource_name());
      std::string value = !c.has_value()                     ? std::string("(default)")
                          : config::IsSensitiveKey(c.name()) ? std::string("[hidden]")
                                                             : c.value();
      changes.push_back(fmt::format("{} {}={}", what, c.name(), value));
      *batch.add_records()->mutable_config() = std::move(c);
    }
  }
  lock.Unlock();
  if (batch.records_size() > 0) {
    RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
    response.set_metadata_offset(offset);
    kLog()->info("configs changed at offset {}: {}", offset, Join(changes, ", "));
  }
  return response;
}
}  // namespace runnel::controllerd
