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
      const bool same_log = !added && p.topic_id == s.topic_id();
      if (!same_log) {
        ++layout_version_;
        ClearTail(p);
      }
      p.topic_id = s.topic_id();
      // A message taken before an append or a DeleteRecords whose answer came first must not
      // set the offsets back: a fetch at the high watermark would wait for the next change
      // with the records there, one below the log start would be answered. The log is never
      // cut while storaged runs (a restart comes as a snapshot), so within one log they only
      // grow.
      const bool grow_only = same_log && !snapshot;
      p.log_start_offset =
          grow_only ? std::max(p.log_start_offset, s.log_start_offset()) : s.log_start_offset();
      p.log_end_offset =
          grow_only ? std::max(p.log_end_offset, s.log_end_offset()) : s.log_end_offset();
      p.high_watermark =
          grow_only ? std::max(p.high_watermark, s.high_watermark()) : s.high_watermark();
      p.size_bytes = s.size_bytes();
      TrimTail(p);
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

void PartitionStates::Appended(const std::string& topic, int32_t partition,
                               const std::string& topic_id, int64_t base_offset,
                               int64_t last_offset, const storage::FileRange& range) {
  auto it = partitions_.find(PartitionKey(topic, partition));
  if (it == partitions_.end() || it->second.topic_id != topic_id) return;
  if (range.path().empty() || range.length() <= 0 || last_offset < base_offset) return;
  StoredPartition& p = it->second;
  if (!p.tail.empty() && p.tail.back().last_offset + 1 != base_offset) {
    ClearTail(p);  // another writer's appends came between: start again from here
  }
  std::shared_ptr<const TailSegment> segment;
  if (!p.tail.empty() && p.tail.back().segment->path == range.path() &&
      p.tail.back().segment->inode == range.inode()) {
    segment = p.tail.back().segment;
  } else {
    segment = std::make_shared<const TailSegment>(TailSegment{range.path(), range.inode()});
  }
  p.tail.push_back(
      TailAppend{base_offset, last_offset, std::move(segment), range.position(), range.length()});
  p.tail_bytes += range.length();
  while (p.tail.size() > kTailAppends || (p.tail.size() > 1 && p.tail_bytes > kTailBytes)) {
    DropOldest(p);
  }
}

std::optional<std::vector<TailSlice>> PartitionStates::ReadTail(const std::string& topic,
                                                                int32_t partition, int64_t offset,
                                                                int64_t max_bytes,
                                                                bool min_one) const {
  const StoredPartition* p = Find(topic, partition);
  if (p == nullptr || p->tail.empty()) return std::nullopt;
  if (offset < p->log_start_offset || offset >= p->high_watermark) return std::nullopt;
  if (offset < p->tail.front().base_offset || offset > p->tail.back().last_offset) {
    return std::nullopt;
  }
  // The append holding `offset` (the tail's offsets have no gap).
  auto a = std::partition_point(p->tail.begin(), p->tail.end(),
                                [offset](const TailAppend& t) { return t.last_offset < offset; });
  std::vector<TailSlice> out;
  int64_t bytes = 0;
  for (; a != p->tail.end() && a->last_offset < p->high_watermark; ++a) {
    if (bytes + a->length > max_bytes) {
      if (bytes == 0 && min_one) return std::nullopt;  // storaged cuts it to one batch
      break;
    }
    if (!out.empty() && out.back().segment == a->segment &&
        out.back().position + out.back().length == a->position) {
      out.back().length += a->length;
    } else {
      out.push_back(TailSlice{a->segment, a->position, a->length});
    }
    bytes += a->length;
  }
  return out;
}

void PartitionStates::TrimTail(StoredPartition& p) {
  // Appends below the log start (retention, DeleteRecords) are never sent again.
  while (!p.tail.empty() && p.tail.front().last_offset < p.log_start_offset) DropOldest(p);
}

void PartitionStates::DropOldest(StoredPartition& p) {
  p.tail_bytes -= p.tail.front().length;
  p.tail.pop_front();
}

void PartitionStates::RaiseLogStart(const std::string& topic, int32_t partition,
                                    int64_t log_start_offset) {
  auto it = partitions_.find(PartitionKey(topic, partition));
  if (it == partitions_.end() || log_start_offset <= it->second.log_start_offset) return;
  it->second.log_start_offset = log_start_offset;
  TrimTail(it->second);
}

void PartitionStates::ClearTail(StoredPartition& p) {
  p.tail.clear();
  p.tail_bytes = 0;
}

void PartitionStates::AppendAnswered(const storage::AppendPartitionResult& r) {
  if (r.error_code() != 0) return;
  Appended(r.topic(), r.partition(), r.topic_id(), r.base_offset(), r.last_offset(), r.range());
  Advance(r.topic(), r.partition(), r.topic_id(), r.high_watermark());
}

void PartitionStates::DropTail(const std::string& topic, int32_t partition) {
  auto it = partitions_.find(PartitionKey(topic, partition));
  if (it != partitions_.end()) ClearTail(it->second);
}

void PartitionStates::Notify() {
  if (layout_version_ != notified_layout_version_) {
    notified_layout_version_ = layout_version_;
    for (const auto& fn : layout_listeners_) fn();
  }
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
