// Log compaction (cleanup.policy=compact): keeps the last record of every key, in place of
// the segments it cleans, with the original offsets (gaps are fine).
//
// For a log, the cleaner
//  1. finds the dirty range [first dirty offset, first uncleanable offset): the first
//     uncleanable offset is the lowest of the active segment's base, the base of the segment
//     holding the last stable offset (an open transaction's data is never compacted: it may
//     yet be aborted) and the base of the first segment with records newer than
//     min.compaction.lag.ms (by its largest timestamp);
//  2. maps every key in the dirty range to its last offset (bounded memory: when the map is
//     full, the dirty range ends at the last whole batch mapped; the first batch is always
//     mapped, so a pass makes progress whatever the bound); records of aborted transactions
//     (known from the segments' transaction indexes, by producer id and offset) are not
//     mapped, committed transactional records are;
//  3. rewrites each non-active segment below the end of the mapped range by Kafka's rules:
//     - a data record stays when no later record has its key; a tombstone (null value) until
//       its batch's delete horizon (set to now + delete.retention.ms the first time the
//       tombstone is cleaned, Kafka's KIP-534 scheme) has passed; records below the log start
//       offset and records without a key go;
//     - the batches of aborted transactions go whole;
//     - a transaction marker stays while this pass meets data of its transaction; the first
//       pass that meets none gives it a delete horizon (now + delete.retention.ms, in its base
//       timestamp with the batch attribute bit, as KIP-534 for tombstones) and a pass after
//       the horizon removes it;
//     - the batch holding a producer's last data (or, when the producer state keeps no data
//       batch, its marker of the current epoch) stays, as a header with no records when all
//       its records go, so producer state rebuilt from the log keeps its sequence and epoch;
//       any other batch left with no records is dropped;
//     - a kept batch keeps its base offset, last offset delta, producer fields, leader epoch
//       and codec; a segment in which nothing changes is not rewritten;
//     - the cleaned copy's transaction index keeps the aborted transactions whose data this
//       pass met (their markers stay) or whose markers lie past the cleaned range, so an
//       abort leaves the index once its data is gone, as in Kafka;
//  4. swaps each cleaned segment in with Log::ReplaceSegment (crash-safe), and moves the
//     log's first dirty offset to the end of the cleaned range. A swap refused because the
//     segment went away meanwhile (retention, truncation) ends the pass without moving it.
// A log is picked when its dirty ratio (dirty bytes / (clean + dirty bytes), the bytes of the
// segments in [log start, first dirty) and [first dirty, first uncleanable), as Kafka counts)
// is above min.cleanable.dirty.ratio, or when it has dirty bytes and a non-active segment from
// the first dirty offset on holds a record older than max.compaction.lag.ms.
//
// Threads: one thread calls CleanOnce / Clean; the cleaner reads segments without locks (a
// non-active segment does not change; a segment's transaction index has its own lock) and
// takes the log's locks only inside ReplaceSegment and, once a pass, to copy the producers'
// last offsets (Log::LastRecordsOfProducers).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/util/mutex.h"
#include "common/util/status.h"
#include "storaged/log/log.h"

namespace runnel::storaged {

// Splits consecutive segments into groups, each to be cleaned into one segment named after
// its first (Kafka's groupSegmentsBySize): a group's .log bytes stay <= max_size
// (segment.bytes), each of its index sizes <= max_index_size (segment.index.bytes), and its
// offsets fit the 32-bit offsets relative to its first base. A segment over a limit alone is a
// group of one.
std::vector<std::vector<std::shared_ptr<Segment>>> GroupSegmentsBySize(
    const std::vector<std::shared_ptr<Segment>>& segments, int64_t max_size,
    int64_t max_index_size);

struct CleanerStats {
  int64_t segments_cleaned = 0;  // segments replaced by a cleaned copy
  int64_t segments_written = 0;  // cleaned copies swapped in (one per group of segments)
  int64_t bytes_read = 0;        // batch bytes read, mapping and rewriting
  int64_t bytes_written = 0;     // bytes of the cleaned copies
  int64_t records_removed = 0;   // every record removed, tombstones included
  int64_t tombstones_removed = 0;
  int64_t aborted_records_removed = 0;  // records of aborted transactions (in records_removed)
  int64_t markers_removed = 0;          // transaction markers removed past their horizon
  int64_t end_offset = -1;              // the first dirty offset after the pass
  bool aborted = false;                 // a swap was refused; the first dirty offset did not move
};

struct CleanerOptions {
  std::function<int64_t()> now_ms;   // defaults to the system clock
  size_t max_map_entries = 1 << 20;  // keys held in the offset map per pass
  // Tests: runs before each segment swap, to change the log under a pass.
  std::function<void(Log&, const Segment&)> before_swap;
};

class Cleaner {
 public:
  explicit Cleaner(CleanerOptions options);

  // The dirty ratio of `log`, and whether it should be cleaned now.
  double DirtyRatio(const Log& log) const;
  bool NeedsCleaning(const Log& log) const;

  // Cleans the log that needs it most (highest dirty ratio) among `logs` (compacted ones
  // only). Returns whether it cleaned one; replaced segments are added to `to_unlink` for
  // delayed unlinking. A log whose cleaning fails is returned as the error (naming it) and
  // skipped by later calls, as Kafka marks a partition uncleanable.
  StatusOr<bool> CleanOnce(const std::vector<std::shared_ptr<Log>>& logs,
                           std::vector<std::shared_ptr<Segment>>* to_unlink);
  // Cleans `log` now, whatever its dirty ratio (also when its dirty range is empty, which
  // still drops tombstones past their horizon). FailedPrecondition when the log is not
  // compacted.
  StatusOr<CleanerStats> Clean(Log& log, std::vector<std::shared_ptr<Segment>>* to_unlink);

 private:
  int64_t Now() const;
  bool IsUncleanable(const std::shared_ptr<Log>& log);

  CleanerOptions options_;
  Mutex mu_;
  std::vector<std::weak_ptr<Log>> uncleanable_ ABSL_GUARDED_BY(mu_);  // logs whose cleaning failed
};

}  // namespace runnel::storaged
