// A segment's two sparse indexes, in Kafka's file formats. Both are arrays of fixed-size
// big-endian entries sorted by offset:
//
//   <base>.index       8-byte entries: relativeOffset int32, position int32
//                      (offset = base + relativeOffset is the LAST offset of the batch that
//                       starts at byte `position` of the .log file, as Kafka writes it; so a
//                       lookup of offset o gives a position at or before o's batch)
//   <base>.timeindex   12-byte entries: timestamp int64, relativeOffset int32
//                      (the largest timestamp seen so far in the segment, and the offset of
//                       the batch that carried it)
//
// No index is memory-mapped: a node holds 100,000 partitions and more, and two maps per
// partition would reach `vm.max_map_count` (65,530 by default) at about 32,000. An index is
// in one of two states:
//   - in memory (the active segment's, or one being rebuilt or truncated): its entries are
//     on the heap, appended and searched there; the file receives them in one write at
//     Flush, TrimToValidSize or Seal (roll, close). The file may lag behind until then; an
//     active segment is recovered from its .log after an unclean stop anyway.
//   - on disk (every rolled segment's): only the entry count and the last entry stay in
//     memory; a lookup reads the entries it probes with pread through the FileCache, so
//     descriptors stay bounded by `runnel.storage.max.open.files` and memory by what is
//     active, whatever the number of segments.
// Any change (append, truncate, reset, resize) brings an on-disk index into memory first.
//
// An index is a cache of the .log: it is rebuilt from the log whenever it is missing,
// fails its sanity check, or its segment is recovered after an unclean stop.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/util/mutex.h"
#include "common/util/status.h"
#include "storaged/log/file_cache.h"

namespace runnel::storaged {

struct OffsetPosition {
  int64_t offset = 0;
  int32_t position = 0;
};

struct TimestampOffset {
  int64_t timestamp = -1;
  int64_t offset = 0;
};

// What both index files share: loading and checking the file, the two states (in memory,
// on disk), writing entries back, trim, resize, rename, delete.
//
// Threads: every method may be called from any thread; the index's own lock makes lookups
// safe beside one appender and beside a roll that moves the entries to disk. On-disk lookups
// read the file outside the lock. Renames and deletes may race with such a read: the read
// then finds another file (inode check) or none and the lookup answers the segment's start,
// which is always a correct lower bound.
class IndexFile {
 public:
  ~IndexFile();
  IndexFile(const IndexFile&) = delete;
  IndexFile& operator=(const IndexFile&) = delete;

  std::string path() const;
  int64_t base_offset() const { return base_offset_; }
  int entries() const { return entries_.load(std::memory_order_acquire); }
  int max_entries() const { return max_entries_.load(std::memory_order_acquire); }
  bool IsFull() const { return entries() >= max_entries(); }
  // Bytes of the file once written and trimmed.
  int64_t SizeInBytes() const { return int64_t{entries()} * entry_size_; }
  // Whether the entries are on the heap (see the file comment).
  bool InMemory() const;

  // Writes the entries, cuts the file to them, drops them from memory and stops taking
  // entries (on roll and close).
  Status TrimToValidSize();
  // Brings the entries into memory and lets the index grow to `max_index_bytes` again (when
  // a segment becomes active again, or before a rebuild). Never drops entries.
  Status Resize(int32_t max_index_bytes);
  // Writes the entries not yet in the file (and cuts entries dropped since), then
  // fdatasync. Entries stay where they are.
  Status Flush();
  // Removes every entry.
  void Reset();
  Status RenameTo(const std::string& new_path);
  // Drops the entries and unlinks the file.
  Status Delete();

 protected:
  // Says whether the entry at `next` may follow the one at `prev` (the file's order).
  using FollowsFn = bool (*)(const uint8_t* prev, const uint8_t* next);
  // Renders entry bytes for an error message.
  using DescribeFn = std::string (*)(const uint8_t* entry);

  IndexFile(std::string path, int64_t base_offset, int entry_size, FileCache* files,
            FollowsFn follows, DescribeFn describe);
  // Reads the file at path_ (created when missing). The entries are the longest prefix of
  // slots in `follows` order; a file holding nothing but zeros has none (an index that
  // Kafka or an older Runnel preallocated and never trimmed). What follows the entries must
  // be zeros, else SanityCheck reports it. `in_memory` keeps the entries on the heap, with
  // room for max_index_bytes (rounded down to whole entries); else only the count and the
  // last entry are kept.
  Status Load(int32_t max_index_bytes, bool in_memory);

