// runnel-controllerd as one object: opens the metadata log, replays it into the controller,
// then serves ControllerService (and grpc.health.v1) on unix:<runnel.run.dir>/controllerd.sock.
// Health is SERVING only once the log has been replayed, since the server starts after.
// Shutdown is the reverse of construction.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/config/config.h"
#include "controllerd/controller.h"
#include "controllerd/controller_service.h"

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
  // Graceful stop: NOT_SERVING, end watch streams, drain calls (bounded), close the log.
  void Stop();

  const std::string& socket_path() const { return socket_path_; }
  Controller& controller() { return *controller_; }

 private:
  Application() = default;

  std::string socket_path_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<ControllerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  bool stopped_ = false;
};

}  // namespace runnel::controllerd
