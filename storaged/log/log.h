// A partition's log: its directory of segments, the one writer's append path, reads,
// offset lookups, truncation and the log start offset.
//
// Invariants:
//  - segments are contiguous in offset order; only the last (active) one is appended to;
//  - log_start_offset <= every readable offset < log_end_offset;
//  - recovery_point <= log_end_offset, and everything below recovery_point is on disk;
//  - an append is visible to reads once Append returns, and durable (fdatasync) before it
//    returns when the config says so (flush.messages / flush.ms, see LogConfig).
//
// Threads: appends take `append_mu_`; reads, offset lookups and retention take a snapshot of
// the segment list under `segments_mu_` and then work without locks (segments are shared
// pointers, so one removed by retention stays valid for a read that holds it). Flushes take
// `flush_mu_`, so concurrent appends that need a flush share one fdatasync (group commit).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/record/batch.h"
#include "common/util/mutex.h"
#include "common/util/status.h"
#include "storaged/log/checkpoints.h"
#include "storaged/log/file_cache.h"
#include "storaged/log/file_names.h"
#include "storaged/log/log_config.h"
#include "storaged/log/producer_state.h"
#include "storaged/log/segment.h"

namespace runnel::storaged {

// A byte range of a segment file, to send with sendfile (or read, when remote).
struct FileRange {
  std::string path;
  int64_t position = 0;
  int32_t length = 0;
  uint64_t inode = 0;  // of the file at `path` when read; a reopened path must match it
};

struct AppendResult {
  protocol::ErrorCode error = protocol::ErrorCode::kNone;
  std::string error_message;
  int batch_index = -1;          // the batch the error is about, when it is about one
  int64_t base_offset = -1;      // first offset assigned
  int64_t last_offset = -1;      // last offset assigned
  int64_t log_append_time = -1;  // set when the topic uses LogAppendTime
  int64_t log_start_offset = -1;
  int64_t high_watermark = -1;      // right after this append
  int64_t last_stable_offset = -1;  // right after this append
  FileRange range;                  // where the appended batches were written
};

struct ReadResult {
  protocol::ErrorCode error = protocol::ErrorCode::kNone;
  int64_t high_watermark = -1;
  int64_t last_stable_offset = -1;
  int64_t log_start_offset = -1;
  int64_t log_end_offset = -1;
  std::vector<FileRange> ranges;  // whole batches, in offset order
  int64_t bytes = 0;              // sum of range lengths
  // read_committed: the aborted transactions overlapping what was read (Kafka's
  // collectAbortedTransactions), in marker order.
  std::vector<AbortedTxn> aborted;
};

struct OffsetLookup {
  protocol::ErrorCode error = protocol::ErrorCode::kNone;
  int64_t offset = -1;
  int64_t timestamp = -1;
  int32_t leader_epoch = -1;
};

// Wall-clock milliseconds since the epoch (the default clock of logs and the manager).
int64_t SystemNowMs();

// ListOffsets' special timestamps.
inline constexpr int64_t kLatestTimestamp = -1;
inline constexpr int64_t kEarliestTimestamp = -2;
inline constexpr int64_t kMaxTimestamp = -3;
inline constexpr int64_t kEarliestLocalTimestamp = -4;
// The highest offset in tiered storage (KIP-1005) and the earliest one waiting for upload
// (KIP-1023): with no tiered storage, Kafka answers both offset -1, timestamp -1, epoch -1.
inline constexpr int64_t kLatestTieredTimestamp = -5;
inline constexpr int64_t kEarliestPendingUploadTimestamp = -6;

// Log-level state for notifications and the StorageService.
struct LogState {
  int64_t log_start_offset = 0;
  int64_t log_end_offset = 0;
  int64_t high_watermark = 0;
  int64_t last_stable_offset = 0;
  int64_t recovery_point = 0;
  int64_t size_bytes = 0;
  int segments = 0;
};

struct LogOptions {
  std::string dir;  // the partition directory
  TopicPartition tp;
  LogConfig config;
  FileCache* files = nullptr;
  std::function<int64_t()> now_ms;               // wall clock, ms since the epoch
  int64_t producer_id_expiration_ms = 86400000;  // producer.id.expiration.ms
  // Called after the log's end or start offset changes, with the offsets (size_bytes and
  // segments are left 0: State() has them). Must not block.
  std::function<void(const TopicPartition&, const LogState&)> on_change;
  // Called when a segment rolls, with the offset below which everything may be flushed in
  // the background (Kafka flushes a rolled segment asynchronously).
  std::function<void(const TopicPartition&, int64_t)> on_roll;
  // Called once when the log goes offline (see Log::offline()), with the reason; it may run
  // under the log's locks, so it must only note the fact (the manager queues it).
  std::function<void(const TopicPartition&, const std::string&)> on_offline;
};

// What loading a log found and did (for the startup log line and tests).
struct LoadReport {
  int segments = 0;
  int recovered_segments = 0;
  int64_t truncated_bytes = 0;
  int rebuilt_indexes = 0;
  int removed_files = 0;           // leftovers: .cleaned, .swap, .deleted, orphan indexes
  std::vector<std::string> notes;  // one line per thing cut or rebuilt
};

// Registers the storage counters every log adds to (appends, flushes and their latency), so
// they are scraped as 0 before the first append.
void RegisterLogMetrics();

class Log {
 public:
  // Creates the directory (if needed) and partition.metadata, or loads an existing one.
  // `recovery_point` is the offset below which the data is known flushed (from the
  // checkpoint; 0 when unknown); segments holding offsets at or after it are recovered
  // unless `clean_shutdown`.
  static StatusOr<std::unique_ptr<Log>> Open(LogOptions options, std::string topic_id,
                                             int64_t recovery_point, int64_t log_start_offset,
                                             bool clean_shutdown, LoadReport* report);
  ~Log();