  // An entry's bytes: entry_size() of them (at most kMaxEntrySize).
  static constexpr int kMaxEntrySize = 12;
  struct Entry {
    int slot = -1;  // -1: none
    uint8_t bytes[kMaxEntrySize] = {};
  };
  // The last entry (slot -1 when empty).
  Entry Last() const;
  // Entry i (i < entries()); nullopt when the file cannot be read.
  std::optional<Entry> At(int i) const;
  // The last entry for which `below` holds, where `below` holds for a prefix of the entries
  // (slot -1 when it holds for none); nullopt when the file cannot be read.
  std::optional<Entry> LastWhere(const std::function<bool(const uint8_t*)>& below) const;
  // Appends one entry; the caller has checked it follows the last one (there is one appender).
  Status AppendEntry(const uint8_t* entry);
  // Drops every entry from the first for which `keep` does not hold (`keep` holds for a
  // prefix).
  Status DropFrom(const std::function<bool(const uint8_t*)>& keep);
  // The load's verdict: DataLoss when the file size is not whole entries, or non-zero data
  // follows the entries.
  Status LoadStatus() const;

 private:
  // Brings the entries into memory (from the file) with room for max_entries_.
  Status BringIntoMemoryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The file through the cache, checked to be the one this index knows (its inode); with
  // `create`, a file removed under the index is made again and takes every entry anew.
  StatusOr<std::shared_ptr<FileHandle>> OpenLocked(bool create) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the entries the file lacks and cuts what it holds past them.
  Status WriteBackLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets the entry count and the kept last entry from memory_.
  void SetEntriesLocked(int n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The file for an on-disk read outside the lock: the handle when path_ still names the
  // file Load read (same inode), else nullptr.
  std::shared_ptr<FileHandle> FileForRead() const;

  const int64_t base_offset_;
  const int entry_size_;
  FileCache* const files_;
  const FollowsFn follows_;
  const DescribeFn describe_;
  mutable Mutex mu_;
  std::string path_ ABSL_GUARDED_BY(mu_);
  uint64_t inode_ ABSL_GUARDED_BY(mu_) = 0;
  // The entries while in memory (entries() of them are real); empty on disk.
  std::vector<uint8_t> memory_ ABSL_GUARDED_BY(mu_);
  bool in_memory_ ABSL_GUARDED_BY(mu_) = false;
  // The last entry, kept in both states.
  Entry last_ ABSL_GUARDED_BY(mu_);
  // Leading entries known to be in the file as they are in memory.
  int written_entries_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t file_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Status load_status_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> entries_{0};
  std::atomic<int> max_entries_{0};
};

class OffsetIndex final : public IndexFile {
 public:
  static constexpr int kEntrySize = 8;
  // Opens the index at `path`, creating it when missing. `writable` keeps it in memory and
  // lets it grow to max_index_bytes.
  static StatusOr<std::unique_ptr<OffsetIndex>> Open(const std::string& path, int64_t base_offset,
                                                     int32_t max_index_bytes, bool writable,
                                                     FileCache* files);

  // The entry with the largest offset <= `offset`; {base_offset, 0} when there is none (or
  // the file cannot be read).
  OffsetPosition Lookup(int64_t offset) const;
  // The last entry with position <= max_position and offset < below_offset; nullopt when
  // none (or the file cannot be read).
  std::optional<OffsetPosition> LastWithin(int64_t max_position, int64_t below_offset) const;
  // Entry i (i < entries()); {base_offset, 0} when the file cannot be read.
  OffsetPosition EntryAt(int i) const;
  OffsetPosition LastEntry() const;  // {base_offset, 0} when empty
  // Adds an entry; `offset` must be above the last entry's and `position` too. Fails
  // (FailedPrecondition) when full or out of order, OutOfRange when `offset` - base does not
  // fit the 32-bit relative offset (the segment must roll first).
  Status Append(int64_t offset, int32_t position);
  // Drops every entry with offset >= `offset`.
  Status TruncateTo(int64_t offset);
  // Checks what Load found and the first entry; DataLoss saying what is wrong.
  Status SanityCheck() const;

 private:
  using IndexFile::IndexFile;
};

class TimeIndex final : public IndexFile {
 public:
  static constexpr int kEntrySize = 12;
  static StatusOr<std::unique_ptr<TimeIndex>> Open(const std::string& path, int64_t base_offset,
                                                   int32_t max_index_bytes, bool writable,
                                                   FileCache* files);

  // The entry with the largest timestamp <= `timestamp`; {-1, base_offset} when none (or the
  // file cannot be read).
  TimestampOffset Lookup(int64_t timestamp) const;
  TimestampOffset EntryAt(int i) const;
  TimestampOffset LastEntry() const;  // {-1, base_offset} when empty
  // Adds an entry when `timestamp` is above the last entry's (else does nothing, checks
  // nothing and returns OK); `offset` must not go below the last entry's. Fails
  // (FailedPrecondition) when no slot is left or `offset` goes backwards, OutOfRange when it is
  // below the base or too far above it for a relative offset. As in Kafka, a segment treats its
  // time index as full one slot early (IsAlmostFull), keeping the last slot for the entry written
  // when the segment rolls.
  Status MaybeAppend(int64_t timestamp, int64_t offset);
  bool IsAlmostFull() const { return entries() >= max_entries() - 1; }
  // Drops every entry with offset >= `offset`.
  Status TruncateTo(int64_t offset);
  Status SanityCheck() const;

 private:
  using IndexFile::IndexFile;
};

}  // namespace runnel::storaged
