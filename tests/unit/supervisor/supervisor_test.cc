// The Supervisor state machine driven step by step with a fake launcher, probe and clock.
#include "supervisor/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <set>

#include "common/config/config.h"

namespace runnel::supervisor {
namespace {

using std::chrono::milliseconds;

constexpr int kExitCode3 = 3 << 8;  // waitpid status of exit(3)
constexpr int kKilled = SIGKILL;    // waitpid status of death by SIGKILL
constexpr int kExit0 = 0;

class FakeClock final : public TimeSource {
 public:
  TimePoint Now() const override { return TimePoint(milliseconds(now_ms_.load())); }
  void Advance(milliseconds d) { now_ms_ += d.count(); }

 private:
  std::atomic<int64_t> now_ms_{1'000'000};
};

class FakeLauncher final : public ProcessLauncher {
 public:
  StatusOr<int> Spawn(const RoleSpec& spec) override {
    if (fail.count(spec.name)) return absl::FailedPreconditionError("cannot execute " + spec.name);
    int pid = next_pid++;
    spawned.push_back(spec.name);
    pid_of[spec.name] = pid;
    live.insert(pid);
    return pid;
  }
  void Signal(int pid, int signal) override {
    ASSERT_TRUE(live.count(pid)) << "signal " << signal << " to pid " << pid << " not started";
    signals.push_back({name_of(pid), signal});
  }
  std::string name_of(int pid) const {
    for (const auto& [name, p] : pid_of) {
      if (p == pid) return name;
    }
    return "?";
  }
  // Reports the current process of `name` as exited.
  void Exit(Supervisor& s, const std::string& name, int wait_status) {
    int pid = pid_of.at(name);
    ASSERT_TRUE(live.erase(pid)) << name << " is not running";
    s.OnExit(pid, wait_status);
  }

  int next_pid = 100;
  std::vector<std::string> spawned;
  std::map<std::string, int> pid_of;  // latest pid of each role
  std::set<int> live;
  std::set<std::string> fail;
  std::vector<std::pair<std::string, int>> signals;
};

class FakeProbe final : public HealthProbe {
 public:
  Readiness Check(const RoleSpec& spec) override {
    ++probes[spec.name];
    if (serving.count(spec.name) > 0) return Readiness::kServing;
    return waiting.count(spec.name) > 0 ? Readiness::kWaiting : Readiness::kNoAnswer;
  }
  std::set<std::string> serving;
  std::set<std::string> waiting;  // answer NOT_SERVING
  std::map<std::string, int> probes;
};

std::vector<RoleSpec> ThreeRoles() {
  std::vector<RoleSpec> specs;
  for (const char* name : {"controllerd", "storaged", "brokerd"}) {
    RoleSpec s;
    s.name = name;
    s.binary = std::string("/bin/runnel-") + name;
    s.socket_path = std::string("/run/") + name + ".sock";
    specs.push_back(s);
  }
  return specs;
}

SupervisorOptions TestOptions() {
  SupervisorOptions o;
  o.ready_timeout = milliseconds(1000);
  o.stop_timeout = milliseconds(500);
  o.backoff_initial = milliseconds(100);
  o.backoff_max = milliseconds(1000);
  o.backoff_reset_after = milliseconds(5000);
  o.probe_interval = milliseconds(50);
  o.kill_grace = milliseconds(2000);
  return o;
}

using Signals = std::vector<std::pair<std::string, int>>;

class SupervisorTest : public testing::Test {
 protected:
  SupervisorTest() : sup_(ThreeRoles(), TestOptions(), &launcher_, &probe_, &clock_) {}

  void Step(milliseconds d) {
    clock_.Advance(d);
    sup_.Poll();
  }
  const RoleSnapshot& Role(const std::string& name) {
    snapshot_ = sup_.Status();
    for (const RoleSnapshot& r : snapshot_.roles) {
      if (r.name == name) return r;
    }
    ADD_FAILURE() << "no role " << name;
    return snapshot_.roles.at(0);
  }
  // Starts all three roles and lets each become ready.
  void StartAll() {
    probe_.serving = {"controllerd", "storaged", "brokerd"};
    sup_.Start();
    for (int i = 0; i < 3; ++i) Step(milliseconds(50));
    ASSERT_EQ(sup_.Status().phase, Phase::kRunning);
  }

