#include "brokerd/storage/storage_reconciler.h"

#include <fmt/format.h>

#include <algorithm>

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

StorageReconciler::StorageReconciler(EventLoop& loop, const MetadataCache& metadata,
                                     PartitionView& states, StorageClient& storage, int32_t node_id,
                                     ConfigsFor configs_for)
    : loop_(loop),
      metadata_(metadata),
      states_(states),
      storage_(storage),
      node_id_(node_id),
      configs_for_(std::move(configs_for)),
      retry_timer_(loop_.raw()) {}

StorageReconciler::~StorageReconciler() = default;

void StorageReconciler::Close() {
  if (closed_) return;
  closed_ = true;
  retry_timer_.Close();
}

void StorageReconciler::Kick() {
  if (closed_) return;
  if (running_) {
    again_ = true;
    return;
  }
  Pass();
}

void StorageReconciler::Pass() {
  if (!metadata_.ready() || !states_.ready()) return;
  running_ = true;
  again_ = false;

  storage::PartitionsRequest deletes, creates, updates;
  // Logs storaged has that the metadata no longer places here, under this topic id.
  for (const auto& [key, stored] : states_.all()) {
    const TopicInfo* topic = metadata_.FindTopic(key.first);
    bool keep = false;
    if (topic != nullptr && topic->id.ToString() == stored.topic_id) {
      auto p = topic->partitions.find(key.second);
      keep = p != topic->partitions.end() && p->second.HostedOn(node_id_);
    }
    if (!keep) AddSpec(&deletes, key.first, key.second, stored.topic_id, nullptr);
  }
  std::map<std::string, std::map<std::string, std::string>> configs_now;
  for (const auto& [name, topic] : metadata_.topics()) {
    std::string id = topic.id.ToString();
    const std::map<std::string, std::string>* configs = nullptr;
    for (const auto& [index, partition] : topic.partitions) {
      if (!partition.HostedOn(node_id_)) continue;
      if (configs == nullptr) {
        configs = &(configs_now[name] = configs_for_(metadata_, topic));
      }
      const StoredPartition* stored = states_.Find(name, index);
      if (stored == nullptr) {
        AddSpec(&creates, name, index, id, configs);
      } else if (stored->topic_id == id) {
        auto pushed = pushed_configs_.find(name);
        if (pushed == pushed_configs_.end() || pushed->second != *configs) {
          AddSpec(&updates, name, index, id, configs);
        }
      }
      // A stored log under another topic id is deleted above and created on the next pass.
    }
  }

  if (deletes.partitions_size() + creates.partitions_size() + updates.partitions_size() == 0) {
    in_sync_ = true;
    RecordCreateFailures({});
    pushed_configs_ = std::move(configs_now);
    return PassDone(true);
  }
  in_sync_ = false;
  for (const auto& s : deletes.partitions()) {
    kLog()->info("deleting the log of {}-{} (no longer placed here)", s.topic(), s.partition());
  }
  if (creates.partitions_size() > 0) {
    kLog()->info("creating {} partition log(s)", creates.partitions_size());
  }
  auto configs = std::make_shared<std::map<std::string, std::map<std::string, std::string>>>(
      std::move(configs_now));
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
      [this, creates = std::move(creates), updates = std::move(updates), configs, ok, check](
          const grpc::Status& s1, storage::PartitionsResponse& r1) mutable {
        check("delete", s1, r1);
        storage_.CreatePartitions(
            std::move(creates), kCallTimeout,
            [this, updates = std::move(updates), configs, ok, check](
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
                  [this, configs, ok, check](const grpc::Status& s3,
                                             storage::PartitionsResponse& r3) {
                    check("update configs of", s3, r3);
                    if (*ok) pushed_configs_ = std::move(*configs);
                    PassDone(*ok);
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

void StorageReconciler::PassDone(bool ok) {
  running_ = false;
  if (closed_) return;
  if (!ok) {
    retry_timer_.Start(retry_ms_, 0, [this] { Kick(); });
    retry_ms_ = std::min(retry_ms_ * 2, kMaxRetryMs);
    return;
  }
  retry_ms_ = kFirstRetryMs;
  if (again_) Pass();
}

}  // namespace runnel::brokerd
