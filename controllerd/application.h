// runnel-controllerd as one object: opens the metadata log (RaftLogStore), starts the quorum
// (Quorum) with the controller as its state machine, and serves:
// - with controller.quorum.voters set: RaftService, ControllerService and grpc.health.v1 on
//   the TCP host:port of this node's own voter entry, from the start (the quorum needs it to
//   elect a leader);
// - ControllerService and grpc.health.v1 on unix:<runnel.run.dir>/controllerd.sock, started
//   (and SERVING) only once this node's image has the cluster id: a single voter after it
//   replayed its log and elected itself, a quorum member once it has applied the cluster's
//   first entries. brokerd and storaged wait for that health.
// Shutdown is the reverse of construction, with a leadership transfer first.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

#include "common/config/config.h"
#include "common/metrics/http_server.h"
#include "common/metrics/metrics_service.h"
#include "common/util/mutex.h"
#include "controllerd/controller.h"
#include "controllerd/controller_service.h"
#include "controllerd/raft_transport.h"

namespace runnel::controllerd {

// Blocks SIGTERM, SIGINT and SIGUSR1 in the calling thread (and the threads it creates
// later), so Application::Run can take them with sigwait, and ignores SIGPIPE. Call first
// thing in main.
void BlockShutdownSignals();

class Application {
 public:
  static StatusOr<std::unique_ptr<Application>> Start(const config::Config& config);
  ~Application();

  // Waits for SIGTERM/SIGINT (returns 0 after a graceful stop) or a fatal controller error
  // (returns 1 so the supervisor restarts it, and the restart recovers the log).
  int Run();
  // Graceful stop: NOT_SERVING, hand the leadership to another voter (bounded by one election
  // timeout), end watch streams, stop the quorum, drain calls (bounded).
  void Stop();

  const std::string& socket_path() const { return socket_path_; }
  Controller& controller() { return *controller_; }

 private:
  Application() = default;
  // The ready thread: waits for the cluster id, then sets the Unix socket server SERVING.
  void ServeWhenReady();
  // Scrape-time metrics of the quorum and the brokers.
  void RegisterControllerMetrics();

  std::string socket_path_;
  std::string tcp_address_;  // "" without a quorum
  int64_t election_timeout_ms_ = 1000;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<RaftServiceImpl> raft_service_;
  GrpcRaftTransport* raft_transport_ = nullptr;  // owned by controller_'s quorum
  std::unique_ptr<ControllerServiceImpl> service_;
  std::unique_ptr<grpc::Server> tcp_server_;
  std::unique_ptr<grpc::Server> server_;  // the Unix socket's: NOT_SERVING until the cluster id
  std::unique_ptr<metrics::MetricsService> metrics_;
  std::unique_ptr<metrics::HttpServer> http_;  // run alone with runnel.http.listener set

  Mutex ready_mu_;
  CondVar ready_cv_;
  bool stopping_ ABSL_GUARDED_BY(ready_mu_) = false;
  std::thread ready_thread_;
  bool stopped_ = false;
};

}  // namespace runnel::controllerd
