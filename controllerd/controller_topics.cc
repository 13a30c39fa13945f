// Controller writes of topics: CreateTopics, DeleteTopics, CreatePartitions, and the replica
// placement the two creating ones share.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/config/topic_config.h"
#include "common/protocol/error_code.h"
#include "common/util/topic_name.h"
#include "controllerd/controller.h"
#include "controllerd/controller_internal.h"
#include "controllerd/placement.h"

namespace runnel::controllerd {

using internal::kLog;
using protocol::ErrorCode;

namespace {

// Bounds what one CreateTopics topic may allocate; Kafka bounds the records of one
// operation too.
constexpr int32_t kMaxPartitionsPerTopic = 100000;

const std::string kZeroUuid(kUuidSize, '\0');

// '.' and '_' collide in metric names, so Kafka refuses topics differing only by them.
std::string UnifyCollisionChars(const std::string& name) {
  std::string out = name;
  std::replace(out.begin(), out.end(), '.', '_');
  return out;
}

void SetError(controller::CreatableTopicResult* r, ErrorCode code, std::string message) {
  r->set_error_code(static_cast<int32_t>(code));
  r->set_error_message(std::move(message));
}

void SetError(controller::DeletableTopicResult* r, ErrorCode code, std::string message) {
  r->set_error_code(static_cast<int32_t>(code));
  r->set_error_message(std::move(message));
}

}  // namespace

// ---- Replica placement (CreateTopics, CreatePartitions) ---------------------------------

std::vector<int32_t> Controller::UnfencedBrokersLocked() const {
  std::vector<int32_t> out;
  for (const auto& [id, b] : image_.brokers()) {
    if (!b.fenced()) out.push_back(id);
  }
  return out;
}

std::string Controller::ManualAssignmentErrorLocked(const std::vector<int32_t>& replicas,
                                                    int32_t partition,
                                                    std::optional<size_t> replica_count) const {
  if (replicas.empty()) return "The manual partition assignment includes an empty replica list.";
  std::vector<int32_t> sorted = replicas;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (!image_.brokers().count(sorted[i])) {
      return fmt::format(
          "The manual partition assignment includes broker {}, but no such broker is registered.",
          sorted[i]);
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return fmt::format("The manual partition assignment includes the broker {} more than once.",
                         sorted[i]);
    }
  }
  if (replica_count && *replica_count != sorted.size()) {
    return fmt::format(
        "The manual partition assignment includes a partition with {} replica(s), but this is "
        "not consistent with previous partitions, which have {} replica(s).",
        sorted.size(), *replica_count);
  }
  bool any_active =
      std::any_of(sorted.begin(), sorted.end(), [&](int32_t b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !image_.brokers().at(b).fenced();
      });
  if (!any_active) {
    return fmt::format(
        "All brokers specified in the manual partition assignment for partition {} are fenced or "
        "in controlled shutdown.",
        partition);
  }
  return "";
}

std::vector<std::vector<int32_t>> Controller::PlaceReplicasLocked(
    int32_t partitions, int32_t rf, const std::vector<int32_t>& unfenced, std::string* error) {
  if (unfenced.empty()) {
    *error = fmt::format(
        "Unable to replicate the partition {} time(s): All brokers are currently fenced.", rf);
    return {};
  }
  if (static_cast<size_t>(rf) > unfenced.size()) {
    *error = fmt::format(
        "Unable to replicate the partition {} time(s): The target replication factor of {} "
        "cannot be reached because only {} broker(s) are registered.",
        rf, rf, unfenced.size());
    return {};
  }
  // With racks (broker.rack on any broker), Kafka's rack-aware placement: replicas of a
  // partition on as many racks as there are.
  std::vector<PlacementBroker> with_racks;
  bool any_rack = false;
  for (int32_t id : unfenced) {
    const auto& reg = image_.brokers().at(id);
    with_racks.push_back(PlacementBroker{id, reg.has_rack() ? reg.rack() : std::string()});
    any_rack |= reg.has_rack() && !reg.rack().empty();
  }
  if (any_rack) {
    const uint64_t start = rng_();
    const uint64_t shift = rng_();
    return PlaceRackAware(partitions, rf, with_racks, start, shift);
  }
  // Without racks: round-robin from a random start.
  std::vector<std::vector<int32_t>> placement;
  size_t start = static_cast<size_t>(rng_() % unfenced.size());
  for (int32_t p = 0; p < partitions; ++p) {
    std::vector<int32_t> replicas;
    replicas.reserve(static_cast<size_t>(std::max(rf, 0)));
    for (int32_t i = 0; i < rf; ++i) {
      replicas.push_back(
          unfenced[(start + static_cast<size_t>(p) + static_cast<size_t>(i)) % unfenced.size()]);
    }
    placement.push_back(std::move(replicas));
  }
  return placement;
}

