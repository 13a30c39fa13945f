// One segment of a partition log: the `.log` file of record batches starting at
// `base_offset`, with its offset and time indexes (index.h) and its transaction index
// (txn_index.h).
//
// The .log file is the batches back to back, exactly as appended (Kafka's format, see
// common/record/batch.h); there is no other framing. Its size is the byte position of
// the next append. A segment is appended to by one thread at a time (its Log's append
// lock); reads use pread and may run concurrently with appends below the size they
// observed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/record/batch.h"
#include "common/util/mutex.h"
#include "common/util/status.h"
#include "storaged/log/file_cache.h"
#include "storaged/log/index.h"
#include "storaged/log/txn_index.h"

namespace runnel::storaged {

// Where a batch lies in a segment's file.
struct BatchLocation {
  int64_t base_offset = 0;
  int64_t last_offset = 0;
  int32_t position = 0;
  int32_t size = 0;
  int64_t max_timestamp = -1;
  int32_t partition_leader_epoch = -1;
  // What the producer state needs of the header (a replay reads nothing else).
  int16_t attributes = 0;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  int32_t base_sequence = -1;
};

// What a recovery scan of a segment found.
struct SegmentRecovery {
  int64_t valid_bytes = 0;      // the file was truncated to this
  int64_t truncated_bytes = 0;  // bytes cut from the tail
  std::string reason;           // why the scan stopped early ("" when the whole file was valid)
  int batches = 0;
};

class Segment {
 public:
  // Opens an existing segment, or creates one when `create`. Indexes are opened writable
  // when `active`. A missing index file is created empty (the caller rebuilds it).
  // `suffix` (e.g. ".cleaned") is appended to every file name. A damaged .txnindex is
  // deleted (logged): Log's replay re-adds what it covers.
  static StatusOr<std::unique_ptr<Segment>> Open(const std::string& dir, int64_t base_offset,
                                                 int32_t max_index_bytes, bool create, bool active,
                                                 FileCache* files, std::string_view suffix = "");
  ~Segment();

  int64_t base_offset() const { return base_offset_; }
  // The .log file's path (a copy: a rename may change it meanwhile).
  std::string log_path() const;
  // The .log file's inode: a reader that opens log_path() checks it is still this file
  // (a compaction swap puts another file under the same name).
  uint64_t inode() const { return inode_; }
  int64_t size() const { return size_.load(std::memory_order_acquire); }
  // The offset after the last batch (base_offset when empty).
  int64_t next_offset() const { return next_offset_.load(std::memory_order_acquire); }
  int64_t max_timestamp() const { return max_timestamp_.load(std::memory_order_acquire); }
  int64_t offset_of_max_timestamp() const { return offset_of_max_timestamp_.load(); }
  // The max timestamp of the first batch (segment.ms rolls are measured from it); -1 empty.
  int64_t rolling_timestamp() const { return rolling_timestamp_; }
  // Wall time this segment was created or loaded (for segment.ms when batches carry no
  // timestamps).
  int64_t created_ms() const { return created_ms_; }
  bool IndexFull() const { return offset_index_->IsFull() || time_index_->IsAlmostFull(); }
  const OffsetIndex& offset_index() const { return *offset_index_; }
  const TimeIndex& time_index() const { return *time_index_; }
  // The aborted transactions whose markers lie in this segment: its .txnindex, made by the
  // first (a segment without one holds no TxnIndex, so the many segments of a node pay
  // nothing for it). Thread-safe.
  Status AppendAbortedTxn(const AbortedTxn& txn);
  // TxnIndex::Collect; false (not complete) without an index.
  bool CollectAbortedTxns(int64_t fetch_offset, int64_t upper_bound,
                          std::vector<AbortedTxn>* out) const;
  std::vector<AbortedTxn> AbortedTxns() const;
  // The marker offset of the last aborted transaction; -1 when none.
  int64_t LastAbortedTxnOffset() const;

  // Writes `bytes` (whole batches back to back, offsets already assigned; `batches` are
  // views of them) at the end of the file in one write, and indexes them every
  // `index_interval_bytes`. On a failed or short write the file is cut back to its previous
  // size and the error returned; the segment stays usable.
  Status Append(record::ByteSpan bytes, const std::vector<record::BatchView>& batches,
                int32_t index_interval_bytes);
  // fdatasync of the .log file and of the transaction index when written to (the offset
  // and time indexes are rebuildable and are synced on roll/close).
  Status Flush();

