// The `records` payload of Produce, Fetch and friends: a run of record batches, either as
// bytes in memory (what a client sent; batches are validated and stored unchanged, see
// DESIGN.md) or as ranges of open segment files that a Fetch response sends to the socket
// with sendfile, so record bytes read from disk never pass through user space.
//
// Code that handles records must therefore not assume they are contiguous bytes in memory:
// use SizeInBytes(), and let the Writer decide how file ranges reach the output.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
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
  // Set instead of `data` by a Reader that borrows records (Reader::BorrowRecords): the
  // payload where it lies in the buffer being decoded, valid only as long as that buffer.
  // brokerd decodes Produce requests so, and the batches are copied once, to storaged.
  std::optional<std::span<const uint8_t>> borrowed = std::nullopt;

  // The payload as one run of bytes in memory, owned or borrowed; nullopt for null records.
  // Does not look at `files`.
  std::optional<std::span<const uint8_t>> Contiguous() const {
    if (borrowed) return borrowed;
    if (data) return std::span<const uint8_t>(*data);
    return std::nullopt;
  }
  bool IsNull() const { return files.empty() && !data.has_value() && !borrowed.has_value(); }
  size_t SizeInBytes() const {
    if (files.empty()) {
      std::optional<std::span<const uint8_t>> bytes = Contiguous();
      return bytes ? bytes->size() : 0;
    }
    int64_t n = 0;
    for (const FileSlice& s : files) n += s.length;
    return static_cast<size_t>(n);
  }

  // Same slices and same payload bytes, whether owned or borrowed.
  bool operator==(const Records& other) const {
    if (files != other.files) return false;
    std::optional<std::span<const uint8_t>> a = Contiguous();
    std::optional<std::span<const uint8_t>> b = other.Contiguous();
    if (a.has_value() != b.has_value()) return false;
    return !a || std::equal(a->begin(), a->end(), b->begin(), b->end());
  }
};

}  // namespace runnel::protocol
