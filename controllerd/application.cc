#include "controllerd/application.h"

#include <fmt/format.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>

#include "common/config/quorum_voters.h"
#include "common/grpc/unix_server.h"
#include "common/log/log.h"
#include "controllerd/file_system.h"
#include "controllerd/raft_log_store.h"

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

// Wakes Run() for the fatal path; the signal is blocked everywhere, so sigwait takes it.
void RaiseFatal() {
  g_fatal = true;
  ::kill(::getpid(), SIGUSR1);
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
  const int32_t node_id = config.GetInt("node.id");
  app->election_timeout_ms_ = config.GetInt("controller.quorum.election.timeout.ms");

  std::string run_dir = config.GetString("runnel.run.dir");
  RUNNEL_RETURN_IF_ERROR(fs.CreateDirs(run_dir));
  app->socket_path_ = grpcutil::SocketPath(run_dir, "controllerd");
  if (app->socket_path_.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(
        fmt::format("socket path {} is too long for a Unix socket", app->socket_path_));
  }

  RUNNEL_ASSIGN_OR_RETURN(std::vector<config::QuorumVoter> voters,
                          config::ParseQuorumVoters(config.Raw("controller.quorum.voters")));
  std::map<int32_t, std::string> peers;
  for (const config::QuorumVoter& v : voters) {
    peers[v.id] = v.Address();
    if (v.id == node_id) app->tcp_address_ = v.Address();
  }
  // Not a voter: a broker-only node's controllerd, which follows the quorum's log as an
  // observer (the config check refuses a controller that is not a voter).
  const bool observer = !voters.empty() && app->tcp_address_.empty();
  const std::vector<std::string> roles = config.GetList("process.roles");
  if (observer && std::find(roles.begin(), roles.end(), "controller") != roles.end()) {
    return absl::InvalidArgumentError(
        fmt::format("node.id {} is not one of controller.quorum.voters ({})", node_id,
                    config.Raw("controller.quorum.voters")));
  }

  std::string log_dir = config.GetString("metadata.log.dir");
  RUNNEL_ASSIGN_OR_RETURN(std::unique_ptr<RaftLogStore> store, RaftLogStore::Open(fs, log_dir));
  std::unique_ptr<raft::Transport> transport;
  if (!voters.empty()) {
    RaftTransportOptions t;
    t.self = node_id;
    t.peers = peers;
    t.request_timeout_ms = config.GetInt("controller.quorum.request.timeout.ms");
    t.observer = observer;
    transport = std::make_unique<GrpcRaftTransport>(std::move(t));
  }
  // Owned by the quorum (alive until controller_ goes); null for a single voter.
  GrpcRaftTransport* raft_transport = static_cast<GrpcRaftTransport*>(transport.get());
  app->raft_transport_ = raft_transport;
  auto quorum = std::make_unique<Quorum>(QuorumOptions::FromConfig(config), std::move(store),
                                         std::move(transport));
  RUNNEL_ASSIGN_OR_RETURN(
      app->controller_, Controller::Open(ControllerOptions::FromConfig(config), std::move(quorum)));
  app->controller_->SetFatalErrorHandler([](const Status&) { RaiseFatal(); });
  app->service_ = std::make_unique<ControllerServiceImpl>(*app->controller_, peers);

  if (observer) {
    // What the voters send it comes back on the streams it opened to them.
    Quorum* q = &app->controller_->quorum();
    raft_transport->SetReceiver(
        [q](std::vector<raft::Message> messages) { q->Deliver(std::move(messages)); });
    logger->info("following the controller quorum ({}) as observer {}",
                 config.Raw("controller.quorum.voters"), node_id);
  } else if (!voters.empty()) {
    Quorum* q = &app->controller_->quorum();
    app->raft_service_ = std::make_unique<RaftServiceImpl>(
        node_id, [q](std::vector<raft::Message> messages) { q->Deliver(std::move(messages)); },
        raft_transport);
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(app->tcp_address_, grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(-1);
    builder.SetMaxSendMessageSize(-1);
    builder.RegisterService(app->raft_service_.get());
    builder.RegisterService(app->service_.get());
    app->tcp_server_ = builder.BuildAndStart();
    if (app->tcp_server_ == nullptr || port == 0) {
      return absl::UnavailableError(fmt::format(
          "cannot listen on {} (this node's controller.quorum.voters entry)", app->tcp_address_));
    }
    logger->info(
        "serving the controller quorum and ControllerService on {} as controller {} "
        "(voters {})",
        app->tcp_address_, node_id, config.Raw("controller.quorum.voters"));
  }
  // Up at once, NOT_SERVING until the quorum has committed the cluster id: the supervisor
  // waits for a controller that answers, however long its quorum takes to form.
  app->metrics_ = std::make_unique<metrics::MetricsService>("controllerd");
  app->RegisterControllerMetrics();
  RUNNEL_ASSIGN_OR_RETURN(
      app->server_,
      grpcutil::StartUnixServer(app->socket_path_, {app->service_.get(), app->metrics_.get()},
                                /*serving=*/false));
  RUNNEL_ASSIGN_OR_RETURN(
      app->http_, metrics::MaybeServeRoleHttp(config, app->metrics_.get(), app->socket_path_));
  app->ready_thread_ = std::thread([a = app.get()] { a->ServeWhenReady(); });
  return app;
}

void Application::ServeWhenReady() {
  auto logger = log::Get("controllerd");
  // Said after 10 s, then every 30 s: a quorum can take as long as its other voters do.
  auto next_warning = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    {
      MutexLock lock(&ready_mu_);
      if (stopping_) return;
    }
    Status st = controller_->WaitForClusterId(std::chrono::steady_clock::now() +
                                              std::chrono::milliseconds(200));
    if (st.ok()) break;
    if (std::chrono::steady_clock::now() >= next_warning) {
      next_warning += std::chrono::seconds(30);
      logger->warn(
          "still waiting for the controller quorum to elect a leader and commit the "
          "cluster's first entries ({})",
          st.message());
    }
    MutexLock lock(&ready_mu_);
    ready_cv_.WaitFor(&ready_mu_, std::chrono::milliseconds(50),
                      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ready_mu_) { return stopping_; });
  }
  MutexLock lock(&ready_mu_);
  if (stopping_) return;
  grpcutil::SetServing(*server_, true);
  logger->info("serving ControllerService on unix:{} as controller {}", socket_path_,
               controller_->node_id());
}

