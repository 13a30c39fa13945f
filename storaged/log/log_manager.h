// Every partition log of one storaged: loading them (with recovery) at start, creating and
// deleting them, the background work (flush by time, flush of rolled segments, retention,
// checkpoints, compaction, unlinking deleted files) and the clean shutdown.
//
// Threads: calls come from gRPC threads; one background thread runs the periodic tasks and
// the cleaner runs on its own thread (cleaner.h), so a long clean never delays retention or
// appends. Change notifications are delivered to subscribers on the appending thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/util/mutex.h"
#include "common/util/status.h"
#include "storaged/log/file_cache.h"
#include "storaged/log/log.h"
#include "storaged/log/log_config.h"

namespace runnel::storaged {

struct LogManagerOptions {
  std::vector<std::string> dirs;  // absolute, already locked (LogDirs)
  LogConfig defaults;
  int recovery_threads_per_dir = 1;              // num.recovery.threads.per.data.dir
  int64_t retention_check_interval_ms = 300000;  // log.retention.check.interval.ms
  int64_t flush_check_interval_ms = 1000;        // log.flush.scheduler.interval.ms
  int64_t checkpoint_interval_ms = 60000;        // log.flush.offset.checkpoint.interval.ms
  bool cleaner_enable = true;                    // log.cleaner.enable
  int64_t cleaner_backoff_ms = 15000;            // log.cleaner.backoff.ms
  size_t max_open_files = 1024;                  // runnel.storage.max.open.files
  int64_t producer_id_expiration_ms = 86400000;  // producer.id.expiration.ms
  int64_t producer_id_expiration_check_interval_ms = 600000;  // producer.id.expiration.check...
  std::function<int64_t()> now_ms;                            // defaults to the system clock
};

class LogManager {
 public:
  // Loads every partition directory of every log dir, recovering those not cleanly shut
  // down, and removes directories marked for deletion. Does not start background work.
  static StatusOr<std::unique_ptr<LogManager>> Open(LogManagerOptions options);
  ~LogManager();  // Shutdown() if not done

  // Starts the background thread(s).
  void Start();

  // Creates the partition's log in the dir holding the fewest partitions, or returns the
  // existing one after checking its topic id (a different id is FailedPrecondition: the
  // old topic's data is still there). `topic_configs` are the topic's explicit configs.
  StatusOr<std::shared_ptr<Log>> CreateLog(const TopicPartition& tp, const std::string& topic_id,
                                           const std::map<std::string, std::string>& topic_configs);
  // Replaces the topic configs of an existing log.
  Status UpdateConfig(const TopicPartition& tp,
                      const std::map<std::string, std::string>& topic_configs);
  // Removes the log: closed, its directory renamed "<tp>.<uuid>-delete", removed in the
  // background. NotFound when there is no such log.
  Status DeleteLog(const TopicPartition& tp);
  std::shared_ptr<Log> GetLog(const TopicPartition& tp) const;
  std::vector<std::shared_ptr<Log>> AllLogs() const;

  // Subscribes to log changes (end/start offset moved, log created or deleted). Returns an
  // id for Unsubscribe. The callback runs on the thread that made the change and must not
  // block.
  using ChangeFn = std::function<void(const TopicPartition&, const LogState&)>;
  int Subscribe(ChangeFn fn);
  void Unsubscribe(int id);

  // One pass of each periodic task, for tests and the background thread.
  void RunRetention();
  void RunTimedFlush();
  // Forgets producers idle longer than producer.id.expiration.ms in every log; how many.
  int RemoveExpiredProducers();
  Status WriteCheckpoints();
  // Takes the logs an I/O error took offline (a failed fsync, see Log::Append) out of
  // service: they join OfflineLogs until storaged restarts (CreateLog refuses them), keep
  // in the checkpoints the recovery point of their last good flush, leave their dir without
  // a clean-shutdown marker, and are reported gone to subscribers. The background thread
  // runs this as soon as a log fails; Shutdown runs it first.
  void TakeFailedLogsOffline();

  // Stops background work, flushes every log, writes the checkpoints and the clean
  // shutdown marker in every dir.
  Status Shutdown();

  // Partitions whose logs could not be loaded at start (a resource error, damage beyond what
  // recovery mends), with the reason. They are out of service while the rest of the node
  // serves; CreateLog of one tries to load it again, as at start; the checkpoints keep what
  // they said of it. Also the logs taken offline by a failed fsync (TakeFailedLogsOffline),
  // which only a restart loads again.
  std::map<TopicPartition, std::string> OfflineLogs() const;
  bool IsOffline(const TopicPartition& tp) const;

