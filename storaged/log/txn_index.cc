#include "storaged/log/txn_index.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "storaged/log/checkpoints.h"
#include "storaged/log/file_io.h"

namespace runnel::storaged {
StatusOr<std::unique_ptr<TxnIndex>> TxnIndex::Open(const std::string& path) {
  std::unique_ptr<TxnIndex> index(new TxnIndex(path));
  RUNNEL_ASSIGN_OR_RETURN(std::optional<std::string> bytes, ReadWholeFile(path));
  if (bytes) {
    RUNNEL_ASSIGN_OR_RETURN(std::vector<AbortedTxn> entries,
                            DecodeTxnIndex(std::span<const uint8_t>(
                                reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size())));
    MutexLock lock(&index->mu_);
    index->entries_ = std::move(entries);
  }
  return index;
}

Status TxnIndex::WriteFromLocked(size_t from, size_t count) {
  RUNNEL_ASSIGN_OR_RETURN(int fd, OpenFile(path_, O_WRONLY | O_CREAT));
  std::vector<uint8_t> bytes(count * kAbortedTxnSize);
  for (size_t i = 0; i < count; ++i) {
    EncodeAbortedTxn(entries_[from + i], bytes.data() + i * kAbortedTxnSize);
  }
  const int64_t position = int64_t(from * kAbortedTxnSize);
  Status s = PwriteFull(fd, bytes.data(), bytes.size(), position, path_);
  if (s.ok()) s = TruncateFd(fd, position + int64_t(bytes.size()), path_);
  ::close(fd);
  if (s.ok()) unsynced_ = true;
  return s;
}

Status TxnIndex::Append(const AbortedTxn& txn) {
  MutexLock lock(&mu_);
  if (!entries_.empty() && txn.last_offset <= entries_.back().last_offset) {
    return absl::FailedPreconditionError(
        fmt::format("{}: an aborted transaction ending at {} after one ending at {}", path_,
                    txn.last_offset, entries_.back().last_offset));
  }
  entries_.push_back(txn);
  Status written = WriteFromLocked(entries_.size() - 1, 1);
  if (!written.ok()) entries_.pop_back();
  return written;
}

bool TxnIndex::Collect(int64_t fetch_offset, int64_t upper_bound,
                       std::vector<AbortedTxn>* out) const {
  MutexLock lock(&mu_);
  for (const AbortedTxn& txn : entries_) {
    if (txn.last_offset >= fetch_offset && txn.first_offset < upper_bound) out->push_back(txn);
    if (txn.last_stable_offset >= upper_bound) return true;
  }
  return false;
}

Status TxnIndex::TruncateTo(int64_t offset) {
  MutexLock lock(&mu_);
  size_t keep = entries_.size();
  while (keep > 0 && entries_[keep - 1].last_offset >= offset) --keep;
  if (keep == entries_.size()) return absl::OkStatus();
  if (keep == 0) {
    if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(fmt::format("unlink {}: {}", path_, std::strerror(errno)));
    }
    entries_.clear();
    unsynced_ = false;
    return absl::OkStatus();
  }
  RUNNEL_ASSIGN_OR_RETURN(int fd, OpenFile(path_, O_WRONLY | O_CREAT));
  Status s = TruncateFd(fd, int64_t(keep * kAbortedTxnSize), path_);
  ::close(fd);
  if (!s.ok()) return s;
  entries_.resize(keep);
  unsynced_ = true;
  return absl::OkStatus();
}

Status TxnIndex::Flush() {
  MutexLock lock(&mu_);
  if (!unsynced_) return absl::OkStatus();
  StatusOr<int> fd = OpenFile(path_, O_WRONLY);
  if (!fd.ok()) return absl::IsNotFound(fd.status()) ? absl::OkStatus() : fd.status();
  Status s = SyncFd(*fd, /*data_only=*/true, path_);
  ::close(*fd);
  if (s.ok()) unsynced_ = false;
  return s;
}

Status TxnIndex::RenameTo(std::string path) {
  MutexLock lock(&mu_);
  if (::access(path_.c_str(), F_OK) == 0) RUNNEL_RETURN_IF_ERROR(RenameFile(path_, path));
  path_ = std::move(path);
  return absl::OkStatus();
}

Status TxnIndex::Delete() {
  MutexLock lock(&mu_);
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(fmt::format("unlink {}: {}", path_, std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::vector<AbortedTxn> TxnIndex::entries() const {
  MutexLock lock(&mu_);
  return entries_;
}

bool TxnIndex::empty() const {
  MutexLock lock(&mu_);
  return entries_.empty();
}

int64_t TxnIndex::last_offset() const {
  MutexLock lock(&mu_);
  return entries_.empty() ? -1 : entries_.back().last_offset;
}

std::string TxnIndex::path() const {
  MutexLock lock(&mu_);
  return path_;
}

}  // namespace runnel::storaged
