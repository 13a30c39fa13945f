// runnel-storaged as one object: locks the log directories, loads every partition log
// (recovering those not cleanly shut down), starts the background work, then serves
// StorageService (and grpc.health.v1) on unix:<runnel.run.dir>/storaged.sock, and the append
// stream on <runnel.run.dir>/storaged-append.sock. Health is SERVING only once every log is
// loaded, since the servers start after.
//
// Stop is the reverse of Start: NOT_SERVING, end watch streams and the append connections,
// drain calls (bounded), then LogManager::Shutdown flushes every log and writes the
// checkpoints and the clean-shutdown marker, and finally the directory locks are released.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/config/config.h"
#include "common/metrics/http_server.h"
#include "common/metrics/metrics_service.h"
#include "storaged/append_socket.h"
#include "storaged/log/log_manager.h"
#include "storaged/log_dirs.h"
#include "storaged/storage_service.h"

namespace runnel::storaged {

// The LogManager settings of a node configuration (log.* keys).
LogManagerOptions LogManagerOptionsFromConfig(const config::Config& config,
                                              std::vector<std::string> dirs);

class Application {
 public:
  static StatusOr<std::unique_ptr<Application>> Start(const config::Config& config);
  ~Application();

  // Waits for SIGTERM or SIGINT (blocked by BlockTerminationSignals in main), stops, and
  // returns the exit code: 0, or 1 when the logs could not be shut down cleanly (the next
  // start recovers them).
  int Run();
  // Graceful stop; returns whether the logs were shut down cleanly. Idempotent.
  bool Stop();

  const std::string& socket_path() const { return socket_path_; }
  LogManager& logs() { return *logs_; }

 private:
  Application() = default;
  // Scrape-time metrics of the logs: partitions, size and segments per topic.
  void RegisterLogMetrics();

  std::unique_ptr<LogDirs> dirs_;
  std::unique_ptr<LogManager> logs_;
  std::unique_ptr<StorageServiceImpl> service_;
  std::unique_ptr<metrics::MetricsService> metrics_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<metrics::HttpServer> http_;          // run alone with runnel.http.listener set
  std::unique_ptr<AppendSocketServer> append_socket_;  // brokerd's appends (append_socket.h)
  std::string socket_path_;
  bool stopped_ = false;
  bool clean_ = true;
};

}  // namespace runnel::storaged