  // The first batch whose last offset >= `offset`, searching from the index entry for it;
  // nullopt when no such batch is below `max_position`.
  StatusOr<std::optional<BatchLocation>> FindBatch(int64_t offset, int64_t max_position) const;
  // The end of the longest run of whole batches from `start` (a batch boundary) that is at
  // most `max_bytes` long, ends below `max_position` and holds no offset >= `limit_offset`.
  // Uses the offset index to skip ahead, so it reads only a few headers.
  StatusOr<int64_t> FindEndPosition(int64_t start, int64_t max_bytes, int64_t max_position,
                                    int64_t limit_offset) const;
  // The first batch with max timestamp >= `timestamp` (via the time index).
  StatusOr<std::optional<BatchLocation>> FindBatchByTimestamp(int64_t timestamp) const;
  // Reads `length` bytes at `position`.
  StatusOr<std::vector<uint8_t>> ReadBytes(int64_t position, int32_t length) const;
  // Calls fn for each batch header from `position`, stopping at the end or when fn says so.
  Status ScanBatches(int64_t position, int64_t end,
                     const std::function<bool(const BatchLocation&)>& fn) const;
  // Reads the whole batch at `loc` and calls fn for each of its records (decompressing).
  Status ForEachRecordIn(const BatchLocation& loc,
                         const std::function<bool(int64_t offset, int64_t timestamp,
                                                  const record::Record&)>& fn) const;

  // Validates every batch from the start (CRC, lengths, magic, increasing offsets),
  // truncates the file after the last valid one, rebuilds both indexes and the in-memory
  // summary, and drops transaction index entries past the valid batches. Used for
  // segments after the recovery point.
  StatusOr<SegmentRecovery> Recover(int32_t index_interval_bytes);
  // Loads the summary (next offset, max timestamp) of a segment known to be valid, from its
  // indexes and a scan of the tail after the last offset index entry. Rebuilds indexes that
  // fail their sanity check.
  Status LoadClean(int32_t index_interval_bytes);

  // Drops every batch at or after `offset` (which must start a batch or be past the end),
  // and the aborted transactions whose markers were among them.
  Status TruncateTo(int64_t offset);
  // Segment rolled: writes the final time index entry, trims the indexes.
  // `sync`: fdatasync the indexes too (a bulk close syncs the whole file system instead).
  // On failure the segment stays active (appendable) and OnRoll may be called again.
  Status OnRoll(bool sync = true);
  // fdatasync of both index files.
  Status SyncIndexes();
  // Makes a rolled segment the active one again (after truncation removed later ones).
  Status Reactivate();
  bool active() const { return active_; }
  // Whether LoadClean had to rebuild the indexes.
  bool rebuilt_indexes() const { return rebuilt_indexes_; }
  void set_created_ms(int64_t ms) { created_ms_ = ms; }
  // Trims indexes and flushes; the segment may not be appended to afterwards.
  // `sync` false leaves the fdatasyncs to the caller (LogManager::Shutdown's syncfs).
  Status Close(bool sync = true);
  // Renames every file, replacing the trailing `from` (may be "") of each name with
  // `to` (may be ""): ".cleaned" -> ".swap" -> "" when a cleaned segment is swapped in,
  // "" -> ".deleted" when a segment is removed.
  Status RenameSuffix(std::string_view from, std::string_view to);
  // Unlinks every file.
  Status Delete();

 private:
  Segment(std::string dir, int64_t base_offset, std::string log_path, FileCache* files);
  StatusOr<std::shared_ptr<FileHandle>> File() const;
  void Track(const BatchLocation& loc);
  Status IndexBatch(const BatchLocation& loc, int32_t index_interval_bytes);
  Status ResetSummary();
  Status RebuildIndexes(int32_t index_interval_bytes);
  Status TrimIndexes();
  // <base>.txnindex with the suffix the .log file has now.
  std::string TxnIndexPath() const;

  std::string dir_;
  int64_t base_offset_;
  mutable Mutex path_mu_;  // guards log_path_ against renames while others read it
  std::string log_path_ ABSL_GUARDED_BY(path_mu_);
  uint64_t inode_ = 0;
  FileCache* files_;
  std::atomic<int64_t> size_{0};
  // Written by the appending thread, read by others (retention, ListOffsets).
  std::atomic<int64_t> next_offset_;
  std::atomic<int64_t> max_timestamp_{-1};
  std::atomic<int64_t> offset_of_max_timestamp_;
  int64_t rolling_timestamp_ = -1;
  int64_t created_ms_ = 0;
  int64_t bytes_since_index_entry_ = 0;
  int32_t max_index_bytes_ = 0;
  bool active_ = false;
  bool indexes_missing_ = false;
  bool rebuilt_indexes_ = false;
  std::unique_ptr<OffsetIndex> offset_index_;
  std::unique_ptr<TimeIndex> time_index_;
  mutable Mutex txn_mu_;
  std::unique_ptr<TxnIndex> txn_index_ ABSL_GUARDED_BY(txn_mu_);  // null until needed
};

}  // namespace runnel::storaged
