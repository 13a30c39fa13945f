#include "storaged/shared_regions.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace runnel::storaged {

class SharedRegions::Mapping {
 public:
  Mapping(int32_t pid, int32_t fd, uint64_t inode, uint8_t* base, uint64_t size)
      : pid(pid), fd(fd), inode(inode), base(base), size(size) {}
  ~Mapping() { ::munmap(base, size); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const int32_t pid;
  const int32_t fd;
  const uint64_t inode;
  uint8_t* const base;
  const uint64_t size;
};

StatusOr<std::shared_ptr<SharedRegions::Mapping>> SharedRegions::Open(
    const storage::SharedBytes& ref) {
  const std::string path = fmt::format("/proc/{}/fd/{}", ref.pid(), ref.fd());
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        fmt::format("cannot open the shared region {}: {}", path, std::strerror(errno)));
  }
  struct stat st;
  Status refused = absl::OkStatus();
  if (::fstat(fd, &st) != 0) {
    refused =
        absl::FailedPreconditionError(fmt::format("fstat {}: {}", path, std::strerror(errno)));
  } else if (static_cast<uint64_t>(st.st_ino) != ref.inode()) {
    refused = absl::FailedPreconditionError(
        fmt::format("{} is inode {}, not the region's {}", path, st.st_ino, ref.inode()));
  } else if (::fcntl(fd, F_GET_SEALS) < 0) {
    refused = absl::FailedPreconditionError(fmt::format("{} is not a memfd", path));
  } else if (st.st_size <= 0) {
    refused = absl::FailedPreconditionError(fmt::format("{} is empty", path));
  }
  if (!refused.ok()) {
    ::close(fd);
    return refused;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);  // the mapping keeps the memfd alive
  if (base == MAP_FAILED) {
    return absl::FailedPreconditionError(
        fmt::format("mmap of {} ({} bytes): {}", path, size, std::strerror(errno)));
  }
  return std::make_shared<Mapping>(ref.pid(), ref.fd(), ref.inode(), static_cast<uint8_t*>(base),
                                   size);
}

StatusOr<std::span<uint8_t>> SharedRegions::Resolve(const storage::SharedBytes& ref,
                                                    std::shared_ptr<Mapping>* hold) {
  std::shared_ptr<Mapping> m;
  {
    MutexLock lock(&mu_);
    for (auto it = recent_.begin(); it != recent_.end(); ++it) {
      if ((*it)->pid == ref.pid() && (*it)->fd == ref.fd() && (*it)->inode == ref.inode()) {
        m = *it;
        if (it != recent_.begin()) {
          recent_.erase(it);
          recent_.push_front(m);
        }
        break;
      }
    }
  }
  if (!m) {
    // Opened outside the lock: the other calls go on meanwhile. Two calls may both open a
    // new region; the second mapping is simply dropped once used.
    StatusOr<std::shared_ptr<Mapping>> opened = Open(ref);
    if (!opened.ok()) return opened.status();
    m = std::move(*opened);
    MutexLock lock(&mu_);
    recent_.push_front(m);
    if (recent_.size() > kKept) recent_.pop_back();
  }
  if (ref.length() == 0 || ref.offset() > m->size || ref.length() > m->size - ref.offset()) {
    return absl::InvalidArgumentError(
        fmt::format("shared bytes [{}, +{}) are not inside the region of {} bytes", ref.offset(),
                    ref.length(), m->size));
  }
  *hold = m;
  return std::span<uint8_t>(m->base + ref.offset(), ref.length());
}

}  // namespace runnel::storaged
