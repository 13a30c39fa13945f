// Checks shared by the fault tests: the batches a log of the crash workload
// (crash_workload.h) must hold, and a whole-log verification against them.
#pragma once

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fault/crash_workload.h"

namespace runnel::storaged::fault {

// The expected batches, built once each and stamped as the log stamps them (base offset,
// leader epoch), with the offsets they must have.
class ExpectedBatches {
 public:
  explicit ExpectedBatches(uint64_t seed) : seed_(seed), offsets_{0} {}

  // The base offset of batch n (= the log end offset after n batches).
  int64_t BaseOffset(int64_t n) {
    while (int64_t(offsets_.size()) <= n) {
      int64_t i = int64_t(offsets_.size()) - 1;
      offsets_.push_back(offsets_.back() + RecordCount(seed_, i));
    }
    return offsets_[size_t(n)];
  }

  const std::vector<uint8_t>& Bytes(int64_t n) {
    while (int64_t(bytes_.size()) <= n) {
      int64_t i = int64_t(bytes_.size());
      // A batch that fails to build stays empty and then matches nothing.
      StatusOr<std::vector<uint8_t>> built = BuildBatch(seed_, i);
      std::vector<uint8_t> b = built.ok() ? std::move(*built) : std::vector<uint8_t>{};
      if (!b.empty()) {
        record::SetBaseOffset(b, BaseOffset(i));
        record::SetPartitionLeaderEpoch(b, EpochOf(i));
      }
      bytes_.push_back(std::move(b));
    }
    return bytes_[size_t(n)];
  }

