#include "storaged/log/index.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "common/util/big_endian.h"
#include "storaged/log/file_io.h"

namespace runnel::storaged {
namespace {

// Lookups first search the last 8 KiB of entries, as Kafka does: appends and most reads
// touch only the tail, so an on-disk lookup near the end reads a few entries from pages the
// kernel already holds instead of probing across the whole file.
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

bool IsZero(const uint8_t* p, int n) {
  for (int b = 0; b < n; ++b) {
    if (p[b] != 0) return false;
  }
  return true;
}

// The largest slot among `entries` for which `below(slot)` holds, where it holds for a
// prefix; -1 when it holds for none; nullopt when `below` fails (returns nullopt).
template <typename BelowFn>
std::optional<int> LargestBelow(int entries, int entry_size, BelowFn below) {
  if (entries == 0) return -1;
  auto search = [&](int lo, int hi) -> std::optional<int> {  // below(lo) holds or lo == -1
    while (lo < hi) {
      int mid = lo + (hi - lo + 1) / 2;
      std::optional<bool> b = below(mid);
      if (!b) return std::nullopt;
      if (*b) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  };
  int first_warm = std::max(0, entries - 1 - kWarmBytes / entry_size);
  std::optional<bool> warm = below(first_warm);
  if (!warm) return std::nullopt;
  if (*warm) return search(first_warm, entries - 1);
  return search(-1, first_warm - 1);
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

std::string DescribeOffsetEntry(const uint8_t* e) {
  return fmt::format("relative offset {}, position {}", RelativeOffsetOf(e), PositionOf(e));
}

std::string DescribeTimeEntry(const uint8_t* e) {
  return fmt::format("timestamp {}, relative offset {}", TimestampOf(e), TimeRelativeOffsetOf(e));
}

// Checks that `offset` can be stored relative to the index's base offset.
Status CheckRelative(const IndexFile& index, int64_t offset) {
  const int64_t base = index.base_offset();
  if (offset < base || offset - base > std::numeric_limits<int32_t>::max()) {
    return absl::OutOfRangeError(fmt::format(
        "{}: offset {} cannot be stored relative to base offset {}", index.path(), offset, base));
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------- IndexFile

IndexFile::IndexFile(std::string path, int64_t base_offset, int entry_size, FileCache* files,
                     FollowsFn follows, DescribeFn describe)
    : base_offset_(base_offset),
      entry_size_(entry_size),
      files_(files),
      follows_(follows),
      describe_(describe),
      path_(std::move(path)) {}

// Entries not yet written are dropped with the object: Close and roll write them first,
// and after anything else the segment is deleted or recovered from its .log.
IndexFile::~IndexFile() = default;

std::string IndexFile::path() const {
  MutexLock lock(&mu_);
  return path_;
}

bool IndexFile::InMemory() const {
  MutexLock lock(&mu_);
  return in_memory_;
}

Status IndexFile::Load(int32_t max_index_bytes, bool in_memory) {
  MutexLock lock(&mu_);
  // Opened directly, not through the cache: a handle cached under this name may be of a
  // file unlinked since. Later opens check the inode against this one.
  RUNNEL_ASSIGN_OR_RETURN(int fd, OpenFile(path_, O_RDWR | O_CREAT));
  FileHandle closes(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return absl::InternalError(Errno("fstat", path_));
  file_bytes_ = st.st_size;
  inode_ = static_cast<uint64_t>(st.st_ino);
  const int slots = int(RoundDownToEntries(file_bytes_, entry_size_) / entry_size_);
  // The whole file is read once to check it (Kafka checks only the last entry of a clean
  // segment's index; a full check finds an index damaged in the middle before a lookup
  // trusts it).
  std::vector<uint8_t> bytes(size_t(slots) * entry_size_);
  RUNNEL_RETURN_IF_ERROR(PreadFull(fd, bytes.data(), bytes.size(), 0, path_));
  auto slot = [&](int i) { return bytes.data() + size_t(i) * entry_size_; };
  int n = 0;
  if (slots > 0) {
    n = 1;
    while (n < slots && follows_(slot(n - 1), slot(n))) ++n;
    // A lone zero entry is real only in a trimmed one-entry file; in a larger file it is
    // preallocated space that was never written (a real first entry (base, 0) would say
    // nothing an empty index does not). Garbage after it is SanityCheck's business.
    if (n == 1 && slots > 1 && IsZero(slot(0), entry_size_)) n = 0;
  }
  load_status_ = absl::OkStatus();
  if (file_bytes_ % entry_size_ != 0) {
    load_status_ = absl::DataLossError(fmt::format(
        "{}: size {} is not a multiple of the entry size {}", path_, file_bytes_, entry_size_));
  } else {
    for (int i = n; i < slots; ++i) {
      if (IsZero(slot(i), entry_size_)) continue;
      if (i == n && n > 0) {
        load_status_ = absl::DataLossError(
            fmt::format("{}: entries out of order: entry {} ({}) after entry {} ({})", path_, i,
                        describe_(slot(i)), n - 1, describe_(slot(n - 1))));
      } else {
        load_status_ = absl::DataLossError(
            fmt::format("{}: non-zero data in slot {} ({}) after the {} entries", path_, i,
                        describe_(slot(i)), n));
      }
      break;
    }
  }
  written_entries_ = n;
  bytes.resize(size_t(n) * entry_size_);
  memory_ = std::move(bytes);
  SetEntriesLocked(n);
  int max_entries = slots;
  in_memory_ = in_memory;
  if (in_memory) {
    int64_t wanted = RoundDownToEntries(max_index_bytes, entry_size_);
    if (file_bytes_ % entry_size_ == 0)
      max_entries = std::max<int64_t>(slots, wanted / entry_size_);
  } else {
    std::vector<uint8_t>().swap(memory_);  // only the count and the last entry stay
  }
  max_entries_.store(max_entries, std::memory_order_release);
  return absl::OkStatus();
}

Status IndexFile::LoadStatus() const {
  MutexLock lock(&mu_);
  return load_status_;
}

void IndexFile::SetEntriesLocked(int n) {
  entries_.store(n, std::memory_order_release);
  last_ = Entry{};
  if (n > 0) {
    last_.slot = n - 1;
    std::memcpy(last_.bytes, memory_.data() + size_t(n - 1) * entry_size_, size_t(entry_size_));
  }
}

Status IndexFile::BringIntoMemoryLocked() {
  if (in_memory_) return absl::OkStatus();
  const int n = entries();
  std::vector<uint8_t> bytes(size_t(n) * entry_size_);
  if (n > 0) {
    RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh, OpenLocked(/*create=*/false));
    RUNNEL_RETURN_IF_ERROR(PreadFull(fh->fd(), bytes.data(), bytes.size(), 0, path_));
  }
  memory_ = std::move(bytes);
  in_memory_ = true;
  return absl::OkStatus();
}

Status IndexFile::WriteBackLocked() {
  const int n = entries();
  const int64_t valid = int64_t{n} * entry_size_;
  if (written_entries_ >= n && file_bytes_ == valid) return absl::OkStatus();
  RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh, OpenLocked(/*create=*/true));
  if (written_entries_ < n) {
    const int64_t from = int64_t{written_entries_} * entry_size_;
    RUNNEL_RETURN_IF_ERROR(
        PwriteFull(fh->fd(), memory_.data() + from, size_t(valid - from), from, path_));
    written_entries_ = n;
    file_bytes_ = std::max(file_bytes_, valid);
  }
  if (file_bytes_ > valid) {
    RUNNEL_RETURN_IF_ERROR(TruncateFd(fh->fd(), valid, path_));
    file_bytes_ = valid;
  }
  return absl::OkStatus();
}

Status IndexFile::TrimToValidSize() {
  MutexLock lock(&mu_);
  if (in_memory_) {
    RUNNEL_RETURN_IF_ERROR(WriteBackLocked());
    std::vector<uint8_t>().swap(memory_);
    in_memory_ = false;
  } else if (file_bytes_ != SizeInBytes()) {
    // An untrimmed file loaded from disk: its tail is zeros (Load checked).
    RUNNEL_RETURN_IF_ERROR(WriteBackLocked());
  }
  max_entries_.store(entries(), std::memory_order_release);
  return absl::OkStatus();
}

Status IndexFile::Resize(int32_t max_index_bytes) {
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(BringIntoMemoryLocked());
  int64_t wanted = RoundDownToEntries(max_index_bytes, entry_size_) / entry_size_;
  max_entries_.store(int(std::max<int64_t>(wanted, entries())), std::memory_order_release);
  return absl::OkStatus();
}

Status IndexFile::Flush() {
  MutexLock lock(&mu_);
  if (in_memory_) RUNNEL_RETURN_IF_ERROR(WriteBackLocked());
  RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh, OpenLocked(/*create=*/true));
  return SyncFd(fh->fd(), /*data_only=*/true, path_);
}

void IndexFile::Reset() {
  MutexLock lock(&mu_);
  // Nothing to read: every entry goes.
  memory_.clear();
  in_memory_ = true;
  written_entries_ = 0;
  SetEntriesLocked(0);
}

Status IndexFile::RenameTo(const std::string& new_path) {
  MutexLock lock(&mu_);
  // Forget both names: a cached handle under the new name would be a file unlinked earlier.
  files_->Forget(path_);
  files_->Forget(new_path);
  RUNNEL_RETURN_IF_ERROR(RenameFile(path_, new_path));
  path_ = new_path;
  return absl::OkStatus();
}

Status IndexFile::Delete() {
  MutexLock lock(&mu_);
  std::vector<uint8_t>().swap(memory_);
  in_memory_ = false;
  written_entries_ = 0;
  file_bytes_ = 0;
  entries_.store(0, std::memory_order_release);
  last_ = Entry{};
  files_->Forget(path_);
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(Errno("unlink", path_));
  }
  return absl::OkStatus();
}

namespace {

// The handle cached for `path` when it is the file with `inode`; a cached handle of another
// file (one unlinked or replaced since) is dropped and the path opened again. NotFound when
// the file under `path` is not that one.
StatusOr<std::shared_ptr<FileHandle>> OpenChecked(FileCache* files, const std::string& path,
                                                  uint64_t inode, bool create, struct stat* st) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh, files->Get(path, create));
    if (::fstat(fh->fd(), st) != 0) return absl::InternalError(Errno("fstat", path));
    if (static_cast<uint64_t>(st->st_ino) == inode || attempt == 1) return fh;
    files->Forget(path);
  }
  return absl::NotFoundError(fmt::format("{}: replaced", path));  // not reached
}

}  // namespace

