// A bounded cache of open segment files. storaged may hold thousands of partitions with
// many segments each; file descriptors are a limited resource, so every .log file is
// opened through this cache, which keeps at most `max_open` descriptors and closes the
// least recently used. A handle in use is never closed under its user: eviction only
// drops the cache's reference, and the descriptor closes when the last user lets go.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/util/mutex.h"
#include "common/util/status.h"

namespace runnel::storaged {

class FileHandle {
 public:
  explicit FileHandle(int fd) : fd_(fd) {}
  ~FileHandle();
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

class FileCache {
 public:
  explicit FileCache(size_t max_open) : max_open_(max_open) {}

  // The open handle for `path` (read-write), opening it if needed; `create` makes a
  // missing file (mode 0644). NotFound when the file is missing and not `create`.
  StatusOr<std::shared_ptr<FileHandle>> Get(const std::string& path, bool create = false);
  // Forgets `path` (before a rename or unlink).
  void Forget(const std::string& path);

  // Handles the cache holds (an evicted handle still in use is open but not counted).
  size_t open_count() const;
  size_t max_open() const { return max_open_; }
  uint64_t opens() const;  // descriptors opened since start

 private:
  using Lru = std::list<std::pair<std::string, std::shared_ptr<FileHandle>>>;
  size_t max_open_;
  mutable Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);  // most recent first
  std::unordered_map<std::string, Lru::iterator> by_path_ ABSL_GUARDED_BY(mu_);
  uint64_t opens_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace runnel::storaged
