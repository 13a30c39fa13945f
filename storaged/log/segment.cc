#include "storaged/log/segment.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log/log.h"
#include "common/util/big_endian.h"
#include "storaged/log/file_io.h"
#include "storaged/log/file_names.h"

namespace runnel::storaged {
namespace {

const log::ModuleLogger kLog("storaged.log");

// Header fields a scan needs (see the layout in common/record/batch.h).
constexpr size_t kBaseOffsetAt = 0;
constexpr size_t kLengthAt = 8;
constexpr size_t kMagicAt = 16;
constexpr size_t kLeaderEpochAt = 12;
constexpr size_t kLastOffsetDeltaAt = 23;
constexpr size_t kAttributesAt = 21;
constexpr size_t kMaxTimestampAt = 35;
constexpr size_t kProducerIdAt = 43;
constexpr size_t kProducerEpochAt = 51;
constexpr size_t kBaseSequenceAt = 53;
constexpr int32_t kMinBatchLength = int32_t(record::kBatchHeaderSize - record::kLogOverhead);
constexpr size_t kFirstScanChunk = 1 << 10;
constexpr size_t kScanChunk = 64 << 10;
constexpr size_t kRecoverChunk = 1 << 20;

int64_t Be64(const uint8_t* p) { return static_cast<int64_t>(LoadBigEndian64(p)); }
int32_t Be32(const uint8_t* p) { return static_cast<int32_t>(LoadBigEndian32(p)); }

Status ErrnoStatus(std::string_view what, const std::string& path) {
  int e = errno;
  if (path.empty()) return absl::InternalError(fmt::format("{}: {}", what, std::strerror(e)));
  return absl::InternalError(fmt::format("{} {}: {}", what, path, std::strerror(e)));
}

// The same status with the file named in front (added only on the error path, where the
// path is copied under its lock).
template <typename Seg>
Status InFile(const Status& s, const Seg& segment) {
  if (s.ok()) return s;
  return absl::Status(s.code(), fmt::format("{}: {}", segment.log_path(), s.message()));
}

// Parses the scan fields of a header at `p` (at least kBatchHeaderSize bytes), found at
// byte `position` of a file whose readable part ends at `end`. Returns why it is not a
// batch header, or "" when it is.
std::string ParseHeader(const uint8_t* p, int64_t position, int64_t end, BatchLocation* loc) {
  int32_t length = Be32(p + kLengthAt);
  if (length < kMinBatchLength) return fmt::format("batch length {} is too small", length);
  if (int8_t(p[kMagicAt]) != record::kMagicV2) {
    return fmt::format("magic byte {} is not 2", int(int8_t(p[kMagicAt])));
  }
  int64_t size = int64_t(length) + int64_t(record::kLogOverhead);
  if (position + size > end) {
    return fmt::format("batch of {} bytes runs past the end of the file ({} bytes)", size, end);
  }
  int32_t last_delta = Be32(p + kLastOffsetDeltaAt);
  if (last_delta < 0) return fmt::format("negative lastOffsetDelta {}", last_delta);
  loc->base_offset = Be64(p + kBaseOffsetAt);
  loc->last_offset = loc->base_offset + last_delta;
  loc->position = int32_t(position);
  loc->size = int32_t(size);
  loc->max_timestamp = Be64(p + kMaxTimestampAt);
  loc->partition_leader_epoch = Be32(p + kLeaderEpochAt);
  loc->attributes = static_cast<int16_t>(LoadBigEndian16(p + kAttributesAt));
  loc->producer_id = Be64(p + kProducerIdAt);
  loc->producer_epoch = static_cast<int16_t>(LoadBigEndian16(p + kProducerEpochAt));
  loc->base_sequence = Be32(p + kBaseSequenceAt);
  return "";
}

}  // namespace

Segment::Segment(std::string dir, int64_t base_offset, std::string log_path, FileCache* files)
    : dir_(std::move(dir)),
      base_offset_(base_offset),
      log_path_(std::move(log_path)),
      files_(files),
      next_offset_(base_offset),
      offset_of_max_timestamp_(base_offset) {}

Segment::~Segment() = default;

StatusOr<std::unique_ptr<Segment>> Segment::Open(const std::string& dir, int64_t base_offset,
                                                 int32_t max_index_bytes, bool create, bool active,
                                                 FileCache* files, std::string_view suffix) {
  const std::string log_path = SegmentFilePath(dir, base_offset, kLogSuffix) + std::string(suffix);
  std::unique_ptr<Segment> s(new Segment(dir, base_offset, log_path, files));
  s->max_index_bytes_ = max_index_bytes;
  s->active_ = active;
  s->created_ms_ = 0;
  const std::string index_path =
      SegmentFilePath(dir, base_offset, kIndexSuffix) + std::string(suffix);
  const std::string time_path =
      SegmentFilePath(dir, base_offset, kTimeIndexSuffix) + std::string(suffix);
  struct stat st;
  bool made = false;
  if (::stat(log_path.c_str(), &st) != 0) {
    if (errno != ENOENT || !create) return ErrnoStatus("stat", log_path);
    RUNNEL_ASSIGN_OR_RETURN(auto fh, files->Get(log_path, /*create=*/true));
    made = true;
    if (::fstat(fh->fd(), &st) != 0) return ErrnoStatus("fstat", log_path);
  }
  s->size_.store(st.st_size);
  s->inode_ = static_cast<uint64_t>(st.st_ino);
  s->indexes_missing_ =
      ::access(index_path.c_str(), F_OK) != 0 || ::access(time_path.c_str(), F_OK) != 0;
  Status opened = [&]() -> Status {
    RUNNEL_ASSIGN_OR_RETURN(s->offset_index_, OffsetIndex::Open(index_path, base_offset,
                                                                max_index_bytes, active, files));
    RUNNEL_ASSIGN_OR_RETURN(
        s->time_index_, TimeIndex::Open(time_path, base_offset, max_index_bytes, active, files));
    return absl::OkStatus();
  }();
  if (!opened.ok() && made) {
    // A new segment whose index could not be made (a full disk): nothing of it stays, so a
    // later roll to the same offset starts afresh and a load does not find half a segment.
    for (const std::string& p : {log_path, index_path, time_path}) {
      files->Forget(p);
      ::unlink(p.c_str());
    }
  }
  RUNNEL_RETURN_IF_ERROR(opened);
  const std::string txn_path =
      SegmentFilePath(dir, base_offset, kTxnIndexSuffix) + std::string(suffix);
  if (made) {
    // A new segment has no aborted transaction: a file left under its name is not its own.
    if (::unlink(txn_path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink", txn_path);
  } else if (::access(txn_path.c_str(), F_OK) == 0) {
    StatusOr<std::unique_ptr<TxnIndex>> txns = TxnIndex::Open(txn_path);
    if (txns.ok()) {
      MutexLock lock(&s->txn_mu_);
      s->txn_index_ = std::move(*txns);
    } else if (txns.status().code() == absl::StatusCode::kDataLoss) {
      kLog()->warn("{}: {}; deleted, rebuilt for what a replay covers", txn_path,
                   txns.status().message());
      if (::unlink(txn_path.c_str()) != 0 && errno != ENOENT) {
        return ErrnoStatus("unlink", txn_path);
      }
    } else {
      return txns.status();
    }
  }
  return s;
}

std::string Segment::TxnIndexPath() const {
  const std::string path = log_path();
  const size_t plain = SegmentFilePath(dir_, base_offset_, kLogSuffix).size();
  return SegmentFilePath(dir_, base_offset_, kTxnIndexSuffix) + path.substr(plain);
}

Status Segment::AppendAbortedTxn(const AbortedTxn& txn) {
  MutexLock lock(&txn_mu_);
  if (txn_index_ == nullptr) {
    RUNNEL_ASSIGN_OR_RETURN(txn_index_, TxnIndex::Open(TxnIndexPath()));
  }
  return txn_index_->Append(txn);
}

bool Segment::CollectAbortedTxns(int64_t fetch_offset, int64_t upper_bound,
                                 std::vector<AbortedTxn>* out) const {
  MutexLock lock(&txn_mu_);
  return txn_index_ != nullptr && txn_index_->Collect(fetch_offset, upper_bound, out);
}

std::vector<AbortedTxn> Segment::AbortedTxns() const {
  MutexLock lock(&txn_mu_);
  return txn_index_ != nullptr ? txn_index_->entries() : std::vector<AbortedTxn>{};
}

int64_t Segment::LastAbortedTxnOffset() const {
  MutexLock lock(&txn_mu_);
  return txn_index_ != nullptr ? txn_index_->last_offset() : -1;
}

std::string Segment::log_path() const {
  MutexLock lock(&path_mu_);
  return log_path_;
}

StatusOr<std::shared_ptr<FileHandle>> Segment::File() const { return files_->Get(log_path()); }

void Segment::Track(const BatchLocation& loc) {
  if (rolling_timestamp_ < 0 && loc.position == 0) rolling_timestamp_ = loc.max_timestamp;
  if (loc.max_timestamp > max_timestamp_.load()) {
    offset_of_max_timestamp_.store(loc.last_offset);
    max_timestamp_.store(loc.max_timestamp);
  }
  next_offset_.store(loc.last_offset + 1, std::memory_order_release);
}

Status Segment::IndexBatch(const BatchLocation& loc, int32_t index_interval_bytes) {
  if (bytes_since_index_entry_ > index_interval_bytes && !offset_index_->IsFull() &&
      !time_index_->IsAlmostFull()) {
    RUNNEL_RETURN_IF_ERROR(offset_index_->Append(loc.last_offset, loc.position));
    RUNNEL_RETURN_IF_ERROR(time_index_->MaybeAppend(max_timestamp(), offset_of_max_timestamp()));
    bytes_since_index_entry_ = 0;
  }
  bytes_since_index_entry_ += loc.size;
  return absl::OkStatus();
}

Status Segment::Append(record::ByteSpan bytes, const std::vector<record::BatchView>& batches,
                       int32_t index_interval_bytes) {
  RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh, File());
  int64_t start = size();
  Status written = PwriteFull(fh->fd(), bytes.data(), bytes.size(), start);
  if (!written.ok()) written = InFile(written, *this);
  if (!written.ok()) {
    // Cut back whatever part was written, so the file still ends at a batch boundary.
    if (Status cut = TruncateFd(fh->fd(), start, ""); !cut.ok()) {
      return absl::DataLossError(fmt::format("{}; and cutting it back to {} bytes failed: {}",
                                             written.message(), start, cut.message()));
    }
    return written;
  }
  int64_t position = start;
  for (const record::BatchView& b : batches) {
    BatchLocation loc{b.base_offset(),   b.last_offset(),
                      int32_t(position), int32_t(b.size_in_bytes()),
                      b.max_timestamp(), b.partition_leader_epoch()};
    Track(loc);
    RUNNEL_RETURN_IF_ERROR(IndexBatch(loc, index_interval_bytes));
    position += int64_t(b.size_in_bytes());
  }
  size_.store(position, std::memory_order_release);
  return absl::OkStatus();
}

Status Segment::Flush() {
  RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh, File());
  RUNNEL_RETURN_IF_ERROR(SyncFd(fh->fd(), /*data_only=*/true, log_path()));
  MutexLock lock(&txn_mu_);
  return txn_index_ != nullptr ? txn_index_->Flush() : absl::OkStatus();
}

Status Segment::ScanBatches(int64_t position, int64_t end,
                            const std::function<bool(const BatchLocation&)>& fn) const {
  if (position >= end) return absl::OkStatus();
  RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh, File());
  std::vector<uint8_t> buf;
  int64_t buf_start = 0;
  // Read a little while batches are big (a header is all that is needed of each), more
  // while they are small (many headers per read).
  int64_t chunk = int64_t(kFirstScanChunk);
  while (position < end) {
    if (end - position < int64_t(record::kBatchHeaderSize)) {
      return absl::DataLossError(
          fmt::format("{}: {} stray bytes at byte {}", log_path(), end - position, position));
    }
    if (buf.empty() || position < buf_start ||
        position + int64_t(record::kBatchHeaderSize) > buf_start + int64_t(buf.size())) {
      buf.resize(size_t(std::min<int64_t>(chunk, end - position)));
      buf_start = position;
      RUNNEL_RETURN_IF_ERROR(InFile(PreadFull(fh->fd(), buf.data(), buf.size(), position), *this));
    }
    BatchLocation loc;
    std::string why = ParseHeader(buf.data() + (position - buf_start), position, end, &loc);
    if (!why.empty()) {
      return absl::DataLossError(fmt::format("{}: at byte {}: {}", log_path(), position, why));
    }
    chunk =
        loc.size >= int64_t(kFirstScanChunk) * 4 ? int64_t(kFirstScanChunk) : int64_t(kScanChunk);
    if (!fn(loc)) break;
    position += loc.size;
  }
  return absl::OkStatus();
}