  const TopicPartition& tp() const { return options_.tp; }
  const std::string& dir() const { return options_.dir; }
  // The file cache its segments use (the cleaner opens its cleaned copies through it).
  FileCache* files() const { return options_.files; }
  const std::string& topic_id() const { return topic_id_; }
  // Makes a new partition's partition.metadata (and its directory) durable; a no-op once
  // done. Open writes it without waiting for the disk; every flush of the log's data calls
  // this first, Close too, and the log manager soon after creation.
  Status SyncMetadata();
  bool metadata_synced() const { return metadata_synced_.load(); }
  // A syncfs of the log's file system made it durable (LogManager's batch of new logs).
  void MetadataSynced() { metadata_synced_.store(true); }
  LogConfig config() const;
  void SetConfig(const LogConfig& config);
  LogState State() const;

  // Validates every batch of `records` (several batches back to back, as in a produce
  // request), then assigns offsets in place, stamps `leader_epoch` and LogAppendTime when
  // configured, appends them all and flushes when the policy requires. Either every batch
  // is appended or none.
  //
  // Batches with a producer id are checked against the producer state (producer_state.h):
  // a rejected one fails the whole append (INVALID_PRODUCER_EPOCH,
  // OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE, with its batch_index). A retry of one
  // of the producer's last 5 batches is a duplicate: as in Kafka, nothing of the append is
  // written and the answer is success with that earlier batch's base and last offset (and
  // its max timestamp as log_append_time, as Kafka answers), with an empty range.
  //
  // `origin` kCoordinator: a coordinator of this broker writes transaction markers or its
  // own producer batches (no sequences); only their epochs are checked, with Kafka's rules
  // for markers (ProducerStateManager::CheckCoordinatorBatch, `transaction_version` the
  // WriteTxnMarkers one), and no batch is a duplicate. A client's control batch is
  // INVALID_RECORD.
  //
  // I/O errors: a failed write (a full disk, EIO) fails this append with
  // KAFKA_STORAGE_ERROR, retriable: what was partly written is cut back, the log end offset
  // stays, and the next append tries again. A failed flush (fsync/fdatasync) takes the log
  // offline: after it the page cache and the disk may disagree in ways no retry can tell,
  // so the log takes no more appends or flushes until storaged restarts and recovers it from
  // the last good recovery point (Kafka takes the log dir offline). The same when a torn
  // write cannot be cut back.
  AppendResult Append(std::span<uint8_t> records, int32_t leader_epoch,
                      AppendOrigin origin = AppendOrigin::kClient, int transaction_version = 0);
  // Appends batches that already carry their offsets (a follower copying its leader, or a
  // test); they must start at the log end offset. Validates CRC and lengths only.
  AppendResult AppendWithOffsets(std::span<uint8_t> records);

