#include "storaged/log/log_manager.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <system_error>

#include "common/log/log.h"
#include "storaged/log/cleaner.h"
#include "storaged/log_dirs.h"

namespace runnel::storaged {
namespace {

constexpr std::chrono::seconds kLoadProgressEvery{5};
// New logs a background pass syncs one by one; from this many on, one syncfs instead.
constexpr size_t kSyncFileSystemFrom = 32;
constexpr std::chrono::milliseconds kSyncNewLogsAfterPause{1000};
constexpr std::chrono::milliseconds kSyncNewLogsWithin{30000};

const log::ModuleLogger kLog("storaged.log");

constexpr size_t kCloseThreads = 8;

std::string Join(const std::string& dir, std::string_view name) {
  return dir + "/" + std::string(name);
}

}  // namespace

LogManager::LogManager(LogManagerOptions options)
    : options_(std::move(options)), files_(options_.max_open_files) {
  if (!options_.now_ms) options_.now_ms = SystemNowMs;
}

LogManager::~LogManager() {
  Status s = Shutdown();
  if (!s.ok()) kLog()->warn("shutdown: {}", s.message());
}

LogOptions LogManager::MakeLogOptions(const std::string& dir, const TopicPartition& tp,
                                      const LogConfig& config) {
  LogOptions o;
  o.dir = Join(dir, PartitionDirName(tp));
  o.tp = tp;
  o.config = config;
  o.files = &files_;
  o.now_ms = options_.now_ms;
  o.producer_id_expiration_ms = options_.producer_id_expiration_ms;
  o.on_change = [this](const TopicPartition& t, const LogState& s) { OnChange(t, s); };
  o.on_roll = [this](const TopicPartition& t, int64_t offset) { OnRoll(t, offset); };
  o.on_offline = [this](const TopicPartition& t, const std::string&) { OnOffline(t); };
  return o;
}

StatusOr<std::unique_ptr<LogManager>> LogManager::Open(LogManagerOptions options) {
  std::unique_ptr<LogManager> m(new LogManager(std::move(options)));
  for (const std::string& dir : m->options_.dirs) RUNNEL_RETURN_IF_ERROR(m->LoadDir(dir));
  m->shut_down_ = false;
  return m;
}

Status LogManager::LoadDir(const std::string& dir) {
  std::string marker = Join(dir, kCleanShutdownMarker);
  bool clean = ::access(marker.c_str(), F_OK) == 0;
  RUNNEL_ASSIGN_OR_RETURN(auto recovery_points,
                          OffsetCheckpointFile(Join(dir, kRecoveryPointCheckpoint)).Read());
  RUNNEL_ASSIGN_OR_RETURN(auto start_offsets,
                          OffsetCheckpointFile(Join(dir, kLogStartOffsetCheckpoint)).Read());
  StatusOr<std::map<TopicPartition, int64_t>> dirty =
      OffsetCheckpointFile(Join(dir, kCleanerOffsetCheckpoint)).Read();
  if (!dirty.ok()) {
    kLog()->warn("{}: starting compaction from the log start: {}", dir, dirty.status().message());
    dirty = std::map<TopicPartition, int64_t>{};
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::InternalError(fmt::format("opendir {}: {}", dir, std::strerror(errno)));
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());

  // Partitions load in parallel (num.recovery.threads.per.data.dir). One that fails to load
  // goes offline and the others load: a node never stays down for one partition.
  std::vector<TopicPartition> todo;
  for (const std::string& name : names) {
    if (IsDeletedPartitionDirName(name)) {
      MutexLock lock(&work_mu_);  // no other thread yet; the lock only says what guards it
      deleted_dirs_.push_back(Join(dir, name));
      continue;
    }
    std::optional<TopicPartition> tp = ParsePartitionDirName(name);
    if (!tp) continue;
    struct stat st;
    if (::stat(Join(dir, name).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    todo.push_back(*tp);
  }
  std::mutex mu;
  size_t next = 0;
  Status first_error = absl::OkStatus();
  // A long load (an unclean stop of many partitions) says how far it got every few seconds.
  const auto load_started = std::chrono::steady_clock::now();
  auto last_progress = load_started;
  auto worker = [&] {
    for (;;) {
      TopicPartition tp;
      {
        std::lock_guard lock(mu);
        if (next >= todo.size() || !first_error.ok()) return;
        tp = todo[next++];
        const auto now = std::chrono::steady_clock::now();
        if (now - last_progress >= kLoadProgressEvery) {
          last_progress = now;
          kLog()->info("{}: loading partitions: {} of {} ({} s, {})", dir, next - 1, todo.size(),
                       std::chrono::duration_cast<std::chrono::seconds>(now - load_started).count(),
                       clean ? "after a clean shutdown" : "recovering after an unclean stop");
        }
      }
      auto find = [&](const std::map<TopicPartition, int64_t>& m, int64_t dflt) {
        auto it = m.find(tp);
        return it == m.end() ? dflt : it->second;
      };
      LoadReport report;
      StatusOr<std::unique_ptr<Log>> log =
          Log::Open(MakeLogOptions(dir, tp, options_.defaults), "", find(recovery_points, 0),
                    find(start_offsets, 0), clean, &report);
      std::lock_guard lock(mu);
      if (!log.ok()) {
        kLog()->error("[{}] cannot be loaded: {}; it stays offline (other partitions serve)",
                      tp.ToString(), log.status().message());
        OfflineLog off;
        off.dir = dir;
        off.recovery_point = find(recovery_points, 0);
        off.log_start_offset = find(start_offsets, 0);
        off.first_dirty_offset = find(*dirty, 0);
        off.clean = clean;
        off.reason = std::string(log.status().message());
        MutexLock llock(&logs_mu_);
        offline_[tp] = std::move(off);
        continue;
      }
      (*log)->set_first_dirty_offset(std::max(find(*dirty, 0), (*log)->State().log_start_offset));
      MutexLock llock(&logs_mu_);
      if (logs_.count(tp)) {
        first_error = absl::FailedPreconditionError(fmt::format(
            "partition {} is in two log dirs: {} and {}", tp.ToString(), log_dir_of_[tp], dir));
        return;
      }
      AddLogLocked(tp, dir, std::shared_ptr<Log>(std::move(*log)));
      load_report_.segments += report.segments;
      load_report_.recovered_segments += report.recovered_segments;
      load_report_.truncated_bytes += report.truncated_bytes;
      load_report_.rebuilt_indexes += report.rebuilt_indexes;
      load_report_.removed_files += report.removed_files;
      for (std::string& n : report.notes) {
        load_report_.notes.push_back(fmt::format("[{}] {}", tp.ToString(), n));
      }
    }
  };
  int threads = std::max(1, std::min<int>(options_.recovery_threads_per_dir, int(todo.size())));
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error& e) {
      // Fewer threads only make loading slower.
      kLog()->warn("{}: loading with {} thread(s), not {}: cannot start another: {}", dir, i,
                   threads, e.what());
      break;
    }
  }
  worker();
  for (std::thread& t : pool) t.join();
  RUNNEL_RETURN_IF_ERROR(first_error);
  // From here on a crash is an unclean stop: the marker goes before any write.
  if (clean) {
    if (::unlink(marker.c_str()) != 0) {
      return absl::InternalError(fmt::format("unlink {}: {}", marker, std::strerror(errno)));
    }
    RUNNEL_RETURN_IF_ERROR(FsyncDir(dir));
  }
  kLog()->info("{}: loaded {} partition(s){}", dir, todo.size(),
               todo.empty() ? ""
               : clean      ? " after a clean shutdown"
                            : " after an unclean stop");
  return absl::OkStatus();
}

void LogManager::Start() {
  MutexLock lock(&work_mu_);
  if (background_.joinable()) return;
  stopping_ = false;
  background_ = std::thread([this] { BackgroundLoop(); });
  if (options_.cleaner_enable) cleaner_thread_ = std::thread([this] { CleanerLoop(); });
}

StatusOr<std::shared_ptr<Log>> LogManager::CreateLog(
    const TopicPartition& tp, const std::string& topic_id,
    const std::map<std::string, std::string>& topic_configs) {
  RUNNEL_ASSIGN_OR_RETURN(LogConfig config,
                          LogConfig::WithOverrides(options_.defaults, topic_configs));
  std::shared_ptr<Log> log = GetLog(tp);
  if (!log) {
    // Creations take their own lock, so lookups (every produce and fetch) never wait for
    // the directory, metadata file and index files of a new partition.
    MutexLock create(&create_mu_);
    log = GetLog(tp);
    bool offline = false;
    {
      MutexLock lock(&logs_mu_);
      offline = offline_.count(tp) > 0;
    }
    if (!log && offline) {
      {
        MutexLock lock(&logs_mu_);
        const OfflineLog& off = offline_.at(tp);
        if (off.until_restart) {
          return absl::UnavailableError(fmt::format(
              "partition {} is offline until storaged restarts: {}", tp.ToString(), off.reason));
        }
      }
      RUNNEL_ASSIGN_OR_RETURN(log, LoadOffline(tp, config));
    } else if (!log) {
      std::string dir;
      {
        // The dir with the fewest partitions takes it.
        MutexLock lock(&logs_mu_);
        dir = options_.dirs.front();
        for (const std::string& d : options_.dirs) {
          if (partitions_in_dir_[d] < partitions_in_dir_[dir]) dir = d;
        }
      }
      // What the creation makes is removed when it fails: nothing half created stays.
      const std::string partition_dir = Join(dir, tp.ToString());
      const bool existed = ::access(partition_dir.c_str(), F_OK) == 0;
      StatusOr<std::unique_ptr<Log>> created =
          Log::Open(MakeLogOptions(dir, tp, config), topic_id, 0, 0, true, nullptr);
      if (!created.ok()) {
        if (!existed) {
          std::error_code ec;
          std::filesystem::remove_all(partition_dir, ec);
        }
        return created.status();
      }
      log = std::shared_ptr<Log>(std::move(*created));
      {
        MutexLock lock(&logs_mu_);
        AddLogLocked(tp, dir, log);
      }
      kLog()->info("[{}] created in {}", tp.ToString(), dir);
      if (!log->metadata_synced()) {
        MutexLock lock(&work_mu_);
        if (unsynced_.empty()) first_unsynced_ms_ = options_.now_ms();
        last_created_ms_ = options_.now_ms();
        unsynced_.push_back(log);
      }
    }
  }
  if (!topic_id.empty() && !log->topic_id().empty() && log->topic_id() != topic_id) {
    return absl::FailedPreconditionError(fmt::format("partition {} exists with topic id {}, not {}",
                                                     tp.ToString(), log->topic_id(), topic_id));
  }
  log->SetConfig(config);
  OnChange(tp, log->State());
  return log;
}

StatusOr<std::shared_ptr<Log>> LogManager::LoadOffline(const TopicPartition& tp,
                                                       const LogConfig& config) {
  OfflineLog off;
  {
    MutexLock lock(&logs_mu_);
    off = offline_.at(tp);
  }
  LoadReport report;
  StatusOr<std::unique_ptr<Log>> loaded =
      Log::Open(MakeLogOptions(off.dir, tp, config), "", off.recovery_point, off.log_start_offset,
                off.clean, &report);
  MutexLock lock(&logs_mu_);
  if (!loaded.ok()) {
    offline_[tp].reason = std::string(loaded.status().message());
    return loaded.status();
  }
  std::shared_ptr<Log> log(std::move(*loaded));
  log->set_first_dirty_offset(std::max(off.first_dirty_offset, log->State().log_start_offset));
  offline_.erase(tp);
  AddLogLocked(tp, off.dir, log);
  kLog()->info("[{}] loaded in {} (offline since start: {})", tp.ToString(), off.dir, off.reason);
  return log;
}

void LogManager::AddLogLocked(const TopicPartition& tp, const std::string& dir,
                              std::shared_ptr<Log> log) {
  logs_[tp] = std::move(log);
  log_dir_of_[tp] = dir;
  ++partitions_in_dir_[dir];
}

bool LogManager::IsOffline(const TopicPartition& tp) const {
  MutexLock lock(&logs_mu_);
  return offline_.count(tp) > 0;
}

void LogManager::OnOffline(const TopicPartition& tp) {
  {
    MutexLock lock(&work_mu_);
    failed_logs_.push_back(tp);
  }
  work_cv_.SignalAll();
}

void LogManager::TakeFailedLogsOffline() {
  std::vector<TopicPartition> failed;
  {
    MutexLock lock(&work_mu_);
    failed.swap(failed_logs_);
  }
  for (const TopicPartition& tp : failed) {
    std::shared_ptr<Log> log;
    {
      MutexLock lock(&logs_mu_);
      auto it = logs_.find(tp);
      if (it == logs_.end() || !it->second->offline()) continue;  // deleted meanwhile
      log = it->second;
      const std::string dir = log_dir_of_.at(tp);
      const LogState state = log->State();
      OfflineLog off;
      off.dir = dir;
      // Only what a flush made durable counts: the next start recovers from there.
      off.recovery_point = state.recovery_point;
      off.log_start_offset = state.log_start_offset;
      off.first_dirty_offset = log->first_dirty_offset();
      off.until_restart = true;
      off.reason = log->offline_reason();
      offline_[tp] = std::move(off);
      logs_.erase(it);
      log_dir_of_.erase(tp);
      --partitions_in_dir_[dir];
    }
    // Its descriptors go; nothing is synced (Close of an offline log keeps its recovery point).
    Status closed = log->Close(/*sync=*/false);
    if (!closed.ok()) kLog()->warn("[{}] close: {}", tp.ToString(), closed.message());
    kLog()->warn("[{}] out of service until storaged restarts", tp.ToString());
    LogState gone;
    gone.log_end_offset = -1;  // reported as a deleted log is: it is not served here
    gone.log_start_offset = -1;
    gone.high_watermark = -1;
    OnChange(tp, gone);
  }
}

std::map<TopicPartition, std::string> LogManager::OfflineLogs() const {
  std::map<TopicPartition, std::string> out;
  MutexLock lock(&logs_mu_);
  for (const auto& [tp, off] : offline_) out[tp] = off.reason;
  return out;
}

Status LogManager::UpdateConfig(const TopicPartition& tp,
                                const std::map<std::string, std::string>& topic_configs) {
  RUNNEL_ASSIGN_OR_RETURN(LogConfig config,
                          LogConfig::WithOverrides(options_.defaults, topic_configs));
  std::shared_ptr<Log> log = GetLog(tp);
  if (!log) return absl::NotFoundError(fmt::format("no partition {}", tp.ToString()));
  log->SetConfig(config);
  return absl::OkStatus();
}

Status LogManager::DeleteLog(const TopicPartition& tp) {
  std::shared_ptr<Log> log;
  {
    MutexLock lock(&logs_mu_);
    auto it = logs_.find(tp);
    if (it == logs_.end())
      return absl::NotFoundError(fmt::format("no partition {}", tp.ToString()));
    log = it->second;
    logs_.erase(it);
    --partitions_in_dir_[log_dir_of_.at(tp)];
    log_dir_of_.erase(tp);
  }
  RUNNEL_ASSIGN_OR_RETURN(std::string renamed, log->MarkDeleted());
  kLog()->info("[{}] deleted; its files go from {}", tp.ToString(), renamed);
  {
    MutexLock lock(&work_mu_);
    deleted_dirs_.push_back(renamed);
  }
  work_cv_.SignalAll();
  LogState gone;
  gone.log_end_offset = -1;  // a deleted log is reported with negative offsets
  gone.log_start_offset = -1;
  gone.high_watermark = -1;
  OnChange(tp, gone);
  return absl::OkStatus();
}

std::shared_ptr<Log> LogManager::GetLog(const TopicPartition& tp) const {
  MutexLock lock(&logs_mu_);
  auto it = logs_.find(tp);
  return it == logs_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Log>> LogManager::AllLogs() const {
  MutexLock lock(&logs_mu_);
  std::vector<std::shared_ptr<Log>> out;
  for (const auto& [tp, log] : logs_) out.push_back(log);
  return out;
}

int LogManager::Subscribe(ChangeFn fn) {
  MutexLock lock(&subscribers_mu_);
  auto copy = std::make_shared<std::map<int, ChangeFn>>(*subscribers_);
  int id = next_subscriber_++;
  (*copy)[id] = std::move(fn);
  subscribers_ = copy;
  return id;
}

void LogManager::Unsubscribe(int id) {
  MutexLock lock(&subscribers_mu_);
  auto copy = std::make_shared<std::map<int, ChangeFn>>(*subscribers_);
  copy->erase(id);
  subscribers_ = copy;
}

void LogManager::OnChange(const TopicPartition& tp, const LogState& state) {
  std::shared_ptr<const std::map<int, ChangeFn>> subs;
  {
    MutexLock lock(&subscribers_mu_);
    subs = subscribers_;
  }
  for (const auto& [id, fn] : *subs) fn(tp, state);
}

void LogManager::OnRoll(const TopicPartition& tp, int64_t offset) {
  {
    MutexLock lock(&work_mu_);
    roll_flushes_.emplace_back(tp, offset);
  }
  work_cv_.SignalAll();
}

void LogManager::QueueUnlink(std::vector<std::shared_ptr<Segment>> segments, int64_t delay_ms) {
  if (segments.empty()) return;
  MutexLock lock(&work_mu_);
  for (std::shared_ptr<Segment>& s : segments) {
    unlink_at_.emplace_back(options_.now_ms() + delay_ms, std::move(s));
  }
}

void LogManager::RunRetention() {
  for (const std::shared_ptr<Log>& log : AllLogs()) {
    std::vector<std::shared_ptr<Segment>> doomed;
    log->DeleteOldSegments(&doomed);
    QueueUnlink(std::move(doomed), log->config().file_delete_delay_ms);
  }
}

void LogManager::RunTimedFlush() {
  for (const std::shared_ptr<Log>& log : AllLogs()) {
    if (log->offline()) continue;  // said once when it went
    Status s = log->MaybeTimedFlush();
    if (!s.ok()) kLog()->error("[{}] timed flush: {}", log->tp().ToString(), s.message());
  }
}

void LogManager::UnlinkDue(bool all) {
  std::vector<std::shared_ptr<Segment>> due;
  {
    MutexLock lock(&work_mu_);
    int64_t now = options_.now_ms();
    for (auto it = unlink_at_.begin(); it != unlink_at_.end();) {
      if (all || it->first <= now) {
        due.push_back(std::move(it->second));
        it = unlink_at_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const std::shared_ptr<Segment>& s : due) {
    Status st = s->Delete();
    if (!st.ok()) kLog()->warn("unlink {}: {}", s->log_path(), st.message());
  }
}

void LogManager::RemoveDeletedDirs(bool all) {
  std::vector<std::string> dirs;
  {
    MutexLock lock(&work_mu_);
    dirs.swap(deleted_dirs_);
  }
  for (const std::string& d : dirs) {
    std::error_code ec;
    std::filesystem::remove_all(d, ec);
    if (ec) kLog()->warn("removing {}: {}", d, ec.message());
  }
}

Status LogManager::WriteCheckpoints() {
  std::map<std::string, std::map<TopicPartition, int64_t>> recovery, start, dirty;
  for (const std::string& d : options_.dirs) {
    recovery[d];
    start[d];
    dirty[d];
  }
  {
    MutexLock lock(&logs_mu_);
    for (const auto& [tp, log] : logs_) {
      const std::string& d = log_dir_of_.at(tp);
      LogState s = log->State();
      recovery[d][tp] = s.recovery_point;
      start[d][tp] = s.log_start_offset;
      dirty[d][tp] = log->first_dirty_offset();
    }
    // An offline partition keeps what the checkpoints said of it.
    for (const auto& [tp, off] : offline_) {
      recovery[off.dir][tp] = off.recovery_point;
      start[off.dir][tp] = off.log_start_offset;
      dirty[off.dir][tp] = off.first_dirty_offset;
    }
  }
  for (const std::string& d : options_.dirs) {
    RUNNEL_RETURN_IF_ERROR(
        OffsetCheckpointFile(Join(d, kRecoveryPointCheckpoint)).Write(recovery[d]));
    RUNNEL_RETURN_IF_ERROR(
        OffsetCheckpointFile(Join(d, kLogStartOffsetCheckpoint)).Write(start[d]));
    RUNNEL_RETURN_IF_ERROR(OffsetCheckpointFile(Join(d, kCleanerOffsetCheckpoint)).Write(dirty[d]));
  }
  return absl::OkStatus();
}

void LogManager::BackgroundLoop() {
  int64_t next_retention =
      options_.now_ms() + std::min<int64_t>(options_.retention_check_interval_ms, 30000);
  int64_t next_flush = options_.now_ms() + options_.flush_check_interval_ms;
  int64_t next_checkpoint = options_.now_ms() + options_.checkpoint_interval_ms;
  int64_t next_producer_expiration =
      options_.now_ms() + options_.producer_id_expiration_check_interval_ms;
  for (;;) {
    std::vector<std::pair<TopicPartition, int64_t>> rolls;
    std::vector<std::weak_ptr<Log>> unsynced;
    {
      MutexLock lock(&work_mu_);
      int64_t now = options_.now_ms();
      int64_t wake =
          std::min({next_retention, next_flush, next_checkpoint, next_producer_expiration});
      if (roll_flushes_.empty() && deleted_dirs_.empty() && failed_logs_.empty() && !stopping_ &&
          wake > now) {
        work_cv_.WaitFor(&work_mu_, std::chrono::milliseconds(std::min<int64_t>(wake - now, 1000)));
      }
      if (stopping_) return;
      rolls.swap(roll_flushes_);
      // New logs are synced once creations pause (a sync while thousands are being created
      // stalls them), or after kSyncNewLogsWithin at the latest.
      const int64_t at = options_.now_ms();
      if (!unsynced_.empty() && (at - last_created_ms_ >= kSyncNewLogsAfterPause.count() ||
                                 at - first_unsynced_ms_ >= kSyncNewLogsWithin.count())) {
        unsynced.swap(unsynced_);
      }
    }
    SyncNewLogs(unsynced);
    TakeFailedLogsOffline();
    for (const auto& [tp, offset] : rolls) {
      if (std::shared_ptr<Log> log = GetLog(tp); log && !log->offline()) {
        Status s = log->FlushUpTo(offset);
        if (!s.ok()) kLog()->error("[{}] flush after roll: {}", tp.ToString(), s.message());
      }
    }
    RemoveDeletedDirs(false);
    int64_t now = options_.now_ms();
    if (now >= next_flush) {
      RunTimedFlush();
      next_flush = now + options_.flush_check_interval_ms;
    }
    if (now >= next_retention) {
      RunRetention();
      next_retention = now + options_.retention_check_interval_ms;
    }
    if (now >= next_producer_expiration) {
      RemoveExpiredProducers();
      next_producer_expiration = now + options_.producer_id_expiration_check_interval_ms;
    }
    UnlinkDue(false);
    if (now >= next_checkpoint) {
      Status s = WriteCheckpoints();
      if (!s.ok()) kLog()->error("writing checkpoints: {}", s.message());
      next_checkpoint = now + options_.checkpoint_interval_ms;
    }
  }
}

int LogManager::RemoveExpiredProducers() {
  int removed = 0;
  for (const std::shared_ptr<Log>& log : AllLogs()) {
    removed += log->RemoveExpiredProducers();
  }
  if (removed > 0) kLog()->info("removed {} expired producer id(s)", removed);
  return removed;
}

void LogManager::SyncNewLogs(const std::vector<std::weak_ptr<Log>>& logs) {
  if (logs.size() >= kSyncFileSystemFrom) {
    // Thousands of new partitions (a topic of many): one syncfs per log dir does what three
    // fsyncs each would, in one pass of the disk.
    for (const std::string& d : options_.dirs) {
      Status s = SyncFileSystem(d);
      if (!s.ok()) {
        kLog()->error("syncing new partitions' metadata: {}", s.message());
        return;  // each log syncs itself before its first flush
      }
    }
    for (const std::weak_ptr<Log>& weak : logs) {
      if (std::shared_ptr<Log> log = weak.lock()) log->MetadataSynced();
    }
    return;
  }
  for (const std::weak_ptr<Log>& weak : logs) {
    {
      MutexLock lock(&work_mu_);
      if (stopping_) return;  // Shutdown's syncfs covers the rest
    }
    if (std::shared_ptr<Log> log = weak.lock()) {
      Status s = log->SyncMetadata();
      if (!s.ok()) {
        kLog()->error("[{}] syncing partition.metadata: {}", log->tp().ToString(), s.message());
      }
    }
  }
}

void LogManager::CleanerLoop() {
  CleanerOptions co;
  co.now_ms = options_.now_ms;
  Cleaner cleaner(co);
  for (;;) {
    std::vector<std::shared_ptr<Segment>> replaced;
    StatusOr<bool> cleaned = cleaner.CleanOnce(AllLogs(), &replaced);
    // The cleaner does not say whose segments these were: the node's delay applies.
    QueueUnlink(std::move(replaced), options_.defaults.file_delete_delay_ms);
    if (!cleaned.ok()) kLog()->error("cleaner: {}", cleaned.status().message());
    MutexLock lock(&work_mu_);
    if (stopping_) return;
    if (cleaned.ok() && *cleaned) continue;  // more may be waiting
    work_cv_.WaitFor(&work_mu_, std::chrono::milliseconds(options_.cleaner_backoff_ms),
                     [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(work_mu_) { return stopping_; });
    if (stopping_) return;
  }
}

Status LogManager::Shutdown() {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  {
    MutexLock lock(&work_mu_);
    stopping_ = true;
  }
  work_cv_.SignalAll();
  if (background_.joinable()) background_.join();
  if (cleaner_thread_.joinable()) cleaner_thread_.join();
  // A failed log is not closed as the others are: its recovery point must not move.
  TakeFailedLogsOffline();
  // Logs close in parallel (index write-backs and trims), without an fsync each: 100,000
  // partitions would take three each; one syncfs per log dir afterwards makes everything
  // durable at once, before the checkpoints and the marker say so.
  Status result = absl::OkStatus();
  std::vector<std::shared_ptr<Log>> logs = AllLogs();
  std::mutex mu;
  size_t next = 0;
  auto closer = [&] {
    for (;;) {
      std::shared_ptr<Log> log;
      {
        std::lock_guard lock(mu);
        if (next >= logs.size()) return;
        log = logs[next++];
      }
      Status s = log->Close(/*sync=*/false);
      if (!s.ok()) {
        kLog()->error("[{}] close: {}", log->tp().ToString(), s.message());
        std::lock_guard lock(mu);
        if (result.ok()) result = s;
      }
    }
  };
  std::vector<std::thread> pool;
  size_t threads = std::min<size_t>(logs.size(), kCloseThreads);
  for (size_t i = 1; i < threads; ++i) pool.emplace_back(closer);
  closer();
  for (std::thread& t : pool) t.join();
  Status synced = absl::OkStatus();
  for (const std::string& d : options_.dirs) {
    Status s = SyncFileSystem(d);
    if (!s.ok() && synced.ok()) synced = s;
  }
  if (!synced.ok() && result.ok()) result = synced;
  UnlinkDue(true);
  RemoveDeletedDirs(true);
  // The logs' recovery points moved to their ends at close: true only once synced. Else the
  // checkpoints keep what the last periodic pass wrote.
  if (synced.ok()) {
    Status cp = WriteCheckpoints();
    if (!cp.ok() && result.ok()) result = cp;
  }
  // The marker says "every log above was flushed and checkpointed": only then.
  // A partition still offline that was not stopped cleanly before is not clean now either,
  // nor one a failed fsync took offline: its dir gets no marker, so the next start recovers
  // what needs it.
  std::set<std::string> unclean;
  {
    MutexLock lock(&logs_mu_);
    for (const auto& [tp, off] : offline_) {
      if (!off.clean) unclean.insert(off.dir);
    }
  }
  if (result.ok()) {
    for (const std::string& d : options_.dirs) {
      if (unclean.count(d) > 0) {
        kLog()->warn(
            "{}: no clean-shutdown marker: a partition offline (since an unclean start, or "
            "after a failed fsync) is still to recover",
            d);
        continue;
      }
      Status s = WriteFileDurably(Join(d, kCleanShutdownMarker), "{\"version\":0}\n");
      if (!s.ok() && result.ok()) result = s;
    }
  }
  kLog()->info("log manager shut down{}", result.ok() ? " cleanly" : " with errors");
  return result;
}

}  // namespace runnel::storaged
