#include "controllerd/metadata_image.h"

#include <fmt/format.h>

#include "controllerd/uuid.h"

namespace runnel::controllerd {
namespace {

std::string Hex(std::string_view bytes) {
  std::string out;
  for (char c : bytes) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
  return out;
}

Status Bad(const std::string& msg) { return absl::DataLossError(msg); }

}  // namespace

Status MetadataImage::Apply(int64_t offset, const metadata::MetadataRecordBatch& batch) {
  if (offset <= offset_) {
    return Bad(fmt::format("entry {} applied after entry {}", offset, offset_));
  }
  for (const metadata::MetadataRecord& r : batch.records()) {
    Status st = ApplyRecord(r);
    if (!st.ok()) {
      return Bad(fmt::format("metadata log entry {}: {}", offset, std::string(st.message())));
    }
  }
  offset_ = offset;
  return absl::OkStatus();
}

Status MetadataImage::Load(int64_t offset, const metadata::MetadataRecordBatch& image) {
  *this = MetadataImage();
  for (const metadata::MetadataRecord& r : image.records()) {
    Status st = ApplyRecord(r);
    if (!st.ok()) {
      return Bad(fmt::format("snapshot at offset {}: {}", offset, std::string(st.message())));
    }
  }
  offset_ = offset;
  return absl::OkStatus();
}

Status MetadataImage::ApplyRecord(const metadata::MetadataRecord& record) {
  using R = metadata::MetadataRecord;
  switch (record.record_case()) {
    case R::kClusterId: {
      const std::string& id = record.cluster_id().cluster_id();
      if (id.empty()) return Bad("ClusterIdRecord with an empty cluster id");
      if (!cluster_id_.empty() && cluster_id_ != id) {
        return Bad(fmt::format("cluster id {} changed to {}", cluster_id_, id));
      }
      cluster_id_ = id;
      return absl::OkStatus();
    }
    case R::kFeatureLevel:
      // Level 0 removes the feature (Kafka's replay of a FeatureLevelRecord).
      if (record.feature_level().feature_level() == 0) {
        features_.erase(record.feature_level().name());
      } else {
        features_[record.feature_level().name()] = record.feature_level().feature_level();
      }
      return absl::OkStatus();
    case R::kRegisterBroker: {
      const auto& b = record.register_broker();
      if (b.broker_id() < 0) return Bad(fmt::format("broker id {} is negative", b.broker_id()));
      brokers_[b.broker_id()] = b;
      return absl::OkStatus();
    }
    case R::kTopic: {
      const auto& t = record.topic();
      if (!IsValidUuid(t.topic_id())) {
        return Bad(fmt::format("topic {} has an invalid id {}", t.name(), Hex(t.topic_id())));
      }
      if (topics_.count(t.name())) return Bad(fmt::format("topic {} exists already", t.name()));
      if (topic_names_by_id_.count(t.topic_id())) {
        return Bad(fmt::format("topic id {} is in use already", Hex(t.topic_id())));
      }
      Topic& topic = topics_[t.name()];
      topic.name = t.name();
      topic.id = t.topic_id();
      topic_names_by_id_[t.topic_id()] = t.name();
      return absl::OkStatus();
    }
    case R::kPartition: {
      const auto& p = record.partition();
      auto it = topic_names_by_id_.find(p.topic_id());
      if (it == topic_names_by_id_.end()) {
        return Bad(fmt::format("partition {} of unknown topic id {}", p.partition_id(),
                               Hex(p.topic_id())));
      }
      if (p.partition_id() < 0 || p.replicas_size() == 0) {
        return Bad(
            fmt::format("partition {} of topic {} is invalid", p.partition_id(), it->second));
      }
      topics_[it->second].partitions[p.partition_id()] = p;
      return absl::OkStatus();
    }
    case R::kRemoveTopic: {
      auto it = topic_names_by_id_.find(record.remove_topic().topic_id());
      if (it == topic_names_by_id_.end()) {
        return Bad(
            fmt::format("removal of unknown topic id {}", Hex(record.remove_topic().topic_id())));
      }
      topics_.erase(it->second);
      topic_names_by_id_.erase(it);
      return absl::OkStatus();
    }
    case R::kConfig: {
      const auto& c = record.config();
      std::map<std::string, std::string>* configs = nullptr;
      switch (c.resource_type()) {
        case metadata::CONFIG_RESOURCE_TOPIC: {
          auto it = topics_.find(c.resource_name());
          if (it == topics_.end()) {
            return Bad(fmt::format("config {} of unknown topic {}", c.name(), c.resource_name()));
          }
          configs = &it->second.configs;
          break;
        }
        case metadata::CONFIG_RESOURCE_BROKER:
          configs = &broker_configs_[c.resource_name()];
          break;
        case metadata::CONFIG_RESOURCE_UNKNOWN:
        case metadata::ConfigResourceType_INT_MIN_SENTINEL_DO_NOT_USE_:
        case metadata::ConfigResourceType_INT_MAX_SENTINEL_DO_NOT_USE_:
          return Bad(fmt::format("config {} of unknown resource type {}", c.name(),
                                 static_cast<int>(c.resource_type())));
      }
      if (c.has_value()) {
        (*configs)[c.name()] = c.value();
      } else {
        configs->erase(c.name());
        if (c.resource_type() == metadata::CONFIG_RESOURCE_BROKER && configs->empty()) {
          broker_configs_.erase(c.resource_name());
        }
      }
      return absl::OkStatus();
    }
    case R::kProducerIds: {
      const int64_t next = record.producer_ids().next_producer_id();
      if (next <= next_producer_id_) {
        return Bad(fmt::format("producer ids moved back from {} to {}", next_producer_id_, next));
      }
      next_producer_id_ = next;
      return absl::OkStatus();
    }
    case R::RECORD_NOT_SET:
      return Bad("empty metadata record (unknown record type from a newer version?)");
  }
  return Bad("unhandled metadata record type");
}

metadata::MetadataRecordBatch MetadataImage::ToRecords() const {
  metadata::MetadataRecordBatch out;
  if (!cluster_id_.empty()) out.add_records()->mutable_cluster_id()->set_cluster_id(cluster_id_);
  for (const auto& [name, level] : features_) {
    auto* f = out.add_records()->mutable_feature_level();
    f->set_name(name);
    f->set_feature_level(level);
  }
  for (const auto& [id, broker] : brokers_) *out.add_records()->mutable_register_broker() = broker;
  // Only the next free id matters to a snapshot; the broker fields are history.
  if (next_producer_id_ > 0) {
    out.add_records()->mutable_producer_ids()->set_next_producer_id(next_producer_id_);
  }
  for (const auto& [resource, configs] : broker_configs_) {
    for (const auto& [key, value] : configs) {
      auto* c = out.add_records()->mutable_config();
      c->set_resource_type(metadata::CONFIG_RESOURCE_BROKER);
      c->set_resource_name(resource);
      c->set_name(key);
      c->set_value(value);
    }
  }
  for (const auto& [name, topic] : topics_) {
    auto* t = out.add_records()->mutable_topic();
    t->set_name(name);
    t->set_topic_id(topic.id);
    for (const auto& [key, value] : topic.configs) {
      auto* c = out.add_records()->mutable_config();
      c->set_resource_type(metadata::CONFIG_RESOURCE_TOPIC);
      c->set_resource_name(name);
      c->set_name(key);
      c->set_value(value);
    }
    for (const auto& [index, partition] : topic.partitions) {
      *out.add_records()->mutable_partition() = partition;
    }
  }
  return out;
}

const MetadataImage::Topic* MetadataImage::TopicByName(std::string_view name) const {
  auto it = topics_.find(std::string(name));
  return it == topics_.end() ? nullptr : &it->second;
}

const MetadataImage::Topic* MetadataImage::TopicById(std::string_view id) const {
  auto it = topic_names_by_id_.find(std::string(id));
  return it == topic_names_by_id_.end() ? nullptr : TopicByName(it->second);
}

bool MetadataImage::operator==(const MetadataImage& other) const {
  return offset_ == other.offset_ &&
         ToRecords().SerializeAsString() == other.ToRecords().SerializeAsString();
}

}  // namespace runnel::controllerd
