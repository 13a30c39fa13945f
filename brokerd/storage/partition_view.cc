#include "brokerd/storage/partition_view.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace runnel::brokerd {

void PartitionView::Apply(const storage::PartitionChange& change, bool snapshot) {
  std::vector<PartitionKey> changed;
  if (snapshot) {
    index_.clear();
    partitions_.clear();
    ++layout_version_;
    layout_reset_ = true;
  }
  for (const storage::PartitionState& s : change.partitions()) {
    PartitionKey key(s.topic(), s.partition());
    if (s.deleted()) {
      auto it = partitions_.find(key);
      if (it != partitions_.end()) {
        index_.erase(PartitionKeyView(it->first.first, it->first.second));
        partitions_.erase(it);
        ++layout_version_;
        if (!snapshot) layout_changed_.push_back(key);
      }
    } else {
      auto [it, added] = partitions_.try_emplace(key);
      if (added) {
        create_failures_.erase(key);
        index_.emplace(PartitionKeyView(it->first.first, it->first.second), &it->second);
      }
      StoredPartition& p = it->second;
      const bool same_log = !added && p.topic_id == s.topic_id();
      if (!same_log) {
        ++layout_version_;
        p.tail.Clear();
        if (!snapshot) layout_changed_.push_back(key);
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
      p.last_stable_offset = grow_only ? std::max(p.last_stable_offset, s.last_stable_offset())
                                       : s.last_stable_offset();
      p.size_bytes = s.size_bytes();
      p.tail.DropBelow(p.log_start_offset);
    }
    if (!snapshot) changed.push_back(std::move(key));
  }
  ready_ = true;
  if (snapshot) {
    waiters_.FireAll();
  } else {
    for (const PartitionKey& key : changed) waiters_.Fire(key);
  }
  Notify();
}

void PartitionView::Advance(const std::string& topic, int32_t partition,
                            const std::string& topic_id, int64_t high_watermark,
                            int64_t last_stable_offset) {
  StoredPartition* found = Lookup(topic, partition);
  if (found == nullptr || found->topic_id != topic_id) return;
  StoredPartition& p = *found;
  if (high_watermark <= p.high_watermark && last_stable_offset <= p.last_stable_offset) return;
  p.high_watermark = std::max(p.high_watermark, high_watermark);
  p.log_end_offset = std::max(p.log_end_offset, high_watermark);
  p.last_stable_offset = std::max(p.last_stable_offset, last_stable_offset);
  waiters_.Fire(PartitionKey(topic, partition));
}

void PartitionView::Appended(const std::string& topic, int32_t partition,
                             const std::string& topic_id, int64_t base_offset, int64_t last_offset,
                             const storage::FileRange& range) {
  StoredPartition* p = Lookup(topic, partition);
  if (p == nullptr || p->topic_id != topic_id) return;
  p->tail.Add(base_offset, last_offset, range);
}

std::optional<std::vector<TailSlice>> PartitionView::ReadTail(const std::string& topic,
                                                              int32_t partition, int64_t offset,
                                                              int64_t max_bytes,
                                                              bool min_one) const {
  const StoredPartition* p = Find(topic, partition);
  if (p == nullptr) return std::nullopt;
  return p->tail.Read(offset, max_bytes, min_one, p->log_start_offset, p->high_watermark);
}

void PartitionView::AppendAnswered(const storage::AppendPartitionResult& r) {
  if (r.error_code() != 0) return;
  Appended(r.topic(), r.partition(), r.topic_id(), r.base_offset(), r.last_offset(), r.range());
  Advance(r.topic(), r.partition(), r.topic_id(), r.high_watermark(), r.last_stable_offset());
}

void PartitionView::RaiseLogStart(const std::string& topic, int32_t partition,
                                  int64_t log_start_offset) {
  StoredPartition* p = Lookup(topic, partition);
  if (p == nullptr || log_start_offset <= p->log_start_offset) return;
  p->log_start_offset = log_start_offset;
  p->tail.DropBelow(log_start_offset);
}

void PartitionView::DropTail(const std::string& topic, int32_t partition) {
  if (StoredPartition* p = Lookup(topic, partition)) p->tail.Clear();
}

void PartitionView::Notify() {
  if (layout_version_ != notified_layout_version_) {
    notified_layout_version_ = layout_version_;
    std::vector<PartitionKey> changed = std::move(layout_changed_);
    layout_changed_.clear();
    const bool reset = std::exchange(layout_reset_, false);
    if (reset) changed.clear();
    for (const auto& fn : layout_keys_listeners_) fn(changed, reset);
    for (const auto& fn : layout_listeners_) fn();
  }
  RunNextChange();
}

void PartitionView::RunNextChange() {
  auto once = std::move(next_change_);
  next_change_.clear();
  for (const auto& fn : once) fn();
}

void PartitionView::MarkLost() {
  ready_ = false;
  index_.clear();
  partitions_.clear();
  ++layout_version_;
  layout_reset_ = true;
  waiters_.FireAll();
  Notify();
}

void PartitionView::SetCreateFailures(std::map<PartitionKey, std::string> failures) {
  for (auto it = failures.begin(); it != failures.end();) {
    it = partitions_.count(it->first) > 0 ? failures.erase(it) : std::next(it);
  }
  if (failures == create_failures_) return;
  create_failures_ = std::move(failures);
  RunNextChange();
}

const std::string* PartitionView::CreateFailure(const std::string& topic, int32_t partition) const {
  if (create_failures_.empty()) return nullptr;
  auto it = create_failures_.find(PartitionKey(topic, partition));
  return it == create_failures_.end() ? nullptr : &it->second;
}

const StoredPartition* PartitionView::Find(const std::string& topic, int32_t partition) const {
  return Lookup(topic, partition);
}

StoredPartition* PartitionView::Lookup(std::string_view topic, int32_t partition) const {
  auto it = index_.find(PartitionKeyView(topic, partition));
  return it == index_.end() ? nullptr : it->second;
}

PartitionView::WatchId PartitionView::Watch(const std::vector<PartitionKey>& keys,
                                            std::function<void()> fn) {
  return waiters_.Watch(keys, std::move(fn));
}

void PartitionView::Unwatch(WatchId id) { waiters_.Unwatch(id); }

}  // namespace runnel::brokerd
