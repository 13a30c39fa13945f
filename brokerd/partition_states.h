// brokerd's view of the partitions its storaged holds, kept from storaged's WatchPartitions
// stream: log start, log end and high watermark per partition. Loop thread only.
//
// Long-poll fetches wait here: Watch() runs a callback once any of the partitions it names
// changes (or the view is replaced or lost), so a waiting fetch costs nothing until then.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "proto/runnel/storage.pb.h"

namespace runnel::brokerd {

using PartitionKey = std::pair<std::string, int32_t>;

struct PartitionKeyHash {
  size_t operator()(const PartitionKey& k) const {
    return std::hash<std::string>()(k.first) * 31 + static_cast<size_t>(k.second);
  }
};

struct StoredPartition {
  std::string topic_id;  // Kafka's base64 form
  int64_t log_start_offset = 0;
  int64_t log_end_offset = 0;
  int64_t high_watermark = 0;
  int64_t size_bytes = 0;
};

class PartitionStates {
 public:
  using WatchId = uint64_t;

  // Applies one message of the watch stream; a snapshot replaces everything known.
  void Apply(const storage::PartitionChange& change, bool snapshot);
  // An append to the log of `topic_id` was answered with `high_watermark`: moves the
  // partition's high watermark and log end up to it (never down) and runs its watches, ahead
  // of the stream's message about the same append. Ignored when the partition is not known
  // or is another log now (deleted and created again). It is not a message of the stream:
  // the OnEveryChange and OnNextChange listeners, which follow which logs exist, do not run.
  // A stream message taken before the append may still arrive after it and set the offsets
  // back for a moment; the message about the append itself follows it.
  void Advance(const std::string& topic, int32_t partition, const std::string& topic_id,
               int64_t high_watermark);
  // The stream broke (storaged restarting): nothing is known until the next snapshot.
  void MarkLost();

  // True between a snapshot and the next loss.
  bool ready() const { return ready_; }
  // Changes when a partition appears, goes or changes topic id, on a snapshot and on a loss;
  // not when only offsets move. Listeners that care about which logs exist compare it.
  uint64_t layout_version() const { return layout_version_; }
  const StoredPartition* Find(const std::string& topic, int32_t partition) const;
  const std::map<PartitionKey, StoredPartition>& all() const { return partitions_; }

  // Runs `fn` once, on the loop, when any of `keys` changes, or on a snapshot or loss.
  WatchId Watch(const std::vector<PartitionKey>& keys, std::function<void()> fn);
  // Forgets a watch that has not fired; harmless after it fired.
  void Unwatch(WatchId id);
  // Runs `fn` after every applied message and loss (for the storage reconciler).
  void OnEveryChange(std::function<void()> fn) { listeners_.push_back(std::move(fn)); }
  // Runs `fn` once, after the next applied message or loss.
  void OnNextChange(std::function<void()> fn) { next_change_.push_back(std::move(fn)); }

  size_t watch_count() const { return watches_.size(); }

 private:
  struct WatchEntry {
    std::vector<PartitionKey> keys;
    std::function<void()> fn;
  };
  void Fire(WatchId id);
  void FireKey(const PartitionKey& key);  // the watches of one partition
  void FireAll();
  void Notify();

  bool ready_ = false;
  uint64_t layout_version_ = 0;
  std::map<PartitionKey, StoredPartition> partitions_;
  WatchId next_watch_ = 1;
  std::unordered_map<WatchId, WatchEntry> watches_;
  std::unordered_map<PartitionKey, std::vector<WatchId>, PartitionKeyHash> watches_by_key_;
  std::vector<std::function<void()>> listeners_;
  std::vector<std::function<void()>> next_change_;
};

}  // namespace runnel::brokerd
