// The log directories one runnel-storaged owns (`log.dirs`).
//
// On open, each directory is created if missing, locked against a second process with an
// exclusive flock on `<dir>/.lock` (held for the life of this object), and carries a
// `meta.properties` file as Kafka writes it:
//
//   # written by runnel-storaged
//   version=1
//   node.id=<node.id>
//   directory.id=<22-char base64 uuid, stable for the life of the directory>
//
// A directory whose meta.properties names another node.id is refused: it belongs to
// another node. meta.properties is written temp + fsync + rename + fsync(dir).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/util/status.h"

namespace runnel::storaged {

struct LogDirState {
  std::string path;  // absolute
  std::string directory_id;
  int lock_fd = -1;
};

// Usage of the file system under a directory.
struct DiskUsage {
  int64_t total_bytes = 0;
  int64_t usable_bytes = 0;
};

class LogDirs {
 public:
  // Opens (creating, locking, checking meta.properties) every directory of `paths`.
  static StatusOr<LogDirs> Open(const std::vector<std::string>& paths, int32_t node_id);

  LogDirs(LogDirs&& other) noexcept;
  LogDirs& operator=(LogDirs&& other) noexcept;
  LogDirs(const LogDirs&) = delete;
  LogDirs& operator=(const LogDirs&) = delete;
  ~LogDirs();  // releases the locks

  const std::vector<LogDirState>& dirs() const { return dirs_; }
  int32_t node_id() const { return node_id_; }

  static StatusOr<DiskUsage> Usage(const std::string& path);

 private:
  LogDirs() = default;
  void Release();

  std::vector<LogDirState> dirs_;
  int32_t node_id_ = -1;
};

// Parses a Java-style properties file's key=value lines (for meta.properties).
StatusOr<std::vector<std::pair<std::string, std::string>>> ReadProperties(const std::string& path);
// Writes `lines` to `path` durably: temp file, fsync, rename, fsync of the directory.
Status WriteFileDurably(const std::string& path, const std::string& contents);
// fsync of a directory, so renames and unlinks in it are durable.
Status FsyncDir(const std::string& dir);
// syncfs(2) of the file system holding `dir`: every file's data and metadata on disk.
Status SyncFileSystem(const std::string& dir);
// fsync of a file by its path.
Status FsyncFile(const std::string& path);
// Writes `contents` as the file at `path` (created or truncated), without waiting for the
// disk: for a file nothing depends on until the caller syncs it (FsyncFile, FsyncDir).
Status WriteNewFile(const std::string& path, const std::string& contents);

}  // namespace runnel::storaged
