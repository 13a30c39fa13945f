#include "controllerd/raft/sim/mem_storage.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "controllerd/raft/sim/checker.h"

namespace runnel::controllerd::raft::sim {

std::string_view CrashModeName(CrashMode mode) {
  switch (mode) {
    case CrashMode::kKeepUnsynced:
      return "keep-unsynced";
    case CrashMode::kLoseUnsynced:
      return "lose-unsynced";
    case CrashMode::kTorn:
      return "torn";
  }
  return "?";
}

void MemStorage::Log::TruncateFrom(int64_t offset) {
  if (offset >= end()) return;
  entries.resize(static_cast<size_t>(std::max<int64_t>(0, offset - start)));
}

void MemStorage::Log::DropBefore(int64_t offset) {
  if (offset <= start) return;
  if (offset >= end()) return Reset(offset);
  entries.erase(entries.begin(), entries.begin() + (offset - start));
  start = offset;
}

MemStorage::MemStorage(NodeId node, Checker* checker, StorageBugs bugs,
                       int64_t retain_before_snapshot)
    : node_(node),
      checker_(checker),
      bugs_(bugs),
      retain_before_snapshot_(retain_before_snapshot) {}

Status MemStorage::InjectedFailure(std::string_view call) {
  fail_next_write_ = false;
  return absl::InternalError(fmt::format("injected I/O error in {}", call));
}

void MemStorage::Violation(std::string why) const {
  if (checker_ != nullptr) checker_->Fail(fmt::format("node {} storage: {}", node_, why));
}

std::optional<int64_t> MemStorage::TermOf(const Log& log, int64_t offset) const {
  if (offset == -1) return 0;
  if (const Entry* e = log.At(offset)) return e->term;
  if (snapshot_id_.end_offset > 0 && offset == snapshot_id_.end_offset - 1) {
    return snapshot_id_.epoch;
  }
  return std::nullopt;
}

Status MemStorage::SetHardState(const HardState& state) {
  if (fail_next_write_) return InjectedFailure("SetHardState");
  if (checker_ != nullptr) checker_->HardStateStored(node_, hard_, state);
  hard_ = state;
  return absl::OkStatus();
}

StatusOr<int64_t> MemStorage::TermAt(int64_t offset) const {
  std::optional<int64_t> term = TermOf(log_, offset);
  if (term) return *term;
  std::string why =
      fmt::format("TermAt({}) outside the log [{}, {}) and snapshot {{{}, {}}}", offset, log_.start,
                  log_.end(), snapshot_id_.end_offset, snapshot_id_.epoch);
  Violation(why);
  return absl::OutOfRangeError(why);
}

StatusOr<std::vector<Entry>> MemStorage::Read(int64_t from, int64_t to, size_t max_bytes) const {
  if (from < log_.start || from >= to || to > log_.end()) {
    std::string why =
        fmt::format("Read({}, {}) outside the log [{}, {})", from, to, log_.start, log_.end());
    Violation(why);
    return absl::OutOfRangeError(why);
  }
  std::vector<Entry> out;
  size_t bytes = 0;
  for (int64_t o = from; o < to; ++o) {
    const Entry& e = *log_.At(o);
    if (!out.empty() && bytes + e.data.size() > max_bytes) break;
    bytes += e.data.size();
    out.push_back(e);
  }
  return out;
}

Status MemStorage::Append(std::span<const Entry> entries) {
  if (fail_next_write_) return InjectedFailure("Append");
  if (entries.empty()) return absl::OkStatus();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].offset != log_.end() + static_cast<int64_t>(i)) {
      std::string why = fmt::format("Append of offset {} (entry {} of {}) at log end {}",
                                    entries[i].offset, i, entries.size(), log_.end());
      Violation(why);
      return absl::InvalidArgumentError(why);
    }
  }
  std::optional<int64_t> prev_term = TermOf(log_, log_.end() - 1);
  if (!prev_term) {
    std::string why = fmt::format("Append at {}: the term before it is unknown", log_.end());
    Violation(why);
    return absl::InvalidArgumentError(why);
  }
  for (const Entry& e : entries) {
    if (checker_ != nullptr) checker_->Appended(node_, e, *prev_term);
    prev_term = e.term;
  }
  Op op;
  op.offset = entries.front().offset;
  op.entries.assign(entries.begin(), entries.end());
  log_.entries.insert(log_.entries.end(), entries.begin(), entries.end());
  pending_.push_back(std::move(op));
  return absl::OkStatus();
}