  // Batches from the one containing `offset`, whole batches, up to `max_bytes` in total
  // (but at least the first batch when `min_one_batch`), not past `max_offset` (exclusive;
  // the high watermark for consumers). OFFSET_OUT_OF_RANGE when `offset` is below the log
  // start or above the end. `read_committed`: not past the last stable offset either, and
  // with the aborted transactions overlapping [offset, the offset after what is returned).
  ReadResult Read(int64_t offset, int32_t max_bytes, bool min_one_batch,
                  std::optional<int64_t> max_offset = std::nullopt,
                  bool read_committed = false) const;
  // ListOffsets for one timestamp (or one of the special values above). `read_committed`
  // (Kafka's rule): latest is the last stable offset, and a timestamp lookup (max
  // timestamp included) finding an offset at or past it finds none (-1, -1).
  OffsetLookup ListOffset(int64_t timestamp, bool read_committed = false) const;
  // The last stable offset: the first offset of the earliest ongoing transaction (never
  // below the log start), else the high watermark. Lock-free.
  int64_t LastStableOffset() const;
  // DeleteRecords: moves the log start offset up to `offset` (-1 = the high watermark).
  // OFFSET_OUT_OF_RANGE when above the high watermark. Returns the new log start offset.
  StatusOr<int64_t> DeleteRecordsBefore(int64_t offset, protocol::ErrorCode* error);
  // Removes everything at and after `offset` (replication truncation).
  Status TruncateTo(int64_t offset);

  // Whether an I/O error took the log offline (see Append), and why.
  bool offline() const { return failed_.load(); }
  std::string offline_reason() const;

  // Flushes every segment up to the current end; concurrent callers share the fdatasync.
  // A failure takes the log offline.
  Status Flush();
  // Flushes when flush.ms has passed since the last flush and there is unflushed data.
  Status MaybeTimedFlush();
  // Flushes up to `offset` if not already (a rolled segment in the background).
  Status FlushUpTo(int64_t offset);
  // Flushes that reached the disk (each one fdatasync per unflushed segment): with group
  // commit, fewer than the appends that waited for them.
  uint64_t flush_count() const { return flush_count_.load(); }

  // Retention: removes whole non-active segments past retention.ms / retention.bytes or
  // wholly below the log start offset. Deleted segments are renamed *.deleted and returned
  // for later unlinking (file.delete.delay.ms). Returns how many were removed.
  // When every segment is past retention.ms, the active one is rolled first so it can go.
  int DeleteOldSegments(std::vector<std::shared_ptr<Segment>>* to_unlink);

  // For the cleaner: a snapshot of the segments (oldest first), the active one last.
  std::vector<std::shared_ptr<Segment>> Segments() const;
  // Swaps a non-active segment for its cleaned copy, crash-safely: `replacement` was opened
  // with suffix ".cleaned" at the same base offset and holds a subset of its batches (its
  // .txnindex, written by the cleaner, the aborted transactions that stay). Its
  // files are flushed and renamed ".swap", the old segment's renamed ".deleted" (returned in
  // to_unlink for later unlinking), then the swap files take the final names. A restart
  // finding "<base>.log.swap" finishes the swap; one finding ".cleaned" files drops them.
  // FailedPrecondition when `old_segment` is no longer a non-active segment of this log, the
  // log is closed, or it was truncated since the cleaner read `truncations()` (the cleaned
  // copy may then lack records that became the latest of their key).
  // As ReplaceSegment for a group of consecutive non-active segments replaced by one, named
  // after the first: every old one is renamed ".deleted" between the two steps. A restart
  // finding the ".swap" finishes it and drops old segments left inside its offsets.
  Status ReplaceSegments(const std::vector<std::shared_ptr<Segment>>& old_segments,
                         std::unique_ptr<Segment> replacement,
                         std::vector<std::shared_ptr<Segment>>* to_unlink,
                         uint64_t truncations_seen);
  Status ReplaceSegment(const std::shared_ptr<Segment>& old_segment,
                        std::unique_ptr<Segment> replacement,
                        std::vector<std::shared_ptr<Segment>>* to_unlink,
                        uint64_t truncations_seen);
  // How many times TruncateTo removed data.
  uint64_t truncations() const { return truncations_.load(); }
  // The cleaner's progress: offsets below it have been compacted (cleaner-offset-checkpoint).
  int64_t first_dirty_offset() const { return first_dirty_offset_.load(); }
  void set_first_dirty_offset(int64_t offset) { first_dirty_offset_.store(offset); }

