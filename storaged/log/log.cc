#include "storaged/log/log.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>

#include "common/log/log.h"
#include "common/metrics/metrics.h"
#include "common/protocol/uuid.h"
#include "common/util/big_endian.h"
#include "storaged/log/checkpoints.h"
#include "storaged/log/file_io.h"
#include "storaged/log_dirs.h"

namespace runnel::storaged {
namespace {

using protocol::ErrorCode;

const log::ModuleLogger kLog("storaged.log");

Status ErrnoStatus(std::string_view what, const std::string& path) {
  int e = errno;
  return absl::InternalError(fmt::format("{} {}: {}", what, path, std::strerror(e)));
}

StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("opendir", dir);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "<20 digits>.<kind><suffix>" -> base offset, for any of the three segment file kinds.
std::optional<int64_t> SegmentBaseOf(std::string_view name, std::string_view suffix) {
  for (std::string_view kind : {kLogSuffix, kIndexSuffix, kTimeIndexSuffix, kTxnIndexSuffix}) {
    std::string full = std::string(kind) + std::string(suffix);
    if (std::optional<int64_t> base = ParseSegmentFileName(name, full)) return base;
  }
  return std::nullopt;
}

}  // namespace

int64_t SystemNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Log::Log(LogOptions options) : options_(std::move(options)), config_(options_.config) {
  if (!options_.now_ms) options_.now_ms = SystemNowMs;
}

Log::~Log() {
  if (!closed_) {
    Status s = Close();
    if (!s.ok()) kLog()->warn("[{}] close: {}", tp().ToString(), s.message());
  }
}

StatusOr<std::unique_ptr<Log>> Log::Open(LogOptions options, std::string topic_id,
                                         int64_t recovery_point, int64_t log_start_offset,
                                         bool clean_shutdown, LoadReport* report) {
  LoadReport local;
  if (report == nullptr) report = &local;
  std::unique_ptr<Log> log(new Log(std::move(options)));
  const std::string& dir = log->options_.dir;
  // A directory made here is known empty: nothing to list, nothing left over to remove.
  bool fresh = false;
  RUNNEL_RETURN_IF_ERROR(MakeDir(dir, 0755, &fresh));
  std::string metadata_path = dir + "/" + std::string(kPartitionMetadata);
  struct stat metadata_st;
  // An empty file is one whose write a crash cut short (it is written without waiting for
  // the disk, see SyncMetadata): as if it were missing.
  if (::stat(metadata_path.c_str(), &metadata_st) == 0 && metadata_st.st_size > 0) {
    RUNNEL_ASSIGN_OR_RETURN(std::string stored, ReadPartitionMetadata(metadata_path));
    if (!topic_id.empty() && stored != topic_id) {
      return absl::FailedPreconditionError(
          fmt::format("{} belongs to topic id {}, not {}: the old topic's data is still there", dir,
                      stored, topic_id));
    }
    topic_id = stored;
  } else if (!topic_id.empty()) {
    // Not synced here: creating thousands of partitions would wait for two disk flushes
    // each. SyncMetadata makes it durable before any of the log's data is (and the log
    // manager's background pass soon after creation).
    RUNNEL_RETURN_IF_ERROR(WritePartitionMetadata(metadata_path, topic_id, /*durable=*/false));
    log->metadata_synced_.store(false);
  }
  log->topic_id_ = topic_id;
  RUNNEL_RETURN_IF_ERROR(
      log->Load(recovery_point, log_start_offset, clean_shutdown, fresh, report));
  return log;
}

Status Log::SyncMetadata() {
  if (metadata_synced_.load()) return absl::OkStatus();
  MutexLock lock(&metadata_sync_mu_);
  if (metadata_synced_.load()) return absl::OkStatus();
  const std::string& dir = options_.dir;
  RUNNEL_RETURN_IF_ERROR(FsyncFile(dir + "/" + std::string(kPartitionMetadata)));
  RUNNEL_RETURN_IF_ERROR(FsyncDir(dir));
  RUNNEL_RETURN_IF_ERROR(FsyncDir(dir.substr(0, dir.rfind('/'))));
  metadata_synced_.store(true);
  return absl::OkStatus();
}

Status Log::RemoveLeftovers(LoadReport* report) {
  const std::string& dir = options_.dir;
  RUNNEL_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir));
  auto remove = [&](const std::string& name, std::string_view why) -> Status {
    std::string path = dir + "/" + name;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink", path);
    report->removed_files++;
    report->notes.push_back(fmt::format("removed {} ({})", name, why));
    return absl::OkStatus();
  };
  // A swap in progress: the cleaned copy was complete (it is flushed before being named
  // .swap), so finish it: drop the segment it replaces and give it the final names.
  for (const std::string& name : names) {
    std::optional<int64_t> base =
        ParseSegmentFileName(name, std::string(kLogSuffix) + std::string(kSwapSuffix));
    if (!base) continue;
    for (std::string_view kind : {kLogSuffix, kIndexSuffix, kTimeIndexSuffix, kTxnIndexSuffix}) {
      std::string final_path = SegmentFilePath(dir, *base, kind);
      std::string swap_path = final_path + std::string(kSwapSuffix);
      if (::access(swap_path.c_str(), F_OK) == 0) {
        RUNNEL_RETURN_IF_ERROR(RenameFile(swap_path, final_path));
      } else if (kind != kLogSuffix) {
        // No index came with the swap: the old one must not survive; an offset or time
        // index is rebuilt. (A cleaned copy holds a .txnindex exactly when aborted
        // transactions stay in it, so none came when none stayed.)
        ::unlink(final_path.c_str());
      }
    }
    report->notes.push_back(
        fmt::format("finished swapping in the cleaned segment {}", OffsetFileStem(*base)));
    swapped_bases_.insert(*base);
  }
  RUNNEL_ASSIGN_OR_RETURN(names, ListDir(dir));
  std::set<int64_t> log_bases;
  for (const std::string& name : names) {
    if (std::optional<int64_t> b = ParseSegmentFileName(name, kLogSuffix)) log_bases.insert(*b);
  }
  for (const std::string& name : names) {
    if (EndsWith(name, kCleanedSuffix) && SegmentBaseOf(name, kCleanedSuffix)) {
      RUNNEL_RETURN_IF_ERROR(remove(name, "unfinished compaction output"));
    } else if (EndsWith(name, kDeletedSuffix) && SegmentBaseOf(name, kDeletedSuffix)) {
      RUNNEL_RETURN_IF_ERROR(remove(name, "segment already deleted"));
    } else if (EndsWith(name, kSwapSuffix) && SegmentBaseOf(name, kSwapSuffix)) {
      RUNNEL_RETURN_IF_ERROR(remove(name, "index of an unfinished swap"));
    } else if (ParseSegmentFileName(name, std::string(kProducerSnapshotSuffix) + ".tmp")) {
      RUNNEL_RETURN_IF_ERROR(remove(name, "unfinished producer snapshot"));
    } else if (std::optional<int64_t> b = SegmentBaseOf(name, "")) {
      if (!log_bases.count(*b)) RUNNEL_RETURN_IF_ERROR(remove(name, "index without a .log"));
    }
  }
  return absl::OkStatus();
}

