#include "supervisor/process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/close_range.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

extern char** environ;

#include "common/log/log.h"

namespace runnel::supervisor {
namespace {

std::string SignalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? abbrev : "?";
}

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Close(); }
  int get() const { return fd_; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

}  // namespace

std::vector<std::string> MergeEnvironment(char** base, const std::vector<std::string>& overrides) {
  auto key_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  std::set<std::string> overridden;
  for (const std::string& kv : overrides) overridden.insert(key_of(kv));
  std::vector<std::string> out;
  for (char** e = base; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    if (overridden.count(key_of(kv)) == 0) out.push_back(std::move(kv));
  }
  out.insert(out.end(), overrides.begin(), overrides.end());
  return out;
}

StatusOr<int> PosixLauncher::Spawn(const RoleSpec& spec) {
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed (the parent has gRPC threads).
  std::vector<std::string> argv_storage;
  argv_storage.push_back(spec.DisplayName());
  argv_storage.insert(argv_storage.end(), spec.args.begin(), spec.args.end());
  std::vector<char*> argv;
  argv.reserve(argv_storage.size() + 1);
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage = MergeEnvironment(environ, spec.env);
  std::vector<char*> envp;
  envp.reserve(env_storage.size() + 1);
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (dev_null.get() < 0) {
    return absl::InternalError(fmt::format("cannot open /dev/null: {}", strerror(errno)));
  }
  // The child reports a failed exec through this pipe; a successful exec closes it.
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return absl::InternalError(fmt::format("pipe2: {}", strerror(errno)));
  }
  Fd err_read(pipe_fds[0]);
  Fd err_write(pipe_fds[1]);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    return absl::ResourceExhaustedError(
        fmt::format("cannot fork for {}: {}", spec.DisplayName(), strerror(errno)));
  }
  if (pid == 0) {
    struct sigaction dfl;
    ::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig) {
      if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
    }
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the supervisor died before prctl
    if (::dup2(dev_null.get(), STDIN_FILENO) < 0) {
      int err = errno;
      (void)!::write(err_write.get(), &err, sizeof err);
      ::_exit(127);
    }
    // Descriptors opened without O_CLOEXEC (a log file, say) must not leak into the role.
    // Marked close-on-exec rather than closed, so err_write still reports a failed exec.
    // Without close_range (Linux < 5.11) they leak, which is harmless.
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ::execve(spec.binary.c_str(), argv.data(), envp.data());
    int err = errno;
    (void)!::write(err_write.get(), &err, sizeof err);
    ::_exit(127);
  }

  ::setpgid(pid, pid);  // also in the parent, so it holds before Spawn returns
  err_write.Close();
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(err_read.get(), &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return absl::FailedPreconditionError(
        fmt::format("cannot execute {}: {}", spec.binary, strerror(child_errno)));
  }
  live_.insert(pid);
  return static_cast<int>(pid);
}

void PosixLauncher::Signal(int pid, int signal) {
  if (pid <= 1 || live_.count(pid) == 0) {
    log::Get("supervisor")
        ->error("refusing to send signal {} to pid {}: not a live role process", signal, pid);
    return;
  }
  if (::kill(pid, signal) != 0) {
    log::Get("supervisor")->warn("kill({}, {}) failed: {}", pid, signal, strerror(errno));
  }
}

std::vector<ExitEvent> PosixLauncher::Reap() {
  std::vector<ExitEvent> events;
  for (auto it = live_.begin(); it != live_.end();) {
    int status = 0;
    pid_t r = ::waitpid(*it, &status, WNOHANG);
    if (r == *it) {
      events.push_back({*it, status});
      it = live_.erase(it);
    } else if (r < 0 && errno == ECHILD) {
      // Cannot happen for our own unreaped child; drop it rather than loop forever.
      log::Get("supervisor")->error("pid {} is no longer our child", *it);
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
  return events;
}

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exit code {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    return fmt::format("killed by signal {} ({}){}", sig, SignalName(sig),
                       WCOREDUMP(wait_status) ? ", core dumped" : "");
  }
  return fmt::format("wait status {:#x}", wait_status);
}

}  // namespace runnel::supervisor
