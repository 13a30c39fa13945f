// The single voter's metadata log on local disk (format: log_format.h).
//
// Invariants after Open:
// - segments hold consecutive offsets [StartOffset(), EndOffset()) with no gap;
// - the newest valid snapshot S has StartOffset() <= S.end_offset <= EndOffset();
// - the previous snapshot is kept with the log after it, so a snapshot found corrupt at the
//   next start can be skipped for the older one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "controllerd/file_system.h"
#include "controllerd/metadata_log.h"

namespace runnel::controllerd {

// What Open found and repaired, for the log and for tests.
struct RecoveryReport {
  std::vector<std::string> skipped_snapshots;  // corrupt or unusable, newest first
  uint64_t truncated_bytes = 0;                // cut from the torn/corrupt tail
  std::vector<std::string> removed_files;      // segments after a corrupt point, temp files
  std::string truncation_reason;               // why the tail was cut ("" = not cut)
};

class LocalMetadataLog final : public MetadataLog {
 public:
  // Opens (creating if needed) <dir>/__cluster_metadata-0, recovers as described in
  // log_format.h, and is ready to append. An unrecoverable state (a gap in the log no
  // snapshot covers) is an error naming the files.
  static StatusOr<std::unique_ptr<LocalMetadataLog>> Open(FileSystem& fs, const std::string& dir);
  ~LocalMetadataLog() override;

  StatusOr<std::optional<Snapshot>> LatestSnapshot() override;
  Status Read(int64_t from, const std::function<Status(const LogEntry&)>& fn) override;
  StatusOr<int64_t> Append(int64_t term, const metadata::MetadataRecordBatch& batch) override;
  Status WriteSnapshot(SnapshotId id, const metadata::MetadataRecordBatch& image) override;
  int64_t StartOffset() const override { return start_offset_; }
  int64_t EndOffset() const override { return end_offset_; }
  int64_t LastTerm() const override { return last_term_; }
  uint64_t BytesSinceSnapshot() const override { return bytes_since_snapshot_; }
  Status Close() override;

  const RecoveryReport& recovery() const { return report_; }
  // The directory holding the segments and snapshots.
  const std::string& partition_dir() const { return dir_; }

 private:
  struct EntryLoc {
    int64_t offset;
    int64_t segment_base;
    uint64_t position;
    uint32_t size;
  };

  LocalMetadataLog(FileSystem& fs, std::string dir) : fs_(fs), dir_(std::move(dir)) {}
  Status Recover();
  Status OpenActiveSegment(int64_t base);
  std::string PathOf(const std::string& name) const { return dir_ + "/" + name; }

  FileSystem& fs_;
  std::string dir_;
  std::vector<int64_t> segments_;  // base offsets, ascending; the last one is active
  std::vector<EntryLoc> entries_;  // every entry in segments_, ascending
  std::unique_ptr<AppendFile> active_;
  std::optional<SnapshotId> latest_snapshot_;
  std::optional<SnapshotId> previous_snapshot_;
  int64_t start_offset_ = 0;
  int64_t end_offset_ = 0;
  int64_t last_term_ = 0;
  uint64_t bytes_since_snapshot_ = 0;
  Status failed_;  // sticky storage failure of an append
  RecoveryReport report_;
};

}  // namespace runnel::controllerd
