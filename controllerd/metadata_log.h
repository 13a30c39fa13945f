// The seam between the controller and the storage of its metadata log.
//
// Today one implementation, LocalMetadataLog: a single voter's log on local disk where an
// append is committed once it is fsync'ed. The Raft issue replaces it with a replicated log
// whose Append returns once a quorum has the entry; the controller does not change.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "common/util/status.h"
#include "controllerd/log_format.h"
#include "proto/runnel/metadata.pb.h"

namespace runnel::controllerd {

using logformat::SnapshotId;

struct LogEntry {
  int64_t offset = 0;
  int64_t term = 0;
  metadata::MetadataRecordBatch batch;
};

struct Snapshot {
  SnapshotId id;                        // the image covers every entry < id.end_offset
  metadata::MetadataRecordBatch image;  // the whole state, as records
};

// Not thread-safe: the controller calls it under its own lock.
class MetadataLog {
 public:
  virtual ~MetadataLog() = default;

  // The snapshot to start from (the newest valid one), or nullopt when there is none and
  // the log starts at offset 0.
  virtual StatusOr<std::optional<Snapshot>> LatestSnapshot() = 0;

  // Calls `fn` for every entry with offset >= `from`, in offset order; stops at the first
  // error `fn` returns. OutOfRange when `from` < StartOffset().
  virtual Status Read(int64_t from, const std::function<Status(const LogEntry&)>& fn) = 0;

  // Appends `batch` as one entry in `term`; returns its offset once the entry is committed
  // (durable). After a storage failure every later Append fails too: the log may hold a
  // partial entry and only a restart (which truncates it) can go on.
  virtual StatusOr<int64_t> Append(int64_t term, const metadata::MetadataRecordBatch& batch) = 0;

  // Stores `image`, the state after every entry < id.end_offset; id.end_offset must be
  // EndOffset(). Entries no snapshot needs any more may then be dropped.
  virtual Status WriteSnapshot(SnapshotId id, const metadata::MetadataRecordBatch& image) = 0;

  // The oldest offset Read() can start from.
  virtual int64_t StartOffset() const = 0;
  // The offset the next Append() gets (one past the last entry).
  virtual int64_t EndOffset() const = 0;
  // The term of the last entry (or of the latest snapshot when no entry follows it); 0 if none.
  virtual int64_t LastTerm() const = 0;
  // Bytes of entries appended after the latest snapshot.
  virtual uint64_t BytesSinceSnapshot() const = 0;

  virtual Status Close() = 0;
};

}  // namespace runnel::controllerd
