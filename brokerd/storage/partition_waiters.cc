#include "brokerd/storage/partition_waiters.h"

#include <utility>

namespace runnel::brokerd {

PartitionWaiters::WatchId PartitionWaiters::Watch(const std::vector<PartitionKey>& keys,
                                                  std::function<void()> fn) {
  WatchId id = next_++;
  for (const PartitionKey& key : keys) by_key_[key].push_back(id);
  watches_.emplace(id, Entry{keys, std::move(fn)});
  return id;
}

void PartitionWaiters::Unwatch(WatchId id) {
  auto it = watches_.find(id);
  if (it == watches_.end()) return;
  for (const PartitionKey& key : it->second.keys) {
    auto k = by_key_.find(key);
    if (k == by_key_.end()) continue;
    std::erase(k->second, id);
    if (k->second.empty()) by_key_.erase(k);
  }
  watches_.erase(it);
}

void PartitionWaiters::FireOne(WatchId id) {
  auto it = watches_.find(id);
  if (it == watches_.end()) return;
  std::function<void()> fn = std::move(it->second.fn);
  Unwatch(id);
  fn();
}

void PartitionWaiters::Fire(const PartitionKey& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  std::vector<WatchId> ids = std::move(it->second);
  by_key_.erase(it);
  for (WatchId id : ids) FireOne(id);
}

void PartitionWaiters::FireAll() {
  std::vector<WatchId> ids;
  ids.reserve(watches_.size());
  for (const auto& [id, w] : watches_) ids.push_back(id);
  for (WatchId id : ids) FireOne(id);
}

}  // namespace runnel::brokerd