  FakeClock clock_;
  FakeLauncher launcher_;
  FakeProbe probe_;
  Supervisor sup_;
  SupervisorSnapshot snapshot_;
};

TEST_F(SupervisorTest, StartsRolesInOrderEachAfterThePreviousServes) {
  sup_.Start();
  EXPECT_EQ(launcher_.spawned, std::vector<std::string>{"controllerd"});
  EXPECT_EQ(Role("controllerd").state, RoleState::kStarting);
  EXPECT_EQ(Role("storaged").state, RoleState::kStopped);
  // Probed every probe_interval, not before.
  Step(milliseconds(49));
  EXPECT_EQ(probe_.probes["controllerd"], 0);
  Step(milliseconds(1));
  EXPECT_EQ(probe_.probes["controllerd"], 1);
  Step(milliseconds(50));
  EXPECT_EQ(probe_.probes["controllerd"], 2);
  EXPECT_EQ(launcher_.spawned.size(), 1u);

  probe_.serving.insert("controllerd");
  Step(milliseconds(50));
  EXPECT_EQ(Role("controllerd").state, RoleState::kServing);
  EXPECT_EQ(launcher_.spawned, (std::vector<std::string>{"controllerd", "storaged"}));
  EXPECT_EQ(sup_.Status().phase, Phase::kStarting);

  probe_.serving.insert("storaged");
  Step(milliseconds(50));
  EXPECT_EQ(launcher_.spawned, (std::vector<std::string>{"controllerd", "storaged", "brokerd"}));
  probe_.serving.insert("brokerd");
  Step(milliseconds(50));
  SupervisorSnapshot s = sup_.Status();
  EXPECT_EQ(s.phase, Phase::kRunning);
  for (const RoleSnapshot& r : s.roles) {
    EXPECT_EQ(r.state, RoleState::kServing) << r.name;
    EXPECT_EQ(r.restarts, 0);
    EXPECT_GT(r.pid, 0);
  }
  EXPECT_EQ(Role("controllerd").uptime, milliseconds(250));
  EXPECT_EQ(Role("brokerd").uptime, milliseconds(50));
  EXPECT_EQ(s.uptime, milliseconds(250));
  EXPECT_TRUE(launcher_.signals.empty());
  EXPECT_FALSE(sup_.NextWakeup().has_value());  // nothing to do until an event
}

TEST_F(SupervisorTest, RoleExitDuringStartupStopsStartedRolesInReverse) {
  probe_.serving = {"controllerd"};
  sup_.Start();
  Step(milliseconds(50));
  ASSERT_EQ(launcher_.spawned, (std::vector<std::string>{"controllerd", "storaged"}));
  launcher_.Exit(sup_, "storaged", kExitCode3);
  EXPECT_EQ(sup_.exit_code(), 1);
  EXPECT_EQ(sup_.failure(), "runnel-storaged exited during startup (exit code 3)");
  EXPECT_EQ(launcher_.signals, (Signals{{"controllerd", SIGTERM}}));
  EXPECT_FALSE(sup_.done());
  launcher_.Exit(sup_, "controllerd", kExit0);
  EXPECT_TRUE(sup_.done());
  EXPECT_EQ(launcher_.spawned.size(), 2u);  // brokerd never started
  EXPECT_EQ(Role("storaged").last_exit, "exit code 3");
  EXPECT_EQ(Role("controllerd").state, RoleState::kStopped);
}

TEST_F(SupervisorTest, EarlierRoleDyingDuringStartupAlsoFails) {
  probe_.serving = {"controllerd"};
  sup_.Start();
  Step(milliseconds(50));
  launcher_.Exit(sup_, "controllerd", kKilled);
  EXPECT_EQ(sup_.failure(), "runnel-controllerd exited during startup (killed by signal 9 (KILL))");
  EXPECT_EQ(launcher_.signals, (Signals{{"storaged", SIGTERM}}));
  launcher_.Exit(sup_, "storaged", kExit0);
  EXPECT_TRUE(sup_.done());
  EXPECT_EQ(sup_.exit_code(), 1);
}

TEST_F(SupervisorTest, NotReadyInTimeFailsStartup) {
  sup_.Start();
  for (int i = 0; i < 19; ++i) Step(milliseconds(50));
  EXPECT_TRUE(sup_.failure().empty());
  Step(milliseconds(50));  // 1000 ms: the ready timeout
  EXPECT_NE(sup_.failure().find("runnel-controllerd (pid 100) did not become ready within 1000 ms"),
            std::string::npos)
      << sup_.failure();
  EXPECT_EQ(launcher_.signals, (Signals{{"controllerd", SIGTERM}}));
  // It ignores SIGTERM: SIGKILL after stop_timeout.
  Step(milliseconds(499));
  EXPECT_EQ(launcher_.signals.size(), 1u);
  Step(milliseconds(1));
  EXPECT_EQ(launcher_.signals, (Signals{{"controllerd", SIGTERM}, {"controllerd", SIGKILL}}));
  launcher_.Exit(sup_, "controllerd", kKilled);
  EXPECT_TRUE(sup_.done());
  EXPECT_EQ(sup_.exit_code(), 1);
}

TEST_F(SupervisorTest, SpawnFailureAtStartupFails) {
  launcher_.fail = {"storaged"};
  probe_.serving = {"controllerd"};
  sup_.Start();
  Step(milliseconds(50));
  EXPECT_EQ(sup_.failure(), "cannot execute storaged");
  EXPECT_EQ(launcher_.signals, (Signals{{"controllerd", SIGTERM}}));
  launcher_.Exit(sup_, "controllerd", kExit0);
  EXPECT_TRUE(sup_.done());
}

TEST_F(SupervisorTest, RestartsDeadRoleWithDoublingBackoff) {
  StartAll();
  const int first_pid = launcher_.pid_of["brokerd"];
  launcher_.Exit(sup_, "brokerd", kKilled);
  EXPECT_EQ(Role("brokerd").state, RoleState::kBackoff);
  EXPECT_EQ(Role("brokerd").pid, 0);
  EXPECT_EQ(Role("brokerd").last_exit, "killed by signal 9 (KILL)");
  EXPECT_EQ(sup_.NextWakeup(), clock_.Now() + milliseconds(100));

  // Failure n waits 100 * 2^(n-1) ms, capped at 1000.
  for (int failure = 1; failure <= 6; ++failure) {
    const int64_t delay = std::min<int64_t>(100LL << (failure - 1), 1000);
    const size_t spawned = launcher_.spawned.size();
    Step(milliseconds(delay - 1));
    EXPECT_EQ(launcher_.spawned.size(), spawned) << "failure " << failure;
    Step(milliseconds(1));
    ASSERT_EQ(launcher_.spawned.size(), spawned + 1) << "failure " << failure;
    EXPECT_EQ(launcher_.spawned.back(), "brokerd");
    EXPECT_EQ(Role("brokerd").restarts, failure);
    EXPECT_EQ(Role("brokerd").state, RoleState::kStarting);
    Step(milliseconds(50));
    EXPECT_EQ(Role("brokerd").state, RoleState::kServing);
    if (failure < 6) launcher_.Exit(sup_, "brokerd", kExitCode3);
  }
  EXPECT_NE(launcher_.pid_of["brokerd"], first_pid);
  // The others were not touched.
  EXPECT_EQ(Role("controllerd").restarts, 0);
  EXPECT_EQ(Role("storaged").state, RoleState::kServing);
  EXPECT_TRUE(launcher_.signals.empty());

  // Serving for backoff_reset_after resets the count: the next delay is the initial one.
  Step(milliseconds(5000));
  launcher_.Exit(sup_, "brokerd", kExitCode3);
  EXPECT_EQ(sup_.NextWakeup(), clock_.Now() + milliseconds(100));
}

TEST_F(SupervisorTest, ARoleThatAnswersNotServingIsWaitedForPastTheReadyTimeout) {
  probe_.waiting = {"controllerd"};
  sup_.Start();
  // Ten times the ready timeout: up, waiting for its quorum, and not given up on.
  for (int i = 0; i < 200; ++i) Step(milliseconds(50));
  EXPECT_TRUE(sup_.failure().empty()) << sup_.failure();
  EXPECT_TRUE(launcher_.signals.empty());
  EXPECT_EQ(Role("controllerd").state, RoleState::kStarting);
  EXPECT_EQ(launcher_.spawned, std::vector<std::string>{"controllerd"});  // the next waits
  probe_.serving = {"controllerd", "storaged", "brokerd"};
  for (int i = 0; i < 3; ++i) Step(milliseconds(50));
  EXPECT_EQ(sup_.Status().phase, Phase::kRunning);
}

TEST_F(SupervisorTest, AWaitingRoleThatStopsAnsweringFailsStartup) {
  probe_.waiting = {"controllerd"};
  sup_.Start();
  for (int i = 0; i < 40; ++i) Step(milliseconds(50));
  EXPECT_TRUE(sup_.failure().empty());
  probe_.waiting.clear();  // hung, or its socket gone
  Step(milliseconds(50));
  EXPECT_NE(sup_.failure().find("did not become ready"), std::string::npos) << sup_.failure();
  EXPECT_EQ(launcher_.signals, (Signals{{"controllerd", SIGTERM}}));
}

TEST_F(SupervisorTest, ARestartedRoleWaitingForItsQuorumIsNotKilled) {
  StartAll();
  probe_.serving.erase("controllerd");
  probe_.waiting = {"controllerd"};
  launcher_.Exit(sup_, "controllerd", kExitCode3);
  for (int i = 0; i < 100; ++i) Step(milliseconds(50));
  EXPECT_EQ(Role("controllerd").state, RoleState::kStarting);
  EXPECT_TRUE(launcher_.signals.empty());
  probe_.serving.insert("controllerd");
  Step(milliseconds(50));
  EXPECT_EQ(Role("controllerd").state, RoleState::kServing);
}

TEST_F(SupervisorTest, RestartedRoleNotReadyIsStoppedAndRestartedAgain) {
  StartAll();
  probe_.serving.erase("storaged");
  launcher_.Exit(sup_, "storaged", kExitCode3);
  Step(milliseconds(100));
  ASSERT_EQ(Role("storaged").state, RoleState::kStarting);
  Step(milliseconds(1000));
  EXPECT_EQ(Role("storaged").state, RoleState::kStopping);
  EXPECT_EQ(launcher_.signals, (Signals{{"storaged", SIGTERM}}));
  Step(milliseconds(500));
  EXPECT_EQ(launcher_.signals, (Signals{{"storaged", SIGTERM}, {"storaged", SIGKILL}}));
  launcher_.Exit(sup_, "storaged", kKilled);
  EXPECT_EQ(Role("storaged").state, RoleState::kBackoff);
  EXPECT_EQ(sup_.NextWakeup(), clock_.Now() + milliseconds(200));  // second failure in a row
  probe_.serving.insert("storaged");
  Step(milliseconds(200));
  Step(milliseconds(50));
  EXPECT_EQ(Role("storaged").state, RoleState::kServing);
  EXPECT_EQ(Role("storaged").restarts, 2);
}

TEST_F(SupervisorTest, SpawnFailureAfterStartupBacksOff) {
  StartAll();
  launcher_.fail = {"brokerd"};
  launcher_.Exit(sup_, "brokerd", kExitCode3);
  Step(milliseconds(100));
  EXPECT_EQ(Role("brokerd").state, RoleState::kBackoff);
  EXPECT_EQ(Role("brokerd").last_exit, "cannot execute brokerd");
  EXPECT_EQ(sup_.NextWakeup(), clock_.Now() + milliseconds(200));
  launcher_.fail.clear();
  Step(milliseconds(200));
  EXPECT_EQ(Role("brokerd").state, RoleState::kStarting);
  EXPECT_EQ(Role("brokerd").restarts, 2);
}

TEST_F(SupervisorTest, StopsInReverseOrderEscalatingToSigkill) {
  StartAll();
  sup_.RequestStop();
  EXPECT_EQ(sup_.Status().phase, Phase::kStopping);
  EXPECT_EQ(launcher_.signals, (Signals{{"brokerd", SIGTERM}}));
  EXPECT_EQ(Role("brokerd").state, RoleState::kStopping);
  Step(milliseconds(499));
  EXPECT_EQ(launcher_.signals.size(), 1u);
  Step(milliseconds(1));
  EXPECT_EQ(launcher_.signals, (Signals{{"brokerd", SIGTERM}, {"brokerd", SIGKILL}}));
  launcher_.Exit(sup_, "brokerd", kKilled);
  EXPECT_EQ(launcher_.signals.back(), (std::pair<std::string, int>{"storaged", SIGTERM}));
  launcher_.Exit(sup_, "storaged", kExit0);
  EXPECT_EQ(launcher_.signals.back(), (std::pair<std::string, int>{"controllerd", SIGTERM}));
  EXPECT_FALSE(sup_.done());
  launcher_.Exit(sup_, "controllerd", kExit0);
  EXPECT_TRUE(sup_.done());
  EXPECT_EQ(sup_.exit_code(), 0);
  EXPECT_EQ(launcher_.signals.size(), 4u);
  for (const RoleSnapshot& r : sup_.Status().roles) {
    EXPECT_EQ(r.state, RoleState::kStopped) << r.name;
    EXPECT_EQ(r.pid, 0);
  }
  sup_.RequestStop();  // a second request changes nothing
  EXPECT_EQ(launcher_.signals.size(), 4u);
}

TEST_F(SupervisorTest, StopDuringBackoffDoesNotRestart) {
  StartAll();
  launcher_.Exit(sup_, "storaged", kExitCode3);
  sup_.RequestStop();
  EXPECT_EQ(Role("storaged").state, RoleState::kStopped);
  launcher_.Exit(sup_, "brokerd", kExit0);
  // storaged has no process: controllerd is next.
  EXPECT_EQ(launcher_.signals, (Signals{{"brokerd", SIGTERM}, {"controllerd", SIGTERM}}));
  Step(milliseconds(1000));
  EXPECT_EQ(launcher_.spawned.size(), 3u);
  launcher_.Exit(sup_, "controllerd", kExit0);
  EXPECT_TRUE(sup_.done());
}

TEST_F(SupervisorTest, StopDuringStartupStopsWhatRuns) {
  probe_.serving = {"controllerd"};
  sup_.Start();
  Step(milliseconds(50));
  sup_.RequestStop();
  EXPECT_EQ(launcher_.signals, (Signals{{"storaged", SIGTERM}}));
  launcher_.Exit(sup_, "storaged", kExit0);
  launcher_.Exit(sup_, "controllerd", kExit0);
  EXPECT_TRUE(sup_.done());
  EXPECT_EQ(sup_.exit_code(), 0);
  EXPECT_TRUE(sup_.failure().empty());
}

TEST_F(SupervisorTest, RoleDyingWhileAnotherStopsIsNotRestarted) {
  StartAll();
  sup_.RequestStop();
  launcher_.Exit(sup_, "controllerd", kKilled);  // dies on its own meanwhile
  EXPECT_EQ(Role("controllerd").state, RoleState::kStopped);
  launcher_.Exit(sup_, "brokerd", kExit0);
  launcher_.Exit(sup_, "storaged", kExit0);
  EXPECT_TRUE(sup_.done());
  EXPECT_EQ(launcher_.spawned.size(), 3u);
  for (const auto& [name, sig] : launcher_.signals) EXPECT_NE(name, "controllerd");
}

TEST_F(SupervisorTest, ProcessThatSurvivesSigkillIsLeftBehindAfterGrace) {
  StartAll();
  sup_.RequestStop();
  Step(milliseconds(500));   // SIGKILL
  Step(milliseconds(2000));  // kill_grace
  EXPECT_EQ(Role("brokerd").state, RoleState::kStopped);
  EXPECT_EQ(Role("brokerd").last_exit, "did not exit after SIGKILL");
  EXPECT_EQ(launcher_.signals.back(), (std::pair<std::string, int>{"storaged", SIGTERM}));
}

TEST_F(SupervisorTest, UnknownPidIsIgnored) {
  StartAll();
  sup_.OnExit(99999, kExit0);
  for (const RoleSnapshot& r : sup_.Status().roles) EXPECT_EQ(r.state, RoleState::kServing);
}

TEST(SupervisorOptionsTest, FromConfig) {
  auto config = config::Config::FromMap({{"runnel.supervisor.ready.timeout.ms", "1234"},
                                         {"runnel.supervisor.stop.timeout.ms", "99"},
                                         {"runnel.supervisor.restart.backoff.initial.ms", "3000"},
                                         {"runnel.supervisor.restart.backoff.max.ms", "60000"}});
  ASSERT_TRUE(config.ok()) << config.status();
  SupervisorOptions o = SupervisorOptions::FromConfig(*config);
  EXPECT_EQ(o.ready_timeout, milliseconds(1234));
  EXPECT_EQ(o.stop_timeout, milliseconds(99));
  EXPECT_EQ(o.backoff_initial, milliseconds(3000));
  EXPECT_EQ(o.backoff_max, milliseconds(60000));
  EXPECT_EQ(o.backoff_reset_after, milliseconds(30000));
}

}  // namespace
}  // namespace runnel::supervisor
