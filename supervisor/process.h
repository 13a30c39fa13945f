// Starting, signalling and reaping role processes. The Supervisor only talks to the
// ProcessLauncher interface, so tests drive it with a fake one.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/util/status.h"
#include "supervisor/roles.h"

namespace runnel::supervisor {

class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;
  // Starts the role's binary; returns its pid.
  virtual StatusOr<int> Spawn(const RoleSpec& spec) = 0;
  // Sends `signal` to `pid`. Only pids returned by Spawn and not yet reaped are
  // signalled; anything else is refused (logged) so a stale pid can never hit a stranger.
  virtual void Signal(int pid, int signal) = 0;
};

// One child that ended: its pid and waitpid() status.
struct ExitEvent {
  int pid = 0;
  int wait_status = 0;
};

// fork + exec of real processes. Each child gets stdin from /dev/null, inherits
// stdout/stderr, has an empty signal mask and default dispositions, runs in its own
// process group (a terminal's Ctrl-C reaches only the supervisor, which stops the roles
// in order) and gets SIGTERM if the supervisor dies (PR_SET_PDEATHSIG).
// Spawn must be called from the thread that lives as long as the children (the main
// thread): the death signal is tied to the forking thread.
class PosixLauncher final : public ProcessLauncher {
 public:
  StatusOr<int> Spawn(const RoleSpec& spec) override;
  void Signal(int pid, int signal) override;

  // Reaps every child started here that has exited, without blocking.
  std::vector<ExitEvent> Reap();
  // Children started here and not yet reaped.
  const std::set<int>& live() const { return live_; }

 private:
  std::set<int> live_;
};

// `base` (a NULL-terminated environ-style array) with the "KEY=value" entries of
// `overrides` replacing or adding to it.
std::vector<std::string> MergeEnvironment(char** base, const std::vector<std::string>& overrides);

// "exit code 3", "killed by signal 9 (KILL)", "killed by signal 11 (SEGV), core dumped".
std::string DescribeWaitStatus(int wait_status);

}  // namespace runnel::supervisor
