#include "controllerd/file_system.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

namespace runnel::controllerd {
namespace {

Status Errno(std::string_view what, const std::string& path, int err) {
  std::string msg = fmt::format("{} {}: {}", what, path, std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  return absl::InternalError(msg);
}

Status WriteAll(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("write", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

class PosixAppendFile final : public AppendFile {
 public:
  PosixAppendFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixAppendFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(std::string_view data) override {
    if (fd_ < 0) return absl::FailedPreconditionError(fmt::format("{} is closed", path_));
    Status st = WriteAll(fd_, data, path_);
    // Even a partial write moved the end; report the size the file really has.
    struct stat sb;
    if (::fstat(fd_, &sb) == 0) size_ = static_cast<uint64_t>(sb.st_size);
    return st;
  }
  Status Sync() override {
    if (fd_ < 0) return absl::FailedPreconditionError(fmt::format("{} is closed", path_));
    if (::fdatasync(fd_) != 0) return Errno("fdatasync", path_, errno);
    return absl::OkStatus();
  }
  uint64_t Size() const override { return size_; }
  Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return Errno("close", path_, errno);
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

class Posix final : public FileSystem {
 public:
  Status CreateDirs(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::InternalError(fmt::format("mkdir {}: {}", dir, ec.message()));
    return absl::OkStatus();
  }

  StatusOr<std::vector<std::string>> ListDir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return Errno("opendir", dir, errno);
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      std::string_view n = e->d_name;
      if (n != "." && n != "..") names.emplace_back(n);
    }
    ::closedir(d);
    return names;
  }

  StatusOr<std::string> ReadFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno("open", path, errno);
    std::string out;
    char buf[1 << 16];
    while (true) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd);
        return Errno("read", path, err);
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
  }

  StatusOr<std::string> ReadRange(const std::string& path, uint64_t offset,
                                  uint64_t length) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno("open", path, errno);
    std::string out(length, '\0');
    uint64_t got = 0;
    while (got < length) {
      ssize_t n = ::pread(fd, out.data() + got, length - got, static_cast<off_t>(offset + got));
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd);
        return Errno("pread", path, err);
      }
      if (n == 0) break;
      got += static_cast<uint64_t>(n);
    }
    ::close(fd);
    out.resize(got);
    return out;
  }

  StatusOr<std::unique_ptr<AppendFile>> OpenAppend(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("open", path, errno);
    struct stat sb;
    if (::fstat(fd, &sb) != 0) {
      int err = errno;
      ::close(fd);
      return Errno("fstat", path, err);
    }
    return std::unique_ptr<AppendFile>(
        new PosixAppendFile(path, fd, static_cast<uint64_t>(sb.st_size)));
  }

  Status WriteFileSynced(const std::string& path, std::string_view data) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("open", path, errno);
    Status st = WriteAll(fd, data, path);
    if (st.ok() && ::fsync(fd) != 0) st = Errno("fsync", path, errno);
    if (::close(fd) != 0 && st.ok()) st = Errno("close", path, errno);
    return st;
  }

  Status Truncate(const std::string& path, uint64_t size) override {
    if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
      return Errno("truncate", path, errno);
    }
    return absl::OkStatus();
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return Errno("rename to " + to, from, errno);
    return absl::OkStatus();
  }

  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return Errno("unlink", path, errno);
    return absl::OkStatus();
  }

  Status SyncDir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno("open", dir, errno);
    Status st;
    if (::fsync(fd) != 0) st = Errno("fsync", dir, errno);
    ::close(fd);
    return st;
  }
};

}  // namespace

FileSystem& PosixFileSystem() {
  static Posix* fs = new Posix();
  return *fs;
}

Status WriteFileAtomically(FileSystem& fs, const std::string& dir, const std::string& name,
                           std::string_view data) {
  std::string path = fmt::format("{}/{}", dir, name);
  std::string tmp = path + ".tmp";
  RUNNEL_RETURN_IF_ERROR(fs.WriteFileSynced(tmp, data));
  RUNNEL_RETURN_IF_ERROR(fs.Rename(tmp, path));
  return fs.SyncDir(dir);
}

}  // namespace runnel::controllerd
