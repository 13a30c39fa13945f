#include "supervisor/app.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/config/config.h"
#include "common/grpc/unix_server.h"
#include "common/log/log.h"
#include "common/metrics/http_server.h"
#include "common/metrics/metrics_service.h"
#include "supervisor/admin_service.h"
#include "supervisor/args.h"
#include "supervisor/process.h"
#include "supervisor/roles.h"
#include "supervisor/status_cli.h"
#include "supervisor/supervisor.h"

namespace runnel::supervisor {
namespace {

constexpr Millis kProbeDeadline{250};
constexpr int64_t kStatusDeadlineMs = 3000;
constexpr Millis kScrapeDeadline{2000};
constexpr Millis kReadyDeadline{250};

// The node's HTTP port: the supervisor's metrics (its process, each role's state and
// restarts), every role's (scraped over its Unix socket when asked), and readiness (every
// role SERVING). Handlers run on the HTTP server's threads; they read the supervisor
// through its thread-safe Status() and the roles through their sockets only.
class NodeHttp {
 public:
  NodeHttp(const Supervisor* supervisor, std::vector<RoleSpec> roles)
      : supervisor_(supervisor), roles_(std::move(roles)), own_("supervisor") {
    auto role_states = [this](bool restarts, std::vector<metrics::Sample>* out) {
      for (const RoleSnapshot& r : supervisor_->Status().roles) {
        double v = restarts ? r.restarts : r.state == RoleState::kServing ? 1 : 0;
        out->push_back({{r.name}, v});
      }
    };
    roles_registry_.AddCallback(
        "runnel_supervisor_role_restarts_total", "Restarts of each role by the supervisor.",
        metrics::Type::kCounter, {"role"},
        [role_states](std::vector<metrics::Sample>* out) { role_states(true, out); });
    roles_registry_.AddCallback(
        "runnel_supervisor_role_up", "1 while the role is running and was SERVING, else 0.",
        metrics::Type::kGauge, {"role"},
        [role_states](std::vector<metrics::Sample>* out) { role_states(false, out); });
  }

  std::string Metrics() const {
    std::vector<metrics::FamilyText> all = own_.Collect();
    for (metrics::FamilyText& f : roles_registry_.Collect()) all.push_back(std::move(f));
    for (const RoleSpec& role : roles_) {
      StatusOr<std::vector<metrics::FamilyText>> scraped =
          metrics::ScrapeRole(role.socket_path, kScrapeDeadline);
      if (!scraped.ok()) continue;  // down or restarting: runnel_supervisor_role_up says so
      for (metrics::FamilyText& f : *scraped) all.push_back(std::move(f));
    }
    return metrics::WriteText(all);
  }

  bool Ready(std::string* why) const {
    std::vector<std::string> not_ready;
    for (const RoleSpec& role : roles_) {
      StatusOr<bool> serving = grpcutil::HealthCheck(role.socket_path, kReadyDeadline);
      if (!serving.ok()) {
        not_ready.push_back(fmt::format("{} (no answer)", role.name));
      } else if (!*serving) {
        not_ready.push_back(fmt::format("{} (NOT_SERVING)", role.name));
      }
    }
    if (not_ready.empty()) return true;
    *why = fmt::format("not ready: {}", fmt::join(not_ready, ", "));
    return false;
  }

