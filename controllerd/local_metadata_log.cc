#include "controllerd/local_metadata_log.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/log/log.h"

namespace runnel::controllerd {
namespace {

using logformat::DecodeFrame;
using logformat::DecodeStatus;

std::shared_ptr<spdlog::logger> Logger() { return log::Get("controllerd.log"); }

// Reads and checks a snapshot file; the error says why it cannot be used.
StatusOr<Snapshot> LoadSnapshot(FileSystem& fs, const std::string& path, SnapshotId id) {
  RUNNEL_ASSIGN_OR_RETURN(std::string data, fs.ReadFile(path));
  logformat::Decoded d = DecodeFrame(data);
  if (d.status != DecodeStatus::kOk) return absl::DataLossError(d.why);
  if (d.frame_size != data.size()) {
    return absl::DataLossError(
        fmt::format("{} byte(s) after the snapshot's frame", data.size() - d.frame_size));
  }
  if (d.frame.offset != id.end_offset || d.frame.term != id.epoch) {
    return absl::DataLossError(
        fmt::format("frame says end offset {} epoch {}, the file name says end offset {} epoch {}",
                    d.frame.offset, d.frame.term, id.end_offset, id.epoch));
  }
  Snapshot snap;
  snap.id = id;
  if (!snap.image.ParseFromArray(d.frame.payload.data(),
                                 static_cast<int>(d.frame.payload.size()))) {
    return absl::DataLossError("payload is not a MetadataRecordBatch");
  }
  return snap;
}

}  // namespace

StatusOr<std::unique_ptr<LocalMetadataLog>> LocalMetadataLog::Open(FileSystem& fs,
                                                                   const std::string& dir) {
  std::string pdir = fmt::format("{}/{}", dir, logformat::kPartitionDirName);
  RUNNEL_RETURN_IF_ERROR(fs.CreateDirs(pdir));
  std::unique_ptr<LocalMetadataLog> log(new LocalMetadataLog(fs, pdir));
  RUNNEL_RETURN_IF_ERROR(log->Recover());
  return log;
}

LocalMetadataLog::~LocalMetadataLog() { (void)Close(); }

Status LocalMetadataLog::Recover() {
  auto logger = Logger();
  RUNNEL_ASSIGN_OR_RETURN(std::vector<std::string> names, fs_.ListDir(dir_));
  std::vector<SnapshotId> snapshots;
  for (const std::string& name : names) {
    if (name.ends_with(logformat::kTempSuffix)) {
      // A snapshot whose write did not finish; the rename never happened.
      RUNNEL_RETURN_IF_ERROR(fs_.Remove(PathOf(name)));
      report_.removed_files.push_back(name);
      logger->warn("removed unfinished file {}/{}", dir_, name);
    } else if (auto base = logformat::ParseSegmentFileName(name)) {
      segments_.push_back(*base);
    } else if (auto id = logformat::ParseSnapshotFileName(name)) {
      snapshots.push_back(*id);
    } else {
      logger->warn("ignoring unknown file {}/{}", dir_, name);
    }
  }
  std::sort(segments_.begin(), segments_.end());
  std::sort(snapshots.rbegin(), snapshots.rend());

  // 1. The log: consecutive entries from the first segment's base offset up to the first
  //    entry that is torn or corrupt, where it is cut.
  int64_t expected = segments_.empty() ? 0 : segments_.front();
  int64_t last_term = 0;
  for (size_t i = 0; i < segments_.size(); ++i) {
    int64_t base = segments_[i];
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
      } else {
        metadata::MetadataRecordBatch batch;
        if (!batch.ParseFromArray(d.frame.payload.data(),
                                  static_cast<int>(d.frame.payload.size()))) {
          problem = fmt::format("entry {} payload is not a MetadataRecordBatch", expected);
        }
      }
      if (!problem.empty()) break;
      entries_.push_back(EntryLoc{expected, base, pos, static_cast<uint32_t>(d.frame_size)});
      last_term = d.frame.term;
      ++expected;
      pos += d.frame_size;
    }
    if (problem.empty()) continue;

