// A test hook, built only into test builds (RUNNEL_TESTS; `make build`'s Release binaries do
// not have it): when the environment variable RUNNEL_TEST_FAULTS_FILE names a file, a running
// storaged fails the file operations that file's rules describe, through storaged's file seam
// (storaged/log/file_io.h). An integration test can so make a real daemon's fsyncs or writes
// fail at the moment it chooses, and check what clients see.
//
// The file is read again when it changes (looked at no more than every 50 ms); a missing or
// empty file fails nothing. One rule per line:
//
//   <op> <errno> <path part>     op: write, sync, truncate, create, rename
//                                errno: EIO, ENOSPC, EDQUOT, EROFS
//
// e.g. `sync EIO /doomed-0/` fails every fsync of files under the partition doomed-0. A
// line that cannot be read is logged and skipped.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/util/mutex.h"
#include "storaged/log/file_io.h"

namespace runnel::storaged {

class FaultFile : public FileFaults {
 public:
  explicit FaultFile(std::string path) : path_(std::move(path)) {}

  FileFault Check(FileOp op, std::string_view path) override;

  // Installs the FaultFile of RUNNEL_TEST_FAULTS_FILE for the rest of the process (never
  // freed: the seam may be asked by any thread until the end); null when the variable is
  // not set.
  static FaultFile* InstallFromEnvironment();

 private:
  struct Rule {
    FileOp op;
    int error;
    std::string path_part;
  };
  void ReloadIfChanged() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  Mutex mu_;
  std::vector<Rule> rules_ ABSL_GUARDED_BY(mu_);
  std::string text_ ABSL_GUARDED_BY(mu_);  // the file's content the rules come from
  std::chrono::steady_clock::time_point next_look_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace runnel::storaged