StatusOr<std::optional<BatchLocation>> Segment::FindBatch(int64_t offset,
                                                          int64_t max_position) const {
  std::optional<BatchLocation> found;
  int64_t start = offset_index_->Lookup(offset).position;
  RUNNEL_RETURN_IF_ERROR(ScanBatches(start, max_position, [&](const BatchLocation& loc) {
    if (loc.last_offset < offset) return true;
    found = loc;
    return false;
  }));
  return found;
}

StatusOr<int64_t> Segment::FindEndPosition(int64_t start, int64_t max_bytes, int64_t max_position,
                                           int64_t limit_offset) const {
  int64_t budget_end = std::min(max_position, start + max_bytes);
  // Skip ahead with the index: an entry's position is a batch boundary, and the batch there
  // ends at its entry's offset, so every batch before it holds offsets below that.
  int64_t position = start;
  // The batch at that entry starts at or before budget_end and ends at the entry's offset,
  // below limit_offset: it may be included.
  if (std::optional<OffsetPosition> e = offset_index_->LastWithin(budget_end, limit_offset);
      e && e->position > position) {
    position = e->position;
  }
  RUNNEL_RETURN_IF_ERROR(ScanBatches(position, max_position, [&](const BatchLocation& loc) {
    if (loc.base_offset >= limit_offset || loc.last_offset >= limit_offset ||
        loc.position + int64_t(loc.size) > budget_end) {
      return false;
    }
    position = loc.position + loc.size;
    return true;
  }));
  return position;
}

