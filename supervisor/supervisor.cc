#include "supervisor/supervisor.h"

#include <fmt/format.h>
#include <signal.h>

#include "common/config/config.h"
#include "common/grpc/unix_server.h"
#include "common/log/log.h"
#include "supervisor/backoff.h"

namespace runnel::supervisor {
namespace {

const log::ModuleLogger kLog("supervisor");

int64_t MillisBetween(TimePoint from, TimePoint to) {
  return std::chrono::duration_cast<Millis>(to - from).count();
}

}  // namespace

Readiness GrpcHealthProbe::Check(const RoleSpec& spec) {
  StatusOr<bool> serving = grpcutil::HealthCheck(spec.socket_path, deadline_);
  if (!serving.ok()) return Readiness::kNoAnswer;
  return *serving ? Readiness::kServing : Readiness::kWaiting;
}

SupervisorOptions SupervisorOptions::FromConfig(const config::Config& config) {
  SupervisorOptions o;
  o.ready_timeout = Millis(config.GetInt("runnel.supervisor.ready.timeout.ms"));
  o.stop_timeout = Millis(config.GetInt("runnel.supervisor.stop.timeout.ms"));
  o.backoff_initial = Millis(config.GetInt("runnel.supervisor.restart.backoff.initial.ms"));
  o.backoff_max = Millis(config.GetInt("runnel.supervisor.restart.backoff.max.ms"));
  o.backoff_reset_after = BackoffResetAfter(o.backoff_initial);
  return o;
}

std::string_view RoleStateName(RoleState state) {
  switch (state) {
    case RoleState::kStarting:
      return "starting";
    case RoleState::kServing:
      return "serving";
    case RoleState::kBackoff:
      return "backoff";
    case RoleState::kStopping:
      return "stopping";
    case RoleState::kStopped:
      return "stopped";
  }
  return "?";
}

std::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kStarting:
      return "starting";
    case Phase::kRunning:
      return "running";
    case Phase::kStopping:
      return "stopping";
    case Phase::kDone:
      return "done";
  }
  return "?";
}

Supervisor::Supervisor(std::vector<RoleSpec> roles, SupervisorOptions options,
                       ProcessLauncher* launcher, HealthProbe* probe, TimeSource* clock)
    : options_(options),
      launcher_(launcher),
      probe_(probe),
      clock_(clock),
      created_at_(clock->Now()) {
  for (RoleSpec& spec : roles) {
    Role role;
    role.spec = std::move(spec);
    roles_.push_back(std::move(role));
  }
  Publish();
}

void Supervisor::Start() {
  const TimePoint now = clock_->Now();
  std::string names;
  for (const Role& r : roles_) names += (names.empty() ? "" : ", ") + r.spec.DisplayName();
  kLog()->info("starting roles in order: {}", names);
  if (roles_.empty()) {
    phase_ = Phase::kRunning;
  } else {
    Spawn(roles_[0], now);
  }
  Publish();
}

void Supervisor::Spawn(Role& role, TimePoint now) {
  StatusOr<int> pid = launcher_->Spawn(role.spec);
  if (!pid.ok()) {
    std::string why = std::string(pid.status().message());
    if (phase_ == Phase::kStarting) {
      FailStartup(why, now);
      return;
    }
    kLog()->error("{}", why);
    role.last_exit = why;
    ScheduleRestart(role, now);
    return;
  }
  role.pid = *pid;
  role.state = RoleState::kStarting;
  role.started_at = now;
  role.serving_since.reset();
  role.deadline = now + options_.ready_timeout;
  role.next_probe = now + options_.probe_interval;
  role.kill_sent = false;
  role.waiting = false;
  if (role.restarts == 0) {
    kLog()->info("started {} (pid {})", role.spec.DisplayName(), role.pid);
  } else {
    kLog()->info("restarted {} (pid {}, restart #{})", role.spec.DisplayName(), role.pid,
                 role.restarts);
  }
}