Status Log::Load(int64_t recovery_point, int64_t log_start_offset, bool clean_shutdown, bool fresh,
                 LoadReport* report) {
  const std::string& dir = options_.dir;
  const std::string name = tp().ToString();
  const LogConfig cfg = config();
  std::vector<std::string> names;
  if (!fresh) {
    RUNNEL_RETURN_IF_ERROR(RemoveLeftovers(report));
    RUNNEL_ASSIGN_OR_RETURN(names, ListDir(dir));
  }
  std::vector<int64_t> bases;
  for (const std::string& n : names) {
    if (std::optional<int64_t> b = ParseSegmentFileName(n, kLogSuffix)) bases.push_back(*b);
    if (std::optional<int64_t> b = ParseSegmentFileName(n, kProducerSnapshotSuffix)) {
      producer_snapshots_.insert(*b);
    }
  }
  std::sort(bases.begin(), bases.end());

  std::vector<std::shared_ptr<Segment>> loaded;
  std::vector<Segment*> recovered;  // rescanned: flushed below, their epochs re-read
  bool cut = false;  // a recovered segment lost its tail: every later segment goes too
  for (size_t i = 0; i < bases.size(); ++i) {
    bool last = i + 1 == bases.size();
    RUNNEL_ASSIGN_OR_RETURN(std::unique_ptr<Segment> seg,
                            Segment::Open(dir, bases[i], cfg.segment_index_bytes,
                                          /*create=*/false, /*active=*/last, options_.files));
    seg->set_created_ms(options_.now_ms());
    // An old segment a merged swap replaced, still here when the swap was cut short: the
    // swapped segment (before it) holds its records already.
    if (!cut && !loaded.empty() && swapped_bases_.count(loaded.back()->base_offset()) &&
        bases[i] < loaded.back()->next_offset()) {
      report->notes.push_back(fmt::format("deleted segment {} merged into segment {}",
                                          OffsetFileStem(bases[i]),
                                          OffsetFileStem(loaded.back()->base_offset())));
      RUNNEL_RETURN_IF_ERROR(seg->Delete());
      continue;
    }
    if (cut) {
      report->notes.push_back(
          fmt::format("deleted segment {} after the truncated one", OffsetFileStem(bases[i])));
      RUNNEL_RETURN_IF_ERROR(seg->Delete());
      continue;
    }
    // A segment holds offsets at or after the recovery point when the next one starts after it.
    bool after_recovery_point = last || bases[i + 1] > recovery_point;
    // An empty .log has nothing to check (a node of many idle partitions would otherwise
    // recover, and flush, every one of them after an unclean stop).
    bool recover = (!clean_shutdown && after_recovery_point && seg->size() > 0) ||
                   swapped_bases_.count(bases[i]);
    if (!recover) {
      Status clean = seg->LoadClean(cfg.index_interval_bytes);
      if (!clean.ok()) {
        report->notes.push_back(fmt::format("segment {} needs recovery: {}",
                                            OffsetFileStem(bases[i]), clean.message()));
        recover = true;
      } else if (seg->rebuilt_indexes()) {
        report->rebuilt_indexes++;
        report->notes.push_back(
            fmt::format("rebuilt the indexes of segment {}", OffsetFileStem(bases[i])));
      }
    }
    if (recover) {
      RUNNEL_ASSIGN_OR_RETURN(SegmentRecovery r, seg->Recover(cfg.index_interval_bytes));
      recovered.push_back(seg.get());
      report->recovered_segments++;
      report->rebuilt_indexes++;
      if (r.truncated_bytes > 0) {
        report->truncated_bytes += r.truncated_bytes;
        report->notes.push_back(
            fmt::format("truncated segment {} from {} to {} bytes: {}", OffsetFileStem(bases[i]),
                        r.valid_bytes + r.truncated_bytes, r.valid_bytes, r.reason));
        cut = !last;
      }
    }
    loaded.push_back(std::move(seg));
  }
  if (cut && !loaded.back()->active()) RUNNEL_RETURN_IF_ERROR(loaded.back()->Reactivate());
  if (loaded.empty()) {
    int64_t base = std::max<int64_t>(log_start_offset, 0);
    RUNNEL_ASSIGN_OR_RETURN(std::unique_ptr<Segment> seg,
                            Segment::Open(dir, base, cfg.segment_index_bytes, /*create=*/true,
                                          /*active=*/true, options_.files));
    seg->set_created_ms(options_.now_ms());
    loaded.push_back(std::move(seg));
  }
  for (const std::shared_ptr<Segment>& s : loaded) segments_[s->base_offset()] = s;
  report->segments += int(loaded.size());

  const Segment& active = *loaded.back();
  int64_t end = active.size() > 0 ? active.next_offset() : active.base_offset();
  // An empty active segment after a non-empty one keeps the end where the segment starts.
  end = std::max(end, active.base_offset());
  log_end_offset_.store(end);
  int64_t start = std::max(log_start_offset, loaded.front()->base_offset());
  log_start_offset_.store(std::min(start, end));
  first_dirty_offset_.store(log_start_offset_.load());

  // What was recovered is flushed now, so the recovery point can move to the end.
  for (Segment* s : recovered) RUNNEL_RETURN_IF_ERROR(s->Flush());
  recovery_point_.store(end);
  last_flush_ms_.store(options_.now_ms());

  StatusOr<LeaderEpochCache> epochs =
      LeaderEpochCache::Load(dir + "/" + std::string(kLeaderEpochCheckpoint));
  if (!epochs.ok()) {
    report->notes.push_back(fmt::format("rebuilding leader epochs: {}", epochs.status().message()));
    RUNNEL_RETURN_IF_ERROR(RebuildLeaderEpochs());
  } else {
    epochs_ = std::move(*epochs);
    RUNNEL_RETURN_IF_ERROR(epochs_->TruncateFromEnd(end));
    RUNNEL_RETURN_IF_ERROR(epochs_->TruncateFromStart(log_start_offset_.load()));
    // A crash between writing a batch and checkpointing its new epoch leaves the epoch out
    // of the file: the recovered batches say which epochs they were written in (Kafka
    // assigns epochs from the batches while recovering, too).
    for (Segment* seg : recovered) {
      Status assigned = absl::OkStatus();
      // Still inside Open (see Load in log.h).
      RUNNEL_RETURN_IF_ERROR(seg->ScanBatches(
          0, seg->size(), [&](const BatchLocation& loc) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            std::optional<EpochEntry> latest = epochs_->Latest();
            if (loc.partition_leader_epoch >= 0 &&
                (!latest || loc.partition_leader_epoch > latest->epoch)) {
              assigned = epochs_->Assign(loc.partition_leader_epoch, loc.base_offset);
            }
            return assigned.ok();
          }));
      RUNNEL_RETURN_IF_ERROR(assigned);
    }
  }
  // The producer state. After a clean stop the latest snapshot is the state: every log
  // whose producers changed since its last snapshot wrote one at close, so a log without
  // snapshots had no producers and costs no read here (a node may hold 100,000 of them).
  // After an unclean stop the batch headers after the latest snapshot are replayed: at most
  // the active segment, as every roll writes one.
  RUNNEL_RETURN_IF_ERROR(LoadProducerStateLocked(clean_shutdown, &report->notes));
  if (!report->notes.empty()) {
    for (const std::string& note : report->notes) kLog()->warn("[{}] {}", name, note);
  }
  return absl::OkStatus();
}

