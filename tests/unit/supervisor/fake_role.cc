// A stand-in for runnel-controllerd / runnel-storaged / runnel-brokerd in the supervisor's
// process tests. Symlinked as runnel-<role>, it takes its role from argv[0], reads
// runnel.run.dir from `--config FILE`, serves grpc.health.v1 on <run.dir>/<role>.sock and
// behaves as env FAKE_ROLE_<ROLE> (e.g. FAKE_ROLE_BROKERD) says:
//   (unset)           serve until SIGTERM/SIGINT, then exit 0
//   exit:N            exit with code N at once, before serving
//   exit-after:MS:N   serve, then exit with code N after MS ms
//   never-ready       serve, but report NOT_SERVING (waiting for something off the node)
//   silent            listen on the socket, but never answer (hung)
//   ready-after:MS    report NOT_SERVING for MS ms, then SERVING
//   ignore-term       serve, and ignore SIGTERM/SIGINT (only SIGKILL ends it)
// When FAKE_ROLE_EVENTS names a file, one line per event is appended to it:
//   "<start|serving|term|exit> <role> <pid> [details]"; start's details show the config
//   path, what stdin is, $RUNNEL_SUPERVISED and the open descriptors.
// It exits by itself after 120 s so a broken test cannot leave it running.
#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "common/config/config.h"
#include "common/grpc/unix_server.h"
#include "proto/runnel/supervisor.grpc.pb.h"

namespace {

using SteadyClock = std::chrono::steady_clock;

std::string events_path;
std::string role;

void Event(const std::string& kind, const std::string& details = "") {
  if (events_path.empty()) return;
  std::string line =
      fmt::format("{} {} {}{}{}\n", kind, role, getpid(), details.empty() ? "" : " ", details);
  int fd = ::open(events_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // One write with O_APPEND: lines from concurrent roles do not interleave.
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

std::string Env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  return v != nullptr ? v : "";
}

// The open descriptors, "0,1,2" when nothing leaked from the supervisor.
std::string OpenFds() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return "?";
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    int fd = std::atoi(e->d_name);
    if (fd != ::dirfd(dir)) fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fmt::format("{}", fmt::join(fds, ","));
}

int Fail(const std::string& why) {
  fmt::print(stderr, "fake role {}: {}\n", role, why);
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigaddset(&term, SIGINT);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);  // before gRPC starts threads

  std::string self = argv[0];
  self = self.substr(self.rfind('/') + 1);
  role = self.rfind("runnel-", 0) == 0 ? self.substr(7) : self;
  events_path = Env("FAKE_ROLE_EVENTS");
  if (argc != 3 || std::string(argv[1]) != "--config") return Fail("usage: --config FILE");
  const std::string config_path = argv[2];

  char stdin_target[256] = {};
  ssize_t n = ::readlink("/proc/self/fd/0", stdin_target, sizeof stdin_target - 1);
  if (n < 0) stdin_target[0] = '\0';
  Event("start", fmt::format("config={} stdin={} supervised={} fds={}", config_path, stdin_target,
                             Env("RUNNEL_SUPERVISED"), OpenFds()));

  auto config = runnel::config::Config::Load(config_path, nullptr);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  std::string upper = role;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::string mode = Env("FAKE_ROLE_" + upper);

  bool ready = true;
  bool ignore_term = false;
  bool silent = false;
  SteadyClock::time_point ready_at{}, exit_at = SteadyClock::time_point::max();
  int exit_code = 0;
  if (mode.rfind("exit:", 0) == 0) {
    Event("exit");
    return std::atoi(mode.c_str() + 5);
  } else if (mode.rfind("exit-after:", 0) == 0) {
    int ms = 0;
    if (std::sscanf(mode.c_str(), "exit-after:%d:%d", &ms, &exit_code) != 2) {
      return Fail("bad mode " + mode);
    }
    exit_at = SteadyClock::now() + std::chrono::milliseconds(ms);
  } else if (mode == "never-ready") {
    ready = false;
    ready_at = SteadyClock::time_point::max();
  } else if (mode.rfind("ready-after:", 0) == 0) {
    ready = false;
    ready_at = SteadyClock::now() + std::chrono::milliseconds(std::atoi(mode.c_str() + 12));
  } else if (mode == "silent") {
    ready = false;
    silent = true;
    ready_at = SteadyClock::time_point::max();
  } else if (mode == "ignore-term") {
    ignore_term = true;
  } else if (!mode.empty()) {
    return Fail("bad mode " + mode);
  }

  const std::string run_dir = config->GetString("runnel.run.dir");
  // gRPC's default health service only runs in a server with at least one synchronous
  // service, so register one whose methods all answer UNIMPLEMENTED.
  runnel::supervisor::SupervisorAdmin::Service placeholder;
  const std::string socket_path = runnel::grpcutil::SocketPath(run_dir, role);
  std::unique_ptr<grpc::Server> server;
  if (silent) {
    // Connections are queued by the kernel and never accepted: no answer, ever.
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path.c_str());
    ::unlink(socket_path.c_str());
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd, 16) != 0) {
      return Fail("cannot listen on " + socket_path);
    }
  } else {
    auto started = runnel::grpcutil::StartUnixServer(socket_path, {&placeholder});
    if (!started.ok()) return Fail(std::string(started.status().message()));
    server = std::move(*started);
    runnel::grpcutil::SetServing(*server, ready);
    if (ready) Event("serving");
  }

  const auto give_up = SteadyClock::now() + std::chrono::seconds(120);
  timespec tick{0, 20 * 1000 * 1000};
  while (SteadyClock::now() < give_up) {
    int sig = sigtimedwait(&term, nullptr, &tick);
    auto now = SteadyClock::now();
    if (sig == SIGTERM || sig == SIGINT) {
      Event("term", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      if (!ignore_term) break;
    }
    if (!ready && now >= ready_at) {
      ready = true;
      runnel::grpcutil::SetServing(*server, true);
      Event("serving");
    }
    if (now >= exit_at) {
      Event("exit", fmt::format("code={}", exit_code));
      std::_Exit(exit_code);
    }
  }
  if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  Event("exit", "code=0");
  return 0;
}