void Controller::AddPartitionRecordsLocked(const std::string& topic_id, int32_t first_partition,
                                           const std::vector<std::vector<int32_t>>& placement,
                                           metadata::MetadataRecordBatch* batch) const {
  for (size_t p = 0; p < placement.size(); ++p) {
    auto* pr = batch->add_records()->mutable_partition();
    pr->set_topic_id(topic_id);
    pr->set_partition_id(first_partition + static_cast<int32_t>(p));
    // Followers do not copy their leader yet (replication is to come), so only the leader is
    // in sync: Metadata must not call a replica in sync that holds none of the data, and an
    // election must never pick one. The leader is the first unfenced replica.
    int32_t leader = -1;
    for (int32_t b : placement[p]) {
      pr->add_replicas(b);
      if (leader < 0 && !image_.brokers().at(b).fenced()) leader = b;
    }
    if (leader >= 0) pr->add_isr(leader);
    pr->set_leader(leader);
    pr->set_leader_epoch(0);
    pr->set_partition_epoch(0);
  }
}
// ---- CreateTopics -----------------------------------------------------------------------

namespace {

// The names a CreateTopics request checks each topic's name against.
struct TopicNames {
  std::map<std::string, int> counts;  // how often each name is in the request
  // Existing and to-be-created names with '.' unified to '_', for the collision check.
  std::map<std::string, std::string> unified;
};

// Kafka's checks of a new topic's name: unique in the request, legal, not taken, not
// colliding with another topic's.
std::optional<protocol::KafkaError> NewTopicNameError(const std::string& name,
                                                      const TopicNames& names,
                                                      const MetadataImage& image) {
  if (names.counts.at(name) > 1) {
    return protocol::KafkaError{ErrorCode::kInvalidRequest, "Duplicate topic name."};
  }
  if (std::string why = TopicNameError(name); !why.empty()) {
    return protocol::KafkaError{ErrorCode::kInvalidTopicException, why};
  }
  if (image.TopicByName(name) != nullptr) {
    return protocol::KafkaError{ErrorCode::kTopicAlreadyExists,
                                fmt::format("Topic '{}' already exists.", name)};
  }
  if (auto it = names.unified.find(UnifyCollisionChars(name)); it != names.unified.end()) {
    return protocol::KafkaError{
        ErrorCode::kInvalidTopicException,
        fmt::format("Topic '{}' collides with existing topic: {}", name, it->second)};
  }
  return std::nullopt;
}

// The topic's configs into `configs` (a later duplicate of a key wins, as Kafka's request map
// does), checked whole.
std::optional<protocol::KafkaError> ParseTopicConfigs(const controller::CreatableTopic& t,
                                                      std::map<std::string, std::string>* configs) {
  std::string config_error;
  for (const auto& c : t.configs()) {
    if (!c.has_value()) {
      config_error = fmt::format("Null value not supported for topic configs: {}", c.name());
      break;
    }
    (*configs)[c.name()] = c.value();
  }
  if (config_error.empty()) {
    if (Status st = config::ValidateTopicConfigs(*configs); !st.ok()) {
      config_error = std::string(st.message());
    }
  }
  if (!config_error.empty()) return protocol::KafkaError{ErrorCode::kInvalidConfig, config_error};
  return std::nullopt;
}

// The answer for a created (or, with validate_only, creatable) topic.
void SetCreated(controller::CreatableTopicResult* r, const std::string& id,
                const std::map<std::string, std::string>& configs,
                const std::vector<std::vector<int32_t>>& placement) {
  r->set_error_code(0);
  r->clear_error_message();
  r->set_topic_id(id);
  r->set_num_partitions(static_cast<int32_t>(placement.size()));
  r->set_replication_factor(static_cast<int32_t>(placement.front().size()));
  for (const auto& [key, value] : config::EffectiveTopicConfigs(configs)) {
    auto* c = r->add_configs();
    c->set_name(key);
    c->set_value(value);
    c->set_read_only(false);
    c->set_config_source(configs.count(key) ? controller::DYNAMIC_TOPIC_CONFIG
                                            : controller::DEFAULT_CONFIG);
    c->set_is_sensitive(false);
  }
}

}  // namespace