StatusOr<std::shared_ptr<FileHandle>> IndexFile::OpenLocked(bool create) {
  struct stat st {};
  RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh,
                          OpenChecked(files_, path_, inode_, create, &st));
  if (static_cast<uint64_t>(st.st_ino) == inode_) return fh;
  if (!create) {
    return absl::NotFoundError(fmt::format("{}: not the index file loaded (replaced)", path_));
  }
  // The file was removed under us (its data is a cache of the .log): the entries are
  // written again into the new one.
  inode_ = static_cast<uint64_t>(st.st_ino);
  file_bytes_ = st.st_size;
  written_entries_ = 0;
  return fh;
}

std::shared_ptr<FileHandle> IndexFile::FileForRead() const {
  std::string path;
  uint64_t inode = 0;
  {
    MutexLock lock(&mu_);
    path = path_;
    inode = inode_;
  }
  struct stat st {};
  StatusOr<std::shared_ptr<FileHandle>> fh = OpenChecked(files_, path, inode, false, &st);
  if (!fh.ok() || static_cast<uint64_t>(st.st_ino) != inode) return nullptr;
  return *std::move(fh);
}

IndexFile::Entry IndexFile::Last() const {
  MutexLock lock(&mu_);
  return last_;
}

std::optional<IndexFile::Entry> IndexFile::At(int i) const {
  Entry e;
  e.slot = i;
  {
    MutexLock lock(&mu_);
    if (i < 0 || i >= entries()) return std::nullopt;
    if (in_memory_) {
      std::memcpy(e.bytes, memory_.data() + size_t(i) * entry_size_, size_t(entry_size_));
      return e;
    }
  }
  std::shared_ptr<FileHandle> fh = FileForRead();
  if (fh == nullptr ||
      !PreadFull(fh->fd(), e.bytes, size_t(entry_size_), int64_t{i} * entry_size_, "").ok()) {
    return std::nullopt;
  }
  return e;
}

