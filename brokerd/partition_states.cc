#include "brokerd/partition_states.h"

#include <algorithm>

namespace runnel::brokerd {

void PartitionStates::Apply(const storage::PartitionChange& change, bool snapshot) {
  std::vector<PartitionKey> changed;
  if (snapshot) {
    partitions_.clear();
    ++layout_version_;
  }
  for (const storage::PartitionState& s : change.partitions()) {
    PartitionKey key(s.topic(), s.partition());
    if (s.deleted()) {
      if (partitions_.erase(key) > 0) ++layout_version_;
    } else {
      auto [it, added] = partitions_.try_emplace(key);
      StoredPartition& p = it->second;
      if (added || p.topic_id != s.topic_id()) ++layout_version_;
      p.topic_id = s.topic_id();
      p.log_start_offset = s.log_start_offset();
      p.log_end_offset = s.log_end_offset();
      p.high_watermark = s.high_watermark();
      p.size_bytes = s.size_bytes();
    }
    if (!snapshot) changed.push_back(std::move(key));
  }
  ready_ = true;
  if (snapshot) {
    FireAll();
  } else {
    for (const PartitionKey& key : changed) FireKey(key);
  }
  Notify();
}

void PartitionStates::Advance(const std::string& topic, int32_t partition,
                              const std::string& topic_id, int64_t high_watermark) {
  PartitionKey key(topic, partition);
  auto it = partitions_.find(key);
  if (it == partitions_.end() || it->second.topic_id != topic_id) return;
  StoredPartition& p = it->second;
  if (high_watermark <= p.high_watermark) return;
  p.high_watermark = high_watermark;
  p.log_end_offset = std::max(p.log_end_offset, high_watermark);
  FireKey(key);
}

void PartitionStates::Notify() {
  for (const auto& fn : listeners_) fn();
  auto once = std::move(next_change_);
  next_change_.clear();
  for (const auto& fn : once) fn();
}

void PartitionStates::MarkLost() {
  ready_ = false;
  partitions_.clear();
  ++layout_version_;
  FireAll();
  Notify();
}

const StoredPartition* PartitionStates::Find(const std::string& topic, int32_t partition) const {
  auto it = partitions_.find(PartitionKey(topic, partition));
  return it == partitions_.end() ? nullptr : &it->second;
}

PartitionStates::WatchId PartitionStates::Watch(const std::vector<PartitionKey>& keys,
                                                std::function<void()> fn) {
  WatchId id = next_watch_++;
  for (const PartitionKey& key : keys) watches_by_key_[key].push_back(id);
  watches_.emplace(id, WatchEntry{keys, std::move(fn)});
  return id;
}

void PartitionStates::Unwatch(WatchId id) {
  auto it = watches_.find(id);
  if (it == watches_.end()) return;
  for (const PartitionKey& key : it->second.keys) {
    auto k = watches_by_key_.find(key);
    if (k == watches_by_key_.end()) continue;
    std::erase(k->second, id);
    if (k->second.empty()) watches_by_key_.erase(k);
  }
  watches_.erase(it);
}

void PartitionStates::Fire(WatchId id) {
  auto it = watches_.find(id);
  if (it == watches_.end()) return;
  std::function<void()> fn = std::move(it->second.fn);
  Unwatch(id);
  fn();
}

void PartitionStates::FireKey(const PartitionKey& key) {
  auto it = watches_by_key_.find(key);
  if (it == watches_by_key_.end()) return;
  std::vector<WatchId> ids = std::move(it->second);
  watches_by_key_.erase(it);
  for (WatchId id : ids) Fire(id);
}

void PartitionStates::FireAll() {
  std::vector<WatchId> ids;
  ids.reserve(watches_.size());
  for (const auto& [id, w] : watches_) ids.push_back(id);
  for (WatchId id : ids) Fire(id);
}

}  // namespace runnel::brokerd
