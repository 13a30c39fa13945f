// Helpers shared by the controllerd tests: file surgery, a fault-injecting FS.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <string>

#include "controllerd/file_system.h"
#include "tests/util/reserved_port.h"

namespace runnel::controllerd::testing {

// A 127.0.0.1 port reserved for this test process; 0 when none could be had.
inline int FreePort() { return runnel::testing::ReservePort(); }

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

// Forwards every call to the real file system, but first asks Inject() about each call that
// changes the disk (and each Append and Sync of an opened file): an error from it is
// returned instead, after TornBytes() bytes of a refused Append reached the file.
class InjectingFileSystem : public FileSystem {
 public:
  enum class Op {
    kMkdir,
    kOpen,
    kAppend,
    kSync,
    kWriteFile,
    kTruncate,
    kRename,
    kRemove,
    kSyncDir
  };

  Status CreateDirs(const std::string& d) override {
    RUNNEL_RETURN_IF_ERROR(Inject(Op::kMkdir, "mkdir"));
    return real_.CreateDirs(d);
  }
  StatusOr<std::vector<std::string>> ListDir(const std::string& d) override {
    return real_.ListDir(d);
  }
  StatusOr<std::string> ReadFile(const std::string& p) override { return real_.ReadFile(p); }
  StatusOr<std::string> ReadRange(const std::string& p, uint64_t o, uint64_t n) override {
    return real_.ReadRange(p, o, n);
  }
  StatusOr<std::unique_ptr<AppendFile>> OpenAppend(const std::string& p) override {
    RUNNEL_RETURN_IF_ERROR(Inject(Op::kOpen, "open " + p));
    RUNNEL_ASSIGN_OR_RETURN(auto f, real_.OpenAppend(p));
    return std::unique_ptr<AppendFile>(new File(this, std::move(f)));
  }
  Status WriteFileSynced(const std::string& p, std::string_view d) override {
    RUNNEL_RETURN_IF_ERROR(Inject(Op::kWriteFile, "write " + p));
    return real_.WriteFileSynced(p, d);
  }
  Status Truncate(const std::string& p, uint64_t s) override {
    RUNNEL_RETURN_IF_ERROR(Inject(Op::kTruncate, "truncate " + p));
    return real_.Truncate(p, s);
  }
  Status Rename(const std::string& a, const std::string& b) override {
    RUNNEL_RETURN_IF_ERROR(Inject(Op::kRename, "rename " + a));
    return real_.Rename(a, b);
  }
  Status Remove(const std::string& p) override {
    RUNNEL_RETURN_IF_ERROR(Inject(Op::kRemove, "remove " + p));
    return real_.Remove(p);
  }
  Status SyncDir(const std::string& d) override {
    RUNNEL_RETURN_IF_ERROR(Inject(Op::kSyncDir, "fsync " + d));
    return real_.SyncDir(d);
  }

 protected:
  // OK lets the call through; `what` names it for the error message.
  virtual Status Inject(Op op, const std::string& what) = 0;
  // Of an Append of `size` bytes that Inject refused, how many still reach the file.
  virtual size_t TornBytes(size_t size) { return 0; }

 private:
  class File final : public AppendFile {
   public:
    File(InjectingFileSystem* fs, std::unique_ptr<AppendFile> f) : fs_(fs), f_(std::move(f)) {}
    Status Append(std::string_view data) override {
      if (Status st = fs_->Inject(Op::kAppend, "append"); !st.ok()) {
        if (size_t torn = fs_->TornBytes(data.size()); torn > 0) {
          (void)f_->Append(data.substr(0, torn));
        }
        return st;
      }
      return f_->Append(data);
    }
    Status Sync() override {
      RUNNEL_RETURN_IF_ERROR(fs_->Inject(Op::kSync, "fdatasync"));
      return f_->Sync();
    }
    uint64_t Size() const override { return f_->Size(); }
    Status Close() override { return f_->Close(); }

   private:
    InjectingFileSystem* fs_;
    std::unique_ptr<AppendFile> f_;
  };

  FileSystem& real_ = PosixFileSystem();
};

// Append, Sync or WriteFileSynced fail on demand (a full disk, EIO).
class FaultyFileSystem final : public InjectingFileSystem {
 public:
  std::atomic<bool> fail_append{false};
  std::atomic<bool> fail_sync{false};
  std::atomic<bool> fail_write_file{false};

 protected:
  Status Inject(Op op, const std::string&) override {
    if (op == Op::kAppend && fail_append) {
      return absl::InternalError("injected: no space left on device");
    }
    if (op == Op::kSync && fail_sync) return absl::InternalError("injected: fdatasync: I/O error");
    if (op == Op::kWriteFile && fail_write_file) {
      return absl::InternalError("injected: write failed");
    }
    return absl::OkStatus();
  }
  // Half the bytes reach the file, as with a disk that filled up mid-write.
  size_t TornBytes(size_t size) override { return size / 2; }
};

}  // namespace runnel::controllerd::testing
