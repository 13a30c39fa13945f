// A segment's transaction index, <20-digit base offset>.txnindex: the transactions aborted
// by a marker written to that segment, so that a read_committed fetch learns which records
// to drop without reading the log (Kafka's TransactionIndex, same file format: aborted_txn.h).
//
// As in Kafka the file exists only once its segment holds an aborted transaction. Entries
// live on the heap as well (aborts are rare; a committed transaction writes none). The file
// is written on each abort and synced with its segment's log (Segment::Flush); an unclean
// start re-adds what the producer state replay finds missing (Log::Load).
//
// Threads: appends come under the log's append lock; reads (Collect) take the index's
// own lock, so a read_committed fetch never waits for the disk.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/util/mutex.h"
#include "common/util/status.h"
#include "storaged/log/aborted_txn.h"

namespace runnel::storaged {

class TxnIndex {
 public:
  // The index at `path`, loaded when the file exists (empty otherwise); a damaged file is
  // kDataLoss (the caller deletes it and rebuilds it by a replay).
  static StatusOr<std::unique_ptr<TxnIndex>> Open(const std::string& path);

  // Adds an entry (its lastOffset must exceed the last entry's: kFailedPrecondition
  // otherwise), writing it to the file, made if needed. Nothing changes on a write error.
  Status Append(const AbortedTxn& txn);
  // Adds to `out` the entries of transactions overlapping [fetch_offset, upper_bound)
  // (lastOffset >= fetch_offset and firstOffset < upper_bound). True when no later segment
  // can hold one (an entry's lastStableOffset reached upper_bound), as Kafka's
  // collectAbortedTxns says.
  bool Collect(int64_t fetch_offset, int64_t upper_bound, std::vector<AbortedTxn>* out) const;
  // Drops the entries whose marker is at or after `offset` and rewrites the file (removed
  // when none is left).
  Status TruncateTo(int64_t offset);
  // fdatasync of the file when written since the last one.
  Status Flush();
  // Renames the file (if any) and uses the new name from now on.
  Status RenameTo(std::string path);
  // Unlinks the file (if any).
  Status Delete();

  std::vector<AbortedTxn> entries() const;
  bool empty() const;
  // The lastOffset of the last entry; -1 when empty.
  int64_t last_offset() const;
  std::string path() const;

 private:
  explicit TxnIndex(std::string path) : path_(std::move(path)) {}
  // Writes every entry from `from` at its place in the file (truncating it to them).
  Status WriteFromLocked(size_t from, size_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable Mutex mu_;
  std::string path_ ABSL_GUARDED_BY(mu_);
  std::vector<AbortedTxn> entries_ ABSL_GUARDED_BY(mu_);
  bool unsynced_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace runnel::storaged
