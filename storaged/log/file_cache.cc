#include "storaged/log/file_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <vector>

#include "storaged/log/file_io.h"

namespace runnel::storaged {

FileHandle::~FileHandle() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<std::shared_ptr<FileHandle>> FileCache::Get(const std::string& path, bool create) {
  // Handles dropped from the cache close outside the lock (when nobody else holds them).
  std::vector<std::shared_ptr<FileHandle>> evicted;
  MutexLock lock(&mu_);
  if (auto it = by_path_.find(path); it != by_path_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  RUNNEL_ASSIGN_OR_RETURN(int fd, OpenFile(path, O_RDWR | (create ? O_CREAT : 0)));
  ++opens_;
  auto handle = std::make_shared<FileHandle>(fd);
  lru_.emplace_front(path, handle);
  by_path_[path] = lru_.begin();
  while (lru_.size() > max_open_) {
    by_path_.erase(lru_.back().first);
    evicted.push_back(std::move(lru_.back().second));
    lru_.pop_back();
  }
  return handle;
}

void FileCache::Forget(const std::string& path) {
  std::shared_ptr<FileHandle> dropped;
  MutexLock lock(&mu_);
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return;
  dropped = std::move(it->second->second);
  lru_.erase(it->second);
  by_path_.erase(it);
}

size_t FileCache::open_count() const {
  MutexLock lock(&mu_);
  return lru_.size();
}

uint64_t FileCache::opens() const {
  MutexLock lock(&mu_);
  return opens_;
}

}  // namespace runnel::storaged