 private:
  const Supervisor* supervisor_;
  const std::vector<RoleSpec> roles_;
  metrics::MetricsService own_;       // the supervisor process's own metrics
  metrics::Registry roles_registry_;  // per-role series, labelled by the role they are about
};

StatusOr<config::Config> LoadConfig(const std::string& path) {
  std::vector<std::string> warnings;
  StatusOr<config::Config> config = config::Config::Load(path, &warnings);
  for (const std::string& w : warnings) fmt::print(stderr, "{}\n", w);
  return config;
}

// mkdir -p: missing directories are created with `mode`; existing ones are left alone.
Status MakeDirs(const std::string& path, mode_t mode) {
  std::filesystem::path p(path);
  std::filesystem::path partial;
  for (const auto& part : p) {
    partial /= part;
    if (partial == partial.root_path()) continue;
    if (::mkdir(partial.c_str(), mode) != 0 && errno != EEXIST) {
      return absl::InternalError(
          fmt::format("cannot create directory {}: {}", partial.string(), strerror(errno)));
    }
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(fmt::format("{} is not a directory", path));
  }
  return absl::OkStatus();
}

// <run.dir>/runnel.pid, holding an exclusive flock for as long as the supervisor runs, so
// a second supervisor on the same run dir (same sockets) refuses to start.
class PidFile {
 public:
  static StatusOr<std::unique_ptr<PidFile>> Create(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::InternalError(fmt::format("cannot open {}: {}", path, strerror(errno)));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      char buf[32] = {};
      ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      ::close(fd);
      std::string other = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "?";
      while (!other.empty() && (other.back() == '\n' || other.back() == ' ')) other.pop_back();
      return absl::AlreadyExistsError(fmt::format(
          "another runnel supervisor (pid {}) is running with this run dir ({} is locked)", other,
          path));
    }
    std::string content = fmt::format("{}\n", ::getpid());
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, content.data(), content.size(), 0) != static_cast<ssize_t>(content.size())) {
      int err = errno;
      ::close(fd);
      return absl::InternalError(fmt::format("cannot write {}: {}", path, strerror(err)));
    }
    return std::unique_ptr<PidFile>(new PidFile(path, fd));
  }
  PidFile(const PidFile&) = delete;
  PidFile& operator=(const PidFile&) = delete;
  // Removed while still locked, so no other supervisor can have taken it over.
  ~PidFile() {
    ::unlink(path_.c_str());
    ::close(fd_);
  }

 private:
  PidFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// Milliseconds until `wakeup`, rounded up (so a wait never ends just before it), at most
// one second.
int PollTimeoutMs(std::optional<TimePoint> wakeup, TimePoint now) {
  constexpr int kMaxMs = 1000;
  if (!wakeup) return kMaxMs;
  if (*wakeup <= now) return 0;
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(*wakeup - now).count();
  return static_cast<int>(std::min<int64_t>(kMaxMs, (us + 999) / 1000));
}

int StatusCommand(const Args& args) {
  std::string run_dir = args.run_dir;
  if (run_dir.empty() && !args.config_path.empty()) {
    StatusOr<config::Config> config = LoadConfig(args.config_path);
    if (!config.ok()) {
      fmt::print(stderr, "{}\n", std::string(config.status().message()));
      return 2;
    }
    run_dir = config->GetString("runnel.run.dir");
  }
  if (run_dir.empty()) run_dir = std::string(config::FindKey("runnel.run.dir")->default_value);
  return RunStatus(run_dir, kStatusDeadlineMs, stdout, stderr);
}

}  // namespace