    // Cut here: the rest of this segment and every later segment.
    report_.truncation_reason = fmt::format("{} at byte {} of {}", problem, pos, name);
    report_.truncated_bytes += data.size() - pos;
    RUNNEL_RETURN_IF_ERROR(fs_.Truncate(PathOf(name), pos));
    logger->warn("metadata log: {}; truncated {} byte(s) from {} (entries from offset {} on)",
                 problem, data.size() - pos, name, expected);
    for (size_t j = i + 1; j < segments_.size(); ++j) {
      std::string later = logformat::SegmentFileName(segments_[j]);
      RUNNEL_ASSIGN_OR_RETURN(std::string later_data, fs_.ReadFile(PathOf(later)));
      report_.truncated_bytes += later_data.size();
      RUNNEL_RETURN_IF_ERROR(fs_.Remove(PathOf(later)));
      report_.removed_files.push_back(later);
      logger->warn("metadata log: removed {} ({} byte(s)) after the cut", later, later_data.size());
    }
    segments_.resize(i + 1);
    RUNNEL_RETURN_IF_ERROR(fs_.SyncDir(dir_));
    break;
  }
  start_offset_ = segments_.empty() ? 0 : segments_.front();
  end_offset_ = expected;
  last_term_ = last_term;

  // 2. The snapshot to start from: the newest one that is intact and that the log can
  //    continue from (older ones stay as fallbacks).
  for (const SnapshotId& id : snapshots) {
    std::string name = logformat::SnapshotFileName(id);
    if (id.end_offset < start_offset_) {
      report_.skipped_snapshots.push_back(name);
      logger->warn("skipping snapshot {}: the log after it starts only at offset {}", name,
                   start_offset_);
      continue;
    }
    StatusOr<Snapshot> snap = LoadSnapshot(fs_, PathOf(name), id);
    if (!snap.ok()) {
      report_.skipped_snapshots.push_back(name);
      logger->warn("skipping corrupt snapshot {}: {}", name, std::string(snap.status().message()));
      continue;
    }
    if (!latest_snapshot_) {
      latest_snapshot_ = id;
    } else {
      previous_snapshot_ = id;
      break;
    }
  }

  if (!latest_snapshot_ && start_offset_ != 0) {
    return absl::DataLossError(
        fmt::format("metadata log in {} starts at offset {} but no intact snapshot covers the "
                    "offsets before it; refusing to start",
                    dir_, start_offset_));
  }
  if (latest_snapshot_ && latest_snapshot_->end_offset > end_offset_) {
    // The snapshot holds more than the (cut) log: the log cannot continue from its end, so
    // it restarts at the snapshot.
    for (int64_t base : segments_) {
      std::string name = logformat::SegmentFileName(base);
      RUNNEL_RETURN_IF_ERROR(fs_.Remove(PathOf(name)));
      report_.removed_files.push_back(name);
    }
    logger->warn("metadata log ends at offset {} before snapshot {}; starting the log anew at {}",
                 end_offset_, logformat::SnapshotFileName(*latest_snapshot_),
                 latest_snapshot_->end_offset);
    segments_.clear();
    entries_.clear();
    start_offset_ = end_offset_ = latest_snapshot_->end_offset;
  }
  if (latest_snapshot_) last_term_ = std::max(last_term_, latest_snapshot_->epoch);

  int64_t snap_end = latest_snapshot_ ? latest_snapshot_->end_offset : 0;
  for (const EntryLoc& e : entries_) {
    if (e.offset >= snap_end) bytes_since_snapshot_ += e.size;
  }

  // 3. Append to the last segment, or a new one at the end.
  int64_t active = segments_.empty() ? end_offset_ : segments_.back();
  if (segments_.empty()) segments_.push_back(active);
  RUNNEL_RETURN_IF_ERROR(OpenActiveSegment(active));
  RUNNEL_RETURN_IF_ERROR(fs_.SyncDir(dir_));
  logger->info("metadata log {}: offsets [{}, {}), snapshot {}, {} byte(s) since it", dir_,
               start_offset_, end_offset_,
               latest_snapshot_ ? logformat::SnapshotFileName(*latest_snapshot_) : "none",
               bytes_since_snapshot_);
  return absl::OkStatus();
}

Status LocalMetadataLog::OpenActiveSegment(int64_t base) {
  if (active_) RUNNEL_RETURN_IF_ERROR(active_->Close());
  RUNNEL_ASSIGN_OR_RETURN(active_, fs_.OpenAppend(PathOf(logformat::SegmentFileName(base))));
  return absl::OkStatus();
}

StatusOr<std::optional<Snapshot>> LocalMetadataLog::LatestSnapshot() {
  if (!latest_snapshot_) return std::optional<Snapshot>();
  RUNNEL_ASSIGN_OR_RETURN(
      Snapshot snap,
      LoadSnapshot(fs_, PathOf(logformat::SnapshotFileName(*latest_snapshot_)), *latest_snapshot_));
  return std::optional<Snapshot>(std::move(snap));
}

Status LocalMetadataLog::Read(int64_t from, const std::function<Status(const LogEntry&)>& fn) {
  if (from < start_offset_) {
    return absl::OutOfRangeError(
        fmt::format("offset {} is before the log start offset {}", from, start_offset_));
  }
  auto it = std::lower_bound(entries_.begin(), entries_.end(), from,
                             [](const EntryLoc& e, int64_t o) { return e.offset < o; });
  for (; it != entries_.end(); ++it) {
    std::string path = PathOf(logformat::SegmentFileName(it->segment_base));
    RUNNEL_ASSIGN_OR_RETURN(std::string data, fs_.ReadRange(path, it->position, it->size));
    logformat::Decoded d = DecodeFrame(data);
    if (d.status != DecodeStatus::kOk || d.frame.offset != it->offset) {
      return absl::DataLossError(
          fmt::format("entry {} in {} no longer reads back: {}", it->offset, path, d.why));
    }
    LogEntry entry;
    entry.offset = d.frame.offset;
    entry.term = d.frame.term;
    if (!entry.batch.ParseFromArray(d.frame.payload.data(),
                                    static_cast<int>(d.frame.payload.size()))) {
      return absl::DataLossError(fmt::format("entry {} in {} does not parse", it->offset, path));
    }
    RUNNEL_RETURN_IF_ERROR(fn(entry));
  }
  return absl::OkStatus();
}

