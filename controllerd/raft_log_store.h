// The controller's Raft log on local disk: raft::Storage over the FileSystem seam.
//
// It keeps the directory and format (log_format.h) the single voter wrote before the quorum,
// so such a data dir opens unchanged:
//
//   <metadata.log.dir>/__cluster_metadata-0/
//     <20-digit base>.log                    segments of frames [len][crc][offset][term][data]
//     <20-digit end>-<10-digit epoch>.checkpoint   a snapshot: one frame, payload = its bytes
//     quorum-state                           the term and vote (format below)
//     *.tmp                                  a file being written atomically; removed at Open
//
// An entry's data is the frame payload as it is (a serialized MetadataRecordBatch; the store
// never parses it).
//
// quorum-state, 20 bytes, integers big-endian, written with WriteFileAtomically:
//   +0   u32  crc        CRC32C of bytes [4, 20)
//   +4   u32  version    1
//   +8   i64  term
//   +16  i32  voted_for  -1 = none
// Any other size, version or crc is DataLoss at Open: a voter that forgot its vote could
// vote twice in one term. A missing file (a data dir of the single voter) stands for
// {term: the last entry's term or the snapshot epoch, voted_for: -1} and is written by Open.
//
// Durability. Append only writes; Sync fdatasyncs. TruncateFrom is durable on return (the
// file is cut and fdatasync'ed, removed segments are fsync'ed out of the directory): were the
// cut only durable at the next Sync, a crash after new appends could leave the new frames
// followed by the old, cut ones with a higher term -- a log no leader ever had. Snapshots
// are durable on return. Segments are removed newest first when the log is cut or discarded
// (so a crash leaves a prefix) and oldest first by retention (a suffix): never a gap.
//
// Open recovers (temp files removed; a torn or corrupt tail, a
// non-consecutive offset or a decreasing term cuts the log there; the newest intact
// snapshot the log can continue from is chosen, a corrupt one falls back to the previous;
// a gap no snapshot covers is DataLoss), and then checks the log against the chosen snapshot
// {E, epoch}: if the log ends before E, or holds entry E-1 with another term (a crash inside
// InstallSnapshot after the snapshot was written but before the conflicting log was
// removed), every segment is removed and the log continues at E.
//
// Single-voter data dirs (no quorum-state yet): the single voter named a snapshot after its
// current term, which may be above the term of entry E-1. Such a snapshot is renamed (same
// bytes) to {E, term of entry E-1}, which is what Raft means by its epoch, before
// quorum-state is first written; from then on a mismatch means a conflicting log.
//
// Guards: Append and InstallSnapshot refuse terms above the stored term (Raft stores a term
// before it takes entries of it, and Open refuses a quorum-state older than the log: a
// stale file); SetHardState refuses a term going back or a second vote in one term.
//
// Invariants after Open and every call: segments hold consecutive entries
// [start_offset(), end_offset()) with nondecreasing terms; the latest snapshot S has
// start_offset() <= S.end_offset <= end_offset(); the previous snapshot is kept with the
// log after it (a fallback when S turns out corrupt), except after InstallSnapshot
// discarded the log. Not thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "controllerd/file_system.h"
#include "controllerd/log_format.h"
#include "controllerd/raft/raft.h"

namespace runnel::controllerd {

// What Open found and repaired, for the log and for tests.
struct RecoveryReport {
  std::vector<std::string> skipped_snapshots;  // corrupt or unusable, newest first
  uint64_t truncated_bytes = 0;                // cut from the torn/corrupt tail
  std::vector<std::string> removed_files;      // segments after a corrupt point, temp files
  std::string truncation_reason;               // why the tail was cut ("" = not cut)
};

class RaftLogStore final : public raft::Storage {
 public:
  static constexpr std::string_view kQuorumStateFileName = "quorum-state";

  // Opens (creating if needed) <dir>/__cluster_metadata-0 and recovers it (see above).
  static StatusOr<std::unique_ptr<RaftLogStore>> Open(FileSystem& fs, const std::string& dir);
  ~RaftLogStore() override;

  raft::HardState hard_state() const override { return hard_state_; }
  Status SetHardState(const raft::HardState& state) override;

  raft::SnapshotId snapshot_id() const override { return latest_.value_or(raft::SnapshotId{0, 0}); }
  int64_t start_offset() const override { return start_offset_; }
  int64_t end_offset() const override { return end_offset_; }
  StatusOr<int64_t> TermAt(int64_t offset) const override;
  StatusOr<std::vector<raft::Entry>> Read(int64_t from, int64_t to,
                                          size_t max_bytes) const override;

  Status Append(std::span<const raft::Entry> entries) override;
  Status TruncateFrom(int64_t offset) override;
  Status Sync() override;

  Status SaveSnapshot(raft::SnapshotId id, std::string data) override;
  Status InstallSnapshot(raft::SnapshotId id, std::string data) override;
  StatusOr<std::string> ReadSnapshot() const override;

  // Closes the active segment; every later write fails. Unsynced appends stay unsynced.
  Status Close();

  // What Open found and repaired.
  const RecoveryReport& recovery() const { return report_; }
  // The directory holding the segments, snapshots and quorum-state.
  const std::string& partition_dir() const { return dir_; }
  // Bytes of frames of the entries at or after the latest snapshot's end (when to snapshot).
  uint64_t bytes_since_snapshot() const { return bytes_since_snapshot_; }

 private:
  struct EntryLoc {
    int64_t segment_base;
    uint64_t position;  // of the frame in the segment
    uint32_t size;      // of the whole frame
    int64_t term;
  };

  RaftLogStore(FileSystem& fs, std::string dir) : fs_(fs), dir_(std::move(dir)) {}

  Status Recover();
  Status ScanSegments(const std::vector<int64_t>& bases);
  StatusOr<bool> ReconcileLogWithSnapshot(bool legacy);
  StatusOr<raft::SnapshotId> RenameLegacySnapshot(raft::SnapshotId id, int64_t term);
  Status LoadHardState(bool present, int64_t seen_term);

  Status CheckWritable() const;
  // Records `st` as the sticky failure of a write to `path` and returns it.
  Status Fail(const std::string& path, const Status& st);
  Status SyncPending();
  Status StoreSnapshot(raft::SnapshotId id, const std::string& data, bool discard_log);
  Status RemoveSegmentSynced(int64_t base);
  Status OpenActive(int64_t base);
  void RecountBytesSinceSnapshot();
  int64_t LastTerm() const;
  StatusOr<std::string> LoadSnapshotPayload(raft::SnapshotId id) const;

  std::string PathOf(std::string_view name) const;
  std::string SegmentPath(int64_t base) const;

  FileSystem& fs_;
  std::string dir_;
  std::vector<int64_t> segments_;  // base offsets, ascending; the last one is active
  std::vector<EntryLoc> entries_;  // entries_[i] is offset start_offset_ + i
  std::unique_ptr<AppendFile> active_;
  std::optional<raft::SnapshotId> latest_;
  std::optional<raft::SnapshotId> previous_;
  int64_t start_offset_ = 0;
  int64_t end_offset_ = 0;
  raft::HardState hard_state_;
  bool unsynced_ = false;  // appends not yet fdatasync'ed
  uint64_t bytes_since_snapshot_ = 0;
  Status failed_;  // sticky: the first write failure
  bool closed_ = false;
  RecoveryReport report_;
};

}  // namespace runnel::controllerd
