// brokerd's copy of the cluster metadata, kept from controllerd's WatchMetadata stream.
//
// It is only touched on the loop thread: the watch thread posts each MetadataUpdate to the
// loop, which applies it here. Handlers read it synchronously (Metadata, DescribeCluster).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "brokerd/broker_metrics.h"
#include "common/protocol/messages.h"
#include "proto/runnel/controller.pb.h"

namespace runnel::brokerd {

struct PartitionInfo {
  int32_t id = 0;
  std::vector<int32_t> replicas;
  std::vector<int32_t> isr;
  int32_t leader = -1;
  int32_t leader_epoch = 0;

  // Whether `node` holds one of its replicas.
  bool HostedOn(int32_t node) const {
    return std::find(replicas.begin(), replicas.end(), node) != replicas.end();
  }
};

// Kafka's internal topics: the coordinators' state topics, nothing else; also before they
// exist (Metadata and DescribeTopicPartitions flag a requested name).
inline bool IsInternalTopicName(const std::string& name) {
  return name == "__consumer_offsets" || name == "__transaction_state";
}

struct TopicInfo {
  std::string name;
  protocol::Uuid id;
  std::map<int32_t, PartitionInfo> partitions;
  std::map<std::string, std::string> configs;  // explicitly set ones
  // Produce and fetch counters of the topic; a handler copies the pointer to keep them for a
  // call in flight.
  std::shared_ptr<TopicMetrics> metrics;
  bool internal() const { return IsInternalTopicName(name); }
};

struct BrokerInfo {
  int32_t id = -1;
  int64_t epoch = -1;
  std::vector<runnel::metadata::BrokerEndpoint> endpoints;
  std::optional<std::string> rack;
  bool fenced = false;
};

// What one applied update changed, for those that follow the metadata and want to look at
// that only (the storage reconciler).
struct MetadataChanges {
  // A whole image replaced everything: anything may have changed.
  bool image = false;
  // Topics, by name, created, removed (also one removed and created again under a new id) or
  // whose explicitly set configs changed.
  std::set<std::string> topics;
  // Partitions of topics not in `topics` that were added or whose replicas changed (not those
  // whose leader or ISR only moved).
  std::set<std::pair<std::string, int32_t>> placements;
  // Broker resources (as broker_configs() names them) whose dynamic configs changed.
  std::set<std::string> broker_configs;
};

class MetadataCache {
 public:
  // Applies one update (a whole image or one delta). Returns false, changing nothing but
  // the active controller, when a delta does not follow the last applied offset (the caller
  // then re-watches).
  bool Apply(const runnel::controller::MetadataUpdate& update);

  // True once a first image has been applied.
  bool ready() const { return ready_; }
  int64_t offset() const { return offset_; }
  const std::string& cluster_id() const { return cluster_id_; }
  // The cluster's finalized features above level 0 (FeatureLevelRecords: metadata.version,
  // transaction.version), and the metadata offset of the last change to them (ApiVersions'
  // FinalizedFeaturesEpoch); -1 before any.
  const std::map<std::string, int16_t>& features() const { return features_; }
  int64_t features_epoch() const { return features_epoch_; }
  // A feature's level; 0 when the cluster does not have it.
  int16_t FeatureLevel(const std::string& name) const {
    auto it = features_.find(name);
    return it == features_.end() ? 0 : it->second;
  }
  // The active controller (the metadata quorum's leader) as last heard of; -1 when unknown.
  int32_t active_controller() const { return active_controller_; }

  const TopicInfo* FindTopic(const std::string& name) const;
  const TopicInfo* FindTopicById(const protocol::Uuid& id) const;
  const std::map<std::string, TopicInfo>& topics() const { return topics_; }
  const std::map<int32_t, BrokerInfo>& brokers() const { return brokers_; }
  // Dynamic broker configs (AlterConfigs on a broker resource) by resource name: a node id as
  // text, or "" for the cluster-wide default.
  const std::map<std::string, std::map<std::string, std::string>>& broker_configs() const {
    return broker_configs_;
  }
  // One broker resource's dynamic configs; empty when it has none.
  const std::map<std::string, std::string>& BrokerConfigs(const std::string& resource) const;

  // The node this cache serves (node.id), for what depends on it such as this broker's own
  // dynamic configs (StorageConfigsFor); -1 until set.
  void set_local_node_id(int32_t id) { local_node_id_ = id; }
  int32_t local_node_id() const { return local_node_id_; }

  // Runs `fn` on the loop thread after the next applied update (for callers waiting for a
  // change they made through the controller to show up here).
  void OnNextUpdate(std::function<void()> fn) { waiters_.push_back(std::move(fn)); }
  // Runs `fn` on the loop thread after every applied update, with what it changed, before
  // Apply returns.
  void OnApplied(std::function<void(const MetadataChanges&)> fn) {
    change_listeners_.push_back(std::move(fn));
  }

 private:
  void ApplyRecord(const runnel::metadata::MetadataRecord& record, MetadataChanges& changes);

  bool ready_ = false;
  int32_t local_node_id_ = -1;
  int64_t offset_ = -1;
  std::string cluster_id_;
  int32_t active_controller_ = -1;
  int64_t active_controller_epoch_ = -1;
  std::map<std::string, TopicInfo> topics_;
  // While an image is applied: the topics' metrics from before it, by name and id, so that
  // the counters of a topic still there carry on.
  std::map<std::pair<std::string, std::string>, std::shared_ptr<TopicMetrics>> carried_metrics_;
  std::map<std::string, std::string> name_by_id_;  // 16-byte id -> name
  std::map<int32_t, BrokerInfo> brokers_;
  std::map<std::string, int16_t> features_;
  int64_t features_epoch_ = -1;
  std::map<std::string, std::map<std::string, std::string>> broker_configs_;
  std::vector<std::function<void()>> waiters_;
  std::vector<std::function<void(const MetadataChanges&)>> change_listeners_;
};

// A 16-byte proto field as a Uuid; the zero id when it is not 16 bytes.
inline protocol::Uuid UuidFromBytes(const std::string& bytes) {
  return protocol::Uuid::FromByteString(bytes).value_or(protocol::Uuid());
}

}  // namespace runnel::brokerd
