#include "controllerd/raft_log_store.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/log/log.h"
#include "common/util/crc32c.h"

namespace runnel::controllerd {
namespace {

using logformat::DecodeFrame;
using logformat::DecodeStatus;
using logformat::GetU32;
using logformat::GetU64;
using logformat::PutU32;
using logformat::PutU64;
using raft::SnapshotId;

const log::ModuleLogger kLog("controllerd.raft");

constexpr size_t kQuorumStateSize = 20;
constexpr uint32_t kQuorumStateVersion = 1;
constexpr size_t kMaxPayload = logformat::kMaxFrameLength - logformat::kMinFrameLength;

std::string EncodeQuorumState(const raft::HardState& s) {
  std::string out(kQuorumStateSize, '\0');
  PutU32(out.data() + 4, kQuorumStateVersion);
  PutU64(out.data() + 8, static_cast<uint64_t>(s.term));
  PutU32(out.data() + 16, static_cast<uint32_t>(s.voted_for));
  PutU32(out.data(), crc32c::Value(out.data() + 4, kQuorumStateSize - 4));
  return out;
}

// The error says what is wrong with the bytes.
StatusOr<raft::HardState> DecodeQuorumState(std::string_view data) {
  if (data.size() != kQuorumStateSize) {
    return absl::DataLossError(
        fmt::format("{} byte(s) where {} were expected", data.size(), kQuorumStateSize));
  }
  uint32_t stored = GetU32(data.data());
  uint32_t crc = crc32c::Value(data.data() + 4, kQuorumStateSize - 4);
  if (stored != crc) {
    return absl::DataLossError(
        fmt::format("crc mismatch (stored {:#010x}, computed {:#010x})", stored, crc));
  }
  uint32_t version = GetU32(data.data() + 4);
  if (version != kQuorumStateVersion) {
    return absl::DataLossError(fmt::format("unknown version {}", version));
  }
  raft::HardState s;
  s.term = static_cast<int64_t>(GetU64(data.data() + 8));
  s.voted_for = static_cast<raft::NodeId>(GetU32(data.data() + 16));
  if (s.term < 0 || s.voted_for < raft::kNoNode) {
    return absl::DataLossError(
        fmt::format("term {} or voted_for {} out of range", s.term, s.voted_for));
  }
  return s;
}

}  // namespace

StatusOr<std::unique_ptr<RaftLogStore>> RaftLogStore::Open(FileSystem& fs, const std::string& dir) {
  std::string pdir = fmt::format("{}/{}", dir, logformat::kPartitionDirName);
  RUNNEL_RETURN_IF_ERROR(fs.CreateDirs(pdir));
  std::unique_ptr<RaftLogStore> store(new RaftLogStore(fs, pdir));
  RUNNEL_RETURN_IF_ERROR(store->Recover());
  return store;
}

RaftLogStore::~RaftLogStore() { (void)Close(); }

std::string RaftLogStore::PathOf(std::string_view name) const {
  return fmt::format("{}/{}", dir_, name);
}

std::string RaftLogStore::SegmentPath(int64_t base) const {
  return PathOf(logformat::SegmentFileName(base));
}

// ---------------------------------------------------------------------------------------------
// Recovery

Status RaftLogStore::Recover() {
  const auto& logger = kLog();
  RUNNEL_ASSIGN_OR_RETURN(std::vector<std::string> names, fs_.ListDir(dir_));
  std::vector<int64_t> bases;
  std::vector<SnapshotId> snapshots;
  bool has_quorum_state = false;
  for (const std::string& name : names) {
    if (name.ends_with(logformat::kTempSuffix)) {
      // An atomic write that did not reach its rename.
      RUNNEL_RETURN_IF_ERROR(fs_.Remove(PathOf(name)));
      report_.removed_files.push_back(name);
      logger->warn("removed unfinished file {}/{}", dir_, name);
    } else if (auto base = logformat::ParseSegmentFileName(name)) {
      bases.push_back(*base);
    } else if (auto id = logformat::ParseSnapshotFileName(name)) {
      snapshots.push_back(*id);
    } else if (name == kQuorumStateFileName) {
      has_quorum_state = true;
    } else {
      logger->warn("ignoring unknown file {}/{}", dir_, name);
    }
  }
  std::sort(bases.begin(), bases.end());
  std::sort(snapshots.rbegin(), snapshots.rend());

  RUNNEL_RETURN_IF_ERROR(ScanSegments(bases));
  bool cut = !report_.truncation_reason.empty();

  // The snapshot to start from: the newest intact one the log can continue from; the next
  // one is kept as the fallback.
  for (const SnapshotId& id : snapshots) {
    std::string name = logformat::SnapshotFileName(id);
    if (id.end_offset < start_offset_) {
      report_.skipped_snapshots.push_back(name);
      logger->warn("skipping snapshot {}/{}: the log after it starts only at offset {}", dir_, name,
                   start_offset_);
      continue;
    }
    StatusOr<std::string> payload = LoadSnapshotPayload(id);
    if (!payload.ok()) {
      report_.skipped_snapshots.push_back(name);
      logger->warn("skipping corrupt snapshot: {}", std::string(payload.status().message()));
      continue;
    }
    if (!latest_) {
      latest_ = id;
    } else {
      previous_ = id;
      break;
    }
  }
  if (!latest_ && start_offset_ != 0) {
    return absl::DataLossError(
        fmt::format("metadata log in {} starts at offset {} but no intact snapshot covers the "
                    "offsets before it; refusing to start",
                    dir_, start_offset_));
  }
  // Before any repair: the highest term this data dir has seen, for a missing quorum-state.
  int64_t seen_term = std::max(entries_.empty() ? int64_t{0} : entries_.back().term,
                               latest_ ? latest_->epoch : int64_t{0});

  // Without quorum-state the data dir is the single voter's, whose snapshot epochs may be
  // above the term of their last entry.
  RUNNEL_ASSIGN_OR_RETURN(bool discarded, ReconcileLogWithSnapshot(!has_quorum_state));

  if (segments_.empty()) segments_.push_back(end_offset_);
  RUNNEL_RETURN_IF_ERROR(OpenActive(segments_.back()));
  if (cut && !discarded) {
    // The cut segment is the active one: make the truncation durable.
    Status st = active_->Sync();
    if (!st.ok()) {
      return Status(st.code(),
                    fmt::format("fdatasync {}: {}", SegmentPath(segments_.back()), st.message()));
    }
  }
  RUNNEL_RETURN_IF_ERROR(fs_.SyncDir(dir_));
  RecountBytesSinceSnapshot();

  // Last: a quorum-state written for a single voter's dir marks it converted.
  RUNNEL_RETURN_IF_ERROR(LoadHardState(has_quorum_state, seen_term));
  logger->info("metadata log {}: offsets [{}, {}), snapshot {}, term {}, voted for {}", dir_,
               start_offset_, end_offset_, latest_ ? logformat::SnapshotFileName(*latest_) : "none",
               hard_state_.term, hard_state_.voted_for);
  return absl::OkStatus();
}

Status RaftLogStore::ScanSegments(const std::vector<int64_t>& bases) {
  const auto& logger = kLog();
  segments_ = bases;
  int64_t expected = bases.empty() ? 0 : bases.front();
  start_offset_ = expected;
  int64_t last_term = 0;
  for (size_t i = 0; i < bases.size(); ++i) {
    int64_t base = bases[i];
    std::string name = logformat::SegmentFileName(base);
    if (base != expected) {
      return absl::DataLossError(fmt::format(
          "metadata log in {} is missing offsets [{}, {}): segment {} does not follow the one "
          "before it; refusing to start rather than lose committed metadata",
          dir_, expected, base, name));
    }
    RUNNEL_ASSIGN_OR_RETURN(std::string data, fs_.ReadFile(PathOf(name)));
    uint64_t pos = 0;
    std::string problem;
    while (pos < data.size()) {
      logformat::Decoded d = DecodeFrame(std::string_view(data).substr(pos));
      if (d.status != DecodeStatus::kOk) {
        problem = d.why;
      } else if (d.frame.offset != expected) {
        problem =
            fmt::format("entry has offset {} where {} was expected", d.frame.offset, expected);
      } else if (d.frame.term < last_term) {
        problem = fmt::format("entry {} has term {} after term {}", d.frame.offset, d.frame.term,
                              last_term);
      }
      if (!problem.empty()) break;
      entries_.push_back(EntryLoc{base, pos, static_cast<uint32_t>(d.frame_size), d.frame.term});
      last_term = d.frame.term;
      ++expected;
      pos += d.frame_size;
    }
    if (problem.empty()) continue;

    // Cut here. Later segments go first, newest first, so a crash part way leaves a log
    // without a gap.
    report_.truncation_reason = fmt::format("{} at byte {} of {}", problem, pos, name);
    for (size_t j = bases.size() - 1; j > i; --j) {
      std::string later = logformat::SegmentFileName(bases[j]);
      RUNNEL_ASSIGN_OR_RETURN(std::string later_data, fs_.ReadFile(PathOf(later)));
      report_.truncated_bytes += later_data.size();
      RUNNEL_RETURN_IF_ERROR(fs_.Remove(PathOf(later)));
      RUNNEL_RETURN_IF_ERROR(fs_.SyncDir(dir_));
      report_.removed_files.push_back(later);
      logger->warn("metadata log {}: removed {} ({} byte(s)) after a cut", dir_, later,
                   later_data.size());
    }
    segments_.resize(i + 1);
    report_.truncated_bytes += data.size() - pos;
    RUNNEL_RETURN_IF_ERROR(fs_.Truncate(PathOf(name), pos));
    logger->warn("metadata log {}: {}; truncated {} byte(s) from {} (entries from offset {} on)",
                 dir_, problem, data.size() - pos, name, expected);
    break;
  }
  end_offset_ = expected;
  return absl::OkStatus();
}

StatusOr<bool> RaftLogStore::ReconcileLogWithSnapshot(bool legacy) {
  if (!latest_) return false;
  const auto& logger = kLog();
  const SnapshotId s = *latest_;
  std::string conflict;
  if (end_offset_ < s.end_offset) {
    conflict = fmt::format("the log ends at offset {}, before snapshot {}", end_offset_,
                           logformat::SnapshotFileName(s));
  } else if (s.end_offset - 1 >= start_offset_) {
    int64_t term = entries_[s.end_offset - 1 - start_offset_].term;
    if (term != s.epoch) {
      if (legacy) {
        RUNNEL_ASSIGN_OR_RETURN(latest_, RenameLegacySnapshot(s, term));
      } else {
        conflict = fmt::format(
            "entry {} has term {} but snapshot {} says {}: the log is from another leader (a "
            "snapshot install was cut short)",
            s.end_offset - 1, term, logformat::SnapshotFileName(s), s.epoch);
      }
    }
  } else if (!legacy && end_offset_ > s.end_offset && entries_.front().term < s.epoch) {
    conflict = fmt::format("entry {} has term {}, below the epoch of snapshot {}", s.end_offset,
                           entries_.front().term, logformat::SnapshotFileName(s));
  }

  if (conflict.empty()) {
    if (previous_ && previous_->end_offset - 1 >= start_offset_) {
      int64_t term = entries_[previous_->end_offset - 1 - start_offset_].term;
      if (term != previous_->epoch) {
        if (legacy) {
          RUNNEL_ASSIGN_OR_RETURN(previous_, RenameLegacySnapshot(*previous_, term));
        } else {
          // Cannot happen unless the files were tampered with; just do not count on it.
          std::string name = logformat::SnapshotFileName(*previous_);
          report_.skipped_snapshots.push_back(name);
          logger->warn("not keeping snapshot {}/{} as a fallback: entry {} has term {}", dir_, name,
                       previous_->end_offset - 1, term);
          previous_.reset();
        }
      }
    }
    return false;
  }

  // The snapshot is committed state; the log is not trustworthy after the divergence, and
  // everything before the snapshot's end is in it. Newest segment first: no gap on a crash.
  report_.truncation_reason = conflict;
  for (const EntryLoc& e : entries_) report_.truncated_bytes += e.size;
  while (!segments_.empty()) {
    int64_t base = segments_.back();
    RUNNEL_RETURN_IF_ERROR(fs_.Remove(SegmentPath(base)));
    RUNNEL_RETURN_IF_ERROR(fs_.SyncDir(dir_));
    report_.removed_files.push_back(logformat::SegmentFileName(base));
    segments_.pop_back();
  }
  logger->warn("metadata log {}: {}; removed the log [{}, {}), continuing at {}", dir_, conflict,
               start_offset_, end_offset_, s.end_offset);
  entries_.clear();
  start_offset_ = end_offset_ = s.end_offset;
  previous_.reset();  // the log after it is gone
  return true;
}

StatusOr<SnapshotId> RaftLogStore::RenameLegacySnapshot(SnapshotId id, int64_t term) {
  RUNNEL_ASSIGN_OR_RETURN(std::string payload, LoadSnapshotPayload(id));
  SnapshotId renamed{id.end_offset, term};
  std::string old_name = logformat::SnapshotFileName(id);
  std::string new_name = logformat::SnapshotFileName(renamed);
  RUNNEL_RETURN_IF_ERROR(WriteFileAtomically(
      fs_, dir_, new_name, logformat::EncodeFrame(renamed.end_offset, renamed.epoch, payload)));
  RUNNEL_RETURN_IF_ERROR(fs_.Remove(PathOf(old_name)));
  RUNNEL_RETURN_IF_ERROR(fs_.SyncDir(dir_));
  report_.removed_files.push_back(old_name);
  kLog()->warn(
      "metadata log {}: single-voter snapshot {} renamed {}: a Raft snapshot's epoch is the term "
      "of its last entry",
      dir_, old_name, new_name);
  return renamed;
}

Status RaftLogStore::LoadHardState(bool present, int64_t seen_term) {
  std::string path = PathOf(kQuorumStateFileName);
  if (!present) {
    // Written now, not at the first vote: a term only held in memory could go backwards
    // across a restart (the log it came from can be cut).
    hard_state_ = raft::HardState{std::max(seen_term, LastTerm()), raft::kNoNode};
    RUNNEL_RETURN_IF_ERROR(WriteFileAtomically(fs_, dir_, std::string(kQuorumStateFileName),
                                               EncodeQuorumState(hard_state_)));
    kLog()->info("metadata log {}: no {} yet; wrote term {}, no vote", dir_, kQuorumStateFileName,
                 hard_state_.term);
    return absl::OkStatus();
  }
  RUNNEL_ASSIGN_OR_RETURN(std::string data, fs_.ReadFile(path));
  StatusOr<raft::HardState> state = DecodeQuorumState(data);
  if (!state.ok()) {
    return absl::DataLossError(
        fmt::format("{} is corrupt: {}; refusing to start: the term and vote it held cannot be "
                    "rebuilt, and a voter that forgot its vote could vote twice",
                    path, state.status().message()));
  }
  if (state->term < LastTerm()) {
    return absl::DataLossError(
        fmt::format("{} holds term {}, older than the log's last term {}; refusing to start "
                    "(the file is stale or from another data dir)",
                    path, state->term, LastTerm()));
  }
  hard_state_ = *state;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Reads

int64_t RaftLogStore::LastTerm() const {
  if (!entries_.empty()) return entries_.back().term;
  return latest_ ? latest_->epoch : 0;
}

void RaftLogStore::RecountBytesSinceSnapshot() {
  int64_t snap_end = latest_ ? latest_->end_offset : 0;
  bytes_since_snapshot_ = 0;
  for (int64_t o = std::max(snap_end, start_offset_); o < end_offset_; ++o) {
    bytes_since_snapshot_ += entries_[o - start_offset_].size;
  }
}

StatusOr<int64_t> RaftLogStore::TermAt(int64_t offset) const {
  if (offset >= start_offset_ && offset < end_offset_) return entries_[offset - start_offset_].term;
  if (latest_ && offset == latest_->end_offset - 1) return latest_->epoch;
  if (offset == -1) return int64_t{0};
  return absl::OutOfRangeError(fmt::format(
      "no term for offset {}: the log in {} holds [{}, {}), snapshot {}", offset, dir_,
      start_offset_, end_offset_, latest_ ? logformat::SnapshotFileName(*latest_) : "none"));
}

StatusOr<std::vector<raft::Entry>> RaftLogStore::Read(int64_t from, int64_t to,
                                                      size_t max_bytes) const {
  if (from < start_offset_ || to > end_offset_ || from > to) {
    return absl::OutOfRangeError(fmt::format("cannot read [{}, {}): the log in {} holds [{}, {})",
                                             from, to, dir_, start_offset_, end_offset_));
  }
  std::vector<raft::Entry> out;
  if (from == to) return out;
  // The entries to return: at least one, then while the data fits in max_bytes.
  auto data_size = [&](int64_t o) {
    return static_cast<size_t>(entries_[o - start_offset_].size) - logformat::kHeaderSize;
  };
  int64_t last = from;
  size_t bytes = data_size(from);
  while (last + 1 < to && bytes + data_size(last + 1) <= max_bytes) {
    ++last;
    bytes += data_size(last);
  }
  out.reserve(static_cast<size_t>(last - from + 1));
  // One ReadRange per segment: the frames of consecutive entries are back to back.
  int64_t o = from;
  while (o <= last) {
    const EntryLoc& first = entries_[o - start_offset_];
    int64_t run_end = o + 1;
    while (run_end <= last &&
           entries_[run_end - start_offset_].segment_base == first.segment_base) {
      ++run_end;
    }
    const EntryLoc& final_loc = entries_[run_end - 1 - start_offset_];
    uint64_t length = final_loc.position + final_loc.size - first.position;
    std::string path = SegmentPath(first.segment_base);
    RUNNEL_ASSIGN_OR_RETURN(std::string data, fs_.ReadRange(path, first.position, length));
    std::string_view rest = data;
    for (; o < run_end; ++o) {
      const EntryLoc& loc = entries_[o - start_offset_];
      logformat::Decoded d = DecodeFrame(rest);
      std::string why;
      if (d.status != DecodeStatus::kOk) {
        why = d.why;
      } else if (d.frame.offset != o || d.frame.term != loc.term || d.frame_size != loc.size) {
        why = fmt::format("frame says offset {} term {}, the index offset {} term {}",
                          d.frame.offset, d.frame.term, o, loc.term);
      }
      if (!why.empty()) {
        return absl::DataLossError(fmt::format("entry {} at byte {} of {} no longer reads back: {}",
                                               o, loc.position, path, why));
      }
      out.push_back(raft::Entry{o, d.frame.term, std::string(d.frame.payload)});
      rest.remove_prefix(d.frame_size);
    }
  }
  return out;
}

StatusOr<std::string> RaftLogStore::LoadSnapshotPayload(SnapshotId id) const {
  std::string path = PathOf(logformat::SnapshotFileName(id));
  RUNNEL_ASSIGN_OR_RETURN(std::string data, fs_.ReadFile(path));
  logformat::Decoded d = DecodeFrame(data);
  if (d.status != DecodeStatus::kOk) {
    return absl::DataLossError(fmt::format("snapshot {}: {}", path, d.why));
  }
  if (d.frame_size != data.size()) {
    return absl::DataLossError(
        fmt::format("snapshot {}: {} byte(s) after its frame", path, data.size() - d.frame_size));
  }
  if (d.frame.offset != id.end_offset || d.frame.term != id.epoch) {
    return absl::DataLossError(fmt::format(
        "snapshot {}: the frame says end offset {} epoch {}, the file name end offset {} epoch {}",
        path, d.frame.offset, d.frame.term, id.end_offset, id.epoch));
  }
  return std::string(d.frame.payload);
}

StatusOr<std::string> RaftLogStore::ReadSnapshot() const {
  if (!latest_) return absl::NotFoundError(fmt::format("no snapshot in {}", dir_));
  return LoadSnapshotPayload(*latest_);
}

// ---------------------------------------------------------------------------------------------
// Writes

Status RaftLogStore::CheckWritable() const {
  if (!failed_.ok()) return failed_;
  if (closed_) return absl::FailedPreconditionError(fmt::format("metadata log {} is closed", dir_));
  return absl::OkStatus();
}

Status RaftLogStore::Fail(const std::string& what, const Status& st) {
  failed_ = Status(st.code(), fmt::format("metadata log {}: {} failed: {}; no more writes until "
                                          "restart",
                                          dir_, what, st.message()));
  kLog()->error("{}", std::string(failed_.message()));
  return failed_;
}

Status RaftLogStore::OpenActive(int64_t base) {
  if (active_) {
    Status st = active_->Close();
    active_.reset();
    if (!st.ok()) return Fail(fmt::format("close {}", SegmentPath(base)), st);
  }
  StatusOr<std::unique_ptr<AppendFile>> f = fs_.OpenAppend(SegmentPath(base));
  if (!f.ok()) return Fail(fmt::format("open {}", SegmentPath(base)), f.status());
  active_ = std::move(*f);
  return absl::OkStatus();
}

Status RaftLogStore::RemoveSegmentSynced(int64_t base) {
  std::string path = SegmentPath(base);
  Status st = fs_.Remove(path);
  if (!st.ok()) return Fail(fmt::format("remove {}", path), st);
  // One directory fsync per removal: the order of removals is what keeps the log gapless.
  st = fs_.SyncDir(dir_);
  if (!st.ok()) return Fail(fmt::format("fsync {} (removing {})", dir_, path), st);
  return absl::OkStatus();
}

Status RaftLogStore::SetHardState(const raft::HardState& state) {
  RUNNEL_RETURN_IF_ERROR(CheckWritable());
  // Cheap guards against a caller bug that would be unsafe: a term going back, a second vote.
  if (state.term < hard_state_.term) {
    return absl::InvalidArgumentError(
        fmt::format("term {} is older than the stored term {}", state.term, hard_state_.term));
  }
  if (state.term == hard_state_.term && hard_state_.voted_for != raft::kNoNode &&
      state.voted_for != hard_state_.voted_for) {
    return absl::InvalidArgumentError(
        fmt::format("already voted for {} in term {}; cannot vote for {}", hard_state_.voted_for,
                    state.term, state.voted_for));
  }
  if (state == hard_state_) return absl::OkStatus();
  Status st =
      WriteFileAtomically(fs_, dir_, std::string(kQuorumStateFileName), EncodeQuorumState(state));
  if (!st.ok()) return Fail(fmt::format("write {}", PathOf(kQuorumStateFileName)), st);
  hard_state_ = state;
  return absl::OkStatus();
}

Status RaftLogStore::Append(std::span<const raft::Entry> entries) {
  RUNNEL_RETURN_IF_ERROR(CheckWritable());
  if (entries.empty()) return absl::OkStatus();
  int64_t last_term = LastTerm();
  std::string buf;
  std::vector<uint32_t> sizes;
  sizes.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const raft::Entry& e = entries[i];
    int64_t want = end_offset_ + static_cast<int64_t>(i);
    if (e.offset != want) {
      return absl::InvalidArgumentError(
          fmt::format("append of offset {} where {} is next in {}", e.offset, want, dir_));
    }
    if (e.term < last_term) {
      return absl::InvalidArgumentError(
          fmt::format("append of offset {} in term {} after term {}", e.offset, e.term, last_term));
    }
    if (e.term > hard_state_.term) {
      // Raft stores a term before taking entries of it; Open would refuse the result.
      return absl::FailedPreconditionError(fmt::format(
          "append of offset {} in term {} while the stored term is {}: SetHardState first",
          e.offset, e.term, hard_state_.term));
    }
    if (e.data.size() > kMaxPayload) {
      return absl::InvalidArgumentError(fmt::format(
          "entry {} of {} bytes is larger than a log entry may be", e.offset, e.data.size()));
    }
    last_term = e.term;
    std::string frame = logformat::EncodeFrame(e.offset, e.term, e.data);
    sizes.push_back(static_cast<uint32_t>(frame.size()));
    buf += frame;
  }
  uint64_t position = active_->Size();
  Status st = active_->Append(buf);
  if (!st.ok()) return Fail(fmt::format("append to {}", SegmentPath(segments_.back())), st);
  for (size_t i = 0; i < entries.size(); ++i) {
    entries_.push_back(EntryLoc{segments_.back(), position, sizes[i], entries[i].term});
    position += sizes[i];
  }
  end_offset_ += static_cast<int64_t>(entries.size());
  bytes_since_snapshot_ += buf.size();
  unsynced_ = true;
  return absl::OkStatus();
}

Status RaftLogStore::Sync() {
  RUNNEL_RETURN_IF_ERROR(CheckWritable());
  if (!unsynced_) return absl::OkStatus();
  Status st = active_->Sync();
  if (!st.ok()) return Fail(fmt::format("fdatasync {}", SegmentPath(segments_.back())), st);
  unsynced_ = false;
  return absl::OkStatus();
}

Status RaftLogStore::TruncateFrom(int64_t offset) {
  RUNNEL_RETURN_IF_ERROR(CheckWritable());
  if (offset >= end_offset_) return absl::OkStatus();
  int64_t snap_end = latest_ ? latest_->end_offset : 0;
  if (offset < snap_end || offset < start_offset_) {
    return absl::InvalidArgumentError(
        fmt::format("cannot truncate {} from offset {}: snapshot {} covers up to {}", dir_, offset,
                    latest_ ? logformat::SnapshotFileName(*latest_) : "none", snap_end));
  }
  const EntryLoc loc = entries_[offset - start_offset_];
  const auto& logger = kLog();
  if (active_) {
    Status st = active_->Close();
    active_.reset();
    if (!st.ok()) return Fail(fmt::format("close {}", SegmentPath(segments_.back())), st);
  }
  // Later segments first, newest first: a crash part way leaves a prefix of the log.
  while (segments_.back() != loc.segment_base) {
    RUNNEL_RETURN_IF_ERROR(RemoveSegmentSynced(segments_.back()));
    logger->info("metadata log {}: removed {} (truncating from offset {})", dir_,
                 logformat::SegmentFileName(segments_.back()), offset);
    segments_.pop_back();
  }
  std::string path = SegmentPath(loc.segment_base);
  Status st = fs_.Truncate(path, loc.position);
  if (!st.ok()) return Fail(fmt::format("truncate {} to {} bytes", path, loc.position), st);
  // Reopened: the append handle's size is stale after a truncation.
  RUNNEL_RETURN_IF_ERROR(OpenActive(loc.segment_base));
  // fdatasync persists the new size too (and any earlier unsynced appends).
  st = active_->Sync();
  if (!st.ok()) return Fail(fmt::format("fdatasync {}", path), st);
  unsynced_ = false;
  logger->info("metadata log {}: truncated [{}, {})", dir_, offset, end_offset_);
  entries_.resize(static_cast<size_t>(offset - start_offset_));
  end_offset_ = offset;
  RecountBytesSinceSnapshot();
  return absl::OkStatus();
}

Status RaftLogStore::SaveSnapshot(SnapshotId id, std::string data) {
  RUNNEL_RETURN_IF_ERROR(CheckWritable());
  if (latest_ && id.end_offset <= latest_->end_offset) {
    return absl::InvalidArgumentError(fmt::format("snapshot {} is not newer than {}",
                                                  logformat::SnapshotFileName(id),
                                                  logformat::SnapshotFileName(*latest_)));
  }
  if (id.end_offset <= 0 || id.end_offset > end_offset_) {
    return absl::InvalidArgumentError(fmt::format("snapshot {} ends outside the log [{}, {}) of {}",
                                                  logformat::SnapshotFileName(id), start_offset_,
                                                  end_offset_, dir_));
  }
  StatusOr<int64_t> term = TermAt(id.end_offset - 1);
  if (!term.ok() || *term != id.epoch) {
    return absl::InvalidArgumentError(fmt::format(
        "snapshot {}: entry {} has term {}, not the epoch {}", logformat::SnapshotFileName(id),
        id.end_offset - 1, term.ok() ? fmt::format("{}", *term) : "unknown", id.epoch));
  }
  if (data.size() > kMaxPayload) {
    return absl::InvalidArgumentError(
        fmt::format("snapshot of {} bytes is larger than a snapshot may be", data.size()));
  }
  return StoreSnapshot(id, data, /*discard_log=*/false);
}

Status RaftLogStore::InstallSnapshot(SnapshotId id, std::string data) {
  RUNNEL_RETURN_IF_ERROR(CheckWritable());
  if (latest_ && id == *latest_) return absl::OkStatus();  // already installed
  if (id.end_offset <= 0 || (latest_ && id.end_offset <= latest_->end_offset)) {
    return absl::InvalidArgumentError(
        fmt::format("snapshot {} is not newer than {}", logformat::SnapshotFileName(id),
                    latest_ ? logformat::SnapshotFileName(*latest_) : "none"));
  }
  if (id.epoch > hard_state_.term) {
    return absl::FailedPreconditionError(
        fmt::format("snapshot {} is of a term after the stored term {}: SetHardState first",
                    logformat::SnapshotFileName(id), hard_state_.term));
  }
  if (data.size() > kMaxPayload) {
    return absl::InvalidArgumentError(
        fmt::format("snapshot of {} bytes is larger than a snapshot may be", data.size()));
  }
  int64_t last = id.end_offset - 1;
  bool keep = last >= start_offset_ && last < end_offset_ &&
              entries_[last - start_offset_].term == id.epoch;
  return StoreSnapshot(id, data, /*discard_log=*/!keep);
}

Status RaftLogStore::StoreSnapshot(SnapshotId id, const std::string& data, bool discard_log) {
  const auto& logger = kLog();
  // The log before a segment roll must be durable: Sync only covers the active segment.
  if (!discard_log) RUNNEL_RETURN_IF_ERROR(Sync());
  std::string name = logformat::SnapshotFileName(id);
  // The snapshot first: until it is durable the old snapshot and log are the state.
  Status st =
      WriteFileAtomically(fs_, dir_, name, logformat::EncodeFrame(id.end_offset, id.epoch, data));
  if (!st.ok()) return Fail(fmt::format("write snapshot {}", PathOf(name)), st);

  if (discard_log) {
    if (active_) {
      st = active_->Close();
      active_.reset();
      if (!st.ok()) return Fail(fmt::format("close {}", SegmentPath(segments_.back())), st);
    }
    // Newest first, as Open would if this is cut short: it then sees a log ending before
    // the snapshot or holding its last offset with another term, and removes the rest.
    while (!segments_.empty()) {
      RUNNEL_RETURN_IF_ERROR(RemoveSegmentSynced(segments_.back()));
      segments_.pop_back();
    }
    logger->info("metadata log {}: snapshot {} installed; discarded the log [{}, {})", dir_, name,
                 start_offset_, end_offset_);
    entries_.clear();
    start_offset_ = end_offset_ = id.end_offset;
    unsynced_ = false;
    segments_.push_back(id.end_offset);
    RUNNEL_RETURN_IF_ERROR(OpenActive(id.end_offset));
    previous_.reset();
    latest_ = id;
  } else {
    previous_ = latest_;
    latest_ = id;
    // A new segment starts here so whole segments can go once no snapshot needs them.
    if (segments_.back() != end_offset_) {
      segments_.push_back(end_offset_);
      RUNNEL_RETURN_IF_ERROR(OpenActive(end_offset_));
    }
    // Keep the previous snapshot and the log after it (the fallback if the new one turns
    // out corrupt); without a previous snapshot keep the log from its start. Oldest first:
    // a crash part way leaves a suffix of the log.
    int64_t keep_from = previous_ ? previous_->end_offset : start_offset_;
    while (segments_.size() > 1 && segments_[1] <= keep_from) {
      RUNNEL_RETURN_IF_ERROR(RemoveSegmentSynced(segments_.front()));
      logger->info("metadata log {}: removed segment {}: every snapshot kept starts after it", dir_,
                   logformat::SegmentFileName(segments_.front()));
      segments_.erase(segments_.begin());
    }
    int64_t new_start = segments_.front();
    entries_.erase(entries_.begin(), entries_.begin() + (new_start - start_offset_));
    start_offset_ = new_start;
  }

  StatusOr<std::vector<std::string>> names = fs_.ListDir(dir_);
  if (!names.ok()) return Fail(fmt::format("list {}", dir_), names.status());
  for (const std::string& n : *names) {
    auto other = logformat::ParseSnapshotFileName(n);
    if (!other || *other == *latest_ || (previous_ && *other == *previous_)) continue;
    st = fs_.Remove(PathOf(n));
    if (!st.ok()) return Fail(fmt::format("remove {}", PathOf(n)), st);
    logger->info("metadata log {}: removed old snapshot {}", dir_, n);
  }
  st = fs_.SyncDir(dir_);
  if (!st.ok()) return Fail(fmt::format("fsync {}", dir_), st);
  RecountBytesSinceSnapshot();
  logger->info("metadata log {}: snapshot {} ({} bytes); log [{}, {})", dir_, name, data.size(),
               start_offset_, end_offset_);
  return absl::OkStatus();
}

Status RaftLogStore::Close() {
  closed_ = true;
  if (!active_) return absl::OkStatus();
  Status st = active_->Close();
  active_.reset();
  return st;
}

}  // namespace runnel::controllerd