StatusOr<std::optional<BatchLocation>> Segment::FindBatchByTimestamp(int64_t timestamp) const {
  TimestampOffset t = time_index_->Lookup(timestamp);
  int64_t start = offset_index_->Lookup(t.offset).position;
  std::optional<BatchLocation> found;
  RUNNEL_RETURN_IF_ERROR(ScanBatches(start, size(), [&](const BatchLocation& loc) {
    if (loc.max_timestamp < timestamp) return true;
    found = loc;
    return false;
  }));
  return found;
}

StatusOr<std::vector<uint8_t>> Segment::ReadBytes(int64_t position, int32_t length) const {
  RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh, File());
  std::vector<uint8_t> out(size_t(std::max(length, 0)));
  RUNNEL_RETURN_IF_ERROR(InFile(PreadFull(fh->fd(), out.data(), out.size(), position), *this));
  return out;
}

Status Segment::ForEachRecordIn(
    const BatchLocation& loc,
    const std::function<bool(int64_t, int64_t, const record::Record&)>& fn) const {
  RUNNEL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadBytes(loc.position, loc.size));
  RUNNEL_ASSIGN_OR_RETURN(record::BatchView view, record::BatchView::Parse(bytes));
  bool log_append_time = view.timestamp_type() == record::TimestampType::kLogAppendTime;
  return record::ForEachRecord(view, [&](const record::Record& r) {
    int64_t ts = log_append_time ? view.max_timestamp() : view.base_timestamp() + r.timestamp_delta;
    return fn(view.base_offset() + r.offset_delta, ts, r);
  });
}

