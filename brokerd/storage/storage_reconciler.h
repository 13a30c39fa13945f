// Keeps storaged's partition logs in step with the cluster metadata: creates the logs of
// partitions placed on this node, deletes those of deleted topics (or of a topic id that no
// longer exists under the name), and pushes topic config changes.
//
// It runs on the loop after every metadata update and every storaged snapshot, one pass at
// a time; a pass that fails is retried after a second, then after twice as long each time it
// fails again (up to 30 s). storaged restarting is covered: its fresh snapshot starts a new
// pass. A log storaged cannot create (a full disk, a resource limit) is recorded in the
// partition view as offline here, with storaged's reason, logged once, and retried.
#pragma once

#include <functional>
#include <map>
#include <string>

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

  StorageReconciler(EventLoop& loop, const MetadataCache& metadata, PartitionView& states,
                    StorageClient& storage, int32_t node_id, ConfigsFor configs_for);
  ~StorageReconciler();

  // Starts a pass now, or after the one running.
  void Kick();
  // Stops for good and closes the retry timer (loop thread, before the loop ends; the
  // destructor closes it too).
  void Close();

  // True when the last pass found nothing to do (for tests and waiting handlers).
  bool in_sync() const { return in_sync_; }

 private:
  void Pass();
  void PassDone(bool ok);
  // Gives the partition view the logs storaged could not create this pass (each with its
  // reason), logging each failure once, not once a pass.
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
  // The creation failures last recorded, as logged.
  std::map<PartitionKey, std::string> logged_failures_;
  // What each topic's partitions were last given, by topic name.
  std::map<std::string, std::map<std::string, std::string>> pushed_configs_;
};

}  // namespace runnel::brokerd