Status Log::LoadProducerStateLocked(bool snapshot_is_state, std::vector<std::string>* notes) {
  const int64_t end = log_end_offset_.load();
  auto drop = [&](int64_t offset, const std::string& why) {
    std::string path = SegmentFilePath(options_.dir, offset, kProducerSnapshotSuffix);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      kLog()->warn("[{}] unlink {}: {}", tp().ToString(), path, std::strerror(errno));
    }
    notes->push_back(fmt::format("deleted producer snapshot {} ({})", OffsetFileStem(offset), why));
  };
  while (!producer_snapshots_.empty() && *producer_snapshots_.rbegin() > end) {
    drop(*producer_snapshots_.rbegin(), "above the log end");
    producer_snapshots_.erase(std::prev(producer_snapshots_.end()));
  }
  producers_.Clear();
  int64_t from = log_start_offset_.load();
  bool damaged = false;
  while (!producer_snapshots_.empty()) {
    const int64_t offset = *producer_snapshots_.rbegin();
    StatusOr<std::optional<std::string>> bytes =
        ReadWholeFile(SegmentFilePath(options_.dir, offset, kProducerSnapshotSuffix));
    Status loaded = !bytes.ok() ? bytes.status()
                    : !*bytes   ? absl::NotFoundError("gone")
                                : producers_.LoadSnapshot(**bytes);
    if (loaded.ok()) {
      from = std::max(from, offset);
      // As Kafka, a snapshot's producers that expired meanwhile are not loaded.
      producers_.RemoveExpired(options_.now_ms(), options_.producer_id_expiration_ms);
      break;
    }
    drop(offset, std::string(loaded.message()));
    producer_snapshots_.erase(offset);
    damaged = true;
  }
  // A damaged latest snapshot: the older one is not the state, replay from it.
  if (snapshot_is_state && !damaged) {
    producers_.MarkSnapshotted();
    first_unstable_offset_.store(producers_.FirstUnstableOffset());
    return absl::OkStatus();
  }
  for (const std::shared_ptr<Segment>& seg : Segments()) {
    if (seg->size() == 0 || seg->next_offset() <= from) continue;
    Status replayed = absl::OkStatus();
    // The scan calls back synchronously, under the append_mu_ this function holds.
    RUNNEL_RETURN_IF_ERROR(seg->ScanBatches(
        0, seg->size(), [&](const BatchLocation& loc) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          if (loc.last_offset < from || loc.producer_id < 0) return true;
          ProducerBatchHeader h;
          h.producer_id = loc.producer_id;
          h.producer_epoch = loc.producer_epoch;
          h.base_sequence = loc.base_sequence;
          h.base_offset = loc.base_offset;
          h.last_offset = loc.last_offset;
          h.max_timestamp = loc.max_timestamp;
          h.transactional = (loc.attributes & 0x10) != 0;
          h.control = (loc.attributes & 0x20) != 0;
          std::optional<record::EndTxnMarker> marker;
          if (h.control) {
            replayed = seg->ForEachRecordIn(loc, [&](int64_t, int64_t, const record::Record& r) {
              record::EndTxnMarker m;
              // Not a transaction marker: no state change, as an empty control batch.
              if (record::ParseEndTxnMarker(r, &m).ok()) marker = m;
              return false;
            });
            if (!replayed.ok()) return false;
          }
          replayed = ReplayLocked(h, marker, *seg);
          return replayed.ok();
        }));
    RUNNEL_RETURN_IF_ERROR(replayed);
  }
  first_unstable_offset_.store(producers_.FirstUnstableOffset());
  return absl::OkStatus();
}

Status Log::ReplayLocked(const ProducerBatchHeader& batch,
                         const std::optional<record::EndTxnMarker>& marker, Segment& segment) {
  std::optional<CompletedTxn> done = producers_.ReplayBatch(batch, marker);
  // An abort whose entry the segment's index lacks (written after its last sync, or the
  // index was damaged): added as the append did.
  if (!done || !done->aborted || segment.LastAbortedTxnOffset() >= done->last_offset) {
    return absl::OkStatus();
  }
  int64_t stable = producers_.FirstUnstableOffsetExcept(done->producer_id);
  if (stable < 0) stable = done->last_offset + 1;
  return segment.AppendAbortedTxn(
      {done->producer_id, done->first_offset, done->last_offset, stable});
}

Status Log::WriteProducerSnapshotLocked(int64_t offset, bool sync) {
  const std::string path = SegmentFilePath(options_.dir, offset, kProducerSnapshotSuffix);
  const std::string bytes = producers_.EncodeSnapshot();
  if (sync) {
    RUNNEL_RETURN_IF_ERROR(WriteFileDurably(path, bytes));
  } else {
    // The caller syncs the file system (LogManager::Shutdown) before it says "clean".
    const std::string tmp = path + ".tmp";
    RUNNEL_RETURN_IF_ERROR(WriteNewFile(tmp, bytes));
    RUNNEL_RETURN_IF_ERROR(RenameFile(tmp, path));
  }
  producer_snapshots_.insert(offset);
  producers_.MarkSnapshotted();
  return absl::OkStatus();
}

void Log::DeleteProducerSnapshotsBelowLocked(int64_t offset) {
  while (!producer_snapshots_.empty() && *producer_snapshots_.begin() < offset) {
    const int64_t below = *producer_snapshots_.begin();
    std::string path = SegmentFilePath(options_.dir, below, kProducerSnapshotSuffix);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      kLog()->warn("[{}] unlink {}: {}", tp().ToString(), path, std::strerror(errno));
    }
    producer_snapshots_.erase(below);
  }
}

Status Log::RebuildLeaderEpochs() {
  std::vector<EpochEntry> entries;
  for (const auto& [base, seg] : segments_) {
    RUNNEL_RETURN_IF_ERROR(seg->ScanBatches(0, seg->size(), [&](const BatchLocation& loc) {
      if (loc.partition_leader_epoch >= 0 &&
          (entries.empty() || loc.partition_leader_epoch > entries.back().epoch)) {
        entries.push_back({loc.partition_leader_epoch, loc.base_offset});
      }
      return true;
    }));
  }
  // The corrupt file goes first: loading a missing file gives an empty cache for the path.
  std::string path = options_.dir + "/" + std::string(kLeaderEpochCheckpoint);
  ::unlink(path.c_str());
  RUNNEL_ASSIGN_OR_RETURN(LeaderEpochCache fresh, LeaderEpochCache::Load(path));
  epochs_ = std::move(fresh);
  return epochs_->Reset(std::move(entries));
}

LogConfig Log::config() const {
  MutexLock lock(&config_mu_);
  return config_;
}

void Log::SetConfig(const LogConfig& config) {
  MutexLock lock(&config_mu_);
  config_ = config;
}

std::shared_ptr<Segment> Log::ActiveSegment() const {
  MutexLock lock(&segments_mu_);
  return segments_.rbegin()->second;
}

std::vector<std::shared_ptr<Segment>> Log::Segments() const {
  MutexLock lock(&segments_mu_);
  std::vector<std::shared_ptr<Segment>> out;
  out.reserve(segments_.size());
  for (const auto& [base, seg] : segments_) out.push_back(seg);
  return out;
}

std::vector<std::shared_ptr<Segment>> Log::SegmentsFrom(int64_t offset) const {
  MutexLock lock(&segments_mu_);
  auto it = segments_.upper_bound(offset);
  if (it != segments_.begin()) --it;
  std::vector<std::shared_ptr<Segment>> out;
  for (; it != segments_.end(); ++it) out.push_back(it->second);
  return out;
}

LogState Log::State() const {
  LogState s;
  s.log_start_offset = log_start_offset_.load();
  s.log_end_offset = log_end_offset_.load();
  s.high_watermark = s.log_end_offset;  // a single replica: everything appended is committed
  s.last_stable_offset = LastStableOffset();
  s.recovery_point = recovery_point_.load();
  MutexLock lock(&segments_mu_);
  for (const auto& [base, seg] : segments_) s.size_bytes += seg->size();
  s.segments = int(segments_.size());
  return s;
}

void Log::Notify() {
  if (!options_.on_change) return;
  // Offsets only: State() walks every segment for the size, too much for every append.
  LogState s;
  s.log_start_offset = log_start_offset_.load();
  s.log_end_offset = log_end_offset_.load();
  s.high_watermark = s.log_end_offset;
  s.last_stable_offset = LastStableOffset();
  s.recovery_point = recovery_point_.load();
  options_.on_change(tp(), s);
}

AppendResult Log::Fail(ErrorCode code, std::string message, int batch_index) const {
  AppendResult r;
  r.error = code;
  r.error_message = std::move(message);
  r.batch_index = batch_index;
  r.log_start_offset = log_start_offset_.load();
  return r;
}

bool Log::ShouldRollLocked(const LogConfig& cfg, const Segment& active, int64_t append_bytes,
                           int64_t last_offset, int64_t max_timestamp) const {
  int64_t size = active.size();
  if (size > 0 && size + append_bytes > cfg.segment_bytes) return true;
  if (size > 0) {
    // segment.ms counts, as in Kafka, from the first batch's timestamp to the new batch's
    // (so old timestamps do not roll a segment per append), or by the wall clock from the
    // segment's creation when the batches carry no timestamps.
    int64_t waited = active.rolling_timestamp() >= 0 ? max_timestamp - active.rolling_timestamp()
                                                     : options_.now_ms() - active.created_ms();
    // A compacted log also rolls by max.compaction.lag.ms, so no record waits in the
    // (never cleaned) active segment longer than that.
    int64_t roll_ms = cfg.segment_ms;
    if (cfg.cleanup_compact) roll_ms = std::min(roll_ms, cfg.max_compaction_lag_ms);
    if (waited > roll_ms) return true;
  }
  if (active.IndexFull()) return true;
  return last_offset - active.base_offset() > INT32_MAX;
}

