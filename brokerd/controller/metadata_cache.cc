#include "brokerd/controller/metadata_cache.h"

namespace runnel::brokerd {

bool MetadataCache::Apply(const runnel::controller::MetadataUpdate& update) {
  // Leadership only moves forward in epochs, whichever controller's stream says so.
  if (update.has_leader_id() && update.leader_epoch() >= active_controller_epoch_) {
    active_controller_ = update.leader_id();
    active_controller_epoch_ = update.leader_epoch();
  }
  MetadataChanges changes;
  if (update.is_snapshot()) {
    // A controller that lags behind the one this cache followed before (after a failover)
    // answers a watch with its older image: keep the newer state and skip its deltas until
    // they pass it. Going back would make topics vanish for a moment, and the reconciler
    // would delete their logs.
    if (ready_ && update.offset() < offset_) return false;
    for (auto& [name, t] : topics_) {
      if (t.metrics) carried_metrics_[{name, t.id.ToString()}] = std::move(t.metrics);
    }
    topics_.clear();
    name_by_id_.clear();
    brokers_.clear();
    broker_configs_.clear();
    cluster_id_.clear();
    features_.clear();
    changes.image = true;
  } else if (!ready_ || update.offset() != offset_ + 1) {
    return false;
  }
  for (const auto& record : update.records()) {
    ApplyRecord(record, changes);
    if (record.has_feature_level()) features_epoch_ = update.offset();
  }
  carried_metrics_.clear();  // of topics the image no longer has
  offset_ = update.offset();
  ready_ = true;
  for (const auto& fn : change_listeners_) fn(changes);
  std::vector<std::function<void()>> waiters;
  waiters.swap(waiters_);
  for (auto& fn : waiters) fn();
  return true;
}

void MetadataCache::ApplyRecord(const runnel::metadata::MetadataRecord& record,
                                MetadataChanges& changes) {
  using R = runnel::metadata::MetadataRecord;
  switch (record.record_case()) {
    case R::kClusterId:
      cluster_id_ = record.cluster_id().cluster_id();
      break;
    case R::kFeatureLevel:
      if (record.feature_level().feature_level() == 0) {
        features_.erase(record.feature_level().name());  // level 0: the feature is off
      } else {
        features_[record.feature_level().name()] =
            static_cast<int16_t>(record.feature_level().feature_level());
      }
      break;
    case R::kProducerIds:  // the controller's counter; brokers get blocks by asking for them
      break;
    case R::kRegisterBroker: {
      const auto& r = record.register_broker();
      BrokerInfo& b = brokers_[r.broker_id()];
      b.id = r.broker_id();
      b.epoch = r.broker_epoch();
      b.endpoints.assign(r.endpoints().begin(), r.endpoints().end());
      b.rack = r.has_rack() ? std::optional<std::string>(r.rack()) : std::nullopt;
      b.fenced = r.fenced();
      break;
    }
    case R::kTopic: {
      const auto& r = record.topic();
      TopicInfo& t = topics_[r.name()];
      const protocol::Uuid id = UuidFromBytes(r.topic_id());
      if (!t.metrics || t.id != id) {
        auto carried = carried_metrics_.find({r.name(), id.ToString()});
        t.metrics = carried != carried_metrics_.end() ? std::move(carried->second)
                                                      : std::make_shared<TopicMetrics>(r.name());
      }
      t.name = r.name();
      t.id = id;
      name_by_id_[r.topic_id()] = r.name();
      changes.topics.insert(r.name());
      break;
    }
    case R::kPartition: {
      const auto& r = record.partition();
      auto name = name_by_id_.find(r.topic_id());
      if (name == name_by_id_.end()) break;
      auto& partitions = topics_[name->second].partitions;
      auto [it, added] = partitions.try_emplace(r.partition_id());
      PartitionInfo& p = it->second;
      if (changes.topics.count(name->second) == 0 &&
          (added || !std::equal(p.replicas.begin(), p.replicas.end(), r.replicas().begin(),
                                r.replicas().end()))) {
        changes.placements.emplace(name->second, r.partition_id());
      }
      p.id = r.partition_id();
      p.replicas.assign(r.replicas().begin(), r.replicas().end());
      p.isr.assign(r.isr().begin(), r.isr().end());
      p.leader = r.leader();
      p.leader_epoch = r.leader_epoch();
      break;
    }
    case R::kRemoveTopic: {
      auto name = name_by_id_.find(record.remove_topic().topic_id());
      if (name == name_by_id_.end()) break;
      changes.topics.insert(name->second);
      topics_.erase(name->second);
      name_by_id_.erase(name);
      break;
    }
    case R::kConfig: {
      const auto& r = record.config();
      std::map<std::string, std::string>* configs = nullptr;
      if (r.resource_type() == runnel::metadata::CONFIG_RESOURCE_TOPIC) {
        auto it = topics_.find(r.resource_name());
        if (it == topics_.end()) break;
        configs = &it->second.configs;
        changes.topics.insert(r.resource_name());
      } else if (r.resource_type() == runnel::metadata::CONFIG_RESOURCE_BROKER) {
        configs = &broker_configs_[r.resource_name()];
        changes.broker_configs.insert(r.resource_name());
      } else {
        break;
      }
      if (r.has_value()) {
        (*configs)[r.name()] = r.value();
      } else {
        configs->erase(r.name());
      }
      if (r.resource_type() == runnel::metadata::CONFIG_RESOURCE_BROKER && configs->empty()) {
        broker_configs_.erase(r.resource_name());
      }
      break;
    }
    case R::RECORD_NOT_SET:
      break;
  }
}

const TopicInfo* MetadataCache::FindTopic(const std::string& name) const {
  auto it = topics_.find(name);
  return it == topics_.end() ? nullptr : &it->second;
}

const std::map<std::string, std::string>& MetadataCache::BrokerConfigs(
    const std::string& resource) const {
  static const std::map<std::string, std::string> kNone;
  auto it = broker_configs_.find(resource);
  return it == broker_configs_.end() ? kNone : it->second;
}

const TopicInfo* MetadataCache::FindTopicById(const protocol::Uuid& id) const {
  auto it = name_by_id_.find(id.ToByteString());
  return it == name_by_id_.end() ? nullptr : FindTopic(it->second);
}

}  // namespace runnel::brokerd