  const LoadReport& load_report() const { return load_report_; }
  FileCache& files() { return files_; }

 private:
  explicit LogManager(LogManagerOptions options);
  LogOptions MakeLogOptions(const std::string& dir, const TopicPartition& tp,
                            const LogConfig& config);
  Status LoadDir(const std::string& dir);
  // Registers a loaded or created log: logs_, log_dir_of_ and the dir's partition count.
  void AddLogLocked(const TopicPartition& tp, const std::string& dir, std::shared_ptr<Log> log)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(logs_mu_);
  // CreateLog of a partition that failed to load at start: loads it as start would have.
  StatusOr<std::shared_ptr<Log>> LoadOffline(const TopicPartition& tp, const LogConfig& config)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);
  void OnChange(const TopicPartition& tp, const LogState& state);
  void OnRoll(const TopicPartition& tp, int64_t offset);
  void OnOffline(const TopicPartition& tp);
  void BackgroundLoop();
  // Makes new logs' partition.metadata durable (Log::SyncMetadata), for many at once with
  // one syncfs per log dir.
  void SyncNewLogs(const std::vector<std::weak_ptr<Log>>& logs);
  void CleanerLoop();
  void UnlinkDue(bool all);
  void RemoveDeletedDirs(bool all);
  void QueueUnlink(std::vector<std::shared_ptr<Segment>> segments, int64_t delay_ms);

  LogManagerOptions options_;
  FileCache files_;
  LoadReport load_report_;

  Mutex create_mu_;  // serializes CreateLog's opening of new logs
  mutable Mutex logs_mu_;
  std::map<TopicPartition, std::shared_ptr<Log>> logs_ ABSL_GUARDED_BY(logs_mu_);
  // partition -> the log dir holding it
  std::map<TopicPartition, std::string> log_dir_of_ ABSL_GUARDED_BY(logs_mu_);
  // log dir -> how many partitions it holds (a new one goes to the dir with the fewest)
  std::map<std::string, int> partitions_in_dir_ ABSL_GUARDED_BY(logs_mu_);
  // A partition that failed to load, and how to load it again.
  struct OfflineLog {
    std::string dir;
    int64_t recovery_point = 0;
    int64_t log_start_offset = 0;
    int64_t first_dirty_offset = 0;
    bool clean = false;  // its dir had the clean-shutdown marker at start
    // An I/O error took it offline while serving: only a restart's recovery may load it.
    bool until_restart = false;
    std::string reason;
  };
  std::map<TopicPartition, OfflineLog> offline_ ABSL_GUARDED_BY(logs_mu_);

  Mutex subscribers_mu_;
  int next_subscriber_ ABSL_GUARDED_BY(subscribers_mu_) = 1;
  std::shared_ptr<const std::map<int, ChangeFn>> subscribers_ ABSL_GUARDED_BY(subscribers_mu_) =
      std::make_shared<std::map<int, ChangeFn>>();

  // Background work queues, guarded by work_mu_.
  Mutex work_mu_;
  CondVar work_cv_;
  bool stopping_ ABSL_GUARDED_BY(work_mu_) = false;
  std::vector<std::pair<TopicPartition, int64_t>> roll_flushes_ ABSL_GUARDED_BY(work_mu_);
  std::vector<TopicPartition> failed_logs_ ABSL_GUARDED_BY(work_mu_);  // for TakeFailedLogsOffline
  // (due ms, segment)
  std::vector<std::pair<int64_t, std::shared_ptr<Segment>>> unlink_at_ ABSL_GUARDED_BY(work_mu_);
  std::vector<std::string> deleted_dirs_ ABSL_GUARDED_BY(work_mu_);
  // Logs created and not yet synced, whose partition.metadata a background pass syncs.
  std::vector<std::weak_ptr<Log>> unsynced_ ABSL_GUARDED_BY(work_mu_);
  int64_t first_unsynced_ms_ ABSL_GUARDED_BY(work_mu_) = 0;
  int64_t last_created_ms_ ABSL_GUARDED_BY(work_mu_) = 0;
  std::thread background_;
  std::thread cleaner_thread_;
  bool shut_down_ = false;
};

}  // namespace runnel::storaged