Status MemStorage::TruncateFrom(int64_t offset) {
  if (fail_next_write_) return InjectedFailure("TruncateFrom");
  std::string why;
  if (offset < log_.start || offset > log_.end()) {
    why = fmt::format("TruncateFrom({}) outside the log [{}, {}]", offset, log_.start, log_.end());
  } else if (offset < snapshot_id_.end_offset) {
    why = fmt::format("TruncateFrom({}) below the snapshot's end {}", offset,
                      snapshot_id_.end_offset);
  } else if (std::optional<int64_t> commit = commit_probe_ ? commit_probe_() : std::nullopt;
             commit && offset <= *commit) {
    why = fmt::format("TruncateFrom({}) at or below the commit offset {}", offset, *commit);
  }
  if (!why.empty()) {
    Violation(why);
    return absl::InvalidArgumentError(why);
  }
  if (offset == log_.end()) return absl::OkStatus();
  Op op;
  op.truncate = true;
  op.offset = offset;
  pending_.push_back(std::move(op));
  log_.TruncateFrom(offset);
  return absl::OkStatus();
}

void MemStorage::ApplyToDurable(const Op& op) {
  if (op.truncate) {
    if (op.offset < durable_.end()) {
      low_water_ = std::min(low_water_, op.offset);
      durable_.TruncateFrom(std::max(op.offset, durable_.start));
    }
    return;
  }
  if (op.offset != durable_.end()) {
    Violation(fmt::format("(simulator) replaying an append at {} onto a durable log ending at {}",
                          op.offset, durable_.end()));
    return;
  }
  durable_.entries.insert(durable_.entries.end(), op.entries.begin(), op.entries.end());
}

Status MemStorage::Sync() {
  if (fail_next_write_ || fail_next_sync_) {
    fail_next_sync_ = false;
    return InjectedFailure("Sync");
  }
  if (bugs_.sync_does_nothing) return absl::OkStatus();
  for (const Op& op : pending_) ApplyToDurable(op);
  pending_.clear();
  return absl::OkStatus();
}

Status MemStorage::SaveSnapshot(SnapshotId id, std::string data) {
  if (fail_next_write_) return InjectedFailure("SaveSnapshot");
  std::string why;
  std::optional<int64_t> commit = commit_probe_ ? commit_probe_() : std::nullopt;
  if (id.end_offset > log_.end()) {
    why = fmt::format("SaveSnapshot({}) beyond the log end {}", id.end_offset, log_.end());
  } else if (id.end_offset < snapshot_id_.end_offset) {
    why = fmt::format("SaveSnapshot({}) older than the stored snapshot {{{}, {}}}", id.end_offset,
                      snapshot_id_.end_offset, snapshot_id_.epoch);
  } else if (commit && id.end_offset - 1 > *commit) {
    why = fmt::format("SaveSnapshot({}) covers offsets above the commit offset {}", id.end_offset,
                      *commit);
  } else if (TermOf(log_, id.end_offset - 1) != id.epoch) {
    why =
        fmt::format("SaveSnapshot({{{}, {}}}) but the log has term {} at offset {}", id.end_offset,
                    id.epoch, TermOf(log_, id.end_offset - 1).value_or(-1), id.end_offset - 1);
  }
  if (!why.empty()) {
    Violation(why);
    return absl::InvalidArgumentError(why);
  }
  if (checker_ != nullptr) checker_->CheckSnapshot(node_, id, data, "SaveSnapshot");
  snapshot_id_ = id;
  snapshot_data_ = std::move(data);
  log_.DropBefore(std::max(log_.start, id.end_offset - retain_before_snapshot_));
  return absl::OkStatus();
}