Status Log::RollLocked() {
  if (failed_.load()) return absl::UnavailableError("the log is offline");
  std::shared_ptr<Segment> old = ActiveSegment();
  int64_t base = log_end_offset_.load();
  if (old->base_offset() == base) return absl::OkStatus();  // already empty at the end
  // The new segment first, then the old one's indexes: a write failing at either step
  // leaves the old segment active and the log as it was, and the next append tries again.
  RUNNEL_ASSIGN_OR_RETURN(std::unique_ptr<Segment> seg,
                          Segment::Open(options_.dir, base, config().segment_index_bytes,
                                        /*create=*/true, /*active=*/true, options_.files));
  Status rolled = old->OnRoll(/*sync=*/false);
  if (rolled.ok()) {
    rolled = old->SyncIndexes();
    if (!rolled.ok()) GoOffline(rolled);
  }
  if (!rolled.ok()) {
    Status dropped = seg->Delete();
    if (!dropped.ok()) kLog()->warn("[{}] {}", tp().ToString(), dropped.message());
    return rolled;
  }
  seg->set_created_ms(options_.now_ms());
  {
    MutexLock lock(&segments_mu_);
    segments_[base] = std::move(seg);
  }
  kLog()->debug("[{}] rolled a new segment at offset {}", tp().ToString(), base);
  // Even with no producers: a replay after a crash then starts at the active segment.
  // Without it the state is still right (the replay starts at an older snapshot, and a
  // clean close writes one, the state staying dirty).
  Status snap = WriteProducerSnapshotLocked(base, /*sync=*/true);
  if (!snap.ok()) kLog()->warn("[{}] producer snapshot: {}", tp().ToString(), snap.message());
  return absl::OkStatus();
}

namespace {

// The storage metrics every log of the process adds to: series resolved once, then one
// relaxed atomic add per event.
struct LogMetrics {
  metrics::Counter* appends;
  metrics::Counter* append_errors;
  metrics::Counter* appended_bytes;
  metrics::Counter* appended_records;
  metrics::Counter* flushes;
  metrics::Histogram* flush_seconds;
};

const LogMetrics& Metrics() {
  static const LogMetrics kMetrics = [] {
    metrics::Registry& r = metrics::ProcessRegistry();
    return LogMetrics{
        r.AddCounter("runnel_storage_appends_total", "Appends to a partition log (one a call).")
            .WithLabels({}),
        r.AddCounter("runnel_storage_append_errors_total", "Appends refused or failed.")
            .WithLabels({}),
        r.AddCounter("runnel_storage_appended_bytes_total", "Bytes of batches appended.")
            .WithLabels({}),
        r.AddCounter("runnel_storage_appended_records_total", "Offsets assigned by appends.")
            .WithLabels({}),
        r.AddCounter("runnel_storage_flushes_total", "Flushes of a log to disk (fdatasync).")
            .WithLabels({}),
        r.AddHistogram("runnel_storage_flush_seconds",
                       "Time of a log flush (fdatasync of its unflushed segments).", {})
            .WithLabels({}),
    };
  }();
  return kMetrics;
}

}  // namespace

void RegisterLogMetrics() { Metrics(); }

AppendResult Log::Append(std::span<uint8_t> records, int32_t leader_epoch, AppendOrigin origin,
                         int transaction_version) {
  const LogConfig cfg = config();
  StatusOr<std::vector<record::BatchView>> batches = record::SplitBatches(records);
  if (!batches.ok())
    return Fail(ErrorCode::kCorruptMessage, std::string(batches.status().message()));
  if (batches->empty()) return Fail(ErrorCode::kInvalidRecord, "no record batches");
  record::ValidationOptions vo;
  vo.max_batch_bytes = cfg.max_message_bytes;
  vo.require_keys = cfg.cleanup_compact;
  vo.from_client = origin == AppendOrigin::kClient;
  if (cfg.timestamp_type == record::TimestampType::kCreateTime &&
      (cfg.timestamp_before_max_ms != INT64_MAX || cfg.timestamp_after_max_ms != INT64_MAX)) {
    vo.now_ms = options_.now_ms();
    vo.timestamp_before_max_ms = cfg.timestamp_before_max_ms;
    vo.timestamp_after_max_ms = cfg.timestamp_after_max_ms;
  }
  for (size_t i = 0; i < batches->size(); ++i) {
    const record::BatchView& b = (*batches)[i];
    protocol::KafkaError e = record::ValidateBatch(b.bytes(), vo);
    if (!e.ok()) {
      std::string message = e.message;
      if (e.code == ErrorCode::kInvalidRecord && cfg.cleanup_compact) {
        message = fmt::format("{} (topic partition {})", e.message, tp().ToString());
      }
      return Fail(e.code, std::move(message), int(i));
    }
  }
  bool needs_flush = false;
  AppendResult result;
  {
    MutexLock lock(&append_mu_);
    result = AppendLocked(cfg, records, *batches, leader_epoch, origin, transaction_version,
                          &needs_flush);
  }
  const LogMetrics& m = Metrics();
  m.appends->Inc();
  if (result.error != ErrorCode::kNone) m.append_errors->Inc();
  // A duplicate (nothing written, an empty range) changes nothing to notify or flush.
  if (result.error != ErrorCode::kNone || result.range.length == 0) return result;
  m.appended_bytes->Inc(static_cast<uint64_t>(result.range.length));
  m.appended_records->Inc(static_cast<uint64_t>(result.last_offset - result.base_offset + 1));
  Notify();
  if (needs_flush) {
    // A failure takes the log offline (FlushUpTo): this append is not acknowledged.
    Status flushed = FlushUpTo(result.last_offset + 1);
    if (!flushed.ok()) return Fail(ErrorCode::kKafkaStorageError, std::string(flushed.message()));
  }
  return result;
}

void Log::GoOffline(const Status& why) {
  {
    MutexLock lock(&failed_mu_);
    if (failed_.load()) return;
    failed_reason_ = std::string(why.message());
    failed_.store(true);
  }
  kLog()->error(
      "[{}] offline until storaged restarts (appends refused, recovery at the next "
      "start): {}",
      tp().ToString(), why.message());
  if (options_.on_offline) options_.on_offline(tp(), std::string(why.message()));
}

std::string Log::offline_reason() const {
  MutexLock lock(&failed_mu_);
  return failed_reason_;
}

AppendResult Log::WriteFailed(const Status& written) {
  if (written.code() == absl::StatusCode::kDataLoss) {
    // The torn write could not be cut back: the file's tail is unknown.
    GoOffline(written);
  } else {
    // Retriable (a full disk): said once per kWriteErrorLogIntervalMs, not once an append.
    const int64_t failures = write_failures_.fetch_add(1) + 1;
    const int64_t now = options_.now_ms();
    int64_t last = last_write_error_log_ms_.load();
    if (now - last >= kWriteErrorLogIntervalMs &&
        last_write_error_log_ms_.compare_exchange_strong(last, now)) {
      kLog()->error("[{}] append failed, the log is unchanged ({} failed so far): {}",
                    tp().ToString(), failures, written.message());
    }
  }
  return Fail(ErrorCode::kKafkaStorageError, std::string(written.message()));
}

void Log::WriteSucceeded() {
  if (write_failures_.load(std::memory_order_relaxed) == 0) [[likely]] {
    return;
  }
  const int64_t failures = write_failures_.exchange(0);
  if (failures > 0) {
    last_write_error_log_ms_.store(INT64_MIN / 2);
    kLog()->info("[{}] appends succeed again after {} failed", tp().ToString(), failures);
  }
}

