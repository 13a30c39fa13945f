#include "storaged/log/file_io.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace runnel::storaged {
namespace {

// "what: error" or "what PATH: error".
Status ErrnoError(std::string_view what, std::string_view path) {
  const int e = errno;
  if (path.empty()) return absl::InternalError(fmt::format("{}: {}", what, std::strerror(e)));
  return absl::InternalError(fmt::format("{} {}: {}", what, path, std::strerror(e)));
}

}  // namespace

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

}  // namespace runnel::storaged
