#include "brokerd/storage/storage_reconciler.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "common/log/log.h"
#include "common/protocol/error_code.h"

namespace runnel::brokerd {
namespace {

const log::ModuleLogger kLog("brokerd.storage");

constexpr std::chrono::milliseconds kCallTimeout{30000};
// A failed pass is retried after kFirstRetryMs, doubling while passes keep failing (a full
// disk may fail thousands of creations each time) up to kMaxRetryMs; a metadata change
// starts a pass at once anyway.
constexpr uint64_t kFirstRetryMs = 1000;
constexpr uint64_t kMaxRetryMs = 30000;
// New creation failures logged one line each per pass, the rest counted in one line.
constexpr int kFailuresLoggedPerPass = 10;

void AddSpec(storage::PartitionsRequest* req, const std::string& topic, int32_t partition,
             const std::string& topic_id, const std::map<std::string, std::string>* configs) {
  storage::PartitionSpec* spec = req->add_partitions();
  spec->set_topic(topic);
  spec->set_partition(partition);
  spec->set_topic_id(topic_id);
  if (configs != nullptr) spec->mutable_configs()->insert(configs->begin(), configs->end());
}

// Errors a pass may meet and go on: the log is already as wanted.
bool Settled(const storage::PartitionResult& r) {
  return r.error_code() == 0 ||
         r.error_code() == static_cast<int32_t>(protocol::ErrorCode::kTopicAlreadyExists) ||
         r.error_code() == static_cast<int32_t>(protocol::ErrorCode::kUnknownTopicOrPartition);
}

}  // namespace

// What one pass does and what it needs when its calls are answered.
struct StorageReconciler::Plan {
  storage::PartitionsRequest deletes, creates, updates;
  // The configs of each topic with a partition here that the pass looked at, by name.
  std::map<std::string, std::map<std::string, std::string>> configs;
  size_t examined = 0;
};

void StorageReconciler::Scope::Merge(Scope other) {
  full = full || other.full;
  topics.merge(other.topics);
  partitions.merge(other.partitions);
}

StorageReconciler::StorageReconciler(EventLoop& loop, MetadataCache& metadata,
                                     PartitionView& states, StorageClient& storage, int32_t node_id,
                                     ConfigsFor configs_for)
    : loop_(loop),
      metadata_(metadata),
      states_(states),
      storage_(storage),
      node_id_(node_id),
      configs_for_(std::move(configs_for)),
      retry_timer_(loop_.raw()) {
  metadata.OnApplied([this](const MetadataChanges& changes) { OnMetadataChanges(changes); });
  states_.OnLayoutKeys([this](const std::vector<PartitionKey>& changed, bool reset) {
    OnLayoutKeys(changed, reset);
  });
}

StorageReconciler::~StorageReconciler() = default;

void StorageReconciler::Close() {
  if (closed_) return;
  closed_ = true;
  retry_timer_.Close();
}

void StorageReconciler::OnMetadataChanges(const MetadataChanges& changes) {
  if (pending_.full) return;
  // The broker configs a topic inherits are this node's and the cluster-wide default's
  // (StorageConfigsFor): a change there may change every topic's.
  const bool inherited = changes.broker_configs.count("") > 0 ||
                         changes.broker_configs.count(fmt::format("{}", node_id_)) > 0;
  if (changes.image || inherited) {
    pending_ = Scope{.full = true, .topics = {}, .partitions = {}};
    return;
  }
  pending_.topics.insert(changes.topics.begin(), changes.topics.end());
  pending_.partitions.insert(changes.placements.begin(), changes.placements.end());
}

void StorageReconciler::OnLayoutKeys(const std::vector<PartitionKey>& changed, bool reset) {
  if (pending_.full) return;
  if (reset) {
    pending_ = Scope{.full = true, .topics = {}, .partitions = {}};
    return;
  }
  pending_.partitions.insert(changed.begin(), changed.end());
}

void StorageReconciler::Kick() {
  if (closed_) return;
  if (running_) {
    again_ = true;
    return;
  }
  Pass();
}

void StorageReconciler::CheckStored(const PartitionKey& key, const StoredPartition& stored,
                                    Plan& plan) {
  ++plan.examined;
  const TopicInfo* topic = metadata_.FindTopic(key.first);
  bool keep = false;
  if (topic != nullptr && topic->id.ToString() == stored.topic_id) {
    auto p = topic->partitions.find(key.second);
    keep = p != topic->partitions.end() && p->second.HostedOn(node_id_);
  }
  if (!keep) AddSpec(&plan.deletes, key.first, key.second, stored.topic_id, nullptr);
}

void StorageReconciler::CheckPlaced(const TopicInfo& topic, int32_t index,
                                    const PartitionInfo& partition, Plan& plan) {
  ++plan.examined;
  if (!partition.HostedOn(node_id_)) return;
  auto [it, added] = plan.configs.try_emplace(topic.name);
  if (added) it->second = configs_for_(metadata_, topic);
  const std::map<std::string, std::string>& configs = it->second;
  const std::string id = topic.id.ToString();
  const StoredPartition* stored = states_.Find(topic.name, index);
  if (stored == nullptr) {
    AddSpec(&plan.creates, topic.name, index, id, &configs);
  } else if (stored->topic_id == id) {
    auto pushed = pushed_configs_.find(topic.name);
    if (pushed == pushed_configs_.end() || pushed->second != configs) {
      AddSpec(&plan.updates, topic.name, index, id, &configs);
    }
  }
  // A stored log under another topic id is deleted (CheckStored) and created on the next
  // pass: its deletion changes the layout, which makes the partition part of that pass.
}

void StorageReconciler::CheckTopic(const std::string& name, Plan& plan) {
  const auto& stored = states_.all();
  for (auto it = stored.lower_bound(PartitionKey(name, std::numeric_limits<int32_t>::min()));
       it != stored.end() && it->first.first == name; ++it) {
    CheckStored(it->first, it->second, plan);
  }
  const TopicInfo* topic = metadata_.FindTopic(name);
  if (topic == nullptr) return;
  for (const auto& [index, partition] : topic->partitions) {
    CheckPlaced(*topic, index, partition, plan);
  }
}

void StorageReconciler::Pass() {
  if (!metadata_.ready() || !states_.ready()) return;
  running_ = true;
  again_ = false;

  auto scope = std::make_shared<Scope>(std::exchange(pending_, Scope{}));
  Plan plan;
  if (scope->full) {
    // Logs storaged has that the metadata no longer places here, under this topic id; then
    // the partitions placed here.
    for (const auto& [key, stored] : states_.all()) CheckStored(key, stored, plan);
    for (const auto& [name, topic] : metadata_.topics()) {
      for (const auto& [index, partition] : topic.partitions) {
        CheckPlaced(topic, index, partition, plan);
      }
    }
  } else {
    for (const std::string& name : scope->topics) CheckTopic(name, plan);
    for (const PartitionKey& key : scope->partitions) {
      if (scope->topics.count(key.first) > 0) continue;  // looked at above
      if (const StoredPartition* stored = states_.Find(key.first, key.second)) {
        CheckStored(key, *stored, plan);
      }
      const TopicInfo* topic = metadata_.FindTopic(key.first);
      if (topic == nullptr) continue;
      auto p = topic->partitions.find(key.second);
      if (p != topic->partitions.end()) CheckPlaced(*topic, key.second, p->second, plan);
    }
  }
  last_pass_examined_ = plan.examined;
  last_pass_full_ = scope->full;

  // What the topics the pass looked at whole were given, once given.
  auto configs = std::make_shared<std::map<std::string, std::map<std::string, std::string>>>(
      std::move(plan.configs));
  auto set_pushed = [this, scope, configs] {
    if (scope->full) {
      pushed_configs_ = std::move(*configs);
      return;
    }
    for (const std::string& name : scope->topics) {
      auto it = configs->find(name);
      if (it == configs->end()) {
        pushed_configs_.erase(name);
      } else {
        pushed_configs_[name] = std::move(it->second);
      }
    }
  };
  storage::PartitionsRequest& deletes = plan.deletes;
  storage::PartitionsRequest& creates = plan.creates;
  storage::PartitionsRequest& updates = plan.updates;
  if (deletes.partitions_size() + creates.partitions_size() + updates.partitions_size() == 0) {
    in_sync_ = true;
    RecordCreateFailures({});
    set_pushed();
    return PassDone(true, scope);
  }
  in_sync_ = false;
  for (const auto& s : deletes.partitions()) {
    kLog()->info("deleting the log of {}-{} (no longer placed here)", s.topic(), s.partition());
  }
  if (creates.partitions_size() > 0) {
    kLog()->info("creating {} partition log(s)", creates.partitions_size());
  }
  auto ok = std::make_shared<bool>(true);
  auto check = [ok](const char* what, const grpc::Status& status,
                    const storage::PartitionsResponse& resp) {
    if (!status.ok()) {
      kLog()->warn("{} partitions: storaged call failed: {}", what, status.error_message());
      *ok = false;
      return;
    }
    for (const auto& r : resp.partitions()) {
      if (Settled(r)) continue;
      kLog()->warn("{} {}-{}: error {}: {}", what, r.topic(), r.partition(), r.error_code(),
                   r.error_message());
      *ok = false;
    }
  };
  // Deletes, then creates, then config updates, one call each.
  storage_.DeletePartitions(
      std::move(deletes), kCallTimeout,
      [this, creates = std::move(creates), updates = std::move(updates), scope, set_pushed, ok,
       check](const grpc::Status& s1, storage::PartitionsResponse& r1) mutable {
        check("delete", s1, r1);
        storage_.CreatePartitions(
            std::move(creates), kCallTimeout,
            [this, updates = std::move(updates), scope, set_pushed, ok, check](
                const grpc::Status& s2, storage::PartitionsResponse& r2) mutable {
              if (!s2.ok()) {
                kLog()->warn("create partitions: storaged call failed: {}", s2.error_message());
                *ok = false;
              } else {
                std::map<PartitionKey, std::string> failures;
                for (const auto& r : r2.partitions()) {
                  if (Settled(r)) continue;
                  failures[PartitionKey(r.topic(), r.partition())] =
                      fmt::format("{} ({})", r.error_message(),
                                  protocol::ErrorName(protocol::ErrorFromWire(r.error_code())));
                  *ok = false;
                }
                RecordCreateFailures(std::move(failures));
              }
              storage_.UpdatePartitionConfigs(
                  std::move(updates), kCallTimeout,
                  [this, scope, set_pushed, ok, check](const grpc::Status& s3,
                                                       storage::PartitionsResponse& r3) {
                    check("update configs of", s3, r3);
                    if (*ok) set_pushed();
                    PassDone(*ok, scope);
                  });
            });
      });
}

void StorageReconciler::RecordCreateFailures(std::map<PartitionKey, std::string> failures) {
  int logged = 0;
  int unlogged = 0;
  for (const auto& [key, reason] : failures) {
    auto known = logged_failures_.find(key);
    if (known != logged_failures_.end() && known->second == reason) continue;
    if (logged < kFailuresLoggedPerPass) {
      kLog()->warn("cannot create the log of {}-{}: {}; it is offline here, retried later",
                   key.first, key.second, reason);
      ++logged;
    } else {
      ++unlogged;
    }
  }
  if (unlogged > 0) {
    kLog()->warn("cannot create the logs of {} more partition(s) either; {} offline here in all",
                 unlogged, failures.size());
  }
  for (const auto& [key, reason] : logged_failures_) {
    if (failures.count(key) == 0 && states_.Find(key.first, key.second) != nullptr) {
      kLog()->info("created the log of {}-{} (failed before)", key.first, key.second);
    }
  }
  logged_failures_ = failures;
  states_.SetCreateFailures(std::move(failures));
}

void StorageReconciler::PassDone(bool ok, const std::shared_ptr<Scope>& scope) {
  running_ = false;
  if (closed_) return;
  if (!ok) {
    // The retry looks again at what this pass looked at, with what changed since.
    pending_.Merge(std::move(*scope));
    retry_timer_.Start(retry_ms_, 0, [this] { Kick(); });
    retry_ms_ = std::min(retry_ms_ * 2, kMaxRetryMs);
    return;
  }
  retry_ms_ = kFirstRetryMs;
  if (again_) Pass();
}

}  // namespace runnel::brokerd