void Supervisor::ProbeStarting(Role& role, TimePoint now) {
  if (role.state != RoleState::kStarting || now < role.next_probe) return;
  Readiness readiness = probe_->Check(role.spec);
  if (readiness == Readiness::kServing) {
    MarkServing(role, clock_->Now());
    return;
  }
  // The probe itself takes time; judge the deadline after it.
  now = clock_->Now();
  if (now < role.deadline) {
    role.next_probe = now + options_.probe_interval;
    return;
  }
  // A role that answers is alive: one waiting for other nodes (a controller quorum still
  // forming, say) is waited for, as Kafka's processes wait. Only silence is a failure.
  if (readiness == Readiness::kWaiting) {
    if (!role.waiting) {
      role.waiting = true;
      kLog()->warn(
          "{} (pid {}) is up but not serving after {} ms; it waits for something off "
          "this node (see its log), and the supervisor waits for it",
          role.spec.DisplayName(), role.pid, MillisBetween(role.started_at, now));
    }
    role.next_probe = now + options_.probe_interval;
    return;
  }
  std::string why = fmt::format(
      "{} (pid {}) did not become ready within {} ms (no grpc.health.v1 SERVING on {})",
      role.spec.DisplayName(), role.pid, options_.ready_timeout.count(), role.spec.socket_path);
  if (phase_ == Phase::kStarting) {
    FailStartup(why, now);
    return;
  }
  kLog()->error("{}; stopping it to restart it", why);
  role.last_exit = "not ready in time";
  Terminate(role, now);
}

void Supervisor::MarkServing(Role& role, TimePoint now) {
  role.state = RoleState::kServing;
  role.serving_since = now;
  kLog()->info("{} (pid {}) is serving after {} ms", role.spec.DisplayName(), role.pid,
               MillisBetween(role.started_at, now));
  if (phase_ != Phase::kStarting) return;
  ++starting_index_;
  if (starting_index_ < roles_.size()) {
    Spawn(roles_[starting_index_], now);
  } else {
    phase_ = Phase::kRunning;
    kLog()->info("all roles are serving");
  }
}

void Supervisor::FailStartup(std::string why, TimePoint now) {
  if (phase_ != Phase::kStarting) return;
  kLog()->error("startup failed: {}", why);
  failure_ = std::move(why);
  exit_code_ = 1;
  phase_ = Phase::kStopping;
  stop_index_ = static_cast<int>(roles_.size()) - 1;
  AdvanceStop(now);
}

void Supervisor::ScheduleRestart(Role& role, TimePoint now) {
  if (role.serving_since && now - *role.serving_since >= options_.backoff_reset_after) {
    role.consecutive_failures = 0;
  }
  role.serving_since.reset();
  ++role.consecutive_failures;
  Millis delay =
      RestartBackoff(options_.backoff_initial, options_.backoff_max, role.consecutive_failures);
  role.state = RoleState::kBackoff;
  role.deadline = now + delay;
  kLog()->info("restarting {} in {} ms (restart #{}, failure {} in a row)", role.spec.DisplayName(),
               delay.count(), role.restarts + 1, role.consecutive_failures);
}

void Supervisor::Terminate(Role& role, TimePoint now) {
  kLog()->info("stopping {} (pid {}) with SIGTERM", role.spec.DisplayName(), role.pid);
  launcher_->Signal(role.pid, SIGTERM);
  role.state = RoleState::kStopping;
  role.deadline = now + options_.stop_timeout;
  role.kill_sent = false;
}

void Supervisor::OnExit(int pid, int wait_status) {
  Role* role = nullptr;
  for (Role& r : roles_) {
    if (r.pid != 0 && r.pid == pid) role = &r;
  }
  if (role == nullptr) {
    kLog()->debug("reaped pid {} which is not a current role process", pid);
    return;
  }
  const TimePoint now = clock_->Now();
  const std::string how = DescribeWaitStatus(wait_status);
  const std::string name = role->spec.DisplayName();
  const bool was_stopping = role->state == RoleState::kStopping;
  role->pid = 0;
  role->last_exit = how;
  switch (phase_) {
    case Phase::kStarting:
      role->state = RoleState::kStopped;
      kLog()->error("{} (pid {}) exited during startup: {}", name, pid, how);
      FailStartup(fmt::format("{} exited during startup ({})", name, how), now);
      break;
    case Phase::kRunning:
      if (was_stopping) {
        kLog()->warn("{} (pid {}) stopped: {}", name, pid, how);
      } else {
        kLog()->error("{} (pid {}) died: {}", name, pid, how);
      }
      ScheduleRestart(*role, now);
      break;
    case Phase::kStopping:
      kLog()->info("{} (pid {}) exited: {}", name, pid, how);
      role->state = RoleState::kStopped;
      AdvanceStop(now);
      break;
    case Phase::kDone:
      role->state = RoleState::kStopped;
      break;
  }
  Publish();
}

void Supervisor::RequestStop() {
  if (phase_ == Phase::kStopping || phase_ == Phase::kDone) {
    kLog()->info("already stopping");
    return;
  }
  kLog()->info("stopping roles in reverse order");
  phase_ = Phase::kStopping;
  stop_index_ = static_cast<int>(roles_.size()) - 1;
  AdvanceStop(clock_->Now());
  Publish();
}