AppendResult Log::AppendLocked(const LogConfig& cfg, std::span<uint8_t> records,
                               const std::vector<record::BatchView>& batches, int32_t leader_epoch,
                               AppendOrigin origin, int transaction_version, bool* needs_flush) {
  if (closed_) return Fail(ErrorCode::kNotLeaderOrFollower, "the log is closed");
  if (failed_.load()) {
    return Fail(ErrorCode::kKafkaStorageError,
                fmt::format("the log is offline until storaged restarts: {}", offline_reason()));
  }
  const int64_t now = options_.now_ms();
  int64_t next = log_end_offset_.load();
  AppendResult result;
  result.base_offset = next;
  int64_t messages = 0;
  int64_t max_timestamp = -1;
  bool has_producers = false;
  for (const record::BatchView& b : batches) {
    has_producers |= b.producer_id() >= 0;
    std::span<uint8_t> bytes(records.data() + (b.bytes().data() - records.data()),
                             b.size_in_bytes());
    record::SetBaseOffset(bytes, next);
    record::SetPartitionLeaderEpoch(bytes, leader_epoch);
    if (cfg.timestamp_type == record::TimestampType::kLogAppendTime) {
      record::SetLogAppendTime(bytes, now);
      result.log_append_time = now;
    }
    next += int64_t(b.last_offset_delta()) + 1;
    messages += b.record_count();
    max_timestamp = std::max(max_timestamp, b.max_timestamp());
  }
  result.last_offset = next - 1;
  // The views read the header bytes just rewritten, so they see the assigned offsets (and
  // LogAppendTime), as Kafka checks the producer state after assigning them.
  ProducerStateManager::AppendPlan plan;
  if (has_producers) [[unlikely]] {
    AppendResult answer;
    if (!CheckProducersLocked(batches, origin, transaction_version, &plan, &answer)) {
      return answer;
    }
  }
  std::shared_ptr<Segment> active = ActiveSegment();
  if (ShouldRollLocked(cfg, *active, int64_t(records.size()), result.last_offset, max_timestamp)) {
    Status rolled = RollLocked();
    if (!rolled.ok()) {
      return Fail(ErrorCode::kKafkaStorageError, std::string(rolled.message()));
    }
    active = ActiveSegment();
    if (options_.on_roll) options_.on_roll(tp(), active->base_offset());
  }
  const int64_t position = active->size();
  Status written = active->Append(records, batches, cfg.index_interval_bytes);
  if (!written.ok()) return WriteFailed(written);
  WriteSucceeded();
  result.range = {active->log_path(), position, int32_t(records.size()), active->inode()};
  if (has_producers) [[unlikely]] {
    const std::vector<CompletedTxn> completed = plan.completed();
    producers_.Commit(std::move(plan));
    // Before the end moves: a read_committed reader must not see the last stable offset
    // pass an aborted transaction before its index entry exists.
    Status indexed = IndexCompletedTxnsLocked(completed, *active);
    if (!indexed.ok()) {
      // The marker is written but its abort not indexed: offline, and a restart's replay
      // indexes it (it is in the active segment, after the latest producer snapshot).
      GoOffline(indexed);
      return Fail(ErrorCode::kKafkaStorageError, std::string(indexed.message()));
    }
  }
  log_end_offset_.store(next, std::memory_order_release);
  if (leader_epoch >= 0) {
    MutexLock lock(&epochs_mu_);
    std::optional<EpochEntry> latest = epochs_->Latest();
    if (!latest || leader_epoch > latest->epoch) {
      Status s = epochs_->Assign(leader_epoch, result.base_offset);
      if (!s.ok()) kLog()->warn("[{}] leader epoch checkpoint: {}", tp().ToString(), s.message());
    }
  }
  int64_t total = appended_messages_.fetch_add(messages) + messages;
  *needs_flush =
      cfg.SyncEveryAppend() || (cfg.flush_messages != INT64_MAX &&
                                total - flushed_messages_snapshot_.load() >= cfg.flush_messages);
  result.log_start_offset = log_start_offset_.load();
  result.high_watermark = next;  // a single replica: everything appended is committed
  result.last_stable_offset = LastStableOffset();
  return result;
}

Status Log::IndexCompletedTxnsLocked(const std::vector<CompletedTxn>& completed, Segment& segment) {
  for (size_t i = 0; i < completed.size(); ++i) {
    const CompletedTxn& c = completed[i];
    if (!c.aborted) continue;
    // Kafka's lastStableOffset(completedTxn): the earliest transaction of another producer
    // still ongoing, counting those this append ends later as ongoing yet.
    int64_t stable = producers_.FirstUnstableOffsetExcept(c.producer_id);
    for (size_t j = i + 1; j < completed.size(); ++j) {
      if (completed[j].producer_id != c.producer_id &&
          (stable < 0 || completed[j].first_offset < stable)) {
        stable = completed[j].first_offset;
      }
    }
    if (stable < 0) stable = c.last_offset + 1;
    RUNNEL_RETURN_IF_ERROR(
        segment.AppendAbortedTxn({c.producer_id, c.first_offset, c.last_offset, stable}));
  }
  first_unstable_offset_.store(producers_.FirstUnstableOffset(), std::memory_order_release);
  return absl::OkStatus();
}

int64_t Log::LastStableOffset() const {
  // The end first: first_unstable_offset_ is stored before the end moves.
  const int64_t end = log_end_offset_.load(std::memory_order_acquire);
  const int64_t first = first_unstable_offset_.load(std::memory_order_acquire);
  if (first < 0 || first >= end) return end;
  return std::max(first, log_start_offset_.load());
}

bool Log::CheckProducersLocked(const std::vector<record::BatchView>& batches, AppendOrigin origin,
                               int transaction_version, ProducerStateManager::AppendPlan* plan,
                               AppendResult* answer) const {
  for (size_t i = 0; i < batches.size(); ++i) {
    const record::BatchView& b = batches[i];
    if (b.producer_id() < 0) continue;
    if (origin == AppendOrigin::kCoordinator) {
      protocol::KafkaError e =
          producers_.CheckCoordinatorBatch(b, b.base_offset(), transaction_version, plan);
      if (!e.ok()) {
        *answer = Fail(e.code, fmt::format("{} in {}", e.message, tp().ToString()), int(i));
        return false;
      }
      continue;
    }
    // Kafka stops at the first duplicate and appends nothing of the request (a producer
    // sends one batch per partition, so a retry is never mixed with new batches).
    if (std::optional<ProducerBatch> dup = producers_.FindDuplicate(b)) {
      kLog()->debug(
          "[{}] duplicate batch of producer {} epoch {} sequences {}..{}: answered "
          "with offsets {}..{}",
          tp().ToString(), b.producer_id(), b.producer_epoch(), dup->first_seq, dup->last_seq,
          dup->first_offset, dup->last_offset);
      *answer = AppendResult{};
      answer->base_offset = dup->first_offset;
      answer->last_offset = dup->last_offset;
      answer->log_append_time = dup->max_timestamp;
      answer->log_start_offset = log_start_offset_.load();
      answer->high_watermark = log_end_offset_.load();
      return false;
    }
    protocol::KafkaError e = producers_.CheckClientBatch(b, b.base_offset(), plan);
    if (!e.ok()) {
      *answer = Fail(e.code, fmt::format("{} in {}", e.message, tp().ToString()), int(i));
      return false;
    }
  }
  return true;
}

std::optional<ProducerEntry> Log::Producer(int64_t producer_id) const {
  MutexLock lock(&append_mu_);
  const ProducerEntry* e = producers_.Find(producer_id);
  if (e == nullptr) return std::nullopt;
  return *e;
}

absl::flat_hash_map<int64_t, Log::ProducerLastRecord> Log::LastRecordsOfProducers() const {
  MutexLock lock(&append_mu_);
  absl::flat_hash_map<int64_t, ProducerLastRecord> out;
  for (const auto& [id, entry] : producers_.producers()) {
    ProducerLastRecord r;
    r.epoch = entry.epoch;
    if (!entry.empty()) r.last_data_offset = entry.batch(entry.count() - 1).last_offset;
    out[id] = r;
  }
  return out;
}

int Log::RemoveExpiredProducers() {
  MutexLock lock(&append_mu_);
  if (producers_.size() == 0) return 0;
  return producers_.RemoveExpired(options_.now_ms(), options_.producer_id_expiration_ms);
}

std::vector<ActiveProducer> Log::ActiveProducers() const {
  MutexLock lock(&append_mu_);
  return producers_.ActiveProducers();
}

size_t Log::ProducerCount() const {
  MutexLock lock(&append_mu_);
  return producers_.size();
}

