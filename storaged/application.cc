#include "storaged/application.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include "common/grpc/unix_server.h"
#include "common/log/log.h"
#include "common/util/signals.h"
#include "storaged/log/log_config.h"

namespace runnel::storaged {
namespace {

// Time in-flight calls get to finish at shutdown before they are cancelled. Watch streams
// end first (StorageServiceImpl::Shutdown), so this only bounds appends and reads in flight.
constexpr std::chrono::milliseconds kDrainDeadline{1000};

void LogLoadReport(const LogManager& logs, size_t partitions) {
  auto logger = log::Get("storaged");
  const LoadReport& r = logs.load_report();
  logger->info(
      "loaded {} partition(s): {} segment(s), {} recovered, {} byte(s) truncated, {} index(es) "
      "rebuilt, {} leftover file(s) removed",
      partitions, r.segments, r.recovered_segments, r.truncated_bytes, r.rebuilt_indexes,
      r.removed_files);
  for (const std::string& note : r.notes) logger->warn("recovery: {}", note);
}

}  // namespace

LogManagerOptions LogManagerOptionsFromConfig(const config::Config& config,
                                              std::vector<std::string> dirs) {
  LogManagerOptions o;
  o.dirs = std::move(dirs);
  o.defaults = LogConfig::FromNode(config);
  o.recovery_threads_per_dir = config.GetInt("num.recovery.threads.per.data.dir");
  o.retention_check_interval_ms = config.GetLong("log.retention.check.interval.ms");
  o.flush_check_interval_ms = config.GetLong("log.flush.scheduler.interval.ms");
  o.checkpoint_interval_ms = config.GetInt("log.flush.offset.checkpoint.interval.ms");
  o.cleaner_enable = config.GetBool("log.cleaner.enable");
  o.cleaner_backoff_ms = config.GetLong("log.cleaner.backoff.ms");
  o.max_open_files = static_cast<size_t>(config.GetInt("runnel.storage.max.open.files"));
  o.producer_id_expiration_ms = config.GetInt("producer.id.expiration.ms");
  o.producer_id_expiration_check_interval_ms =
      config.GetInt("producer.id.expiration.check.interval.ms");
  return o;
}

namespace {

// Segment and index files are kept open up to runnel.storage.max.open.files, besides gRPC's
// sockets: the usual soft limit of 1024 descriptors is too few. Raise it to the hard limit
// (what systemd's LimitNOFILE or the shell allows). When even that leaves too little room,
// the file cache is made smaller to fit, and the log says so: storaged never runs out of
// descriptors by design (deploy/README.md says how to raise the limit). Returns the file
// cache's size.
size_t FitFileLimit(size_t max_open_files, spdlog::logger& logger) {
  constexpr size_t kReserved = 256;  // sockets, checkpoint and metadata files, logs
  constexpr size_t kFewest = 64;
  struct rlimit lim;
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return max_open_files;
  if (lim.rlim_cur < lim.rlim_max) {
    rlim_t old = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) {
      logger.info("open file limit raised from {} to {}", old, lim.rlim_cur);
    } else {
      lim.rlim_cur = old;
    }
  }
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= max_open_files + kReserved) {
    return max_open_files;
  }
  size_t fit = std::max(
      kFewest, size_t(lim.rlim_cur) > kReserved ? size_t(lim.rlim_cur) - kReserved : size_t{0});
  logger.warn(
      "the open file limit {} leaves too little room for runnel.storage.max.open.files={}: "
      "keeping at most {} segment and index files open (slower reads of many partitions); "
      "raise LimitNOFILE (deploy/README.md) or lower the key",
      lim.rlim_cur, max_open_files, fit);
  return fit;
}

// Says what the memory map limit is. storaged maps no index file (a partition costs no map
// whatever their number), so only threads and the allocator use maps; a limit far below the
// kernel's default still deserves a line when something else on the host lowered it.
void ReportMapLimit(spdlog::logger& logger) {
  std::ifstream in("/proc/sys/vm/max_map_count");
  int64_t limit = 0;
  if (!(in >> limit)) return;
  constexpr int64_t kLow = 16384;
  if (limit < kLow) {
    logger.warn(
        "vm.max_map_count is {}, below {}: storaged maps no index file, but threads and "
        "memory need maps too; deploy/README.md says how to raise it",
        limit, kLow);
  } else {
    logger.info("vm.max_map_count is {} (storaged maps no index file: partitions use none)", limit);
  }
}

}  // namespace