StatusOr<int64_t> LocalMetadataLog::Append(int64_t term,
                                           const metadata::MetadataRecordBatch& batch) {
  if (!failed_.ok()) return failed_;
  if (!active_) return absl::FailedPreconditionError("metadata log is closed");
  if (term < last_term_) {
    return absl::FailedPreconditionError(
        fmt::format("append in term {} after term {}", term, last_term_));
  }
  std::string payload;
  if (!batch.SerializeToString(&payload)) {
    return absl::InternalError("cannot serialize a metadata record batch");
  }
  if (payload.size() > logformat::kMaxFrameLength - logformat::kMinFrameLength) {
    return absl::InvalidArgumentError(fmt::format(
        "metadata batch of {} bytes is larger than a log entry may be", payload.size()));
  }
  std::string frame = logformat::EncodeFrame(end_offset_, term, payload);
  uint64_t position = active_->Size();
  Status st = active_->Append(frame);
  if (st.ok()) st = active_->Sync();
  if (!st.ok()) {
    failed_ = absl::UnavailableError(fmt::format(
        "metadata log write failed, no more appends until restart: {}", std::string(st.message())));
    Logger()->error("{}", std::string(failed_.message()));
    return failed_;
  }
  entries_.push_back(
      EntryLoc{end_offset_, segments_.back(), position, static_cast<uint32_t>(frame.size())});
  last_term_ = term;
  bytes_since_snapshot_ += frame.size();
  return end_offset_++;
}

Status LocalMetadataLog::WriteSnapshot(SnapshotId id, const metadata::MetadataRecordBatch& image) {
  if (!failed_.ok()) return failed_;
  if (id.end_offset != end_offset_) {
    return absl::InvalidArgumentError(fmt::format(
        "snapshot at end offset {} but the log ends at {}", id.end_offset, end_offset_));
  }
  if (latest_snapshot_ && id <= *latest_snapshot_) {
    return absl::InvalidArgumentError(fmt::format("snapshot {} is not newer than {}",
                                                  logformat::SnapshotFileName(id),
                                                  logformat::SnapshotFileName(*latest_snapshot_)));
  }
  std::string payload;
  if (!image.SerializeToString(&payload)) return absl::InternalError("cannot serialize snapshot");
  if (payload.size() > logformat::kMaxFrameLength - logformat::kMinFrameLength) {
    return absl::ResourceExhaustedError(
        fmt::format("metadata image of {} bytes is larger than a snapshot may be", payload.size()));
  }
  std::string name = logformat::SnapshotFileName(id);
  RUNNEL_RETURN_IF_ERROR(WriteFileAtomically(
      fs_, dir_, name, logformat::EncodeFrame(id.end_offset, id.epoch, payload)));
  if (latest_snapshot_) previous_snapshot_ = latest_snapshot_;
  latest_snapshot_ = id;
  bytes_since_snapshot_ = 0;

  // A new segment starts at the snapshot, so whole segments can go when no snapshot needs
  // them any more.
  if (segments_.back() != end_offset_) {
    RUNNEL_RETURN_IF_ERROR(OpenActiveSegment(end_offset_));
    segments_.push_back(end_offset_);
  }
  // Keep the previous snapshot and the log after it (the fallback if the new one turns out
  // corrupt); without a previous snapshot keep the log from offset 0.
  int64_t keep_from = previous_snapshot_ ? previous_snapshot_->end_offset : 0;
  auto logger = Logger();
  while (segments_.size() > 1 && segments_[1] <= keep_from) {
    std::string seg = logformat::SegmentFileName(segments_.front());
    RUNNEL_RETURN_IF_ERROR(fs_.Remove(PathOf(seg)));
    logger->info("removed segment {}: every snapshot kept starts after it", seg);
    segments_.erase(segments_.begin());
  }
  start_offset_ = segments_.front();
  entries_.erase(entries_.begin(),
                 std::lower_bound(entries_.begin(), entries_.end(), start_offset_,
                                  [](const EntryLoc& e, int64_t o) { return e.offset < o; }));
  RUNNEL_ASSIGN_OR_RETURN(std::vector<std::string> names, fs_.ListDir(dir_));
  for (const std::string& n : names) {
    auto other = logformat::ParseSnapshotFileName(n);
    if (!other || *other == *latest_snapshot_ ||
        (previous_snapshot_ && *other == *previous_snapshot_)) {
      continue;
    }
    RUNNEL_RETURN_IF_ERROR(fs_.Remove(PathOf(n)));
    logger->info("removed old snapshot {}", n);
  }
  RUNNEL_RETURN_IF_ERROR(fs_.SyncDir(dir_));
  logger->info("wrote snapshot {} ({} bytes); log now starts at {}", name, payload.size(),
               start_offset_);
  return absl::OkStatus();
}

Status LocalMetadataLog::Close() {
  if (!active_) return absl::OkStatus();
  Status st = active_->Close();
  active_.reset();
  return st;
}

}  // namespace runnel::controllerd