AppendResult Log::AppendWithOffsets(std::span<uint8_t> records) {
  StatusOr<std::vector<record::BatchView>> batches = record::SplitBatches(records);
  if (!batches.ok())
    return Fail(ErrorCode::kCorruptMessage, std::string(batches.status().message()));
  if (batches->empty()) return Fail(ErrorCode::kInvalidRecord, "no record batches");
  for (size_t i = 0; i < batches->size(); ++i) {
    if (!(*batches)[i].CrcValid()) {
      return Fail(ErrorCode::kCorruptMessage, "record batch CRC mismatch", int(i));
    }
  }
  AppendResult result;
  {
    MutexLock lock(&append_mu_);
    if (failed_.load() || closed_) {
      return Fail(ErrorCode::kKafkaStorageError,
                  closed_ ? "the log is closed" : "the log is offline until storaged restarts");
    }
    int64_t next = log_end_offset_.load();
    if ((*batches)[0].base_offset() < next) {
      return Fail(ErrorCode::kInvalidRecord,
                  fmt::format("batch offset {} is below the log end offset {}",
                              (*batches)[0].base_offset(), next));
    }
    for (size_t i = 1; i < batches->size(); ++i) {
      if ((*batches)[i].base_offset() <= (*batches)[i - 1].last_offset()) {
        return Fail(ErrorCode::kInvalidRecord, "batch offsets are not increasing", int(i));
      }
    }
    result.base_offset = (*batches)[0].base_offset();
    result.last_offset = batches->back().last_offset();
    std::shared_ptr<Segment> active = ActiveSegment();
    int64_t max_timestamp = -1;
    for (const record::BatchView& b : *batches) {
      max_timestamp = std::max(max_timestamp, b.max_timestamp());
    }
    const LogConfig cfg = config();
    if (ShouldRollLocked(cfg, *active, int64_t(records.size()), result.last_offset,
                         max_timestamp)) {
      Status rolled = RollLocked();
      if (!rolled.ok()) return Fail(ErrorCode::kKafkaStorageError, std::string(rolled.message()));
    }
    active = ActiveSegment();
    if (result.last_offset - active->base_offset() > INT32_MAX ||
        result.base_offset < active->base_offset()) {
      return Fail(ErrorCode::kInvalidRecord, "batch offsets do not fit the active segment");
    }
    Status written = active->Append(records, *batches, cfg.index_interval_bytes);
    if (!written.ok()) return WriteFailed(written);
    WriteSucceeded();
    bool has_producers = false;
    for (const record::BatchView& b : *batches) {
      // Copied batches are trusted, as Kafka trusts its leader's (no sequence checks).
      if (b.producer_id() < 0) [[likely]] {
        continue;
      }
      has_producers = true;
      std::optional<record::EndTxnMarker> marker;
      if (b.is_control()) (void)record::ReadEndTxnMarker(b, &marker);
      Status replayed = ReplayLocked(ProducerBatchHeader::Of(b), marker, *active);
      if (!replayed.ok()) {
        GoOffline(replayed);
        return Fail(ErrorCode::kKafkaStorageError, std::string(replayed.message()));
      }
    }
    if (has_producers) first_unstable_offset_.store(producers_.FirstUnstableOffset());
    log_end_offset_.store(result.last_offset + 1);
    result.log_start_offset = log_start_offset_.load();
    result.high_watermark = result.last_offset + 1;
    result.last_stable_offset = LastStableOffset();
  }
  Notify();
  return result;
}

ReadResult Log::Read(int64_t offset, int32_t max_bytes, bool min_one_batch,
                     std::optional<int64_t> max_offset, bool read_committed) const {
  ReadResult r;
  r.log_start_offset = log_start_offset_.load();
  r.log_end_offset = log_end_offset_.load(std::memory_order_acquire);
  r.high_watermark = r.log_end_offset;
  r.last_stable_offset = std::min(LastStableOffset(), r.log_end_offset);
  if (offset < r.log_start_offset || offset > r.log_end_offset) {
    r.error = ErrorCode::kOffsetOutOfRange;
    return r;
  }
  int64_t limit = std::min(max_offset.value_or(r.high_watermark), r.log_end_offset);
  if (read_committed) limit = std::min(limit, r.last_stable_offset);
  if (offset >= limit) return r;
  const int64_t fetch_offset = offset;
  int64_t budget = std::max(max_bytes, 0);
  // Where the returned batches end (read_committed bounds its aborted transactions there).
  std::shared_ptr<Segment> last_segment;
  int64_t last_end = 0;
  for (const std::shared_ptr<Segment>& seg : SegmentsFrom(offset)) {
    if (seg->base_offset() >= limit) break;
    int64_t seg_end = seg->size();
    StatusOr<std::optional<BatchLocation>> first = seg->FindBatch(offset, seg_end);
    if (!first.ok()) {
      kLog()->error("[{}] read: {}", tp().ToString(), first.status().message());
      r.error = ErrorCode::kKafkaStorageError;
      return r;
    }
    if (!*first) continue;  // the offset is in a gap at the end of this segment
    const BatchLocation& loc = **first;
    if (loc.base_offset >= limit || loc.last_offset >= limit) break;
    int64_t end_position = loc.position;
    if (r.ranges.empty() && min_one_batch && loc.size > budget) {
      end_position = loc.position + loc.size;
    } else {
      StatusOr<int64_t> end = seg->FindEndPosition(loc.position, budget, seg_end, limit);
      if (!end.ok()) {
        kLog()->error("[{}] read: {}", tp().ToString(), end.status().message());
        r.error = ErrorCode::kKafkaStorageError;
        return r;
      }
      end_position = *end;
    }
    if (end_position <= loc.position) break;
    int32_t length = int32_t(end_position - loc.position);
    r.ranges.push_back({seg->log_path(), loc.position, length, seg->inode()});
    r.bytes += length;
    budget -= length;
    if (read_committed) [[unlikely]] {
      last_segment = seg;
      last_end = end_position;
    }
    // Continue into the next segment only when this one was read to its end.
    if (end_position < seg_end || budget <= 0) break;
    offset = seg->next_offset();
  }
  if (read_committed && last_segment != nullptr) [[unlikely]] {
    // Kafka's upper bound: the offset of the batch after what is returned (the segment's
    // next offset when it was read to its end).
    int64_t upper = last_segment->next_offset();
    Status scanned =
        last_segment->ScanBatches(last_end, last_segment->size(), [&](const BatchLocation& next) {
          upper = next.base_offset;
          return false;
        });
    if (!scanned.ok()) {
      kLog()->error("[{}] read: {}", tp().ToString(), scanned.message());
      r.error = ErrorCode::kKafkaStorageError;
      return r;
    }
    CollectAbortedTxns(fetch_offset, std::min(upper, limit), &r.aborted);
  }
  return r;
}

void Log::CollectAbortedTxns(int64_t fetch_offset, int64_t upper_bound,
                             std::vector<AbortedTxn>* out) const {
  // Transactions aborted before the segment holding fetch_offset ended before it; each
  // segment's search says when no later one can hold more.
  for (const std::shared_ptr<Segment>& seg : SegmentsFrom(fetch_offset)) {
    if (seg->CollectAbortedTxns(fetch_offset, upper_bound, out)) return;
  }
}

int32_t Log::EpochForOffset(int64_t offset) const {
  MutexLock lock(&epochs_mu_);
  int32_t epoch = -1;
  for (const EpochEntry& e : epochs_->entries()) {
    if (e.start_offset <= offset) epoch = e.epoch;
  }
  return epoch;
}