Status Segment::ResetSummary() {
  next_offset_.store(base_offset_);
  max_timestamp_.store(-1);
  offset_of_max_timestamp_.store(base_offset_);
  rolling_timestamp_ = -1;
  bytes_since_index_entry_ = 0;
  return absl::OkStatus();
}

Status Segment::RebuildIndexes(int32_t index_interval_bytes) {
  RUNNEL_RETURN_IF_ERROR(offset_index_->Resize(max_index_bytes_));
  RUNNEL_RETURN_IF_ERROR(time_index_->Resize(max_index_bytes_));
  offset_index_->Reset();
  time_index_->Reset();
  RUNNEL_RETURN_IF_ERROR(ResetSummary());
  Status indexed = absl::OkStatus();
  RUNNEL_RETURN_IF_ERROR(ScanBatches(0, size(), [&](const BatchLocation& loc) {
    Track(loc);
    indexed = IndexBatch(loc, index_interval_bytes);
    return indexed.ok();
  }));
  RUNNEL_RETURN_IF_ERROR(indexed);
  if (!active_) return TrimIndexes();
  return absl::OkStatus();
}

StatusOr<SegmentRecovery> Segment::Recover(int32_t index_interval_bytes) {
  RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh, File());
  RUNNEL_RETURN_IF_ERROR(offset_index_->Resize(max_index_bytes_));
  RUNNEL_RETURN_IF_ERROR(time_index_->Resize(max_index_bytes_));
  offset_index_->Reset();
  time_index_->Reset();
  RUNNEL_RETURN_IF_ERROR(ResetSummary());
  SegmentRecovery result;
  const int64_t end = size();
  int64_t position = 0;
  std::vector<uint8_t> buf;
  int64_t buf_start = 0;
  int64_t expected_min_offset = base_offset_;
  while (position < end) {
    if (end - position < int64_t(record::kBatchHeaderSize)) {
      result.reason = fmt::format("{} bytes at byte {} are too few for a batch header",
                                  end - position, position);
      break;
    }
    // Make sure the header is buffered, then the whole batch.
    auto ensure = [&](int64_t n) -> Status {
      if (position >= buf_start && position + n <= buf_start + int64_t(buf.size())) {
        return absl::OkStatus();
      }
      buf.resize(
          size_t(std::max<int64_t>(n, std::min<int64_t>(int64_t(kRecoverChunk), end - position))));
      buf_start = position;
      return InFile(PreadFull(fh->fd(), buf.data(), buf.size(), position), *this);
    };
    RUNNEL_RETURN_IF_ERROR(ensure(int64_t(record::kBatchHeaderSize)));
    BatchLocation loc;
    std::string why = ParseHeader(buf.data() + (position - buf_start), position, end, &loc);
    if (why.empty()) {
      RUNNEL_RETURN_IF_ERROR(ensure(loc.size));
      record::ByteSpan bytes(buf.data() + (position - buf_start), size_t(loc.size));
      StatusOr<record::BatchView> view = record::BatchView::Parse(bytes);
      if (!view.ok()) {
        why = std::string(view.status().message());
      } else if (!view->CrcValid()) {
        why = fmt::format("CRC mismatch in the batch at offset {}", loc.base_offset);
      } else if (loc.base_offset < expected_min_offset) {
        why = fmt::format("batch offset {} is below the previous batch's end {}", loc.base_offset,
                          expected_min_offset);
      } else if (loc.last_offset - base_offset_ > INT32_MAX) {
        why = fmt::format("batch offset {} is too far from the segment base", loc.last_offset);
      }
    }
    if (!why.empty()) {
      result.reason = fmt::format("at byte {}: {}", position, why);
      break;
    }
    Track(loc);
    RUNNEL_RETURN_IF_ERROR(IndexBatch(loc, index_interval_bytes));
    expected_min_offset = loc.last_offset + 1;
    position += loc.size;
    ++result.batches;
  }
  result.valid_bytes = position;
  result.truncated_bytes = end - position;
  if (result.truncated_bytes > 0) {
    RUNNEL_RETURN_IF_ERROR(TruncateFd(fh->fd(), position, log_path()));
    size_.store(position);
  }
  {
    MutexLock lock(&txn_mu_);
    if (txn_index_ != nullptr) RUNNEL_RETURN_IF_ERROR(txn_index_->TruncateTo(next_offset()));
  }
  if (!active_) RUNNEL_RETURN_IF_ERROR(TrimIndexes());
  indexes_missing_ = false;
  return result;
}

