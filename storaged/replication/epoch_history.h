// A partition's leader epochs and the first offset written in each, in memory only: the pure
// rules of Kafka's LeaderEpochFileCache (assign, truncate from either end, end offset for an
// epoch). LeaderEpochCache (storaged/log/checkpoints.h) persists one to
// leader-epoch-checkpoint; the replication core (leader_state.h, follower_state.h) reads one
// as a value. No I/O, no locks: the owner serializes calls.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace runnel::storaged {

struct EpochEntry {
  int32_t epoch = 0;
  int64_t start_offset = 0;
  bool operator==(const EpochEntry&) const = default;
};

// Whether `entries` rise strictly in both epoch and start offset, all non-negative.
bool EpochEntriesRise(const std::vector<EpochEntry>& entries);

class EpochHistory {
 public:
  EpochHistory() = default;
  // `entries` must rise (EpochEntriesRise); the caller checks.
  explicit EpochHistory(std::vector<EpochEntry> entries) : entries_(std::move(entries)) {}

  const std::vector<EpochEntry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  std::optional<EpochEntry> Latest() const;
  // Records that `epoch` (>= 0) starts at `start_offset` (>= 0), Kafka's rule: nothing
  // changes when the latest entry is this epoch starting at or before `start_offset`;
  // otherwise every entry at the end whose epoch is >= `epoch` or whose start offset is >=
  // `start_offset` is removed and the new entry added. Returns whether anything changed.
  bool Assign(int32_t epoch, int64_t start_offset);
  // Removes entries with start offset >= `end_offset` (log truncated at `end_offset`).
  bool TruncateFromEnd(int64_t end_offset);
  // Log start moved to `start_offset`: entries wholly before it go, the one covering it is
  // moved up to start at it.
  bool TruncateFromStart(int64_t start_offset);
  // As OffsetsForLeaderEpoch answers (Kafka's rules): for the latest epoch, (epoch,
  // `log_end_offset`); for an older one, the largest known epoch <= `epoch` and the start
  // offset of the first epoch after it; for an epoch before every entry (removed with the
  // log start), (`epoch`, the first entry's start offset). nullopt (UNDEFINED_EPOCH and
  // UNDEFINED_EPOCH_OFFSET on the wire) when `epoch` is negative, the history is empty, or
  // `epoch` is above the latest.
  std::optional<std::pair<int32_t, int64_t>> EndOffsetFor(int32_t epoch,
                                                          int64_t log_end_offset) const;
  // The epoch of the record at `offset` (the last entry starting at or before it); nullopt
  // before the first entry.
  std::optional<int32_t> EpochAt(int64_t offset) const;

  bool operator==(const EpochHistory&) const = default;

 private:
  std::vector<EpochEntry> entries_;
};

}  // namespace runnel::storaged
