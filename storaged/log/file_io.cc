#include "storaged/log/file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string>

namespace runnel::storaged {
namespace {

std::atomic<FileFaults*> g_faults{nullptr};

// "what: error" or "what PATH: error", with errno `e`.
Status ErrnoError(int e, std::string_view what, std::string_view path) {
  std::string message = path.empty() ? fmt::format("{}: {}", what, std::strerror(e))
                                     : fmt::format("{} {}: {}", what, path, std::strerror(e));
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

Status ErrnoError(std::string_view what, std::string_view path) {
  return ErrnoError(errno, what, path);
}

// The path `fd` is open on now ("" when it cannot be told).
std::string PathOfFd(int fd) {
  char link[PATH_MAX];
  ssize_t n = ::readlink(fmt::format("/proc/self/fd/{}", fd).c_str(), link, sizeof link);
  return n > 0 ? std::string(link, size_t(n)) : std::string();
}

// The installed injector's verdict on `op` (nothing without one). `path` may be empty for
// an operation on `fd`, which is then resolved (only when an injector is installed).
FileFault Consult(FileOp op, std::string_view path, int fd = -1) {
  FileFaults* faults = g_faults.load(std::memory_order_relaxed);
  if (faults == nullptr) [[likely]] {
    return {};
  }
  if (path.empty() && fd >= 0) return faults->Check(op, PathOfFd(fd));
  return faults->Check(op, path);
}

// PwriteFull without asking the injector.
Status PwriteAll(int fd, const uint8_t* buf, size_t n, int64_t pos, std::string_view path) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pwrite(fd, buf + done, n - done, pos + int64_t(done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", path);
    }
    if (r == 0) {
      return absl::InternalError(path.empty() ? std::string("write: wrote nothing")
                                              : fmt::format("write {}: wrote nothing", path));
    }
    done += size_t(r);
  }
  return absl::OkStatus();
}

}  // namespace

void SetFileFaults(FileFaults* faults) { g_faults.store(faults, std::memory_order_release); }

Status PreadFull(int fd, uint8_t* buf, size_t n, int64_t pos, std::string_view path) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, buf + done, n - done, pos + int64_t(done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read", path);
    }
    if (r == 0) {
      const int64_t at = pos + int64_t(done);
      return absl::DataLossError(
          path.empty() ? fmt::format("unexpected end of file at byte {}", at)
                       : fmt::format("{}: unexpected end of file at byte {}", path, at));
    }
    done += size_t(r);
  }
  return absl::OkStatus();
}

Status PwriteFull(int fd, const uint8_t* buf, size_t n, int64_t pos, std::string_view path) {
  const FileFault fault = Consult(FileOp::kWrite, path, fd);
  if (fault.error != 0) {
    // The torn part is written for real, so the caller's undo is tested on a real file.
    const size_t torn = std::min(fault.torn_bytes, n);
    if (torn > 0) RUNNEL_RETURN_IF_ERROR(PwriteAll(fd, buf, torn, pos, path));
    return ErrnoError(fault.error, "write", path);
  }
  return PwriteAll(fd, buf, n, pos, path);
}

Status SyncFd(int fd, bool data_only, std::string_view path) {
  const char* what = data_only ? "fdatasync" : "fsync";
  if (const FileFault fault = Consult(FileOp::kSync, path, fd); fault.error != 0) {
    return ErrnoError(fault.error, what, path);
  }
  if ((data_only ? ::fdatasync(fd) : ::fsync(fd)) != 0) return ErrnoError(what, path);
  return absl::OkStatus();
}

Status SyncFileSystemOf(int fd, std::string_view path) {
  if (const FileFault fault = Consult(FileOp::kSync, path, fd); fault.error != 0) {
    return ErrnoError(fault.error, "syncfs", path);
  }
  if (::syncfs(fd) != 0) return ErrnoError("syncfs", path);
  return absl::OkStatus();
}

Status TruncateFd(int fd, int64_t size, std::string_view path) {
  if (const FileFault fault = Consult(FileOp::kTruncate, path, fd); fault.error != 0) {
    return ErrnoError(fault.error, "truncate", path);
  }
  if (::ftruncate(fd, size) != 0) return ErrnoError("truncate", path);
  return absl::OkStatus();
}

StatusOr<int> OpenFile(std::string_view path, int flags, mode_t mode) {
  const std::string p(path);
  if ((flags & O_CREAT) != 0) {
    if (const FileFault fault = Consult(FileOp::kCreate, p); fault.error != 0) {
      return ErrnoError(fault.error, "open", p);
    }
  }
  int fd = ::open(p.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return absl::NotFoundError(fmt::format("open {}: {}", p, std::strerror(e)));
    return ErrnoError(e, "open", p);
  }
  return fd;
}

Status MakeDir(std::string_view path, mode_t mode, bool* made) {
  const std::string p(path);
  *made = false;
  if (const FileFault fault = Consult(FileOp::kCreate, p); fault.error != 0) {
    return ErrnoError(fault.error, "mkdir", p);
  }
  if (::mkdir(p.c_str(), mode) == 0) {
    *made = true;
    return absl::OkStatus();
  }
  if (errno == EEXIST) return absl::OkStatus();
  return ErrnoError("mkdir", p);
}

Status RenameFile(std::string_view from, std::string_view to) {
  const std::string f(from);
  const std::string t(to);
  if (const FileFault fault = Consult(FileOp::kRename, f); fault.error != 0) {
    return ErrnoError(fault.error, fmt::format("rename {} to", f), t);
  }
  if (::rename(f.c_str(), t.c_str()) != 0) return ErrnoError(fmt::format("rename {} to", f), t);
  return absl::OkStatus();
}

}  // namespace runnel::storaged