std::optional<protocol::KafkaError> Controller::PlaceNewTopicLocked(
    const controller::CreatableTopic& t, const std::vector<int32_t>& unfenced,
    std::vector<std::vector<int32_t>>* placement) {
  if (!t.assignments().empty()) return PlaceNewTopicManuallyLocked(t, placement);
  if (t.replication_factor() < -1 || t.replication_factor() == 0) {
    return protocol::KafkaError{
        ErrorCode::kInvalidReplicationFactor,
        "Replication factor must be larger than 0, or -1 to use the default value."};
  }
  if (t.num_partitions() < -1 || t.num_partitions() == 0) {
    return protocol::KafkaError{ErrorCode::kInvalidPartitions,
                                "Number of partitions was set to an invalid non-positive value."};
  }
  int32_t partitions =
      t.num_partitions() == -1 ? options_.default_num_partitions : t.num_partitions();
  int32_t rf =
      t.replication_factor() == -1 ? options_.default_replication_factor : t.replication_factor();
  if (partitions > kMaxPartitionsPerTopic) {
    return protocol::KafkaError{
        ErrorCode::kInvalidPartitions,
        fmt::format("Number of partitions {} is more than the {} a topic may have.", partitions,
                    kMaxPartitionsPerTopic)};
  }
  std::string error;
  *placement = PlaceReplicasLocked(partitions, rf, unfenced, &error);
  if (!error.empty()) return protocol::KafkaError{ErrorCode::kInvalidReplicationFactor, error};
  return std::nullopt;
}

std::optional<protocol::KafkaError> Controller::PlaceNewTopicManuallyLocked(
    const controller::CreatableTopic& t, std::vector<std::vector<int32_t>>* placement) const {
  if (t.replication_factor() != -1) {
    return protocol::KafkaError{ErrorCode::kInvalidRequest,
                                "A manual partition assignment was specified, but replication "
                                "factor was not set to -1."};
  }
  if (t.num_partitions() != -1) {
    return protocol::KafkaError{ErrorCode::kInvalidRequest,
                                "A manual partition assignment was specified, but numPartitions "
                                "was not set to -1."};
  }
  std::map<int32_t, std::vector<int32_t>> by_partition;
  std::optional<size_t> replica_count;
  std::string error;
  for (const auto& a : t.assignments()) {
    if (by_partition.count(a.partition_index())) {
      error = fmt::format("Found multiple manual partition assignments for partition {}",
                          a.partition_index());
      break;
    }
    std::vector<int32_t> replicas(a.broker_ids().begin(), a.broker_ids().end());
    error = ManualAssignmentErrorLocked(replicas, a.partition_index(), replica_count);
    if (!error.empty()) break;
    replica_count = replicas.size();
    by_partition[a.partition_index()] = std::move(replicas);
  }
  if (error.empty()) {
    for (int32_t i = 0; i < static_cast<int32_t>(by_partition.size()); ++i) {
      if (!by_partition.count(i)) {
        error = "partitions should be a consecutive 0-based integer sequence";
        break;
      }
    }
  }
  if (!error.empty()) return protocol::KafkaError{ErrorCode::kInvalidReplicaAssignment, error};
  for (auto& [index, replicas] : by_partition) placement->push_back(std::move(replicas));
  return std::nullopt;
}

std::string Controller::AddTopicRecordsLocked(const std::string& name,
                                              const std::map<std::string, std::string>& configs,
                                              const std::vector<std::vector<int32_t>>& placement,
                                              std::set<std::string>* new_ids,
                                              metadata::MetadataRecordBatch* batch) {
  std::string id;
  do {
    id = uuids_.Next();
  } while (image_.TopicById(id) != nullptr || new_ids->count(id));
  new_ids->insert(id);
  auto* tr = batch->add_records()->mutable_topic();
  tr->set_name(name);
  tr->set_topic_id(id);
  for (const auto& [key, value] : configs) {
    auto* c = batch->add_records()->mutable_config();
    c->set_resource_type(metadata::CONFIG_RESOURCE_TOPIC);
    c->set_resource_name(name);
    c->set_name(key);
    c->set_value(value);
  }
  AddPartitionRecordsLocked(id, 0, placement, batch);
  return id;
}

