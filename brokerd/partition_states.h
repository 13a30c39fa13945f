// brokerd's view of the partitions its storaged holds, kept from storaged's WatchPartitions
// stream: log start, log end and high watermark per partition. Loop thread only.
//
// Long-poll fetches wait here: Watch() runs a callback once any of the partitions it names
// changes (or the view is replaced or lost), so a waiting fetch costs nothing until then.
//
// Each partition also keeps its tail: where this brokerd's latest appends lie in the segment
// files, from storaged's answers. A fetch of those offsets, what a consumer keeping up asks
// for, is answered from it with no storaged call. The tail goes with the partition on a
// snapshot, a loss (storaged restarting: recovery may have cut the log) and a new topic id;
// offsets below the log start are never answered from it. A log cut while storaged runs
// (none is today; replication will) must clear it too, and may lower the high watermark,
// which Apply keeps from going back within one log.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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

// A segment file that recent appends went to, as storaged's append answers name it.
struct TailSegment {
  std::string path;
  uint64_t inode = 0;
};

// One answered append: its offsets and where its batches lie.
struct TailAppend {
  int64_t base_offset = 0;
  int64_t last_offset = 0;
  std::shared_ptr<const TailSegment> segment;
  int64_t position = 0;
  int32_t length = 0;
};

// A byte range of a tail segment to send.
struct TailSlice {
  std::shared_ptr<const TailSegment> segment;
  int64_t position = 0;
  int64_t length = 0;
};

struct StoredPartition {
  std::string topic_id;  // Kafka's base64 form
  int64_t log_start_offset = 0;
  int64_t log_end_offset = 0;
  int64_t high_watermark = 0;
  int64_t size_bytes = 0;
  // The latest appends this brokerd made, consecutive in offsets, oldest first: a fetch of
  // these offsets (a consumer keeping up) is answered from here without a storaged Read.
  std::deque<TailAppend> tail;
  int64_t tail_bytes = 0;
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
  // the OnLayoutChange and OnNextChange listeners do not run.
  // A stream message taken before the append may still arrive after it: it does not set the
  // high watermark back (within one log it only grows; a snapshot sets it as it is).
  void Advance(const std::string& topic, int32_t partition, const std::string& topic_id,
               int64_t high_watermark);
  // An append to the log of `topic_id` was answered: its batches are offsets
  // [base_offset, last_offset] and lie at `range`. Kept at the end of the partition's tail
  // when they follow it in offsets, else the tail starts again with them; the oldest go
  // beyond kTailAppends appends or kTailBytes bytes. Ignored as Advance is.
  void Appended(const std::string& topic, int32_t partition, const std::string& topic_id,
                int64_t base_offset, int64_t last_offset, const storage::FileRange& range);
  // The byte ranges that answer a fetch of `offset` with at most `max_bytes` (whole appends,
  // each one batch from a Produce request), below the high watermark; an empty list when the
  // first append there is larger than max_bytes and `min_one` is false (nothing fits), as
  // storaged's Read answers. nullopt when the tail cannot answer it as storaged would (the
  // offset outside the tail or the log, or the first append larger than max_bytes with
  // `min_one`): then storaged is asked.
  std::optional<std::vector<TailSlice>> ReadTail(const std::string& topic, int32_t partition,
                                                 int64_t offset, int64_t max_bytes,
                                                 bool min_one) const;
  // An append this brokerd made was answered (`r`, with no error): Appended and Advance as
  // the answer says. Every append path calls it, so that a fetch waiting for the records
  // answers at once: the watch stream tells of appends only every kRoutineSpacing (storaged).
  void AppendAnswered(const storage::AppendPartitionResult& r);
  // Records were deleted up to `log_start_offset` (DeleteRecords answered): moves the
  // partition's log start up to it (never down) and forgets the tail below it.
  void RaiseLogStart(const std::string& topic, int32_t partition, int64_t log_start_offset);
  // Forgets a partition's tail (its file could not be opened).
  void DropTail(const std::string& topic, int32_t partition);
  // The stream broke (storaged restarting): nothing is known until the next snapshot.
  void MarkLost();

  static constexpr size_t kTailAppends = 1024;
  static constexpr int64_t kTailBytes = 64 << 20;

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
  // Runs `fn` after every applied message and loss that changed the layout (which logs
  // exist, under which topic ids): for those that follow it, the storage reconciler and the
  // group shards. The messages that only move offsets, one every few ms while appends go on,
  // do not run it.
  void OnLayoutChange(std::function<void()> fn) { layout_listeners_.push_back(std::move(fn)); }
  // Runs `fn` once, after the next applied message or loss.
  void OnNextChange(std::function<void()> fn) { next_change_.push_back(std::move(fn)); }

  size_t watch_count() const { return watches_.size(); }

 private:
  struct WatchEntry {
    std::vector<PartitionKey> keys;
    std::function<void()> fn;
  };
  static void TrimTail(StoredPartition& p);
  static void ClearTail(StoredPartition& p);
  static void DropOldest(StoredPartition& p);  // the tail's oldest append, which must exist
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
  std::vector<std::function<void()>> layout_listeners_;
  uint64_t notified_layout_version_ = 0;  // the layout the layout listeners last ran for
  std::vector<std::function<void()>> next_change_;
};

}  // namespace runnel::brokerd