Status Segment::LoadClean(int32_t index_interval_bytes) {
  // No entries is fine (everything before the last batch may be within the interval):
  // the scan below then starts at byte 0.
  bool rebuild =
      indexes_missing_ || !offset_index_->SanityCheck().ok() || !time_index_->SanityCheck().ok();
  if (!rebuild) {
    OffsetPosition last = offset_index_->LastEntry();
    if (last.position > size()) rebuild = true;
  }
  if (rebuild) {
    rebuilt_indexes_ = true;
    return RebuildIndexes(index_interval_bytes);
  }
  RUNNEL_RETURN_IF_ERROR(ResetSummary());
  // The first batch gives the rolling timestamp; the time index's last entry the maximum up
  // to its last index entry; the tail after the last offset index entry is scanned.
  RUNNEL_RETURN_IF_ERROR(ScanBatches(0, size(), [&](const BatchLocation& loc) {
    rolling_timestamp_ = loc.max_timestamp;
    return false;
  }));
  TimestampOffset t = time_index_->LastEntry();
  if (t.timestamp >= 0) {
    offset_of_max_timestamp_.store(t.offset);
    max_timestamp_.store(t.timestamp);
  }
  OffsetPosition last = offset_index_->LastEntry();
  bytes_since_index_entry_ = 0;
  int64_t from = offset_index_->entries() > 0 ? last.position : 0;
  int64_t rolling = rolling_timestamp_;
  RUNNEL_RETURN_IF_ERROR(ScanBatches(from, size(), [&](const BatchLocation& loc) {
    Track(loc);
    bytes_since_index_entry_ += loc.size;
    return true;
  }));
  rolling_timestamp_ = rolling;
  indexes_missing_ = false;
  return absl::OkStatus();
}