int RunNode(const std::string& config_path) {
  // Blocked before any thread exists (gRPC starts some), so every thread inherits the
  // mask and these signals are only ever read from the signalfd, in the main loop.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGCHLD);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  StatusOr<config::Config> config = LoadConfig(config_path);
  if (!config.ok()) {
    fmt::print(stderr, "{}\n", std::string(config.status().message()));
    return 2;
  }
  log::InitFromConfig("runnel", *config);
  auto logger = log::Get("supervisor");
  auto fail = [&](const Status& s) {
    logger->error("{}", std::string(s.message()));
    fmt::print(stderr, "runnel: {}\n", std::string(s.message()));
    return 1;
  };

  StatusOr<std::string> abs_config = AbsolutePath(config_path);
  if (!abs_config.ok()) return fail(abs_config.status());
  const std::string run_dir = config->GetString("runnel.run.dir");
  StatusOr<std::string> bin_dir = RoleBinDir();
  if (!bin_dir.ok()) return fail(bin_dir.status());
  StatusOr<std::vector<RoleSpec>> specs = BuildRoleSpecs(
      RoleNamesFor(config->GetList("process.roles")), *bin_dir, *abs_config, run_dir);
  if (!specs.ok()) return fail(specs.status());

  if (Status s = MakeDirs(run_dir, 0750); !s.ok()) return fail(s);
  StatusOr<std::unique_ptr<PidFile>> pid_file = PidFile::Create(run_dir + "/runnel.pid");
  if (!pid_file.ok()) return fail(pid_file.status());

  int sfd = ::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return fail(absl::InternalError(fmt::format("signalfd: {}", strerror(errno))));

  PosixLauncher launcher;
  GrpcHealthProbe probe(kProbeDeadline);
  SteadyTimeSource clock;
  const std::vector<RoleSpec> role_specs = *specs;
  Supervisor supervisor(*std::move(specs), SupervisorOptions::FromConfig(*config), &launcher,
                        &probe, &clock);
  AdminService admin(&supervisor);
  const std::string admin_socket = grpcutil::SocketPath(run_dir, "supervisor");
  StatusOr<std::unique_ptr<grpc::Server>> server =
      grpcutil::StartUnixServer(admin_socket, {&admin});
  if (!server.ok()) {
    ::close(sfd);
    return fail(server.status());
  }
  logger->info("supervisor pid {}, config {}, run dir {}, admin socket {}", ::getpid(), *abs_config,
               run_dir, admin_socket);

  std::unique_ptr<NodeHttp> node_http;
  std::unique_ptr<metrics::HttpServer> http;
  if (const std::string listener = config->GetString("runnel.http.listener"); !listener.empty()) {
    node_http = std::make_unique<NodeHttp>(&supervisor, role_specs);
    NodeHttp* h = node_http.get();
    StatusOr<std::unique_ptr<metrics::HttpServer>> started = metrics::HttpServer::Start(
        listener, {[h] { return h->Metrics(); }, [h](std::string* why) { return h->Ready(why); }});
    if (!started.ok()) {
      (*server)->Shutdown(std::chrono::system_clock::now());
      ::unlink(admin_socket.c_str());
      ::close(sfd);
      return fail(started.status());
    }
    http = *std::move(started);
  }

  supervisor.Start();
  while (!supervisor.done()) {
    pollfd pfd{sfd, POLLIN, 0};
    int timeout = PollTimeoutMs(supervisor.NextWakeup(), clock.Now());
    if (::poll(&pfd, 1, timeout) < 0 && errno != EINTR) {
      logger->error("poll: {}", strerror(errno));
    }
    signalfd_siginfo info;
    while (::read(sfd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) {
        logger->info("received {} from pid {}", info.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT",
                     info.ssi_pid);
        supervisor.RequestStop();
      }
      // SIGCHLD only wakes the loop; children are reaped below, every round, because
      // several exits can be merged into one signal.
    }
    for (const ExitEvent& e : launcher.Reap()) supervisor.OnExit(e.pid, e.wait_status);
    supervisor.Poll();
  }

  http.reset();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->reset();
  ::unlink(admin_socket.c_str());
  ::close(sfd);
  if (supervisor.exit_code() != 0) {
    fmt::print(stderr, "runnel: startup failed: {}\n", supervisor.failure());
  } else {
    logger->info("stopped");
  }
  return supervisor.exit_code();
}

int Main(int argc, char** argv) {
  std::vector<std::string> raw(argv + 1, argv + argc);
  StatusOr<Args> args = ParseArgs(raw);
  if (!args.ok()) {
    fmt::print(stderr, "runnel: {}\n\n{}", std::string(args.status().message()), Usage());
    return 2;
  }
  switch (args->command) {
    case Command::kHelp:
      fmt::print("{}", Usage());
      return 0;
    case Command::kConfigDocs:
      fmt::print("{}", config::MarkdownTable());
      return 0;
    case Command::kStatus:
      return StatusCommand(*args);
    case Command::kRun:
      return RunNode(args->config_path);
  }
  return 2;
}

}  // namespace runnel::supervisor
