// brokerd's view of the partitions its storaged holds, kept from storaged's WatchPartitions
// stream and moved ahead by the answers to this brokerd's appends: log start, log end, high
// watermark and last stable offset per partition. Loop thread only.
//
// It owns the two things that must change with those offsets, each a class of its own:
// - PartitionWaiters (partition_waiters.h): long-poll fetches waiting for a partition to
//   change; the view fires a partition's waiters whenever its offsets move, and all of
//   them on a snapshot or loss.
// - AppendTail (append_tail.h), one per partition: where this brokerd's latest appends lie
//   in the segment files, so that a consumer keeping up is answered with no storaged call.
//   The view clears it when the partition becomes another log and trims it below the log
//   start.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "brokerd/storage/append_tail.h"
#include "brokerd/storage/partition_key.h"
#include "brokerd/storage/partition_waiters.h"
#include "proto/runnel/storage.pb.h"

namespace runnel::brokerd {

struct StoredPartition {
  std::string topic_id;  // Kafka's base64 form
  int64_t log_start_offset = 0;
  int64_t log_end_offset = 0;
  int64_t high_watermark = 0;
  // The first offset of the earliest ongoing transaction, else the high watermark: where a
  // read_committed fetch stops.
  int64_t last_stable_offset = 0;
  int64_t size_bytes = 0;
  // Where the latest appends this brokerd made lie (see AppendTail).
  AppendTail tail;
};

class PartitionView {
 public:
  using WatchId = PartitionWaiters::WatchId;

  PartitionView() = default;
  // Not copied: its index points into its own map.
  PartitionView(const PartitionView&) = delete;
  PartitionView& operator=(const PartitionView&) = delete;

  // Applies one message of the watch stream; a snapshot replaces everything known.
  void Apply(const storage::PartitionChange& change, bool snapshot);
  // An append to the log of `topic_id` was answered with `high_watermark` and
  // `last_stable_offset`: moves the partition's high watermark, log end and last stable
  // offset up to them (never down; -1 leaves the last stable offset) and runs its watches
  // when one moved, ahead of the stream's message about the same append. Ignored when the partition
  // is not known or is another log now (deleted and created again). It is not a message of the
  // stream: the OnLayoutChange and OnNextChange listeners do not run. A stream message taken before
  // the append may still arrive after it: it does not set the high watermark back (within one log
  // it only grows; a snapshot sets it as it is).
  void Advance(const std::string& topic, int32_t partition, const std::string& topic_id,
               int64_t high_watermark, int64_t last_stable_offset = -1);
  // An append to the log of `topic_id` was answered: its batches are offsets
  // [base_offset, last_offset] and lie at `range` (AppendTail::Add). Ignored as Advance is.
  void Appended(const std::string& topic, int32_t partition, const std::string& topic_id,
                int64_t base_offset, int64_t last_offset, const storage::FileRange& range);
  // The partition's AppendTail::Read within its log start and high watermark; nullopt for
  // a partition not known.
  std::optional<std::vector<TailSlice>> ReadTail(const std::string& topic, int32_t partition,
                                                 int64_t offset, int64_t max_bytes,
                                                 bool min_one) const;
  // An append this brokerd made was answered (`r`; ignored when it carries an error):
  // Appended and Advance as the answer says, so that a fetch waiting for the records answers
  // at once (the watch stream tells of appends only every kRoutineSpacing, see storaged).
  // AppendBatcher calls it for every answer before its caller hears of it; nothing else
  // needs to.
  void AppendAnswered(const storage::AppendPartitionResult& r);
  // Records were deleted up to `log_start_offset` (DeleteRecords answered): moves the
  // partition's log start up to it (never down) and forgets the tail below it.
  void RaiseLogStart(const std::string& topic, int32_t partition, int64_t log_start_offset);
  // Forgets a partition's tail (its file could not be opened).
  void DropTail(const std::string& topic, int32_t partition);
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
  // Runs `fn` after every applied message and loss that changed the layout (which logs
  // exist, under which topic ids): for those that follow it, the storage reconciler and the
  // group shards. The messages that only move offsets, one every few ms while appends go on,
  // do not run it.
  void OnLayoutChange(std::function<void()> fn) { layout_listeners_.push_back(std::move(fn)); }
  // Runs `fn` on the same occasions, before the OnLayoutChange listeners, with what changed:
  // the partitions that appeared, went or became another log (a new topic id) since it last
  // ran; or `reset` (a snapshot or a loss: any may have, and `changed` is empty).
  using LayoutKeysFn = std::function<void(const std::vector<PartitionKey>& changed, bool reset)>;
  void OnLayoutKeys(LayoutKeysFn fn) { layout_keys_listeners_.push_back(std::move(fn)); }
  // Runs `fn` once, after the next applied message or loss.
  void OnNextChange(std::function<void()> fn) { next_change_.push_back(std::move(fn)); }

  size_t watch_count() const { return waiters_.size(); }

  // Logs placed here that storaged could not create, each with storaged's reason (the storage
  // reconciler's latest answer; it retries them). Such a partition is offline here: Metadata
  // gives it no leader and lists this broker among its offline replicas. Replacing the set
  // runs the OnNextChange listeners when it changed (so a CreateTopics waiting for its logs
  // hears of the failure); a log that appears leaves it at once.
  void SetCreateFailures(std::map<PartitionKey, std::string> failures);
  // storaged's reason when the partition's log could not be created; nullptr otherwise.
  const std::string* CreateFailure(const std::string& topic, int32_t partition) const;
  const std::map<PartitionKey, std::string>& create_failures() const { return create_failures_; }

 private:
  void Notify();
  // Runs (and forgets) the OnNextChange listeners.
  void RunNextChange();

  bool ready_ = false;
  uint64_t layout_version_ = 0;
  // Returns the partition or null, without copying `topic` and in constant time (Fetch and
  // Produce look up every partition they name).
  StoredPartition* Lookup(std::string_view topic, int32_t partition) const;
  std::map<PartitionKey, StoredPartition> partitions_;
  // The same partitions by hash; its keys view the names in partitions_'s keys.
  std::unordered_map<PartitionKeyView, StoredPartition*, PartitionKeyViewHash> index_;
  std::map<PartitionKey, std::string> create_failures_;
  PartitionWaiters waiters_;
  std::vector<std::function<void()>> layout_listeners_;
  std::vector<LayoutKeysFn> layout_keys_listeners_;
  // The layout changes not yet given to the OnLayoutKeys listeners.
  std::vector<PartitionKey> layout_changed_;
  bool layout_reset_ = false;
  uint64_t notified_layout_version_ = 0;  // the layout the layout listeners last ran for
  std::vector<std::function<void()>> next_change_;
};

}  // namespace runnel::brokerd