OffsetLookup Log::LookupMaxTimestamp() const {
  OffsetLookup out;
  std::shared_ptr<Segment> best;
  for (const std::shared_ptr<Segment>& seg : Segments()) {
    if (seg->max_timestamp() >= 0 && (!best || seg->max_timestamp() > best->max_timestamp())) {
      best = seg;
    }
  }
  if (!best) return out;  // no timestamps: offset -1, timestamp -1, as Kafka answers
  int64_t target_ts = best->max_timestamp();
  StatusOr<std::optional<BatchLocation>> loc =
      best->FindBatch(best->offset_of_max_timestamp(), best->size());
  if (!loc.ok() || !*loc) {
    out.error = ErrorCode::kKafkaStorageError;
    return out;
  }
  out.timestamp = target_ts;
  out.offset = (*loc)->last_offset;
  out.leader_epoch = (*loc)->partition_leader_epoch;
  // The exact record that carries the maximum.
  Status s = best->ForEachRecordIn(**loc, [&](int64_t offset, int64_t ts, const record::Record&) {
    if (ts == target_ts) {
      out.offset = offset;
      return false;
    }
    return true;
  });
  if (!s.ok()) kLog()->warn("[{}] max timestamp lookup: {}", tp().ToString(), s.message());
  return out;
}

OffsetLookup Log::LookupTimestamp(int64_t timestamp) const {
  OffsetLookup out;
  int64_t start = log_start_offset_.load();
  for (const std::shared_ptr<Segment>& seg : Segments()) {
    if (seg->max_timestamp() < timestamp) continue;
    StatusOr<std::optional<BatchLocation>> loc = seg->FindBatchByTimestamp(timestamp);
    if (!loc.ok()) {
      out.error = ErrorCode::kKafkaStorageError;
      return out;
    }
    if (!*loc) continue;
    // The batch found may lie wholly below the log start (DeleteRecords moves it inside a
    // segment), so the search goes on through the later batches of this segment.
    bool found = false;
    Status record_error;
    Status s = seg->ScanBatches((*loc)->position, seg->size(), [&](const BatchLocation& batch) {
      if (batch.last_offset < start || batch.max_timestamp < timestamp) return true;
      record_error =
          seg->ForEachRecordIn(batch, [&](int64_t offset, int64_t ts, const record::Record&) {
            if (ts >= timestamp && offset >= start) {
              out.offset = offset;
              out.timestamp = ts;
              out.leader_epoch = batch.partition_leader_epoch;
              found = true;
              return false;
            }
            return true;
          });
      return record_error.ok() && !found;
    });
    if (!s.ok() || !record_error.ok()) {
      out = OffsetLookup();
      out.error = ErrorCode::kKafkaStorageError;
      return out;
    }
    if (found) return out;
  }
  return out;  // nothing at or after the timestamp: -1, -1
}

OffsetLookup Log::ListOffset(int64_t timestamp, bool read_committed) const {
  OffsetLookup out;
  if (read_committed && timestamp != kLatestTimestamp && timestamp != kEarliestTimestamp &&
      timestamp != kEarliestLocalTimestamp) {
    // Kafka's rule: what a read_committed consumer may not read yet is not found.
    OffsetLookup found = ListOffset(timestamp, false);
    if (found.error == ErrorCode::kNone && found.offset >= LastStableOffset()) return out;
    return found;
  }
  switch (timestamp) {
    case kLatestTimestamp:
      out.offset = read_committed ? LastStableOffset() : log_end_offset_.load();
      out.leader_epoch = EpochForOffset(out.offset);
      return out;
    case kEarliestTimestamp:
    case kEarliestLocalTimestamp:
      out.offset = log_start_offset_.load();
      out.leader_epoch = EpochForOffset(out.offset);
      return out;
    case kMaxTimestamp:
      return LookupMaxTimestamp();
    case kLatestTieredTimestamp:
    case kEarliestPendingUploadTimestamp:
      return out;  // nothing is tiered: -1, -1, -1
    default:
      if (timestamp < 0) {
        out.error = ErrorCode::kInvalidRequest;
        return out;
      }
      return LookupTimestamp(timestamp);
  }
}

StatusOr<int64_t> Log::DeleteRecordsBefore(int64_t offset, ErrorCode* error) {
  *error = ErrorCode::kNone;
  {
    MutexLock lock(&append_mu_);
    int64_t hw = log_end_offset_.load();
    if (offset == -1) offset = hw;
    if (offset < 0 || offset > hw) {
      *error = ErrorCode::kOffsetOutOfRange;
      return log_start_offset_.load();
    }
    if (offset <= log_start_offset_.load()) return log_start_offset_.load();
    log_start_offset_.store(offset);
    MutexLock elock(&epochs_mu_);
    RUNNEL_RETURN_IF_ERROR(epochs_->TruncateFromStart(offset));
  }
  Notify();
  return offset;
}

Status Log::TruncateTo(int64_t offset) {
  {
    MutexLock lock(&append_mu_);
    if (offset >= log_end_offset_.load()) return absl::OkStatus();
    truncations_.fetch_add(1);
    MutexLock flock(&flush_mu_);
    std::vector<std::shared_ptr<Segment>> doomed;
    std::shared_ptr<Segment> keep;
    {
      MutexLock slock(&segments_mu_);
      for (auto it = segments_.begin(); it != segments_.end();) {
        if (it->first > offset || (it->first == offset && it != segments_.begin())) {
          doomed.push_back(it->second);
          it = segments_.erase(it);
        } else {
          keep = it->second;
          ++it;
        }
      }
    }
    for (const std::shared_ptr<Segment>& s : doomed) RUNNEL_RETURN_IF_ERROR(s->Delete());
    if (offset < keep->base_offset()) {
      // Everything goes: start again at `offset`.
      RUNNEL_RETURN_IF_ERROR(keep->Delete());
      RUNNEL_ASSIGN_OR_RETURN(std::unique_ptr<Segment> seg,
                              Segment::Open(options_.dir, offset, config().segment_index_bytes,
                                            true, true, options_.files));
      seg->set_created_ms(options_.now_ms());
      MutexLock slock(&segments_mu_);
      segments_.clear();
      segments_[offset] = std::move(seg);
      log_start_offset_.store(offset);
    } else {
      if (!keep->active()) RUNNEL_RETURN_IF_ERROR(keep->Reactivate());
      RUNNEL_RETURN_IF_ERROR(keep->TruncateTo(offset));
    }
    log_end_offset_.store(offset);
    if (recovery_point_.load() > offset) recovery_point_.store(offset);
    {
      MutexLock elock(&epochs_mu_);
      RUNNEL_RETURN_IF_ERROR(epochs_->TruncateFromEnd(offset));
    }
    // Kafka's truncateAndReload: the state as of the new end, from the snapshots at or
    // below it and the batches after them.
    std::vector<std::string> notes;
    RUNNEL_RETURN_IF_ERROR(LoadProducerStateLocked(/*snapshot_is_state=*/false, &notes));
    for (const std::string& note : notes) kLog()->info("[{}] {}", tp().ToString(), note);
    DeleteProducerSnapshotsBelowLocked(log_start_offset_.load());
  }
  Notify();
  return absl::OkStatus();
}

Status Log::FlushUpTo(int64_t offset) {
  // After a failed fsync a second one may succeed without the data being on disk (the
  // kernel marks the pages clean either way): no retry, ever, until a restart recovers.
  if (failed_.load()) {
    return absl::UnavailableError(
        fmt::format("the log is offline until storaged restarts: {}", offline_reason()));
  }
  // The topic id is on disk before any record is.
  if (Status synced = SyncMetadata(); !synced.ok()) {
    GoOffline(synced);
    return synced;
  }
  MutexLock lock(&flush_mu_);
  if (recovery_point_.load() >= offset) return absl::OkStatus();  // a flusher got here first
  // Everything appended so far is in the page cache: one fdatasync per segment covers it.
  int64_t target = log_end_offset_.load(std::memory_order_acquire);
  int64_t messages = appended_messages_.load();
  const auto flush_start = std::chrono::steady_clock::now();
  for (const std::shared_ptr<Segment>& seg : SegmentsFrom(recovery_point_.load())) {
    if (Status flushed = seg->Flush(); !flushed.ok()) {
      GoOffline(flushed);
      return flushed;
    }
  }
  Metrics().flushes->Inc();
  Metrics().flush_seconds->Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - flush_start).count());
  recovery_point_.store(std::max(recovery_point_.load(), target));
  flush_count_.fetch_add(1);
  flushed_messages_snapshot_.store(messages);
  last_flush_ms_.store(options_.now_ms());
  return absl::OkStatus();
}

