// Where one partition's latest appends lie in the segment files, from storaged's answers to
// this brokerd's appends. A fetch of those offsets, what a consumer keeping up asks for, is
// answered from it with no storaged call.
//
// PartitionView owns one per partition and keeps it true: it is cleared when the partition
// becomes another log (a snapshot, a loss of the watch stream, a new topic id) and trimmed
// below the log start; offsets at or above the high watermark are never answered from it.
// A log cut while storaged runs (none is today; replication will) must clear it too.
// Loop thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/runnel/storage.pb.h"

namespace runnel::brokerd {

// A segment file that recent appends went to, as storaged's append answers name it.
struct TailSegment {
  std::string path;
  uint64_t inode = 0;
};

// One answered append: its offsets and where its batches lie.
struct TailAppend {
  int64_t base_offset = 0;
  int64_t last_offset = 0;
  std::shared_ptr<const TailSegment> segment;
  int64_t position = 0;
  int32_t length = 0;
};

// A byte range of a tail segment to send.
struct TailSlice {
  std::shared_ptr<const TailSegment> segment;
  int64_t position = 0;
  int64_t length = 0;
};

class AppendTail {
 public:
  static constexpr size_t kMaxAppends = 1024;
  static constexpr int64_t kMaxBytes = 64 << 20;

  // An append of offsets [base_offset, last_offset] whose batches lie at `range`. Kept at
  // the end when it follows the tail in offsets, else the tail starts again with it (another
  // writer's appends came between); the oldest go beyond kMaxAppends appends or kMaxBytes
  // bytes. An empty range is ignored.
  void Add(int64_t base_offset, int64_t last_offset, const storage::FileRange& range);
  // The byte ranges that answer a fetch of `offset` with at most `max_bytes` (whole appends,
  // each one batch from a Produce request), below `high_watermark`; an empty list when the
  // first append there is larger than max_bytes and `min_one` is false (nothing fits), as
  // storaged's Read answers. nullopt when the tail cannot answer it as storaged would (the
  // offset outside the tail or [log_start_offset, high_watermark), or the first append
  // larger than max_bytes with `min_one`): then storaged is asked.
  std::optional<std::vector<TailSlice>> Read(int64_t offset, int64_t max_bytes, bool min_one,
                                             int64_t log_start_offset,
                                             int64_t high_watermark) const;
  // Forgets the appends wholly below `log_start_offset` (retention, DeleteRecords): they are
  // never sent again.
  void DropBelow(int64_t log_start_offset);
  void Clear();

  bool empty() const { return appends_.empty(); }
  size_t size() const { return appends_.size(); }
  int64_t bytes() const { return bytes_; }
  const std::deque<TailAppend>& appends() const { return appends_; }

 private:
  void DropOldest();  // which must exist

  // Consecutive in offsets, oldest first.
  std::deque<TailAppend> appends_;
  int64_t bytes_ = 0;
};

}  // namespace runnel::brokerd