std::optional<IndexFile::Entry> IndexFile::LastWhere(
    const std::function<bool(const uint8_t*)>& below) const {
  Entry e;
  int n = 0;
  {
    MutexLock lock(&mu_);
    n = entries();
    if (in_memory_) {
      const uint8_t* memory = memory_.data();
      auto in_memory = [&](int i) -> std::optional<bool> {
        return below(memory + size_t(i) * entry_size_);
      };
      e.slot = LargestBelow(n, entry_size_, in_memory).value_or(-1);
      if (e.slot >= 0) {
        std::memcpy(e.bytes, memory + size_t(e.slot) * entry_size_, size_t(entry_size_));
      }
      return e;
    }
  }
  if (n == 0) return e;
  std::shared_ptr<FileHandle> fh = FileForRead();
  if (fh == nullptr) return std::nullopt;
  uint8_t probe[kMaxEntrySize];
  auto on_disk = [&](int i) -> std::optional<bool> {
    if (!PreadFull(fh->fd(), probe, size_t(entry_size_), int64_t{i} * entry_size_, "").ok()) {
      return std::nullopt;
    }
    return below(probe);
  };
  std::optional<int> slot = LargestBelow(n, entry_size_, on_disk);
  if (!slot) return std::nullopt;
  e.slot = *slot;
  if (e.slot >= 0 &&
      !PreadFull(fh->fd(), e.bytes, size_t(entry_size_), int64_t{e.slot} * entry_size_, "").ok()) {
    return std::nullopt;
  }
  return e;
}

