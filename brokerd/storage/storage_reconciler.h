// Keeps storaged's partition logs in step with the cluster metadata: creates the logs of
// partitions placed on this node, deletes those of deleted topics (or of a topic id that no
// longer exists under the name), and pushes topic config changes.
//
// It runs on the loop after every metadata update and every change of which logs storaged
// holds, one pass at a time. A pass looks only at what changed since the last one: the topics
// the metadata created, removed or reconfigured, the partitions it placed elsewhere or here,
// and the logs that appeared or went in storaged. A full pass (every stored log, every
// partition of every topic) comes first, after a metadata image, after storaged's stream
// restarts (a snapshot or a loss of the partition view) and after a change of the broker
// configs topics inherit. A pass that fails is retried after a second, then after twice as
// long each time it fails again (up to 30 s), on what it looked at. A log storaged cannot
// create (a full disk, a resource limit) is recorded in the partition view as offline here,
// with storaged's reason, logged once, and retried.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "brokerd/controller/metadata_cache.h"
#include "brokerd/net/uv_handle.h"
#include "brokerd/storage/partition_view.h"
#include "brokerd/storage/storage_client.h"

namespace runnel::brokerd {

class StorageReconciler {
 public:
  // `configs_for` gives the configs storaged should apply to a topic.
  using ConfigsFor =
      std::function<std::map<std::string, std::string>(const MetadataCache&, const TopicInfo&)>;

  // Follows the changes of `metadata` and `states` (OnApplied, OnLayoutKeys) from here on;
  // both outlive it.
  StorageReconciler(EventLoop& loop, MetadataCache& metadata, PartitionView& states,
                    StorageClient& storage, int32_t node_id, ConfigsFor configs_for);
  ~StorageReconciler();

  // Starts a pass now, or after the one running.
  void Kick();
  // Stops for good and closes the retry timer (loop thread, before the loop ends; the
  // destructor closes it too).
  void Close();

  // True when the last pass found nothing to do (for tests and waiting handlers).
  bool in_sync() const { return in_sync_; }
  // How many partitions the last pass looked at, stored logs and placed partitions each
  // counted (for tests: a pass stays proportional to what changed).
  size_t last_pass_examined() const { return last_pass_examined_; }
  // Whether the last pass was a full one (for tests).
  bool last_pass_full() const { return last_pass_full_; }

 private:
  // What a pass looks at.
  struct Scope {
    bool full = false;
    // Every stored log and placed partition of these topics, by name.
    std::set<std::string> topics;
    // And these partitions.
    std::set<PartitionKey> partitions;

    void Merge(Scope other);
  };
  struct Plan;

  void OnMetadataChanges(const MetadataChanges& changes);
  void OnLayoutKeys(const std::vector<PartitionKey>& changed, bool reset);
  void Pass();
  // Adds to `plan` what the stored log `key` needs: a delete when it is no longer placed
  // here under its topic id.
  void CheckStored(const PartitionKey& key, const StoredPartition& stored, Plan& plan);
  // Adds to `plan` what partition `index` of `topic` needs: a create when it is placed here
  // and not stored, a config update when it is stored and its configs changed.
  void CheckPlaced(const TopicInfo& topic, int32_t index, const PartitionInfo& partition,
                   Plan& plan);
  // Every stored log and placed partition of the topic `name`.
  void CheckTopic(const std::string& name, Plan& plan);
  // Ends the pass that looked at `scope`; a failed one gives it back to pending_.
  void PassDone(bool ok, const std::shared_ptr<Scope>& scope);
  // Gives the partition view the logs storaged could not create this pass (each with its
  // reason), logging each failure once, not once a pass. The set replaces the one before:
  // a failed creation fails its pass, so the next pass looks at that partition again.
  void RecordCreateFailures(std::map<PartitionKey, std::string> failures);

  EventLoop& loop_;
  const MetadataCache& metadata_;
  PartitionView& states_;
  StorageClient& storage_;
  int32_t node_id_;
  ConfigsFor configs_for_;
  bool running_ = false;
  bool again_ = false;
  bool in_sync_ = false;
  bool closed_ = false;
  UvTimer retry_timer_;
  uint64_t retry_ms_ = 1000;
  // What changed since the last pass began; full at the start.
  Scope pending_{.full = true, .topics = {}, .partitions = {}};
  size_t last_pass_examined_ = 0;
  bool last_pass_full_ = false;
  // The creation failures last recorded, as logged.
  std::map<PartitionKey, std::string> logged_failures_;
  // What each topic's partitions were last given, by topic name (the topics with a partition
  // here).
  std::map<std::string, std::map<std::string, std::string>> pushed_configs_;
};

}  // namespace runnel::brokerd
