// The long-poll registry: fetches waiting for one of their partitions to change. A waiting
// fetch costs nothing until PartitionView fires one of its keys (or all of them, on a
// snapshot or a loss of storaged's watch stream). Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "brokerd/storage/partition_key.h"

namespace runnel::brokerd {

class PartitionWaiters {
 public:
  using WatchId = uint64_t;

  // Runs `fn` once, when any of `keys` fires or everything does. Never 0.
  WatchId Watch(const std::vector<PartitionKey>& keys, std::function<void()> fn);
  // Forgets a watch that has not fired; harmless after it fired.
  void Unwatch(WatchId id);
  // Runs (and forgets) the watches that name `key`.
  void Fire(const PartitionKey& key);
  // Runs (and forgets) every watch.
  void FireAll();

  size_t size() const { return watches_.size(); }

 private:
  struct Entry {
    std::vector<PartitionKey> keys;
    std::function<void()> fn;
  };
  void FireOne(WatchId id);

  WatchId next_ = 1;
  std::unordered_map<WatchId, Entry> watches_;
  std::unordered_map<PartitionKey, std::vector<WatchId>, PartitionKeyHash> by_key_;
};

}  // namespace runnel::brokerd