Status MemStorage::InstallSnapshot(SnapshotId id, std::string data) {
  if (fail_next_write_) return InjectedFailure("InstallSnapshot");
  if (id.end_offset < snapshot_id_.end_offset) {
    std::string why =
        fmt::format("InstallSnapshot({{{}, {}}}) older than the stored snapshot {{{}, {}}}",
                    id.end_offset, id.epoch, snapshot_id_.end_offset, snapshot_id_.epoch);
    Violation(why);
    return absl::InvalidArgumentError(why);
  }
  if (checker_ != nullptr) checker_->CheckSnapshot(node_, id, data, "InstallSnapshot");
  bool keep = id.end_offset == 0 || TermOf(log_, id.end_offset - 1) == id.epoch;
  snapshot_id_ = id;
  snapshot_data_ = std::move(data);
  if (keep) {
    log_.DropBefore(std::max(log_.start, id.end_offset - retain_before_snapshot_));
  } else {
    low_water_ = std::min(low_water_, durable_.start);
    log_.Reset(id.end_offset);
    durable_.Reset(id.end_offset);
    pending_.clear();
  }
  return absl::OkStatus();
}

StatusOr<std::string> MemStorage::ReadSnapshot() const {
  if (!snapshot_data_) return absl::NotFoundError("no snapshot");
  return *snapshot_data_;
}

bool MemStorage::DurableLogFollowsSnapshot() const {
  int64_t end = snapshot_id_.end_offset;
  if (end == 0 || durable_.start == end) return true;
  const Entry* last = durable_.At(end - 1);
  return last != nullptr && last->term == snapshot_id_.epoch;
}

bool MemStorage::DurablyHolds(const Entry& entry) const {
  if (entry.offset < snapshot_id_.end_offset) return true;
  if (!DurableLogFollowsSnapshot()) return false;
  const Entry* e = durable_.At(entry.offset);
  return e != nullptr && *e == entry;
}

int64_t MemStorage::TakeDurableLowWater() {
  return std::exchange(low_water_, std::numeric_limits<int64_t>::max());
}

void MemStorage::Crash(CrashMode mode, std::mt19937_64& rng) {
  size_t keep = 0;
  switch (mode) {
    case CrashMode::kKeepUnsynced:
      keep = pending_.size();
      break;
    case CrashMode::kLoseUnsynced:
      keep = 0;
      break;
    case CrashMode::kTorn:
      keep = static_cast<size_t>(rng() % (pending_.size() + 1));
      break;
  }
  for (size_t i = 0; i < keep; ++i) ApplyToDurable(pending_[i]);
  if (mode == CrashMode::kTorn && keep < pending_.size() && !pending_[keep].truncate &&
      pending_[keep].entries.size() > 1) {
    // The write tore inside an append: some of its entries made it.
    Op part = pending_[keep];
    part.entries.resize(rng() % part.entries.size());
    if (!part.entries.empty()) ApplyToDurable(part);
  }
  if (bugs_.forget_synced_entry &&
      durable_.end() > std::max(durable_.start, snapshot_id_.end_offset)) {
    durable_.entries.pop_back();
  }
  if (bugs_.forget_vote) hard_.voted_for = kNoNode;
  // Recovery: a log that does not continue the snapshot is discarded (as InstallSnapshot does).
  if (!DurableLogFollowsSnapshot()) {
    durable_.Reset(snapshot_id_.end_offset);
  } else if (snapshot_id_.end_offset > 0) {
    durable_.DropBefore(
        std::max(durable_.start, snapshot_id_.end_offset - retain_before_snapshot_));
  }
  log_ = durable_;
  pending_.clear();
  ClearFaults();
  low_water_ = 0;
}

}  // namespace runnel::controllerd::raft::sim
