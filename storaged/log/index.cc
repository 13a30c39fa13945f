#include "storaged/log/index.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/util/big_endian.h"

namespace runnel::storaged {
namespace {

// Lookups first search the last 8 KiB of entries, as Kafka does: appends and most reads
// touch only the tail, so its pages stay in memory while the rest of a large index may be
// paged out and a full binary search would fault on its way through.
constexpr int kWarmBytes = 8192;

std::string Errno(const char* what, const std::string& path) {
  return fmt::format("{} {}: {}", what, path, std::strerror(errno));
}

int32_t LoadInt32(const uint8_t* p) { return static_cast<int32_t>(LoadBigEndian32(p)); }
int64_t LoadInt64(const uint8_t* p) { return static_cast<int64_t>(LoadBigEndian64(p)); }
void StoreInt32(uint8_t* p, int32_t value) { StoreBigEndian(p, static_cast<uint32_t>(value), 4); }
void StoreInt64(uint8_t* p, int64_t value) { StoreBigEndian(p, static_cast<uint64_t>(value), 8); }

int64_t RoundDownToEntries(int64_t bytes, int entry_size) {
  return bytes <= 0 ? 0 : bytes / entry_size * entry_size;
}

// The slot with the largest key <= `target` among `entries` slots sorted by key; -1 when
// the first key is above `target`.
template <typename KeyFn>
int LargestLowerBound(int entries, int entry_size, int64_t target, KeyFn key) {
  if (entries == 0) return -1;
  auto search = [&](int lo, int hi) {
    while (lo < hi) {
      int mid = lo + (hi - lo + 1) / 2;
      if (key(mid) <= target) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  };
  int first_warm = std::max(0, entries - 1 - kWarmBytes / entry_size);
  if (key(first_warm) < target) return search(first_warm, entries - 1);
  if (key(0) > target) return -1;
  return search(0, first_warm);
}

// The first slot whose key is >= `target` (`entries` when none), keys non-decreasing.
template <typename KeyFn>
int FirstAtOrAbove(int entries, int64_t target, KeyFn key) {
  int lo = 0;
  int hi = entries;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (key(mid) < target) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Offset index slot: relativeOffset int32, position int32.
int32_t RelativeOffsetOf(const uint8_t* slot) { return LoadInt32(slot); }
int32_t PositionOf(const uint8_t* slot) { return LoadInt32(slot + 4); }

bool OffsetEntryFollows(const uint8_t* prev, const uint8_t* next) {
  return RelativeOffsetOf(next) > RelativeOffsetOf(prev) && PositionOf(next) > PositionOf(prev);
}

// Time index slot: timestamp int64, relativeOffset int32.
int64_t TimestampOf(const uint8_t* slot) { return LoadInt64(slot); }
int32_t TimeRelativeOffsetOf(const uint8_t* slot) { return LoadInt32(slot + 8); }

bool TimeEntryFollows(const uint8_t* prev, const uint8_t* next) {
  return TimestampOf(next) > TimestampOf(prev) &&
         TimeRelativeOffsetOf(next) >= TimeRelativeOffsetOf(prev);
}

// Checks that `offset` can be stored relative to `base_offset`.
Status CheckRelative(const std::string& path, int64_t base_offset, int64_t offset) {
  if (offset < base_offset || offset - base_offset > std::numeric_limits<int32_t>::max()) {
    return absl::OutOfRangeError(fmt::format(
        "{}: offset {} cannot be stored relative to base offset {}", path, offset, base_offset));
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------- IndexFile

IndexFile::IndexFile(std::string path, int64_t base_offset, int entry_size)
    : path_(std::move(path)), base_offset_(base_offset), entry_size_(entry_size) {}

IndexFile::~IndexFile() { (void)Unmap(); }

Status IndexFile::Map(int32_t max_index_bytes, bool writable, FollowsFn follows) {
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(Errno("open", path_));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status s = absl::InternalError(Errno("fstat", path_));
    ::close(fd);
    return s;
  }
  file_bytes_ = st.st_size;
  on_disk_slots_ = int(RoundDownToEntries(file_bytes_, entry_size_) / entry_size_);
  Status s = MapFd(fd, RoundDownToEntries(file_bytes_, entry_size_));
  if (!s.ok()) {
    ::close(fd);
    return s;
  }

  int n = 0;
  if (max_entries_ > 0) {
    n = 1;
    while (n < max_entries_ && follows(Slot(n - 1), Slot(n))) ++n;
    // A lone zero entry is real only in a trimmed one-entry file; in a larger file it is
    // preallocated space that was never written (a real first entry (base, 0) would say
    // nothing an empty index does not). Garbage after it is SanityCheck's business.
    if (n == 1 && max_entries_ > 1 && SlotIsZero(0)) n = 0;
  }
  set_entries(n);

  int64_t wanted = RoundDownToEntries(max_index_bytes, entry_size_);
  if (writable && file_bytes_ % entry_size_ == 0 && file_bytes_ < wanted) {
    if (::ftruncate(fd, wanted) != 0) {
      s = absl::InternalError(Errno("preallocate", path_));
    } else {
      file_bytes_ = wanted;
      s = MapFd(fd, wanted);
    }
  }
  ::close(fd);
  return s;
}

Status IndexFile::MapFd(int fd, int64_t bytes) {
  void* mapped = nullptr;
  if (bytes > 0) {
    mapped = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) return absl::InternalError(Errno("mmap", path_));
    // Entries are touched a page at a time, at the tail or by binary search: readahead
    // would fault in (and zero-fill) megabytes of the preallocated file around each page.
    (void)::madvise(mapped, static_cast<size_t>(bytes), MADV_RANDOM);
  }
  if (Status s = Unmap(); !s.ok()) {
    if (mapped != nullptr) ::munmap(mapped, static_cast<size_t>(bytes));
    return s;
  }
  data_ = static_cast<uint8_t*>(mapped);
  mapped_bytes_ = static_cast<size_t>(bytes);
  max_entries_ = static_cast<int>(bytes / entry_size_);
  return absl::OkStatus();
}

Status IndexFile::Unmap() {
  if (data_ != nullptr && ::munmap(data_, mapped_bytes_) != 0) {
    return absl::InternalError(Errno("munmap", path_));
  }
  data_ = nullptr;
  mapped_bytes_ = 0;
  max_entries_ = 0;
  return absl::OkStatus();
}

Status IndexFile::Remap(int64_t bytes) {
  int fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(Errno("open", path_));
  Status s;
  if (::ftruncate(fd, bytes) != 0) {
    s = absl::InternalError(Errno("resize", path_));
  } else {
    file_bytes_ = bytes;
    // Past the entries the file is ours now: zeros (dropped slots are zeroed).
    on_disk_slots_ = std::min<int64_t>(on_disk_slots_, entries());
    s = MapFd(fd, bytes);
    // The old mapping stays, but nothing past the new end of the file may be touched.
    if (!s.ok()) max_entries_ = std::min<int64_t>(max_entries_, bytes / entry_size_);
  }
  ::close(fd);
  return s;
}

Status IndexFile::TrimToValidSize() {
  if (file_bytes_ == SizeInBytes() && int64_t(mapped_bytes_) == file_bytes_) {
    return absl::OkStatus();
  }
  return Remap(SizeInBytes());
}

Status IndexFile::Resize(int32_t max_index_bytes) {
  return Remap(std::max(RoundDownToEntries(max_index_bytes, entry_size_), SizeInBytes()));
}

Status IndexFile::Flush() {
  if (data_ != nullptr && ::msync(data_, mapped_bytes_, MS_SYNC) != 0) {
    return absl::InternalError(Errno("msync", path_));
  }
  return absl::OkStatus();
}

void IndexFile::Reset() { DropEntriesFrom(0); }

Status IndexFile::RenameTo(const std::string& new_path) {
  if (::rename(path_.c_str(), new_path.c_str()) != 0) {
    return absl::InternalError(
        fmt::format("rename {} to {}: {}", path_, new_path, std::strerror(errno)));
  }
  path_ = new_path;
  return absl::OkStatus();
}

Status IndexFile::Delete() {
  RUNNEL_RETURN_IF_ERROR(Unmap());
  set_entries(0);
  file_bytes_ = 0;
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(Errno("unlink", path_));
  }
  return absl::OkStatus();
}

bool IndexFile::SlotIsZero(int i) const {
  const uint8_t* slot = Slot(i);
  for (int b = 0; b < entry_size_; ++b) {
    if (slot[b] != 0) return false;
  }
  return true;
}

int IndexFile::FirstNonZeroSlot(int from) const {
  // Slots past what the file held when opened were added by our own ftruncate: zeros by
  // definition, and not worth faulting in (a preallocated index is megabytes).
  int end = std::min(max_entries_, on_disk_slots_);
  for (int i = std::max(from, 0); i < end; ++i) {
    if (!SlotIsZero(i)) return i;
  }
  return -1;
}

Status IndexFile::CheckSizeAndTail(std::string (*describe)(const IndexFile&, int)) const {
  if (file_bytes_ % entry_size_ != 0) {
    return absl::DataLossError(fmt::format("{}: size {} is not a multiple of the entry size {}",
                                           path_, file_bytes_, entry_size_));
  }
  int n = entries();
  int bad = FirstNonZeroSlot(n);
  if (bad < 0) return absl::OkStatus();
  if (bad == n && n > 0) {
    return absl::DataLossError(
        fmt::format("{}: entries out of order: entry {} ({}) after entry {} ({})", path_, bad,
                    describe(*this, bad), n - 1, describe(*this, n - 1)));
  }
  return absl::DataLossError(fmt::format("{}: non-zero data in slot {} ({}) after the {} entries",
                                         path_, bad, describe(*this, bad), n));
}

void IndexFile::DropEntriesFrom(int from) {
  int n = entries();
  if (from >= n) return;
  from = std::max(from, 0);
  // Publish the smaller count before the slots go, so a concurrent reader never reads a
  // zeroed entry as a real one.
  set_entries(from);
  std::memset(Slot(from), 0, size_t(n - from) * entry_size_);
}

// ---------------------------------------------------------------- OffsetIndex

StatusOr<std::unique_ptr<OffsetIndex>> OffsetIndex::Open(const std::string& path,
                                                         int64_t base_offset,
                                                         int32_t max_index_bytes, bool writable) {
  std::unique_ptr<OffsetIndex> index(new OffsetIndex(path, base_offset, kEntrySize));
  RUNNEL_RETURN_IF_ERROR(index->Map(max_index_bytes, writable, &OffsetEntryFollows));
  return index;
}

OffsetPosition OffsetIndex::EntryAt(int i) const {
  const uint8_t* slot = Slot(i);
  return {base_offset() + RelativeOffsetOf(slot), PositionOf(slot)};
}

OffsetPosition OffsetIndex::LastEntry() const {
  int n = entries();
  return n == 0 ? OffsetPosition{base_offset(), 0} : EntryAt(n - 1);
}

OffsetPosition OffsetIndex::Lookup(int64_t offset) const {
  int slot = LargestLowerBound(entries(), kEntrySize, offset,
                               [this](int i) { return base_offset() + RelativeOffsetOf(Slot(i)); });
  return slot < 0 ? OffsetPosition{base_offset(), 0} : EntryAt(slot);
}

Status OffsetIndex::Append(int64_t offset, int32_t position) {
  int n = entries();
  if (n >= max_entries()) {
    return absl::FailedPreconditionError(
        fmt::format("{}: offset index is full ({} entries)", path(), n));
  }
  RUNNEL_RETURN_IF_ERROR(CheckRelative(path(), base_offset(), offset));
  if (position < 0) {
    return absl::InvalidArgumentError(
        fmt::format("{}: negative position {} for offset {}", path(), position, offset));
  }
  if (n > 0) {
    OffsetPosition last = EntryAt(n - 1);
    if (offset <= last.offset || position <= last.position) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: entry (offset {}, position {}) does not follow the last (offset {}, position {})",
          path(), offset, position, last.offset, last.position));
    }
  }
  uint8_t* slot = Slot(n);
  StoreInt32(slot, static_cast<int32_t>(offset - base_offset()));
  StoreInt32(slot + 4, position);
  set_entries(n + 1);
  return absl::OkStatus();
}