StatusOr<std::unique_ptr<Application>> Application::Start(const config::Config& config) {
  auto logger = log::Get("storaged");
  std::unique_ptr<Application> app(new Application());
  const size_t max_open_files =
      FitFileLimit(static_cast<size_t>(config.GetInt("runnel.storage.max.open.files")), *logger);
  ReportMapLimit(*logger);

  RUNNEL_ASSIGN_OR_RETURN(LogDirs dirs,
                          LogDirs::Open(config.GetList("log.dirs"), config.GetInt("node.id")));
  app->dirs_ = std::make_unique<LogDirs>(std::move(dirs));
  std::vector<std::string> paths;
  for (const LogDirState& d : app->dirs_->dirs()) paths.push_back(d.path);

  auto started = std::chrono::steady_clock::now();
  LogManagerOptions options = LogManagerOptionsFromConfig(config, paths);
  options.max_open_files = max_open_files;
  RUNNEL_ASSIGN_OR_RETURN(app->logs_, LogManager::Open(std::move(options)));
  LogLoadReport(*app->logs_, app->logs_->AllLogs().size());
  logger->info("logs loaded in {} ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - started)
                                           .count());
  app->logs_->Start();

  std::string run_dir = config.GetString("runnel.run.dir");
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        fmt::format("cannot create runnel.run.dir {}: {}", run_dir, ec.message()));
  }
  app->socket_path_ = grpcutil::SocketPath(run_dir, "storaged");
  app->service_ = std::make_unique<StorageServiceImpl>(*app->dirs_, *app->logs_);
  app->metrics_ = std::make_unique<metrics::MetricsService>("storaged");
  app->RegisterLogMetrics();
  RUNNEL_ASSIGN_OR_RETURN(
      app->server_,
      grpcutil::StartUnixServer(app->socket_path_, {app->service_.get(), app->metrics_.get()}));
  RUNNEL_ASSIGN_OR_RETURN(
      app->append_socket_,
      AppendSocketServer::Start(grpcutil::SocketPath(run_dir, "storaged-append"), *app->service_));
  grpcutil::SetServing(*app->server_, true);
  RUNNEL_ASSIGN_OR_RETURN(
      app->http_, metrics::MaybeServeRoleHttp(config, app->metrics_.get(), app->socket_path_));
  logger->info("serving StorageService on unix:{} (appends also on {}) with {} log dir(s)",
               app->socket_path_, app->append_socket_->path(), paths.size());
  return app;
}

namespace {

constexpr const char* kLogFamilies[] = {
    "runnel_storage_partitions", "runnel_storage_log_size_bytes", "runnel_storage_log_segments"};

}  // namespace

void Application::RegisterLogMetrics() {
  storaged::RegisterLogMetrics();
  // Per topic: walks every log's segments at each scrape (State()), never on an append.
  auto per_topic = [this](int what, std::vector<metrics::Sample>* out) {
    std::map<std::string, int64_t> sums;
    for (const std::shared_ptr<Log>& log : logs_->AllLogs()) {
      int64_t& sum = sums[log->tp().topic];
      if (what == 0) {
        ++sum;
      } else {
        LogState state = log->State();
        sum += what == 1 ? state.size_bytes : state.segments;
      }
    }
    for (const auto& [topic, v] : sums) out->push_back({{topic}, static_cast<double>(v)});
  };
  metrics::Registry& r = metrics::ProcessRegistry();
  r.AddCallback(kLogFamilies[0], "Partition logs of the topic on this node.", metrics::Type::kGauge,
                {"topic"}, [per_topic](std::vector<metrics::Sample>* out) { per_topic(0, out); });
  r.AddCallback(kLogFamilies[1], "Bytes of the topic's segments on this node.",
                metrics::Type::kGauge, {"topic"},
                [per_topic](std::vector<metrics::Sample>* out) { per_topic(1, out); });
  r.AddCallback(kLogFamilies[2], "Segments of the topic's logs on this node.",
                metrics::Type::kGauge, {"topic"},
                [per_topic](std::vector<metrics::Sample>* out) { per_topic(2, out); });
}

Application::~Application() { Stop(); }

int Application::Run() {
  int sig = WaitForTerminationSignal();
  log::Get("storaged")->info("signal {} received, shutting down", sig);
  return Stop() ? 0 : 1;
}

bool Application::Stop() {
  if (stopped_) return clean_;
  stopped_ = true;
  auto logger = log::Get("storaged");
  http_.reset();
  if (server_) grpcutil::SetServing(*server_, false);
  if (service_) service_->Shutdown();
  if (append_socket_) {
    append_socket_->Stop();
    append_socket_.reset();
  }
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + kDrainDeadline);
    server_->Wait();
    server_.reset();
    ::unlink(socket_path_.c_str());
  }
  service_.reset();
  // No scrape is running now (both servers are gone): the callbacks may go with the logs.
  for (const char* name : kLogFamilies) metrics::ProcessRegistry().RemoveCallback(name);
  if (logs_) {
    Status st = logs_->Shutdown();
    if (!st.ok()) {
      clean_ = false;
      logger->error("unclean shutdown, the next start recovers the logs: {}",
                    std::string(st.message()));
    }
    logs_.reset();
  }
  dirs_.reset();
  logger->info("stopped");
  return clean_;
}

}  // namespace runnel::storaged