StatusOr<controller::CreateTopicsResponse> Controller::CreateTopics(
    const controller::CreateTopicsRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());

  TopicNames names;
  for (const auto& t : request.topics()) ++names.counts[t.name()];
  for (const auto& [name, topic] : image_.topics()) names.unified[UnifyCollisionChars(name)] = name;
  std::set<std::string> new_ids;
  const std::vector<int32_t> unfenced = UnfencedBrokersLocked();

  controller::CreateTopicsResponse response;
  response.set_metadata_offset(-1);
  metadata::MetadataRecordBatch batch;
  for (const controller::CreatableTopic& t : request.topics()) {
    controller::CreatableTopicResult* r = response.add_topics();
    r->set_name(t.name());
    r->set_topic_id(kZeroUuid);
    r->set_num_partitions(-1);
    r->set_replication_factor(-1);

    // Name, configs, placement: the first error refuses the topic.
    std::map<std::string, std::string> configs;
    std::vector<std::vector<int32_t>> placement;
    std::optional<protocol::KafkaError> error = NewTopicNameError(t.name(), names, image_);
    if (!error) error = ParseTopicConfigs(t, &configs);
    if (!error) error = PlaceNewTopicLocked(t, unfenced, &placement);
    if (error) {
      SetError(r, error->code, std::move(error->message));
      continue;
    }
    std::string id = kZeroUuid;
    if (!request.validate_only()) {
      id = AddTopicRecordsLocked(t.name(), configs, placement, &new_ids, &batch);
    }
    names.unified[UnifyCollisionChars(t.name())] = t.name();
    SetCreated(r, id, configs, placement);
  }

  lock.Unlock();
  if (batch.records_size() > 0) {
    RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
    response.set_metadata_offset(offset);
    for (const auto& r : response.topics()) {
      if (r.error_code() == 0) {
        kLog()->info("created topic {} ({} partition(s), replication factor {}) at offset {}",
                     r.name(), r.num_partitions(), r.replication_factor(), offset);
      }
    }
  }
  return response;
}

// ---- DeleteTopics -----------------------------------------------------------------------

StatusOr<controller::DeleteTopicsResponse> Controller::DeleteTopics(
    const controller::DeleteTopicsRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());

  // Resolve each entry to a key naming the topic (its id when it exists), so the same topic
  // asked twice, by name or by id, is caught.
  struct Resolved {
    bool by_id = false;
    const MetadataImage::Topic* topic = nullptr;
    std::string key;
  };
  std::vector<Resolved> resolved;
  std::map<std::string, int> key_counts;
  controller::DeleteTopicsResponse response;
  response.set_metadata_offset(-1);
  for (const auto& t : request.topics()) {
    controller::DeletableTopicResult* r = response.add_topics();
    r->set_name(t.name());
    r->set_topic_id(t.topic_id());
    Resolved res;
    bool has_name = !t.name().empty();
    bool has_id = !t.topic_id().empty() && !IsZeroUuid(t.topic_id());
    if (has_name && has_id) {
      SetError(r, ErrorCode::kInvalidRequest, "You may not specify both topic name and topic id.");
    } else if (!has_name && !has_id) {
      SetError(r, ErrorCode::kInvalidRequest, "Neither topic name nor topic id was specified.");
    } else if (has_id && t.topic_id().size() != kUuidSize) {
      SetError(r, ErrorCode::kInvalidRequest,
               fmt::format("A topic id is 16 bytes, not {}.", t.topic_id().size()));
    } else if (has_name) {
      res.topic = image_.TopicByName(t.name());
      res.key = res.topic ? res.topic->id : "name:" + t.name();
    } else {
      res.by_id = true;
      res.topic = image_.TopicById(t.topic_id());
      res.key = res.topic ? res.topic->id : "id:" + t.topic_id();
    }
    if (!res.key.empty()) ++key_counts[res.key];
    resolved.push_back(std::move(res));
  }

  metadata::MetadataRecordBatch batch;
  for (int i = 0; i < response.topics_size(); ++i) {
    controller::DeletableTopicResult* r = response.mutable_topics(i);
    const Resolved& res = resolved[i];
    if (res.key.empty()) continue;  // already answered
    if (key_counts[res.key] > 1) {
      SetError(r, ErrorCode::kInvalidRequest,
               res.by_id ? "Duplicate topic id." : "Duplicate topic name.");
      continue;
    }
    if (res.topic == nullptr) {
      if (res.by_id) {
        SetError(r, ErrorCode::kUnknownTopicId, "This server does not host this topic ID.");
      } else {
        SetError(r, ErrorCode::kUnknownTopicOrPartition,
                 "This server does not host this topic-partition.");
      }
      continue;
    }
    r->set_name(res.topic->name);
    r->set_topic_id(res.topic->id);
    r->set_error_code(0);
    batch.add_records()->mutable_remove_topic()->set_topic_id(res.topic->id);
  }
  lock.Unlock();
  if (batch.records_size() > 0) {
    RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
    response.set_metadata_offset(offset);
    for (const auto& r : response.topics()) {
      if (r.error_code() == 0) kLog()->info("deleted topic {} at offset {}", r.name(), offset);
    }
  }
  return response;
}

