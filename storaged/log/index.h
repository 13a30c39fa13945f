// A segment's two sparse indexes, in Kafka's file formats. Both are arrays of fixed-size
// big-endian entries sorted by offset, memory-mapped, preallocated to `segment.index.bytes`
// (rounded down to whole entries) while the segment is active and trimmed to their entries
// when it rolls or the log closes:
//
//   <base>.index       8-byte entries: relativeOffset int32, position int32
//                      (offset = base + relativeOffset is the LAST offset of the batch that
//                       starts at byte `position` of the .log file, as Kafka writes it; so a
//                       lookup of offset o gives a position at or before o's batch)
//   <base>.timeindex   12-byte entries: timestamp int64, relativeOffset int32
//                      (the largest timestamp seen so far in the segment, and the offset of
//                       the batch that carried it)
//
// An index is a cache of the .log: it is rebuilt from the log whenever it is missing,
// fails its sanity check, or its segment is recovered after an unclean stop.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/util/status.h"

namespace runnel::storaged {

struct OffsetPosition {
  int64_t offset = 0;
  int32_t position = 0;
};

struct TimestampOffset {
  int64_t timestamp = -1;
  int64_t offset = 0;
};

// Shared mapping logic of both index files: open/create, preallocate, mmap, trim, resize,
// rename, delete. The file descriptor is closed once mapped. Invariant: every mapped slot
// after the entries is zero (so a preallocated file reopened after an unclean stop shows
// where its entries end).
//
// Threads: lookups may run concurrently with one appender (an entry is written before the
// count that publishes it); every other change (truncate, reset, trim, resize, rename,
// delete) needs the index to itself.
class IndexFile {
 public:
  ~IndexFile();
  IndexFile(const IndexFile&) = delete;
  IndexFile& operator=(const IndexFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t base_offset() const { return base_offset_; }
  int entries() const { return entries_.load(std::memory_order_acquire); }
  int max_entries() const { return max_entries_; }
  bool IsFull() const { return entries() >= max_entries_; }
  // Bytes of the file if trimmed now.
  int64_t SizeInBytes() const { return int64_t{entries()} * entry_size_; }

  // Trims the file to its entries and remaps read-only-sized (on roll and close).
  Status TrimToValidSize();
  // Re-grows a trimmed index to `max_index_bytes` so it can take entries again (when a
  // segment becomes active again after truncation). Never drops entries: the file keeps at
  // least SizeInBytes().
  Status Resize(int32_t max_index_bytes);
  // msync of the mapping.
  Status Flush();
  // Removes every entry (the file keeps its size).
  void Reset();
  Status RenameTo(const std::string& new_path);
  // Unmaps and unlinks the file.
  Status Delete();

 protected:
  // Says whether the entry at `next` may follow the one at `prev` (the file's order).
  using FollowsFn = bool (*)(const uint8_t* prev, const uint8_t* next);

  IndexFile(std::string path, int64_t base_offset, int entry_size);
  // Maps the file at path_, creating it when missing. entries_ is set to the longest prefix
  // of slots in `follows` order; a file that holds nothing but zeros has no entries (an
  // index preallocated and never trimmed, after an unclean stop). When `writable`, a file
  // smaller than max_index_bytes (rounded down to whole entries) is grown to it; a file
  // whose size is not whole entries is left as it is for SanityCheck to report.
  Status Map(int32_t max_index_bytes, bool writable, FollowsFn follows);
  uint8_t* Slot(int i) const { return data_ + size_t(i) * entry_size_; }
  // Publishes a new entry count (after the entries' bytes are written).
  void set_entries(int n) { entries_.store(n, std::memory_order_release); }
  int64_t file_bytes() const { return file_bytes_; }
  // The first mapped slot at or after `from` holding a non-zero byte; -1 when none.
  int FirstNonZeroSlot(int from) const;
  bool SlotIsZero(int i) const;
  // DataLoss when the file size is not whole entries, or a non-zero slot follows the
  // entries; `describe(i)` renders the entry in slot i for the message.
  Status CheckSizeAndTail(std::string (*describe)(const IndexFile&, int)) const;
  // Zeroes slots [from, entries_) and makes `from` the entry count, keeping the invariant
  // that every slot after the entries is zero.
  void DropEntriesFrom(int from);

 private:
  Status Unmap();
  // Resizes the file to `bytes` and maps it again.
  Status Remap(int64_t bytes);
  // Maps `bytes` of `fd`, replacing the current mapping (kept when mapping fails).
  Status MapFd(int fd, int64_t bytes);
  std::string path_;
  int64_t base_offset_;
  int entry_size_;
  uint8_t* data_ = nullptr;
  size_t mapped_bytes_ = 0;
  int64_t file_bytes_ = 0;
  int on_disk_slots_ = 0;  // whole slots the file held when Map opened it
  std::atomic<int> entries_{0};
  int max_entries_ = 0;
};

class OffsetIndex final : public IndexFile {
 public:
  static constexpr int kEntrySize = 8;
  // Opens the index at `path`, creating it when missing. `writable` preallocates for appends.
  static StatusOr<std::unique_ptr<OffsetIndex>> Open(const std::string& path, int64_t base_offset,
                                                     int32_t max_index_bytes, bool writable);

  // The entry with the largest offset <= `offset`; {base_offset, 0} when there is none.
  OffsetPosition Lookup(int64_t offset) const;
  OffsetPosition EntryAt(int i) const;
  OffsetPosition LastEntry() const;  // {base_offset, 0} when empty
  // Adds an entry; `offset` must be above the last entry's and `position` too. Fails
  // (FailedPrecondition) when full or out of order, OutOfRange when `offset` - base does not
  // fit the 32-bit relative offset (the segment must roll first).
  Status Append(int64_t offset, int32_t position);
  // Drops every entry with offset >= `offset`.
  void TruncateTo(int64_t offset);
  // Checks order and the range of relative offsets; DataLoss saying what is wrong.
  Status SanityCheck() const;

 private:
  using IndexFile::IndexFile;
};

class TimeIndex final : public IndexFile {
 public:
  static constexpr int kEntrySize = 12;
  static StatusOr<std::unique_ptr<TimeIndex>> Open(const std::string& path, int64_t base_offset,
                                                   int32_t max_index_bytes, bool writable);

  // The entry with the largest timestamp <= `timestamp`; {-1, base_offset} when none.
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
  void TruncateTo(int64_t offset);
  Status SanityCheck() const;

 private:
  using IndexFile::IndexFile;
};

}  // namespace runnel::storaged
