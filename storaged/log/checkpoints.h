// The small metadata files beside the segments, in Kafka's text formats. Every write is
// durable: temp file, fsync, rename, fsync of the directory (WriteFileDurably). A file that
// does not parse is reported as DataLoss naming the file and line; callers decide whether
// to rebuild (leader epochs can be rebuilt from the batches) or start from zero.
//
//   leader-epoch-checkpoint (per partition)     partition.metadata (per partition)
//     0                      version            version: 0
//     2                      entry count        topic_id: <22-char base64 topic id>
//     0 0                    epoch startOffset
//     3 1200
//
//   recovery-point-offset-checkpoint, log-start-offset-checkpoint,
//   cleaner-offset-checkpoint (per log dir)
//     0                      version
//     2                      entry count
//     orders 0 1500          topic partition offset
//     orders 1 1499
//
//   .kafka_cleanshutdown (per log dir): written last on a clean stop, removed at start.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/util/status.h"
#include "storaged/log/file_names.h"
#include "storaged/replication/epoch_history.h"

namespace runnel::storaged {

// The whole file; nullopt when it does not exist.
StatusOr<std::optional<std::string>> ReadWholeFile(const std::string& path);

// A per-log-dir "topic partition offset" file.
class OffsetCheckpointFile {
 public:
  explicit OffsetCheckpointFile(std::string path) : path_(std::move(path)) {}
  // A missing file reads as empty. DataLoss for a bad line or a partition listed twice.
  StatusOr<std::map<TopicPartition, int64_t>> Read() const;
  // InvalidArgument for a topic name Kafka would not allow (it could break the format).
  Status Write(const std::map<TopicPartition, int64_t>& offsets) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The partition's leader epochs and the first offset written in each, kept in memory (an
// EpochHistory: the pure rules, storaged/replication/epoch_history.h) and in
// leader-epoch-checkpoint. Epochs and start offsets only increase.
class LeaderEpochCache {
 public:
  // Loads the file (missing = empty). DataLoss when it does not parse or its entries do
  // not rise strictly in both epoch and start offset.
  static StatusOr<LeaderEpochCache> Load(const std::string& path);

  const std::vector<EpochEntry>& entries() const { return history_.entries(); }
  const EpochHistory& history() const { return history_; }
  std::optional<EpochEntry> Latest() const { return history_.Latest(); }
  // Records that `epoch` starts at `start_offset` (Kafka's rule): nothing changes when the
  // latest entry is this epoch starting at or before `start_offset`; otherwise every entry
  // at the end whose epoch is >= `epoch` or whose start offset is >= `start_offset` is
  // removed and the new entry added. So a newer epoch is appended, dropping older epochs
  // that claimed offsets from `start_offset` on; an older epoch (which the log only shows
  // when it was rewritten) replaces the later ones. Writes the file only when something
  // changed; on a write error the cache is left as it was. InvalidArgument for negatives.
  Status Assign(int32_t epoch, int64_t start_offset);
  // Removes entries with start offset >= `end_offset` (log truncated at end_offset).
  Status TruncateFromEnd(int64_t end_offset);
  // Log start moved to `start_offset`: entries wholly before it go, the one covering it is
  // moved up to start at it.
  Status TruncateFromStart(int64_t start_offset);
  // As OffsetsForLeaderEpoch answers (Kafka's rules): for the latest epoch, (epoch,
  // `log_end_offset`); for an older one, the largest known epoch <= `epoch` and the start
  // offset of the first epoch after it; for an epoch before every entry (removed with the
  // log start), (`epoch`, the first entry's start offset). nullopt (UNDEFINED_EPOCH and
  // UNDEFINED_EPOCH_OFFSET on the wire) when `epoch` is negative, the cache is empty, or
  // `epoch` is above the latest.
  std::optional<std::pair<int32_t, int64_t>> EndOffsetFor(int32_t epoch,
                                                          int64_t log_end_offset) const {
    return history_.EndOffsetFor(epoch, log_end_offset);
  }
  // Replaces everything (used when rebuilding from the log) and writes the file.
  // InvalidArgument unless epochs and start offsets are non-negative and strictly rising.
  Status Reset(std::vector<EpochEntry> entries);

 private:
  Status Persist() const;
  // Applies `change` to the history and writes the file when it changed; on a write error
  // the history is left as it was.
  template <typename Change>
  Status Apply(Change change);
  std::string path_;
  EpochHistory history_;
};

// partition.metadata: the topic id (the base64 form used by Kafka tools). NotFound when the
// file is missing, DataLoss when it does not parse.
StatusOr<std::string> ReadPartitionMetadata(const std::string& path);
// `durable`: temp file, fsync, rename, fsync of the directory; else a plain write that the
// caller syncs later (a new partition's, see Log::SyncMetadata).
Status WritePartitionMetadata(const std::string& path, const std::string& topic_id_base64,
                              bool durable = true);

}  // namespace runnel::storaged