Status Segment::TruncateTo(int64_t offset) {
  {
    MutexLock lock(&txn_mu_);
    if (txn_index_ != nullptr) RUNNEL_RETURN_IF_ERROR(txn_index_->TruncateTo(offset));
  }
  RUNNEL_ASSIGN_OR_RETURN(std::optional<BatchLocation> loc, FindBatch(offset, size()));
  if (!loc) return absl::OkStatus();  // nothing at or after offset
  RUNNEL_ASSIGN_OR_RETURN(std::shared_ptr<FileHandle> fh, File());
  RUNNEL_RETURN_IF_ERROR(TruncateFd(fh->fd(), loc->position, log_path()));
  size_.store(loc->position);
  RUNNEL_RETURN_IF_ERROR(offset_index_->TruncateTo(loc->base_offset));
  RUNNEL_RETURN_IF_ERROR(time_index_->TruncateTo(loc->base_offset));
  // Recompute the summary of what is left.
  RUNNEL_RETURN_IF_ERROR(ResetSummary());
  int64_t last_entry_pos = offset_index_->entries() > 0 ? offset_index_->LastEntry().position : -1;
  RUNNEL_RETURN_IF_ERROR(ScanBatches(0, size(), [&](const BatchLocation& l) {
    Track(l);
    bytes_since_index_entry_ = l.position > last_entry_pos ? bytes_since_index_entry_ + l.size : 0;
    return true;
  }));
  return absl::OkStatus();
}