namespace {

constexpr const char* kControllerFamilies[] = {"runnel_controller_raft_term",
                                               "runnel_controller_raft_leader_id",
                                               "runnel_controller_raft_commit_offset",
                                               "runnel_controller_raft_applied_offset",
                                               "runnel_controller_raft_end_offset",
                                               "runnel_controller_raft_is_leader",
                                               "runnel_controller_brokers"};

}  // namespace

void Application::RegisterControllerMetrics() {
  metrics::Registry& r = metrics::ProcessRegistry();
  Controller* c = controller_.get();
  auto quorum = [c](int64_t QuorumState::*field) {
    return [c, field](std::vector<metrics::Sample>* out) {
      out->push_back({{}, static_cast<double>(c->quorum().State().*field)});
    };
  };
  r.AddCallback(kControllerFamilies[0], "Raft term this node knows of.", metrics::Type::kGauge, {},
                quorum(&QuorumState::term));
  r.AddCallback(kControllerFamilies[1], "Node id of the quorum's leader (-1: none known).",
                metrics::Type::kGauge, {}, [c](std::vector<metrics::Sample>* out) {
                  QuorumState s = c->quorum().State();
                  out->push_back({{}, s.leader == raft::kNoNode ? -1.0 : double(s.leader)});
                });
  r.AddCallback(kControllerFamilies[2],
                "Metadata log offset below which entries are committed (the high watermark).",
                metrics::Type::kGauge, {}, quorum(&QuorumState::commit_offset));
  r.AddCallback(kControllerFamilies[3], "Last metadata log offset applied to the image.",
                metrics::Type::kGauge, {}, quorum(&QuorumState::applied_offset));
  r.AddCallback(kControllerFamilies[4], "This node's metadata log end offset (the next one).",
                metrics::Type::kGauge, {}, quorum(&QuorumState::end_offset));
  r.AddCallback(kControllerFamilies[5], "1 while this node leads the controller quorum.",
                metrics::Type::kGauge, {}, [c](std::vector<metrics::Sample>* out) {
                  out->push_back({{}, c->quorum().State().role == raft::Role::kLeader ? 1.0 : 0.0});
                });
  r.AddCallback(kControllerFamilies[6], "Registered brokers in the metadata, by state.",
                metrics::Type::kGauge, {"state"}, [c](std::vector<metrics::Sample>* out) {
                  int fenced = 0;
                  int unfenced = 0;
                  // A named copy: a loop over c->Image().brokers() reads a dead temporary.
                  const MetadataImage image = c->Image();
                  for (const auto& [id, b] : image.brokers()) ++(b.fenced() ? fenced : unfenced);
                  out->push_back({{"fenced"}, double(fenced)});
                  out->push_back({{"unfenced"}, double(unfenced)});
                });
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
  {
    MutexLock lock(&ready_mu_);
    stopping_ = true;
  }
  ready_cv_.SignalAll();
  if (ready_thread_.joinable()) ready_thread_.join();
  http_.reset();
  if (server_) grpcutil::SetServing(*server_, false);
  if (tcp_server_) grpcutil::SetServing(*tcp_server_, false);
  if (controller_) {
    // While the servers still run: the next leader takes over before this one goes.
    controller_->quorum().TransferLeadershipAndStop(
        std::chrono::milliseconds(election_timeout_ms_));
    // Ends watch streams and refuses new work, so the drain below is quick.
    controller_->Shutdown();
  }
  const auto drain = std::chrono::system_clock::now() + kDrainDeadline;
  if (server_) {
    server_->Shutdown(drain);
    server_->Wait();
    server_.reset();
    ::unlink(socket_path_.c_str());
  }
  if (tcp_server_) {
    // Observers' Attach streams never end by themselves: end them rather than wait out the
    // drain deadline.
    if (raft_transport_ != nullptr) raft_transport_->DetachObservers();
    tcp_server_->Shutdown(drain);
    tcp_server_->Wait();
    tcp_server_.reset();
  }
  service_.reset();
  raft_service_.reset();
  // No scrape is running now (the servers are gone): the callbacks may go with controller_.
  for (const char* name : kControllerFamilies) metrics::ProcessRegistry().RemoveCallback(name);
  controller_.reset();
  log::Get("controllerd")->info("stopped");
}

}  // namespace runnel::controllerd
