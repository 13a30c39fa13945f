// The file-system seam of the metadata log: the few operations it needs, so a test can
// inject failures (a failed fsync, a full disk) and the Raft issue can swap storage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/util/status.h"

namespace runnel::controllerd {

// A file open for appending. Not thread-safe; one writer.
class AppendFile {
 public:
  virtual ~AppendFile() = default;
  virtual Status Append(std::string_view data) = 0;
  // Makes everything appended so far durable (fdatasync).
  virtual Status Sync() = 0;
  // Bytes in the file (including appended, not yet synced bytes).
  virtual uint64_t Size() const = 0;
  virtual Status Close() = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Creates `dir` and its missing parents.
  virtual Status CreateDirs(const std::string& dir) = 0;
  // Names (not paths) of the entries of `dir`.
  virtual StatusOr<std::vector<std::string>> ListDir(const std::string& dir) = 0;
  virtual StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // `length` bytes at `offset`; fewer only if the file is shorter.
  virtual StatusOr<std::string> ReadRange(const std::string& path, uint64_t offset,
                                          uint64_t length) = 0;
  // Opens (creating if missing) for appending at the current end.
  virtual StatusOr<std::unique_ptr<AppendFile>> OpenAppend(const std::string& path) = 0;
  // Creates or replaces `path` with `data` and fsyncs it (not its directory).
  virtual Status WriteFileSynced(const std::string& path, std::string_view data) = 0;
  virtual Status Truncate(const std::string& path, uint64_t size) = 0;
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status Remove(const std::string& path) = 0;
  // fsyncs a directory so renames, creations and removals in it are durable.
  virtual Status SyncDir(const std::string& dir) = 0;
};

// The real one, over POSIX calls. Errors name the path and strerror.
FileSystem& PosixFileSystem();

// Writes `path` atomically: <path>.tmp written and fsync'ed, renamed over `path`, then the
// directory fsync'ed (STYLE 10: metadata files are written temp + fsync + rename + fsync(dir)).
Status WriteFileAtomically(FileSystem& fs, const std::string& dir, const std::string& name,
                           std::string_view data);

}  // namespace runnel::controllerd