Status Segment::TrimIndexes() {
  RUNNEL_RETURN_IF_ERROR(offset_index_->TrimToValidSize());
  RUNNEL_RETURN_IF_ERROR(time_index_->TrimToValidSize());
  return absl::OkStatus();
}

Status Segment::OnRoll(bool sync) {
  if (max_timestamp() >= 0) {
    RUNNEL_RETURN_IF_ERROR(time_index_->MaybeAppend(max_timestamp(), offset_of_max_timestamp()));
  }
  // Each step can be done again after a failure (a write-back goes on from what was written).
  RUNNEL_RETURN_IF_ERROR(TrimIndexes());
  if (sync) RUNNEL_RETURN_IF_ERROR(SyncIndexes());
  active_ = false;
  return absl::OkStatus();
}

Status Segment::SyncIndexes() {
  RUNNEL_RETURN_IF_ERROR(offset_index_->Flush());
  return time_index_->Flush();
}

Status Segment::Reactivate() {
  active_ = true;
  RUNNEL_RETURN_IF_ERROR(offset_index_->Resize(max_index_bytes_));
  return time_index_->Resize(max_index_bytes_);
}

Status Segment::Close(bool sync) {
  if (active_) RUNNEL_RETURN_IF_ERROR(OnRoll(sync));
  if (sync) RUNNEL_RETURN_IF_ERROR(Flush());
  files_->Forget(log_path());
  files_->Forget(offset_index_->path());
  files_->Forget(time_index_->path());
  return absl::OkStatus();
}

Status Segment::RenameSuffix(std::string_view from, std::string_view to) {
  auto renamed = [&](const std::string& p) {
    std::string base = p;
    if (!from.empty() && p.size() >= from.size() &&
        p.compare(p.size() - from.size(), from.size(), from) == 0) {
      base = p.substr(0, p.size() - from.size());
    }
    return base + std::string(to);
  };
  std::string old_log = log_path();
  std::string new_log = renamed(old_log);
  // Forget both names: a cached handle under the new name would be a file unlinked earlier.
  files_->Forget(old_log);
  files_->Forget(new_log);
  RUNNEL_RETURN_IF_ERROR(RenameFile(old_log, new_log));
  {
    MutexLock lock(&path_mu_);
    log_path_ = new_log;
  }
  RUNNEL_RETURN_IF_ERROR(offset_index_->RenameTo(renamed(offset_index_->path())));
  RUNNEL_RETURN_IF_ERROR(time_index_->RenameTo(renamed(time_index_->path())));
  MutexLock lock(&txn_mu_);
  return txn_index_ != nullptr ? txn_index_->RenameTo(renamed(txn_index_->path()))
                               : absl::OkStatus();
}

Status Segment::Delete() {
  std::string path = log_path();
  files_->Forget(path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink", path);
  RUNNEL_RETURN_IF_ERROR(offset_index_->Delete());
  RUNNEL_RETURN_IF_ERROR(time_index_->Delete());
  MutexLock lock(&txn_mu_);
  return txn_index_ != nullptr ? txn_index_->Delete() : absl::OkStatus();
}

}  // namespace runnel::storaged
