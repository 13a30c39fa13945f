#include "controllerd/application.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>

#include "common/grpc/unix_server.h"
#include "common/log/log.h"
#include "controllerd/file_system.h"
#include "controllerd/local_metadata_log.h"

namespace runnel::controllerd {
namespace {

// Time in-flight calls get to finish at shutdown before they are cancelled. Controller
// work is already over when the server shuts down (Controller::Shutdown takes its lock), so
// this only bounds the wait for clients to close their connections: an idle client of this
// gRPC version notices the server's GOAWAY only at its 5 s backup poll.
constexpr std::chrono::milliseconds kDrainDeadline{1000};

std::atomic<bool> g_fatal{false};

sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  return set;
}

}  // namespace

void BlockShutdownSignals() {
  sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A peer that went away must be an error on that call, not the end of the process.
  std::signal(SIGPIPE, SIG_IGN);
}

StatusOr<std::unique_ptr<Application>> Application::Start(const config::Config& config) {
  auto logger = log::Get("controllerd");
  std::unique_ptr<Application> app(new Application());
  FileSystem& fs = PosixFileSystem();

  std::string log_dir = config.GetString("metadata.log.dir");
  RUNNEL_ASSIGN_OR_RETURN(std::unique_ptr<LocalMetadataLog> log,
                          LocalMetadataLog::Open(fs, log_dir));
  RUNNEL_ASSIGN_OR_RETURN(app->controller_,
                          Controller::Open(ControllerOptions::FromConfig(config), std::move(log)));
  app->controller_->SetFatalErrorHandler([](const Status&) {
    // Wake Run(); the signal is blocked everywhere, so sigwait takes it.
    g_fatal = true;
    ::kill(::getpid(), SIGUSR1);
  });

  std::string run_dir = config.GetString("runnel.run.dir");
  RUNNEL_RETURN_IF_ERROR(fs.CreateDirs(run_dir));
  app->socket_path_ = grpcutil::SocketPath(run_dir, "controllerd");
  app->service_ = std::make_unique<ControllerServiceImpl>(*app->controller_);
  RUNNEL_ASSIGN_OR_RETURN(app->server_,
                          grpcutil::StartUnixServer(app->socket_path_, {app->service_.get()}));
  grpcutil::SetServing(*app->server_, true);
  logger->info("serving ControllerService on unix:{} as controller {}", app->socket_path_,
               app->controller_->node_id());
  return app;
}

Application::~Application() { Stop(); }

int Application::Run() {
  sigset_t set = ShutdownSignals();
  int sig = 0;
  while (true) {
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGUSR1 && !g_fatal) continue;  // not ours
    break;
  }
  auto logger = log::Get("controllerd");
  if (sig == SIGUSR1) {
    logger->error("stopping after a fatal metadata log error; a restart recovers the log");
    Stop();
    return 1;
  }
  logger->info("signal {} received, shutting down", sig);
  Stop();
  return 0;
}

void Application::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (server_) grpcutil::SetServing(*server_, false);
  // Ends watch streams and refuses new work, so the drain below is quick.
  if (controller_) controller_->Shutdown();
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() + kDrainDeadline);
    server_->Wait();
    server_.reset();
    ::unlink(socket_path_.c_str());
  }
  service_.reset();
  controller_.reset();
  log::Get("controllerd")->info("stopped");
}

}  // namespace runnel::controllerd
