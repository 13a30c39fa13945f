// The `records` payload of Produce, Fetch and friends: a run of record batches, either as
// bytes in memory (what a client sent; batches are validated and stored unchanged, see
// DESIGN.md) or as ranges of open segment files that a Fetch response sends to the socket
// with sendfile, so record bytes read from disk never pass through user space.
//
// Code that handles records must therefore not assume they are contiguous bytes in memory:
// use SizeInBytes(), and let the Writer decide how file ranges reach the output.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace runnel::protocol {

using Bytes = std::vector<uint8_t>;

// An open file whose bytes a response sends; the descriptor is closed when the last user
// (a queued response, a slice in a message) lets go, so a segment deleted by retention
// meanwhile stays readable until then. Shared as std::shared_ptr<const FileHandle>.
class FileHandle {
 public:
  // Takes ownership of `fd` (which may be -1: nothing to close).
  explicit FileHandle(int fd) : fd_(fd) {}
  ~FileHandle() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;

  int fd() const { return fd_; }

 private:
  int fd_;
};

// `length` bytes of `file` from byte `position`.
struct FileSlice {
  std::shared_ptr<const FileHandle> file;
  int64_t position = 0;
  int64_t length = 0;

  // Same file object (not same contents), position and length.
  bool operator==(const FileSlice&) const = default;
};

struct Records {
  // nullopt is Kafka's null records (length -1), distinct from an empty payload. Unused when
  // `files` is not empty.
  std::optional<Bytes> data;
  // When not empty, the records are these file ranges back to back (never null). The "= {}"
  // keeps Records{bytes} free of -Wmissing-field-initializers.
  std::vector<FileSlice> files = {};

  bool IsNull() const { return files.empty() && !data.has_value(); }
  size_t SizeInBytes() const {
    if (files.empty()) return data ? data->size() : 0;
    int64_t n = 0;
    for (const FileSlice& s : files) n += s.length;
    return static_cast<size_t>(n);
  }

  bool operator==(const Records&) const = default;
};

}  // namespace runnel::protocol
