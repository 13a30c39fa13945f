// The file operations by which storaged changes its log dirs: whole reads and writes at a
// position (pread/pwrite retried until every byte is done), sync, truncate, create and
// rename. Segment files, index files, checkpoints and metadata files all go through these,
// so one seam sees every write and every sync storaged makes to partition logs.
//
// The seam: a test installs a FileFaults (SetFileFaults) and every operation below asks it
// first, so a test can make the Nth write fail with ENOSPC, a sync with EIO, a creation of
// one path fail, without a real device. With none installed (production) each operation
// costs one relaxed atomic load and a branch more than the system call.
//
// Errors: ENOSPC and EDQUOT are ResourceExhausted ("the disk is full"), other errnos
// Internal; both name the operation and the file.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/util/status.h"

namespace runnel::storaged {

// What a FileFaults is asked about.
enum class FileOp {
  kWrite,     // pwrite of data (PwriteFull)
  kSync,      // fsync, fdatasync, syncfs (SyncFd, SyncFileSystemOf)
  kTruncate,  // ftruncate (TruncateFd)
  kCreate,    // a file opened with O_CREAT, a directory made (OpenFile, MakeDir)
  kRename,    // rename (RenameFile)
};

// What to do with one operation.
struct FileFault {
  int error = 0;  // errno to fail with; 0 lets the operation run
  // kWrite only: this many bytes are written for real before the error (a torn write, as a
  // disk filling up mid-write gives: a short write, then ENOSPC).
  size_t torn_bytes = 0;
};

// A test's fault injector. Check runs before every operation, on the thread doing it, with
// the file's path (for operations on an fd, the path the fd resolves to now), and must be
// thread-safe.
class FileFaults {
 public:
  virtual ~FileFaults() = default;
  virtual FileFault Check(FileOp op, std::string_view path) = 0;
};

// Installs `faults` for the whole process (nullptr removes it). The caller keeps it alive
// until it is removed. For tests.
void SetFileFaults(FileFaults* faults);

// Reads exactly `n` bytes at `pos`; a short read (end of file) is DataLoss. `path`, when
// given, names the file in the message ("read PATH: ...", "PATH: unexpected end of file").
Status PreadFull(int fd, uint8_t* buf, size_t n, int64_t pos, std::string_view path = "");
// Writes exactly `n` bytes at `pos`.
Status PwriteFull(int fd, const uint8_t* buf, size_t n, int64_t pos, std::string_view path = "");
// fdatasync (`data_only`) or fsync of `fd`.
Status SyncFd(int fd, bool data_only, std::string_view path);
// syncfs of the file system `fd` is on.
Status SyncFileSystemOf(int fd, std::string_view path);
// ftruncate of `fd` to `size` bytes.
Status TruncateFd(int fd, int64_t size, std::string_view path);
// open(2) with O_CLOEXEC added; an O_CREAT open is a kCreate. A missing file (ENOENT) is
// NotFound. The caller closes the descriptor.
StatusOr<int> OpenFile(std::string_view path, int flags, mode_t mode = 0644);
// mkdir(2); `*made` says whether it made the directory (false: it existed).
Status MakeDir(std::string_view path, mode_t mode, bool* made);
// rename(2).
Status RenameFile(std::string_view from, std::string_view to);

}  // namespace runnel::storaged