Status IndexFile::AppendEntry(const uint8_t* entry) {
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(BringIntoMemoryLocked());
  const int n = entries();
  if (n >= max_entries()) {
    return absl::FailedPreconditionError(fmt::format("{}: index is full ({} entries)", path_, n));
  }
  memory_.resize(size_t(n) * entry_size_);
  memory_.insert(memory_.end(), entry, entry + entry_size_);
  SetEntriesLocked(n + 1);
  return absl::OkStatus();
}

Status IndexFile::DropFrom(const std::function<bool(const uint8_t*)>& keep) {
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(BringIntoMemoryLocked());
  const int n = entries();
  int lo = 0;
  int hi = n;
  while (lo < hi) {  // the first slot `keep` rejects
    int mid = lo + (hi - lo) / 2;
    if (keep(memory_.data() + size_t(mid) * entry_size_)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo >= n) return absl::OkStatus();
  memory_.resize(size_t(lo) * entry_size_);
  written_entries_ = std::min(written_entries_, lo);
  SetEntriesLocked(lo);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- OffsetIndex

StatusOr<std::unique_ptr<OffsetIndex>> OffsetIndex::Open(const std::string& path,
                                                         int64_t base_offset,
                                                         int32_t max_index_bytes, bool writable,
                                                         FileCache* files) {
  std::unique_ptr<OffsetIndex> index(new OffsetIndex(path, base_offset, kEntrySize, files,
                                                     &OffsetEntryFollows, &DescribeOffsetEntry));
  RUNNEL_RETURN_IF_ERROR(index->Load(max_index_bytes, writable));
  return index;
}

namespace {

OffsetPosition ToOffsetPosition(int64_t base_offset, const uint8_t* e) {
  return {base_offset + RelativeOffsetOf(e), PositionOf(e)};
}

TimestampOffset ToTimestampOffset(int64_t base_offset, const uint8_t* e) {
  return {TimestampOf(e), base_offset + TimeRelativeOffsetOf(e)};
}

}  // namespace

OffsetPosition OffsetIndex::EntryAt(int i) const {
  std::optional<Entry> e = At(i);
  return e ? ToOffsetPosition(base_offset(), e->bytes) : OffsetPosition{base_offset(), 0};
}

OffsetPosition OffsetIndex::LastEntry() const {
  Entry e = Last();
  return e.slot < 0 ? OffsetPosition{base_offset(), 0} : ToOffsetPosition(base_offset(), e.bytes);
}

OffsetPosition OffsetIndex::Lookup(int64_t offset) const {
  const int64_t base = base_offset();
  std::optional<Entry> e =
      LastWhere([&](const uint8_t* slot) { return base + RelativeOffsetOf(slot) <= offset; });
  // An unreadable file answers the segment's start: a scan from there finds the batch.
  if (!e || e->slot < 0) return {base, 0};
  return ToOffsetPosition(base, e->bytes);
}

std::optional<OffsetPosition> OffsetIndex::LastWithin(int64_t max_position,
                                                      int64_t below_offset) const {
  const int64_t base = base_offset();
  std::optional<Entry> e = LastWhere([&](const uint8_t* slot) {
    return PositionOf(slot) <= max_position && base + RelativeOffsetOf(slot) < below_offset;
  });
  if (!e || e->slot < 0) return std::nullopt;
  return ToOffsetPosition(base, e->bytes);
}

Status OffsetIndex::Append(int64_t offset, int32_t position) {
  int n = entries();
  if (n >= max_entries()) {
    return absl::FailedPreconditionError(
        fmt::format("{}: offset index is full ({} entries)", path(), n));
  }
  RUNNEL_RETURN_IF_ERROR(CheckRelative(*this, offset));
  if (position < 0) {
    return absl::InvalidArgumentError(
        fmt::format("{}: negative position {} for offset {}", path(), position, offset));
  }
  if (n > 0) {
    OffsetPosition last = LastEntry();
    if (offset <= last.offset || position <= last.position) {
      return absl::FailedPreconditionError(fmt::format(
          "{}: entry (offset {}, position {}) does not follow the last (offset {}, position {})",
          path(), offset, position, last.offset, last.position));
    }
  }
  uint8_t entry[kEntrySize];
  StoreInt32(entry, static_cast<int32_t>(offset - base_offset()));
  StoreInt32(entry + 4, position);
  return AppendEntry(entry);
}

Status OffsetIndex::TruncateTo(int64_t offset) {
  const int64_t base = base_offset();
  return DropFrom([&](const uint8_t* slot) { return base + RelativeOffsetOf(slot) < offset; });
}

Status OffsetIndex::SanityCheck() const {
  RUNNEL_RETURN_IF_ERROR(LoadStatus());
  if (entries() > 0) {
    // Later entries are above the first: Load counts only entries in order.
    std::optional<Entry> e = At(0);
    if (!e) return absl::DataLossError(fmt::format("{}: cannot read entry 0", path()));
    OffsetPosition first = ToOffsetPosition(base_offset(), e->bytes);
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
                                                     int32_t max_index_bytes, bool writable,
                                                     FileCache* files) {
  std::unique_ptr<TimeIndex> index(
      new TimeIndex(path, base_offset, kEntrySize, files, &TimeEntryFollows, &DescribeTimeEntry));
  RUNNEL_RETURN_IF_ERROR(index->Load(max_index_bytes, writable));
  return index;
}

TimestampOffset TimeIndex::EntryAt(int i) const {
  std::optional<Entry> e = At(i);
  return e ? ToTimestampOffset(base_offset(), e->bytes) : TimestampOffset{-1, base_offset()};
}

TimestampOffset TimeIndex::LastEntry() const {
  Entry e = Last();
  return e.slot < 0 ? TimestampOffset{-1, base_offset()}
                    : ToTimestampOffset(base_offset(), e.bytes);
}

TimestampOffset TimeIndex::Lookup(int64_t timestamp) const {
  std::optional<Entry> e =
      LastWhere([&](const uint8_t* slot) { return TimestampOf(slot) <= timestamp; });
  // An unreadable file answers the segment's start: a scan from there finds the batch.
  if (!e || e->slot < 0) return {-1, base_offset()};
  return ToTimestampOffset(base_offset(), e->bytes);
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
  RUNNEL_RETURN_IF_ERROR(CheckRelative(*this, offset));
  uint8_t entry[kEntrySize];
  StoreInt64(entry, timestamp);
  StoreInt32(entry + 8, static_cast<int32_t>(offset - base_offset()));
  return AppendEntry(entry);
}

Status TimeIndex::TruncateTo(int64_t offset) {
  const int64_t base = base_offset();
  return DropFrom([&](const uint8_t* slot) { return base + TimeRelativeOffsetOf(slot) < offset; });
}

Status TimeIndex::SanityCheck() const {
  RUNNEL_RETURN_IF_ERROR(LoadStatus());
  if (entries() > 0) {
    // Later entries are not below the first: Load counts only entries in order.
    std::optional<Entry> e = At(0);
    if (!e) return absl::DataLossError(fmt::format("{}: cannot read entry 0", path()));
    TimestampOffset first = ToTimestampOffset(base_offset(), e->bytes);
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
