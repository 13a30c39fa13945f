#include "brokerd/storage/append_tail.h"

#include <algorithm>
#include <utility>

namespace runnel::brokerd {

void AppendTail::Add(int64_t base_offset, int64_t last_offset, const storage::FileRange& range) {
  if (range.path().empty() || range.length() <= 0 || last_offset < base_offset) return;
  if (!appends_.empty() && appends_.back().last_offset + 1 != base_offset) Clear();
  std::shared_ptr<const TailSegment> segment;
  if (!appends_.empty() && appends_.back().segment->path == range.path() &&
      appends_.back().segment->inode == range.inode()) {
    segment = appends_.back().segment;
  } else {
    segment = std::make_shared<const TailSegment>(TailSegment{range.path(), range.inode()});
  }
  appends_.push_back(
      TailAppend{base_offset, last_offset, std::move(segment), range.position(), range.length()});
  bytes_ += range.length();
  while (appends_.size() > kMaxAppends || (appends_.size() > 1 && bytes_ > kMaxBytes)) {
    DropOldest();
  }
}

std::optional<std::vector<TailSlice>> AppendTail::Read(int64_t offset, int64_t max_bytes,
                                                       bool min_one, int64_t log_start_offset,
                                                       int64_t high_watermark) const {
  if (appends_.empty()) return std::nullopt;
  if (offset < log_start_offset || offset >= high_watermark) return std::nullopt;
  if (offset < appends_.front().base_offset || offset > appends_.back().last_offset) {
    return std::nullopt;
  }
  // The append holding `offset` (the tail's offsets have no gap).
  auto a = std::partition_point(appends_.begin(), appends_.end(),
                                [offset](const TailAppend& t) { return t.last_offset < offset; });
  std::vector<TailSlice> out;
  int64_t bytes = 0;
  for (; a != appends_.end() && a->last_offset < high_watermark; ++a) {
    if (bytes + a->length > max_bytes) {
      if (bytes == 0 && min_one) return std::nullopt;  // storaged cuts it to one batch
      break;
    }
    if (!out.empty() && out.back().segment == a->segment &&
        out.back().position + out.back().length == a->position) {
      out.back().length += a->length;
    } else {
      out.push_back(TailSlice{a->segment, a->position, a->length});
    }
    bytes += a->length;
  }
  return out;
}

void AppendTail::DropBelow(int64_t log_start_offset) {
  while (!appends_.empty() && appends_.front().last_offset < log_start_offset) DropOldest();
}

void AppendTail::Clear() {
  appends_.clear();
  bytes_ = 0;
}

void AppendTail::DropOldest() {
  bytes_ -= appends_.front().length;
  appends_.pop_front();
}

}  // namespace runnel::brokerd