// ---- CreatePartitions -------------------------------------------------------------------

StatusOr<controller::CreatePartitionsResponse> Controller::CreatePartitions(
    const controller::CreatePartitionsRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());

  std::map<std::string, int> name_counts;
  for (const auto& t : request.topics()) ++name_counts[t.name()];
  const std::vector<int32_t> unfenced = UnfencedBrokersLocked();

  controller::CreatePartitionsResponse response;
  response.set_metadata_offset(-1);
  metadata::MetadataRecordBatch batch;
  for (const controller::CreatePartitionsTopic& t : request.topics()) {
    controller::CreatePartitionsTopicResult* r = response.add_topics();
    r->set_name(t.name());
    auto fail = [r](ErrorCode code, std::string message) {
      r->set_error_code(static_cast<int32_t>(code));
      r->set_error_message(std::move(message));
    };
    if (name_counts[t.name()] > 1) {
      fail(ErrorCode::kInvalidRequest, "Duplicate topic name.");
      continue;
    }
    const MetadataImage::Topic* topic = image_.TopicByName(t.name());
    if (topic == nullptr) {
      // Kafka answers this one without a message (the client's default text says it all).
      r->set_error_code(static_cast<int32_t>(ErrorCode::kUnknownTopicOrPartition));
      continue;
    }
    const int32_t current = static_cast<int32_t>(topic->partitions.size());
    if (t.count() == current) {
      fail(ErrorCode::kInvalidPartitions,
           fmt::format("Topic already has {} partition(s).", current));
      continue;
    }
    if (t.count() < current) {
      fail(ErrorCode::kInvalidPartitions,
           fmt::format("The topic {} currently has {} partition(s); {} would not be an increase.",
                       t.name(), current, t.count()));
      continue;
    }
    if (t.count() > kMaxPartitionsPerTopic) {
      fail(ErrorCode::kInvalidPartitions,
           fmt::format("Number of partitions {} is more than the {} a topic may have.", t.count(),
                       kMaxPartitionsPerTopic));
      continue;
    }
    if (topic->partitions.empty()) {
      fail(ErrorCode::kUnknownServerError,
           fmt::format("Invalid state: topic {} appears to have no partitions.", t.name()));
      continue;
    }
    const int32_t additional = t.count() - current;
    // New partitions get as many replicas as the existing ones (Kafka takes the first's).
    const int32_t rf = topic->partitions.begin()->second.replicas_size();

    std::vector<std::vector<int32_t>> placement;
    std::string error;
    if (t.manual()) {
      if (t.assignments_size() != additional) {
        error = fmt::format(
            "Attempted to add {} additional partition(s), but only {} assignment(s) were "
            "specified.",
            additional, t.assignments_size());
      }
      for (int i = 0; error.empty() && i < t.assignments_size(); ++i) {
        std::vector<int32_t> replicas(t.assignments(i).broker_ids().begin(),
                                      t.assignments(i).broker_ids().end());
        error = ManualAssignmentErrorLocked(replicas, current + i, static_cast<size_t>(rf));
        placement.push_back(std::move(replicas));
      }
      if (!error.empty()) {
        fail(ErrorCode::kInvalidReplicaAssignment, error);
        continue;
      }
    } else {
      placement = PlaceReplicasLocked(additional, rf, unfenced, &error);
      if (!error.empty()) {
        fail(ErrorCode::kInvalidReplicationFactor, error);
        continue;
      }
    }
    if (!request.validate_only()) AddPartitionRecordsLocked(topic->id, current, placement, &batch);
    r->set_error_code(0);
  }

  lock.Unlock();
  if (batch.records_size() > 0) {
    RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
    response.set_metadata_offset(offset);
    for (int i = 0; i < response.topics_size(); ++i) {
      if (response.topics(i).error_code() == 0) {
        kLog()->info("topic {} now has {} partition(s) (offset {})", response.topics(i).name(),
                     request.topics(i).count(), offset);
      }
    }
  }
  return response;
}
}  // namespace runnel::controllerd