  // A copy of a producer's state (nullopt when the log knows none), and how many it knows.
  std::optional<ProducerEntry> Producer(int64_t producer_id) const;
  // For the cleaner (Kafka's lastRecordsOfActiveProducers): for every producer the state
  // knows, the last offset of its last kept data batch (-1 when none, e.g. after a marker of
  // a new epoch) and its epoch; compaction keeps the batch holding it (or, with none, the
  // producer's marker of that epoch) so the producer state survives a rebuild.
  struct ProducerLastRecord {
    int64_t last_data_offset = -1;
    int16_t epoch = kNoProducerEpoch;
  };
  absl::flat_hash_map<int64_t, ProducerLastRecord> LastRecordsOfProducers() const;
  size_t ProducerCount() const;
  // DescribeProducers: every producer the log knows, in producer id order, read under the
  // append lock (so between two appends, never inside one).
  std::vector<ActiveProducer> ActiveProducers() const;
  // Forgets producers idle for producer.id.expiration.ms with no ongoing transaction;
  // returns how many. A snapshot's expired producers are dropped as it loads, too.
  int RemoveExpiredProducers();

  // A copy of the leader epoch entries.
  std::vector<EpochEntry> LeaderEpochs() const;
  // OffsetsForLeaderEpoch: (the largest known epoch <= `epoch`, where it ends), by the
  // rules of LeaderEpochCache::EndOffsetFor with the log end offset as the latest epoch's
  // end; (-1, -1), Kafka's UNDEFINED, when the log cannot say.
  std::pair<int32_t, int64_t> EndOffsetForEpoch(int32_t epoch) const;

  // Closes segments (trimming indexes) after a final flush. The log is unusable afterwards.
  // `sync` false: no fsync of any file (the caller syncs the whole file system, see
  // LogManager::Shutdown); the recovery point still moves to the end, so the caller must
  // sync before it checkpoints.
  Status Close(bool sync = true);
  // Closes and renames the directory for deletion; the caller removes it.
  StatusOr<std::string> MarkDeleted();