bool Supervisor::EscalateStop(Role& role, TimePoint now) {
  if (!role.kill_sent) {
    kLog()->warn("{} (pid {}) did not exit within {} ms of SIGTERM; sending SIGKILL",
                 role.spec.DisplayName(), role.pid, options_.stop_timeout.count());
    launcher_->Signal(role.pid, SIGKILL);
    role.kill_sent = true;
    role.deadline = now + options_.kill_grace;
    return false;
  }
  kLog()->error("{} (pid {}) did not exit {} ms after SIGKILL; leaving it behind",
                role.spec.DisplayName(), role.pid, options_.kill_grace.count());
  role.last_exit = "did not exit after SIGKILL";
  role.pid = 0;
  return true;
}

void Supervisor::AdvanceStop(TimePoint now) {
  // A role waiting for its restart is not going to be restarted any more.
  for (Role& r : roles_) {
    if (r.state == RoleState::kBackoff) r.state = RoleState::kStopped;
  }
  while (stop_index_ >= 0) {
    Role& r = roles_[stop_index_];
    if (r.pid == 0) {
      r.state = RoleState::kStopped;
      --stop_index_;
      continue;
    }
    if (r.state != RoleState::kStopping) {
      Terminate(r, now);
      return;
    }
    if (now < r.deadline || !EscalateStop(r, now)) return;
    r.state = RoleState::kStopped;
    --stop_index_;
  }
  phase_ = Phase::kDone;
  kLog()->info("all roles stopped");
}

void Supervisor::Poll() {
  const TimePoint now = clock_->Now();
  switch (phase_) {
    case Phase::kStarting:
      ProbeStarting(roles_[starting_index_], now);
      break;
    case Phase::kRunning:
      for (Role& r : roles_) {
        switch (r.state) {
          case RoleState::kStarting:
            ProbeStarting(r, clock_->Now());
            break;
          case RoleState::kBackoff:
            if (now >= r.deadline) {
              ++r.restarts;
              Spawn(r, now);
            }
            break;
          case RoleState::kStopping:
            // Stopped because it did not become ready; escalate like a shutdown would.
            if (now >= r.deadline && EscalateStop(r, now)) ScheduleRestart(r, now);
            break;
          case RoleState::kServing:
          case RoleState::kStopped:
            break;
        }
      }
      break;
    case Phase::kStopping:
      AdvanceStop(now);
      break;
    case Phase::kDone:
      break;
  }
  Publish();
}

std::optional<TimePoint> Supervisor::NextWakeup() const {
  std::optional<TimePoint> next;
  auto consider = [&next](TimePoint t) {
    if (!next || t < *next) next = t;
  };
  auto consider_role = [&](const Role& r) {
    switch (r.state) {
      case RoleState::kStarting:
        consider(std::min(r.next_probe, r.deadline));
        break;
      case RoleState::kBackoff:
      case RoleState::kStopping:
        consider(r.deadline);
        break;
      case RoleState::kServing:
      case RoleState::kStopped:
        break;
    }
  };
  switch (phase_) {
    case Phase::kStarting:
      consider_role(roles_[starting_index_]);
      break;
    case Phase::kRunning:
      for (const Role& r : roles_) consider_role(r);
      break;
    case Phase::kStopping:
      if (stop_index_ >= 0) consider_role(roles_[stop_index_]);
      break;
    case Phase::kDone:
      break;
  }
  return next;
}

void Supervisor::Publish() {
  SupervisorSnapshot snap;
  snap.phase = phase_;
  std::vector<TimePoint> started_at;
  for (const Role& r : roles_) {
    RoleSnapshot s;
    s.name = r.spec.name;
    s.pid = r.pid;
    s.state = r.state;
    s.restarts = r.restarts;
    s.last_exit = r.last_exit;
    snap.roles.push_back(std::move(s));
    started_at.push_back(r.started_at);
  }
  MutexLock lock(&status_mu_);
  published_ = std::move(snap);
  published_started_at_ = std::move(started_at);
}

SupervisorSnapshot Supervisor::Status() const {
  const TimePoint now = clock_->Now();
  MutexLock lock(&status_mu_);
  SupervisorSnapshot snap = published_;
  snap.uptime = std::chrono::duration_cast<Millis>(now - created_at_);
  for (size_t i = 0; i < snap.roles.size(); ++i) {
    if (snap.roles[i].pid != 0) {
      snap.roles[i].uptime =
          std::max(Millis(0), std::chrono::duration_cast<Millis>(now - published_started_at_[i]));
    }
  }
  return snap;
}

}  // namespace runnel::supervisor
