#include "storaged/log_dirs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/protocol/uuid.h"
#include "storaged/log/file_cache.h"
#include "storaged/log/file_io.h"

namespace runnel::storaged {
namespace fs = std::filesystem;
namespace {

std::string Errno(const char* what, const std::string& path) {
  return fmt::format("{} {}: {}", what, path, std::strerror(errno));
}

// Creates (or truncates) `path` and writes `contents` into it, then fsync when `sync`.
Status WriteWholeFile(const std::string& path, const std::string& contents, bool sync) {
  RUNNEL_ASSIGN_OR_RETURN(int fd, OpenFile(path, O_WRONLY | O_CREAT | O_TRUNC));
  FileHandle closes(fd);
  RUNNEL_RETURN_IF_ERROR(
      PwriteFull(fd, reinterpret_cast<const uint8_t*>(contents.data()), contents.size(), 0, path));
  if (sync) RUNNEL_RETURN_IF_ERROR(SyncFd(fd, /*data_only=*/false, path));
  return absl::OkStatus();
}

Status FsyncPath(const std::string& path, int flags) {
  RUNNEL_ASSIGN_OR_RETURN(int fd, OpenFile(path, flags));
  FileHandle closes(fd);
  return SyncFd(fd, /*data_only=*/false, path);
}

}  // namespace

Status FsyncDir(const std::string& dir) { return FsyncPath(dir, O_RDONLY | O_DIRECTORY); }

Status FsyncFile(const std::string& path) { return FsyncPath(path, O_RDONLY); }

Status SyncFileSystem(const std::string& dir) {
  RUNNEL_ASSIGN_OR_RETURN(int fd, OpenFile(dir, O_RDONLY | O_DIRECTORY));
  FileHandle closes(fd);
  return SyncFileSystemOf(fd, dir);
}

Status WriteNewFile(const std::string& path, const std::string& contents) {
  return WriteWholeFile(path, contents, /*sync=*/false);
}

StatusOr<std::vector<std::pair<std::string, std::string>>> ReadProperties(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(fmt::format("cannot read {}", path));
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) {
      return absl::DataLossError(fmt::format("{}: line '{}' is not key=value", path, line));
    }
    out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  return out;
}

Status WriteFileDurably(const std::string& path, const std::string& contents) {
  std::string tmp = path + ".tmp";
  // On failure the old file stays as it was, and the temp file goes (a full disk is not
  // made fuller by it).
  Status written = WriteWholeFile(tmp, contents, /*sync=*/true);
  if (written.ok()) written = RenameFile(tmp, path);
  if (!written.ok()) {
    ::unlink(tmp.c_str());
    return written;
  }
  return FsyncDir(fs::path(path).parent_path().string());
}

StatusOr<LogDirs> LogDirs::Open(const std::vector<std::string>& paths, int32_t node_id) {
  LogDirs result;
  result.node_id_ = node_id;
  for (const std::string& configured : paths) {
    std::error_code ec;
    fs::path dir = fs::absolute(configured, ec).lexically_normal();
    fs::create_directories(dir, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          fmt::format("log.dirs: cannot create {}: {}", dir.string(), ec.message()));
    }
    LogDirState state;
    state.path = dir.string();
    std::string lock_path = (dir / ".lock").string();
    state.lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (state.lock_fd < 0) {
      return absl::FailedPreconditionError("log.dirs: " + Errno("cannot open", lock_path));
    }
    if (::flock(state.lock_fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(state.lock_fd);
      return absl::FailedPreconditionError(fmt::format(
          "log.dirs: {} is in use by another process (lock {} is held)", state.path, lock_path));
    }
    // From here the lock is owned by `result` and released by its destructor on error.
    result.dirs_.push_back(state);
    LogDirState& owned = result.dirs_.back();

    std::string meta = (dir / "meta.properties").string();
    if (fs::exists(meta)) {
      RUNNEL_ASSIGN_OR_RETURN(auto props, ReadProperties(meta));
      std::string found_node;
      for (const auto& [k, v] : props) {
        if (k == "node.id") found_node = v;
        if (k == "directory.id") owned.directory_id = v;
      }
      if (found_node != std::to_string(node_id)) {
        return absl::FailedPreconditionError(
            fmt::format("log.dirs: {} belongs to node.id={} but this node is node.id={}", meta,
                        found_node.empty() ? "(none)" : found_node, node_id));
      }
    }
    if (owned.directory_id.empty()) {
      owned.directory_id = protocol::Uuid::Random().ToString();
      RUNNEL_RETURN_IF_ERROR(WriteFileDurably(
          meta,
          fmt::format("# written by runnel-storaged\nversion=1\nnode.id={}\ndirectory.id={}\n",
                      node_id, owned.directory_id)));
    }
  }
  return result;
}

LogDirs::LogDirs(LogDirs&& other) noexcept
    : dirs_(std::move(other.dirs_)), node_id_(other.node_id_) {
  other.dirs_.clear();
}

LogDirs& LogDirs::operator=(LogDirs&& other) noexcept {
  if (this != &other) {
    Release();
    dirs_ = std::move(other.dirs_);
    other.dirs_.clear();
    node_id_ = other.node_id_;
  }
  return *this;
}

LogDirs::~LogDirs() { Release(); }

void LogDirs::Release() {
  for (LogDirState& d : dirs_) {
    if (d.lock_fd >= 0) ::close(d.lock_fd);
    d.lock_fd = -1;
  }
  dirs_.clear();
}

StatusOr<DiskUsage> LogDirs::Usage(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return absl::InternalError(Errno("statvfs", path));
  DiskUsage u;
  u.total_bytes = static_cast<int64_t>(st.f_blocks) * static_cast<int64_t>(st.f_frsize);
  u.usable_bytes = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  return u;
}

}  // namespace runnel::storaged
