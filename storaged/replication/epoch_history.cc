#include "storaged/replication/epoch_history.h"

#include <algorithm>
#include <iterator>

namespace runnel::storaged {

bool EpochEntriesRise(const std::vector<EpochEntry>& entries) {
  for (size_t i = 0; i < entries.size(); ++i) {
    const EpochEntry& e = entries[i];
    if (e.epoch < 0 || e.start_offset < 0) return false;
    if (i > 0 &&
        (e.epoch <= entries[i - 1].epoch || e.start_offset <= entries[i - 1].start_offset)) {
      return false;
    }
  }
  return true;
}

std::optional<EpochEntry> EpochHistory::Latest() const {
  if (entries_.empty()) return std::nullopt;
  return entries_.back();
}

bool EpochHistory::Assign(int32_t epoch, int64_t start_offset) {
  if (!entries_.empty() && entries_.back().epoch == epoch &&
      entries_.back().start_offset <= start_offset) {
    return false;  // the epoch is already known to start here or earlier
  }
  // What the log says now wins: an entry for this epoch or a later one, or starting at or
  // after this offset, contradicts it.
  while (!entries_.empty() &&
         (entries_.back().epoch >= epoch || entries_.back().start_offset >= start_offset)) {
    entries_.pop_back();
  }
  entries_.push_back({epoch, start_offset});
  return true;
}

bool EpochHistory::TruncateFromEnd(int64_t end_offset) {
  if (end_offset < 0 || entries_.empty() || entries_.back().start_offset < end_offset) {
    return false;
  }
  while (!entries_.empty() && entries_.back().start_offset >= end_offset) entries_.pop_back();
  return true;
}

bool EpochHistory::TruncateFromStart(int64_t start_offset) {
  // Entries starting at or before the new log start: the last of them covers it.
  auto first_after = std::find_if(entries_.begin(), entries_.end(), [&](const EpochEntry& e) {
    return e.start_offset > start_offset;
  });
  if (first_after == entries_.begin()) return false;
  std::vector<EpochEntry> after{{std::prev(first_after)->epoch, start_offset}};
  after.insert(after.end(), first_after, entries_.end());
  if (after == entries_) return false;
  entries_ = std::move(after);
  return true;
}

std::optional<std::pair<int32_t, int64_t>> EpochHistory::EndOffsetFor(
    int32_t epoch, int64_t log_end_offset) const {
  if (epoch < 0 || entries_.empty()) return std::nullopt;
  if (entries_.back().epoch == epoch) return std::make_pair(epoch, log_end_offset);
  auto higher =
      std::upper_bound(entries_.begin(), entries_.end(), epoch,
                       [](int32_t e, const EpochEntry& entry) { return e < entry.epoch; });
  // Above every epoch known: nothing to say (the leader fences such requests before asking).
  if (higher == entries_.end()) return std::nullopt;
  // Below every epoch known (its entries went with the log start): the requested epoch ends
  // where the first known one starts, so a follower truncates no further than that.
  if (higher == entries_.begin()) return std::make_pair(epoch, higher->start_offset);
  return std::make_pair(std::prev(higher)->epoch, higher->start_offset);
}

std::optional<int32_t> EpochHistory::EpochAt(int64_t offset) const {
  auto after =
      std::upper_bound(entries_.begin(), entries_.end(), offset,
                       [](int64_t o, const EpochEntry& entry) { return o < entry.start_offset; });
  if (after == entries_.begin()) return std::nullopt;
  return std::prev(after)->epoch;
}

}  // namespace runnel::storaged