Status Log::Flush() { return FlushUpTo(log_end_offset_.load()); }

Status Log::MaybeTimedFlush() {
  const LogConfig cfg = config();
  if (cfg.flush_ms == INT64_MAX) return absl::OkStatus();
  if (recovery_point_.load() >= log_end_offset_.load()) return absl::OkStatus();
  if (options_.now_ms() - last_flush_ms_.load() < cfg.flush_ms) return absl::OkStatus();
  return Flush();
}

int Log::DeleteOldSegments(std::vector<std::shared_ptr<Segment>>* to_unlink) {
  const LogConfig cfg = config();
  const int64_t now = options_.now_ms();
  MutexLock lock(&append_mu_);
  if (closed_) return 0;
  std::vector<std::shared_ptr<Segment>> segs = Segments();
  // Retention by time may take the active segment too: roll it first, as Kafka does.
  if (cfg.cleanup_delete && cfg.retention_ms >= 0 && !segs.empty()) {
    const Segment& active = *segs.back();
    bool all_expired = active.size() > 0 && active.max_timestamp() >= 0 &&
                       now - active.max_timestamp() > cfg.retention_ms;
    for (size_t i = 0; all_expired && i + 1 < segs.size(); ++i) {
      all_expired = now - segs[i]->max_timestamp() > cfg.retention_ms;
    }
    if (all_expired) {
      Status rolled = RollLocked();
      if (!rolled.ok()) {
        kLog()->warn("[{}] roll for retention: {}", tp().ToString(), rolled.message());
      } else {
        if (options_.on_roll) options_.on_roll(tp(), log_end_offset_.load());
        segs = Segments();
      }
    }
  }
  int64_t total = 0;
  for (const auto& s : segs) total += s->size();
  const int64_t start = log_start_offset_.load();
  size_t n = 0;  // segs[0..n) go
  for (; n + 1 < segs.size(); ++n) {
    const Segment& s = *segs[n];
    bool below_start = segs[n + 1]->base_offset() <= start;
    bool by_time =
        cfg.cleanup_delete && cfg.retention_ms >= 0 && now - s.max_timestamp() > cfg.retention_ms;
    bool by_size =
        cfg.cleanup_delete && cfg.retention_bytes >= 0 && total - s.size() >= cfg.retention_bytes;
    if (!below_start && !by_time && !by_size) break;
    total -= s.size();
  }
  if (n == 0) return 0;
  {
    MutexLock slock(&segments_mu_);
    for (size_t i = 0; i < n; ++i) segments_.erase(segs[i]->base_offset());
  }
  int64_t new_start = std::max(start, segs[n]->base_offset());
  log_start_offset_.store(new_start);
  if (first_dirty_offset_.load() < new_start) first_dirty_offset_.store(new_start);
  {
    MutexLock elock(&epochs_mu_);
    Status s = epochs_->TruncateFromStart(new_start);
    if (!s.ok()) kLog()->warn("[{}] leader epochs: {}", tp().ToString(), s.message());
  }
  // The producer snapshots of the removed segments go with them: those below the new log
  // start (the one at the first kept segment's base stays unless DeleteRecords moved it).
  DeleteProducerSnapshotsBelowLocked(new_start);
  for (size_t i = 0; i < n; ++i) {
    Status s = segs[i]->RenameSuffix("", kDeletedSuffix);
    if (!s.ok()) kLog()->warn("[{}] rename for deletion: {}", tp().ToString(), s.message());
    to_unlink->push_back(segs[i]);
  }
  kLog()->info("[{}] retention removed {} segment(s); log start offset is now {}", tp().ToString(),
               n, new_start);
  // Subscribers only note the change, so notifying under append_mu_ is fine.
  Notify();
  return int(n);
}

Status Log::ReplaceSegment(const std::shared_ptr<Segment>& old_segment,
                           std::unique_ptr<Segment> replacement,
                           std::vector<std::shared_ptr<Segment>>* to_unlink,
                           uint64_t truncations_seen) {
  return ReplaceSegments({old_segment}, std::move(replacement), to_unlink, truncations_seen);
}

Status Log::ReplaceSegments(const std::vector<std::shared_ptr<Segment>>& old_segments,
                            std::unique_ptr<Segment> replacement,
                            std::vector<std::shared_ptr<Segment>>* to_unlink,
                            uint64_t truncations_seen) {
  MutexLock lock(&append_mu_);
  if (closed_) return absl::FailedPreconditionError("the log is closed");
  if (old_segments.empty()) return absl::InvalidArgumentError("no segment to replace");
  if (truncations_.load() != truncations_seen) {
    return absl::FailedPreconditionError("the log was truncated during the cleaning pass");
  }
  {
    MutexLock slock(&segments_mu_);
    auto it = segments_.find(old_segments.front()->base_offset());
    for (const std::shared_ptr<Segment>& old : old_segments) {
      if (it == segments_.end() || it->second != old || std::next(it) == segments_.end()) {
        return absl::FailedPreconditionError("a segment is no longer a non-active segment");
      }
      ++it;
    }
  }
  RUNNEL_RETURN_IF_ERROR(replacement->Flush());
  RUNNEL_RETURN_IF_ERROR(replacement->RenameSuffix(kCleanedSuffix, kSwapSuffix));
  RUNNEL_RETURN_IF_ERROR(FsyncDir(options_.dir));
  for (const std::shared_ptr<Segment>& old : old_segments) {
    RUNNEL_RETURN_IF_ERROR(old->RenameSuffix("", kDeletedSuffix));
  }
  RUNNEL_RETURN_IF_ERROR(replacement->RenameSuffix(kSwapSuffix, ""));
  RUNNEL_RETURN_IF_ERROR(FsyncDir(options_.dir));
  {
    MutexLock slock(&segments_mu_);
    for (const std::shared_ptr<Segment>& old : old_segments) segments_.erase(old->base_offset());
    segments_[old_segments.front()->base_offset()] = std::move(replacement);
  }
  for (const std::shared_ptr<Segment>& old : old_segments) to_unlink->push_back(old);
  return absl::OkStatus();
}

std::vector<EpochEntry> Log::LeaderEpochs() const {
  MutexLock lock(&epochs_mu_);
  return epochs_->entries();
}

std::pair<int32_t, int64_t> Log::EndOffsetForEpoch(int32_t epoch) const {
  MutexLock lock(&epochs_mu_);
  if (!epochs_) return {-1, -1};
  return epochs_->EndOffsetFor(epoch, log_end_offset_.load())
      .value_or(std::pair<int32_t, int64_t>(-1, -1));
}

Status Log::Close(bool sync) {
  if (failed_.load()) sync = false;  // no second fsync after a failed one (FlushUpTo)
  if (sync) RUNNEL_RETURN_IF_ERROR(SyncMetadata());
  MutexLock lock(&append_mu_);
  if (closed_) return absl::OkStatus();
  closed_ = true;
  Status result = absl::OkStatus();
  // Only a log whose producers changed since its last snapshot writes one (see Load).
  if (producers_.dirty() && !failed_.load()) {
    result = WriteProducerSnapshotLocked(log_end_offset_.load(), sync);
  }
  for (const std::shared_ptr<Segment>& seg : Segments()) {
    Status s = seg->Close(sync);
    if (!s.ok() && result.ok()) result = s;
  }
  // An offline log keeps the recovery point of its last good flush (see FlushUpTo).
  if (result.ok() && !failed_.load()) recovery_point_.store(log_end_offset_.load());
  return result;
}

StatusOr<std::string> Log::MarkDeleted() {
  RUNNEL_RETURN_IF_ERROR(Close());
  std::string parent = options_.dir.substr(0, options_.dir.rfind('/'));
  protocol::Uuid id = protocol::Uuid::Random();
  std::string hex;
  for (uint8_t b : id.bytes) hex += fmt::format("{:02x}", b);
  std::string target = parent + "/" + DeletedPartitionDirName(tp(), hex);
  RUNNEL_RETURN_IF_ERROR(RenameFile(options_.dir, target));
  RUNNEL_RETURN_IF_ERROR(FsyncDir(parent));
  return target;
}

}  // namespace runnel::storaged
