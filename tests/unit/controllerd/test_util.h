// Helpers shared by the controllerd tests: temp dirs, file surgery, a fault-injecting FS.
#pragma once

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "controllerd/file_system.h"

namespace runnel::controllerd::testing {

// A fresh directory under /tmp (short, so Unix socket paths fit), removed at the end.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ctlXXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

// Forwards to the real file system; Append or Sync fail on demand (a full disk, EIO).
class FaultyFileSystem final : public FileSystem {
 public:
  std::atomic<bool> fail_append{false};
  std::atomic<bool> fail_sync{false};
  std::atomic<bool> fail_write_file{false};

  Status CreateDirs(const std::string& d) override { return real_.CreateDirs(d); }
  StatusOr<std::vector<std::string>> ListDir(const std::string& d) override {
    return real_.ListDir(d);
  }
  StatusOr<std::string> ReadFile(const std::string& p) override { return real_.ReadFile(p); }
  StatusOr<std::string> ReadRange(const std::string& p, uint64_t o, uint64_t n) override {
    return real_.ReadRange(p, o, n);
  }
  StatusOr<std::unique_ptr<AppendFile>> OpenAppend(const std::string& p) override {
    RUNNEL_ASSIGN_OR_RETURN(auto f, real_.OpenAppend(p));
    return std::unique_ptr<AppendFile>(new File(this, std::move(f)));
  }
  Status WriteFileSynced(const std::string& p, std::string_view d) override {
    if (fail_write_file) return absl::InternalError("injected: write failed");
    return real_.WriteFileSynced(p, d);
  }
  Status Truncate(const std::string& p, uint64_t s) override { return real_.Truncate(p, s); }
  Status Rename(const std::string& a, const std::string& b) override { return real_.Rename(a, b); }
  Status Remove(const std::string& p) override { return real_.Remove(p); }
  Status SyncDir(const std::string& d) override { return real_.SyncDir(d); }

 private:
  class File final : public AppendFile {
   public:
    File(FaultyFileSystem* fs, std::unique_ptr<AppendFile> f) : fs_(fs), f_(std::move(f)) {}
    Status Append(std::string_view data) override {
      if (fs_->fail_append) {
        // Half the bytes reach the file, as with a disk that filled up mid-write.
        (void)f_->Append(data.substr(0, data.size() / 2));
        return absl::InternalError("injected: no space left on device");
      }
      return f_->Append(data);
    }
    Status Sync() override {
      if (fs_->fail_sync) return absl::InternalError("injected: fdatasync: I/O error");
      return f_->Sync();
    }
    uint64_t Size() const override { return f_->Size(); }
    Status Close() override { return f_->Close(); }

   private:
    FaultyFileSystem* fs_;
    std::unique_ptr<AppendFile> f_;
  };

  FileSystem& real_ = PosixFileSystem();
};

}  // namespace runnel::controllerd::testing
