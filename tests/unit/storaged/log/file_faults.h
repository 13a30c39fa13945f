// A fault-injecting FileFaults for storaged tests: installed for the life of the object, it
// fails the file operations that match its rules (an operation, a part of the path, from
// the Nth match, so many times), and counts every operation it is asked about.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/util/mutex.h"
#include "storaged/log/file_io.h"

namespace runnel::storaged::testing {

class FaultInjector : public FileFaults {
 public:
  FaultInjector() { SetFileFaults(this); }
  ~FaultInjector() override { SetFileFaults(nullptr); }
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // Fails `op` on paths containing `path_part` with `error`: the matches after the first
  // `skip`, `times` of them (-1: all). A write writes `torn_bytes` for real first.
  void Fail(FileOp op, std::string path_part, int error, int skip = 0, int times = -1,
            size_t torn_bytes = 0) {
    MutexLock lock(&mu_);
    rules_.push_back({op, std::move(path_part), skip, times, FileFault{error, torn_bytes}});
  }
  // Removes every rule (the disk has room again); the counts stay.
  void Clear() {
    MutexLock lock(&mu_);
    rules_.clear();
  }
  // Operations failed so far.
  int injected() const {
    MutexLock lock(&mu_);
    return injected_;
  }
  // Operations of kind `op` on paths containing `path_part` asked about so far.
  int Calls(FileOp op, std::string_view path_part) const {
    MutexLock lock(&mu_);
    int n = 0;
    for (const auto& [key, count] : calls_) {
      if (key.first == op && key.second.find(path_part) != std::string::npos) n += count;
    }
    return n;
  }

  FileFault Check(FileOp op, std::string_view path) override {
    MutexLock lock(&mu_);
    ++calls_[{op, std::string(path)}];
    for (Rule& r : rules_) {
      if (r.op != op || path.find(r.path_part) == std::string_view::npos) continue;
      if (r.skip > 0) {
        --r.skip;
        continue;
      }
      if (r.times == 0) continue;
      if (r.times > 0) --r.times;
      ++injected_;
      return r.fault;
    }
    return {};
  }

 private:
  struct Rule {
    FileOp op;
    std::string path_part;
    int skip;
    int times;
    FileFault fault;
  };
  mutable Mutex mu_;
  std::vector<Rule> rules_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<FileOp, std::string>, int> calls_ ABSL_GUARDED_BY(mu_);
  int injected_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace runnel::storaged::testing