void OffsetIndex::TruncateTo(int64_t offset) {
  DropEntriesFrom(FirstAtOrAbove(
      entries(), offset, [this](int i) { return base_offset() + RelativeOffsetOf(Slot(i)); }));
}

Status OffsetIndex::SanityCheck() const {
  auto describe = [](const IndexFile& f, int i) {
    const auto& self = static_cast<const OffsetIndex&>(f);
    return fmt::format("offset {}, position {}", self.EntryAt(i).offset, self.EntryAt(i).position);
  };
  RUNNEL_RETURN_IF_ERROR(CheckSizeAndTail(describe));
  if (entries() > 0) {
    // Later entries are above the first: Map counts only entries in order.
    OffsetPosition first = EntryAt(0);
    if (first.offset < base_offset()) {
      return absl::DataLossError(fmt::format("{}: entry 0 has offset {} below the base offset {}",
                                             path(), first.offset, base_offset()));
    }
    if (first.position < 0) {
      return absl::DataLossError(
          fmt::format("{}: entry 0 has negative position {}", path(), first.position));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- TimeIndex

StatusOr<std::unique_ptr<TimeIndex>> TimeIndex::Open(const std::string& path, int64_t base_offset,
                                                     int32_t max_index_bytes, bool writable) {
  std::unique_ptr<TimeIndex> index(new TimeIndex(path, base_offset, kEntrySize));
  RUNNEL_RETURN_IF_ERROR(index->Map(max_index_bytes, writable, &TimeEntryFollows));
  return index;
}

TimestampOffset TimeIndex::EntryAt(int i) const {
  const uint8_t* slot = Slot(i);
  return {TimestampOf(slot), base_offset() + TimeRelativeOffsetOf(slot)};
}

TimestampOffset TimeIndex::LastEntry() const {
  int n = entries();
  return n == 0 ? TimestampOffset{-1, base_offset()} : EntryAt(n - 1);
}

TimestampOffset TimeIndex::Lookup(int64_t timestamp) const {
  int slot = LargestLowerBound(entries(), kEntrySize, timestamp,
                               [this](int i) { return TimestampOf(Slot(i)); });
  return slot < 0 ? TimestampOffset{-1, base_offset()} : EntryAt(slot);
}

Status TimeIndex::MaybeAppend(int64_t timestamp, int64_t offset) {
  int n = entries();
  TimestampOffset last = LastEntry();
  // Not a new maximum: nothing to write, so nothing to check.
  if (timestamp <= last.timestamp) return absl::OkStatus();
  if (n > 0 && offset < last.offset) {
    return absl::FailedPreconditionError(
        fmt::format("{}: offset {} (timestamp {}) is below the last entry's offset {}", path(),
                    offset, timestamp, last.offset));
  }
  if (n >= max_entries()) {
    return absl::FailedPreconditionError(
        fmt::format("{}: time index is full ({} entries)", path(), n));
  }
  RUNNEL_RETURN_IF_ERROR(CheckRelative(path(), base_offset(), offset));
  uint8_t* slot = Slot(n);
  StoreInt64(slot, timestamp);
  StoreInt32(slot + 8, static_cast<int32_t>(offset - base_offset()));
  set_entries(n + 1);
  return absl::OkStatus();
}

void TimeIndex::TruncateTo(int64_t offset) {
  DropEntriesFrom(FirstAtOrAbove(
      entries(), offset, [this](int i) { return base_offset() + TimeRelativeOffsetOf(Slot(i)); }));
}

Status TimeIndex::SanityCheck() const {
  auto describe = [](const IndexFile& f, int i) {
    const auto& self = static_cast<const TimeIndex&>(f);
    return fmt::format("timestamp {}, offset {}", self.EntryAt(i).timestamp,
                       self.EntryAt(i).offset);
  };
  RUNNEL_RETURN_IF_ERROR(CheckSizeAndTail(describe));
  if (entries() > 0) {
    // Later entries are not below the first: Map counts only entries in order.
    TimestampOffset first = EntryAt(0);
    if (first.offset < base_offset()) {
      return absl::DataLossError(fmt::format("{}: entry 0 has offset {} below the base offset {}",
                                             path(), first.offset, base_offset()));
    }
    if (first.timestamp < 0) {
      // MaybeAppend never stores one: the empty index's timestamp is -1 and entries rise.
      return absl::DataLossError(
          fmt::format("{}: entry 0 has negative timestamp {}", path(), first.timestamp));
    }
  }
  return absl::OkStatus();
}

}  // namespace runnel::storaged