 private:
  explicit Log(LogOptions options);
  // Load and RebuildLeaderEpochs run inside Open, before any other thread can see the log,
  // so they fill the guarded members without the locks.
  // `fresh`: Open made the directory, so it holds nothing yet.
  Status Load(int64_t recovery_point, int64_t log_start_offset, bool clean_shutdown, bool fresh,
              LoadReport* report) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  Status RemoveLeftovers(LoadReport* report);
  Status RebuildLeaderEpochs() ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Rolls to a new active segment at the log end offset. Needs append_mu_.
  Status RollLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(append_mu_);
  bool ShouldRollLocked(const LogConfig& cfg, const Segment& active, int64_t append_bytes,
                        int64_t last_offset, int64_t max_timestamp) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(append_mu_);
  std::shared_ptr<Segment> ActiveSegment() const;
  std::vector<std::shared_ptr<Segment>> SegmentsFrom(int64_t offset) const;
  void Notify();
  // Takes the log offline (once; later calls keep the first reason) and logs why.
  void GoOffline(const Status& why);
  AppendResult Fail(protocol::ErrorCode code, std::string message, int batch_index = -1) const;
  // An append's write failed: KAFKA_STORAGE_ERROR, logged (rate-limited); offline when the
  // segment could not be cut back (DataLoss).
  AppendResult WriteFailed(const Status& written);
  // An append's write succeeded: says so once after failures.
  void WriteSucceeded();
  AppendResult AppendLocked(const LogConfig& cfg, std::span<uint8_t> records,
                            const std::vector<record::BatchView>& batches, int32_t leader_epoch,
                            AppendOrigin origin, int transaction_version, bool* needs_flush)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(append_mu_);
  // Checks the producers' batches of an append (offsets already assigned) into `plan`; an
  // error, or a duplicate's answer, in `*answer`. False when the append must not be written.
  bool CheckProducersLocked(const std::vector<record::BatchView>& batches, AppendOrigin origin,
                            int transaction_version, ProducerStateManager::AppendPlan* plan,
                            AppendResult* answer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(append_mu_);
  // The producer state at load or after a truncation: snapshots above the log end are
  // deleted, then the latest good one is loaded (a damaged one is noted in `notes`, deleted,
  // and the next older one tried); unless `snapshot_is_state` (a clean start), the batch
  // headers after it (or after the log start) are replayed.
  Status LoadProducerStateLocked(bool snapshot_is_state, std::vector<std::string>* notes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(append_mu_);
  // Applies a batch already in `segment` to the producer state (ReplayBatch); an abort it
  // completes is added to the segment's transaction index unless already there.
  Status ReplayLocked(const ProducerBatchHeader& batch,
                      const std::optional<record::EndTxnMarker>& marker, Segment& segment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(append_mu_);
  // Writes <offset>.snapshot of the current state (temp + rename; fsynced when `sync`).
  Status WriteProducerSnapshotLocked(int64_t offset, bool sync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(append_mu_);
  // Deletes the snapshots below `offset` (their segments are gone).
  void DeleteProducerSnapshotsBelowLocked(int64_t offset) ABSL_EXCLUSIVE_LOCKS_REQUIRED(append_mu_);
  // Writes the index entries of the transactions an append's markers aborted (in the
  // active segment, where the markers went), then publishes the first unstable offset.
  // `completed` as the plan had them, the producer state already committed.
  Status IndexCompletedTxnsLocked(const std::vector<CompletedTxn>& completed, Segment& segment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(append_mu_);
  // Adds the aborted transactions overlapping [fetch_offset, upper_bound) to `out`.
  void CollectAbortedTxns(int64_t fetch_offset, int64_t upper_bound,
                          std::vector<AbortedTxn>* out) const;
  int32_t EpochForOffset(int64_t offset) const;
  OffsetLookup LookupMaxTimestamp() const;
  OffsetLookup LookupTimestamp(int64_t timestamp) const;

  LogOptions options_;
  std::string topic_id_;
  std::atomic<bool> metadata_synced_{true};
  Mutex metadata_sync_mu_;

  mutable Mutex config_mu_;
  LogConfig config_ ABSL_GUARDED_BY(config_mu_);

  // One writer at a time; also held by roll, truncation, retention and segment swaps.
  mutable Mutex append_mu_;
  // Guards segments_ (readers copy what they need and let go).
  mutable Mutex segments_mu_;
  std::map<int64_t, std::shared_ptr<Segment>> segments_ ABSL_GUARDED_BY(segments_mu_);

  std::atomic<int64_t> log_end_offset_{0};
  // producers_.FirstUnstableOffset(), for lock-free readers of the last stable offset; set
  // before log_end_offset_ moves (readers load the end first).
  std::atomic<int64_t> first_unstable_offset_{-1};
  std::atomic<int64_t> log_start_offset_{0};
  std::atomic<int64_t> recovery_point_{0};
  std::atomic<int64_t> first_dirty_offset_{0};
  std::atomic<int64_t> appended_messages_{0};
  std::atomic<int64_t> last_flush_ms_{0};
  std::atomic<bool> failed_{false};  // an I/O error left the log unsafe to append to
  mutable Mutex failed_mu_;
  std::string failed_reason_ ABSL_GUARDED_BY(failed_mu_);
  // Appends whose write failed since the last that succeeded, and when that was last logged.
  static constexpr int64_t kWriteErrorLogIntervalMs = 10000;
  std::atomic<int64_t> write_failures_{0};
  std::atomic<int64_t> last_write_error_log_ms_{INT64_MIN / 2};
  std::atomic<uint64_t> truncations_{0};
  std::atomic<uint64_t> flush_count_{0};

  // Serializes flushes; the second of two concurrent flushers usually finds its data
  // already flushed by the first (group commit).
  Mutex flush_mu_;
  std::atomic<int64_t> flushed_messages_snapshot_{0};  // appended_messages_ at the last flush

  mutable Mutex epochs_mu_;
  std::optional<LeaderEpochCache> epochs_ ABSL_GUARDED_BY(epochs_mu_);
  bool closed_ ABSL_GUARDED_BY(append_mu_) = false;
  ProducerStateManager producers_ ABSL_GUARDED_BY(append_mu_);
  // The offsets of the producer snapshot files in the directory.
  std::set<int64_t> producer_snapshots_ ABSL_GUARDED_BY(append_mu_);
  std::set<int64_t> swapped_bases_;  // segments whose swap was finished at load
};

}  // namespace runnel::storaged
