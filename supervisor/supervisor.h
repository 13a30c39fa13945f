// The supervision state machine: starts the roles in order, waits for each to be
// SERVING, restarts the ones that die with backoff, and stops them in reverse order.
//
// It does no I/O of its own: processes go through a ProcessLauncher, readiness through a
// HealthProbe and time through a Clock, so tests drive it step by step with fakes. The
// owner (the node's main loop) calls Start once, then OnExit for every reaped child,
// RequestStop on SIGTERM/SIGINT, and Poll whenever NextWakeup is reached, until done().
//
// Threads: every method except Status() runs on the owner's thread. Status() may be
// called from any thread (the admin gRPC service); it reads a copy published under a
// mutex after each step.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/util/mutex.h"
#include "supervisor/process.h"
#include "supervisor/roles.h"

namespace runnel::config {
class Config;
}

namespace runnel::supervisor {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Millis = std::chrono::milliseconds;

class TimeSource {
 public:
  virtual ~TimeSource() = default;
  virtual TimePoint Now() const = 0;  // must be callable from any thread
};

class SteadyTimeSource final : public TimeSource {
 public:
  TimePoint Now() const override { return Clock::now(); }
};

// What one readiness check of a starting role found.
enum class Readiness {
  kServing,   // grpc.health.v1 answered SERVING
  kWaiting,   // answered NOT_SERVING: up, and waiting for something off this node (a quorum)
  kNoAnswer,  // no answer (not listening yet, hung, or gone)
};

class HealthProbe {
 public:
  virtual ~HealthProbe() = default;
  virtual Readiness Check(const RoleSpec& spec) = 0;
};

// Asks the role's Unix socket with grpcutil::HealthCheck.
class GrpcHealthProbe final : public HealthProbe {
 public:
  explicit GrpcHealthProbe(Millis deadline) : deadline_(deadline) {}
  Readiness Check(const RoleSpec& spec) override;

 private:
  Millis deadline_;
};

struct SupervisorOptions {
  Millis ready_timeout{30000};
  Millis stop_timeout{10000};
  Millis backoff_initial{200};
  Millis backoff_max{30000};
  Millis backoff_reset_after{10000};  // see BackoffResetAfter
  Millis probe_interval{50};
  // After SIGKILL, how long to wait for the exit before giving up on a process stuck in
  // the kernel (it is then left behind, and logged).
  Millis kill_grace{5000};

  // From the runnel.supervisor.* keys.
  static SupervisorOptions FromConfig(const config::Config& config);
};

enum class RoleState { kStarting, kServing, kBackoff, kStopping, kStopped };
std::string_view RoleStateName(RoleState state);

enum class Phase { kStarting, kRunning, kStopping, kDone };
std::string_view PhaseName(Phase phase);

struct RoleSnapshot {
  std::string name;
  int pid = 0;
  RoleState state = RoleState::kStopped;
  Millis uptime{0};
  int restarts = 0;
  std::string last_exit;
};

struct SupervisorSnapshot {
  Phase phase = Phase::kStarting;
  Millis uptime{0};
  std::vector<RoleSnapshot> roles;
};

class Supervisor {
 public:
  // The pointers must outlive the Supervisor.
  Supervisor(std::vector<RoleSpec> roles, SupervisorOptions options, ProcessLauncher* launcher,
             HealthProbe* probe, TimeSource* clock);
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts the first role.
  void Start();
  // A child exited; `wait_status` as from waitpid. Unknown pids are ignored.
  void OnExit(int pid, int wait_status);
  // Stops every role in reverse start order (SIGTERM, then SIGKILL after stop_timeout).
  void RequestStop();
  // Does what is due now: readiness probes, timeouts, restarts, stop escalation.
  void Poll();
  // When Poll has something to do next (a probe, a deadline); nullopt when only an
  // event (OnExit, RequestStop) can change anything.
  std::optional<TimePoint> NextWakeup() const;

  bool done() const { return phase_ == Phase::kDone; }
  // 0 after a requested stop, 1 when startup failed.
  int exit_code() const { return exit_code_; }
  // Why startup failed, naming the role; empty otherwise.
  const std::string& failure() const { return failure_; }

  // Thread-safe copy of the current state.
  SupervisorSnapshot Status() const;

 private:
  struct Role {
    RoleSpec spec;
    RoleState state = RoleState::kStopped;
    int pid = 0;  // 0 when no process of ours is running
    TimePoint started_at{};
    std::optional<TimePoint> serving_since;
    TimePoint deadline{};    // ready deadline, restart time or stop deadline, by state
    TimePoint next_probe{};  // kStarting only
    bool kill_sent = false;  // kStopping only: SIGKILL already sent
    bool waiting = false;    // kStarting only: past its ready deadline, answering NOT_SERVING
    int restarts = 0;
    int consecutive_failures = 0;
    std::string last_exit;
  };

  void Spawn(Role& role, TimePoint now);
  void ProbeStarting(Role& role, TimePoint now);
  void MarkServing(Role& role, TimePoint now);
  void FailStartup(std::string why, TimePoint now);
  void ScheduleRestart(Role& role, TimePoint now);
  void Terminate(Role& role, TimePoint now);
  // For a kStopping role past its deadline: SIGKILL it or, when that was already done,
  // give up on it (pid forgotten). True when given up.
  bool EscalateStop(Role& role, TimePoint now);
  void AdvanceStop(TimePoint now);
  void Publish();

  std::vector<Role> roles_;
  SupervisorOptions options_;
  ProcessLauncher* launcher_;
  HealthProbe* probe_;
  TimeSource* clock_;
  const TimePoint created_at_;

  Phase phase_ = Phase::kStarting;
  size_t starting_index_ = 0;  // kStarting: the role being started
  int stop_index_ = -1;        // kStopping: the role being stopped (counts down)
  int exit_code_ = 0;
  std::string failure_;

  mutable Mutex status_mu_;
  // Uptimes are filled by Status().
  SupervisorSnapshot published_ ABSL_GUARDED_BY(status_mu_);
  std::vector<TimePoint> published_started_at_ ABSL_GUARDED_BY(status_mu_);
};

}  // namespace runnel::supervisor