 private:
  uint64_t seed_;
  std::vector<int64_t> offsets_;
  std::vector<std::vector<uint8_t>> bytes_;
};

inline StatusOr<std::vector<uint8_t>> PreadRange(const std::string& path, int64_t position,
                                                 int64_t length) {
  std::vector<uint8_t> out(static_cast<size_t>(length));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(fmt::format("open {}: {}", path, std::strerror(errno)));
  ssize_t r = ::pread(fd, out.data(), out.size(), position);
  ::close(fd);
  if (r != ssize_t(out.size())) {
    return absl::DataLossError(
        fmt::format("{}: read {} of {} bytes at {}", path, r, length, position));
  }
  return out;
}

// What one verification found.
struct Found {
  int64_t batches = 0;
  int64_t end = 0;
  int segments = 0;
};

// Checks the whole log against the workload: whole batches only, contiguous offsets, CRCs,
// bytes; reads through the Log API; leader epochs. Returns "" or what is wrong.
inline std::string VerifyLog(const Log& log, ExpectedBatches& expected, Rng& rng, Found* found) {
  LogState state = log.State();
  if (state.log_start_offset != 0) {
    return fmt::format("log start offset {} (nothing was deleted)", state.log_start_offset);
  }
  std::vector<std::shared_ptr<Segment>> segments = log.Segments();
  if (segments.empty()) return "no segments";
  int64_t n = 0;
  for (size_t s = 0; s < segments.size(); ++s) {
    const Segment& seg = *segments[s];
    const bool last = s + 1 == segments.size();
    struct stat st;
    if (::stat(seg.log_path().c_str(), &st) != 0) return fmt::format("stat {}", seg.log_path());
    if (st.st_size != seg.size()) {
      return fmt::format("{} is {} bytes, the segment says {}", seg.log_path(), st.st_size,
                         seg.size());
    }
    if (seg.size() == 0) {
      if (!last) return fmt::format("non-active segment {} is empty", seg.log_path());
      if (seg.base_offset() != expected.BaseOffset(n)) {
        return fmt::format("empty active segment {} does not start at the end {}", seg.log_path(),
                           expected.BaseOffset(n));
      }
      continue;
    }
    StatusOr<std::vector<uint8_t>> bytes = PreadRange(seg.log_path(), 0, seg.size());
    if (!bytes.ok()) return std::string(bytes.status().message());
    StatusOr<std::vector<record::BatchView>> views = record::SplitBatches(*bytes);
    if (!views.ok()) {
      return fmt::format("{} is not whole batches: {}", seg.log_path(), views.status().message());
    }
    if ((*views)[0].base_offset() != seg.base_offset()) {
      return fmt::format("segment {} starts with offset {}", seg.log_path(),
                         (*views)[0].base_offset());
    }
    for (const record::BatchView& v : *views) {
      if (!v.CrcValid()) return fmt::format("batch {} at offset {}: bad CRC", n, v.base_offset());
      if (v.base_offset() != expected.BaseOffset(n)) {
        return fmt::format("batch {} has base offset {}, expected {} (offsets not contiguous)", n,
                           v.base_offset(), expected.BaseOffset(n));
      }
      const std::vector<uint8_t>& want = expected.Bytes(n);
      if (v.size_in_bytes() != want.size() ||
          std::memcmp(v.bytes().data(), want.data(), want.size()) != 0) {
        size_t i = 0;
        while (i < want.size() && i < v.size_in_bytes() && v.bytes()[i] == want[i]) ++i;
        return fmt::format(
            "batch {} (offset {}, {} bytes, in {}) differs from the one built "
            "({} bytes) at byte {}",
            n, v.base_offset(), v.size_in_bytes(), seg.log_path(), want.size(), i);
      }
      ++n;
    }
  }
  const int64_t end = expected.BaseOffset(n);
  if (state.log_end_offset != end) {
    return fmt::format("log end offset {}, but the {} batches end at {}", state.log_end_offset, n,
                       end);
  }
  found->batches = n;
  found->end = end;
  found->segments = int(segments.size());

  // Reads through the engine: single batches found via the indexes, a run of batches across
  // segments, the end, past the end.
  for (int i = 0; n > 0 && i < 8; ++i) {
    int64_t b = int64_t(rng.Below(uint64_t(n)));
    int64_t first = expected.BaseOffset(b), next = expected.BaseOffset(b + 1);
    int64_t offset = first + int64_t(rng.Below(uint64_t(next - first)));
    ReadResult r = log.Read(offset, 1, /*min_one_batch=*/true);
    if (r.error != protocol::ErrorCode::kNone || r.ranges.size() != 1) {
      return fmt::format("Read({}): error {}, {} ranges", offset, int(r.error), r.ranges.size());
    }
    StatusOr<std::vector<uint8_t>> got =
        PreadRange(r.ranges[0].path, r.ranges[0].position, r.ranges[0].length);
    if (!got.ok() || *got != expected.Bytes(b)) {
      return fmt::format("Read({}) did not return batch {}", offset, b);
    }
  }
  if (n > 0) {
    int64_t b = int64_t(rng.Below(uint64_t(n)));
    ReadResult r = log.Read(expected.BaseOffset(b), 200 << 10, true);
    if (r.error != protocol::ErrorCode::kNone)
      return fmt::format("Read run: error {}", int(r.error));
    int64_t want_n = b;
    for (const FileRange& range : r.ranges) {
      StatusOr<std::vector<uint8_t>> got = PreadRange(range.path, range.position, range.length);
      if (!got.ok()) return std::string(got.status().message());
      StatusOr<std::vector<record::BatchView>> views = record::SplitBatches(*got);
      if (!views.ok()) return fmt::format("Read run: {}", views.status().message());
      for (const record::BatchView& v : *views) {
        const std::vector<uint8_t>& want = expected.Bytes(want_n++);
        if (!std::equal(v.bytes().begin(), v.bytes().end(), want.begin(), want.end())) {
          return fmt::format("Read run from batch {}: batch {} differs", b, want_n - 1);
        }
      }
    }
    if (want_n == b) return fmt::format("Read run from batch {} returned nothing", b);
    // A timestamp lookup lands on the first record of the batch (via the time index).
    OffsetLookup t = log.ListOffset(kBaseTimestamp + b * kTimestampStep);
    if (t.error != protocol::ErrorCode::kNone || t.offset != expected.BaseOffset(b)) {
      return fmt::format("ListOffset(timestamp of batch {}) = {}, expected {}", b, t.offset,
                         expected.BaseOffset(b));
    }
  }
  ReadResult at_end = log.Read(end, 1 << 20, true);
  if (at_end.error != protocol::ErrorCode::kNone || !at_end.ranges.empty()) {
    return fmt::format("Read at the end {}: error {}, {} ranges", end, int(at_end.error),
                       at_end.ranges.size());
  }
  if (log.Read(end + 1, 1 << 20, true).error != protocol::ErrorCode::kOffsetOutOfRange) {
    return "Read past the end is not OFFSET_OUT_OF_RANGE";
  }
  if (log.ListOffset(kLatestTimestamp).offset != end) return "ListOffset(latest) != end";

  // Leader epochs: epoch e starts at batch 64e.
  std::vector<EpochEntry> want_epochs;
  for (int64_t b = 0; b < n; b += kBatchesPerEpoch) {
    want_epochs.push_back({EpochOf(b), expected.BaseOffset(b)});
  }
  std::vector<EpochEntry> epochs = log.LeaderEpochs();
  if (epochs != want_epochs) {
    std::string have, want;
    for (const EpochEntry& e : epochs) have += fmt::format(" ({} {})", e.epoch, e.start_offset);
    for (const EpochEntry& e : want_epochs) {
      want += fmt::format(" ({} {})", e.epoch, e.start_offset);
    }
    return fmt::format("leader epochs [{} ] expected [{} ]", have, want);
  }
  return "";
}

}  // namespace runnel::storaged::fault
