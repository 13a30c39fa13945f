// The real `runnel` binary supervising fake role processes (fake_role.cc, symlinked as
// runnel-controllerd/-storaged/-brokerd in a temp RUNNEL_BIN_DIR). Every wait is bounded.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/grpc/unix_server.h"
#include "proto/runnel/supervisor.grpc.pb.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

extern char** environ;

namespace runnel::supervisor {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr auto kWait = 20s;  // upper bound of any wait; things normally take < 1 s

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout = kWait) {
  return runnel::testing::WaitUntil(done, timeout, 20ms);
}

// The pid exists, zombie or not: a child the supervisor failed to reap stays Alive.
bool Alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

// The pid exists and is not a zombie (an orphan waiting for init to reap it is over).
bool Running(int pid) {
  if (!Alive(pid)) return false;
  std::string stat = ReadFile(fmt::format("/proc/{}/stat", pid));
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

struct Event {
  std::string kind;  // start, serving, term, exit
  std::string role;
  int pid = 0;
  std::string details;
};

// A child process with stdout/stderr captured to files.
struct Child {
  int pid = -1;
  std::string out_path, err_path;
  std::optional<int> status;  // waitpid status once reaped

  // Bounded wait for exit; false when it is still running.
  bool Wait(std::chrono::milliseconds timeout = kWait) {
    return WaitFor(
        [&] {
          if (status) return true;
          int st;
          if (::waitpid(pid, &st, WNOHANG) == pid) status = st;
          return status.has_value();
        },
        timeout);
  }
  int ExitCode() const { return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1; }
  std::string Out() const { return ReadFile(out_path); }
  std::string Err() const { return ReadFile(err_path); }
};

Child RunRunnel(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                const std::string& capture_prefix) {
  Child c;
  c.out_path = capture_prefix + ".out";
  c.err_path = capture_prefix + ".err";
  std::vector<std::string> argv_s = {RUNNEL_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    if (env.count(key) == 0 && key.rfind("FAKE_ROLE_", 0) != 0 && key != "RUNNEL_BIN_DIR") {
      env_s.push_back(kv);
    }
  }
  for (const auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  int out = ::open(c.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err = ::open(c.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out);
  ::close(err);
  return c;
}

class SupervisorProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Roles orphaned when a test kills the supervisor are re-parented to this process
    // (not to init, which may never reap them) and reaped in TearDown.
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    tmp_.emplace("supervisor");
    dir_ = tmp_->path();
    bin_dir_ = dir_ + "/bin";
    run_dir_ = dir_ + "/run";
    events_ = dir_ + "/events";
    config_ = dir_ + "/node.properties";
    ASSERT_EQ(::mkdir(bin_dir_.c_str(), 0755), 0);
    for (const char* role : {"controllerd", "storaged", "brokerd"}) LinkRole(role);
    env_ = {{"RUNNEL_BIN_DIR", bin_dir_}, {"FAKE_ROLE_EVENTS", events_}};
    WriteConfig("");
  }

  void TearDown() override {
    // Nothing may outlive a test: a still running supervisor is killed (its roles get
    // SIGTERM through PR_SET_PDEATHSIG), then any role process that is still there.
    if (node_.pid > 0 && !node_.status) {
      ::kill(node_.pid, SIGKILL);
      node_.Wait(5s);
    }
    for (const Event& e : Events()) {
      if (e.kind == "start" && WaitFor([&] { return !Running(e.pid); }, 5s) == false) {
        ADD_FAILURE() << "role " << e.role << " pid " << e.pid << " outlived the test";
        ::kill(e.pid, SIGKILL);
      }
    }
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    tmp_.reset();
  }

  void LinkRole(const std::string& role) {
    std::string link = bin_dir_ + "/runnel-" + role;
    ASSERT_EQ(::symlink(FAKE_ROLE_BINARY, link.c_str()), 0) << link;
  }

  void WriteConfig(const std::string& extra) {
    std::ofstream(config_) << "# supervisor process test\n"
                           << "runnel.run.dir=" << run_dir_ << "\n"
                           << "runnel.supervisor.ready.timeout.ms=10000\n"
                           << "runnel.supervisor.stop.timeout.ms=5000\n"
                           << "runnel.supervisor.restart.backoff.initial.ms=100\n"
                           << extra;
  }

  void StartNode() { node_ = RunRunnel({"--config", config_}, env_, dir_ + "/runnel"); }

  std::vector<Event> Events() const {
    std::vector<Event> out;
    std::istringstream in(ReadFile(events_));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream l(line);
      Event e;
      l >> e.kind >> e.role >> e.pid;
      std::getline(l, e.details);
      if (!e.details.empty() && e.details[0] == ' ') e.details.erase(0, 1);
      out.push_back(e);
    }
    return out;
  }
  // "kind role" of each event, in order, for the kinds given.
  std::vector<std::string> Sequence(const std::set<std::string>& kinds) const {
    std::vector<std::string> out;
    for (const Event& e : Events()) {
      if (kinds.count(e.kind)) out.push_back(e.kind + " " + e.role);
    }
    return out;
  }

  StatusOr<GetStatusResponse> AdminStatus() {
    auto stub = SupervisorAdmin::NewStub(
        grpcutil::UnixChannel(grpcutil::SocketPath(run_dir_, "supervisor")));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 2s);
    GetStatusResponse resp;
    grpc::Status st = stub->GetStatus(&ctx, GetStatusRequest(), &resp);
    if (!st.ok()) return FromGrpc(st);
    return resp;
  }

  bool AllServing(GetStatusResponse* out = nullptr) {
    auto st = AdminStatus();
    if (!st.ok() || st->roles_size() == 0) return false;
    for (const RoleStatus& r : st->roles()) {
      if (r.state() != RoleStatus::SERVING) return false;
    }
    if (out != nullptr) *out = *st;
    return true;
  }

  // SIGTERM to the supervisor; it must exit 0.
  void StopNode() {
    ASSERT_EQ(::kill(node_.pid, SIGTERM), 0);
    ASSERT_TRUE(node_.Wait()) << "runnel did not stop; stderr:\n" << node_.Err();
    EXPECT_EQ(node_.ExitCode(), 0) << node_.Err();
  }

  std::optional<runnel::testing::TempDir> tmp_;
  std::string dir_, bin_dir_, run_dir_, events_, config_;
  std::map<std::string, std::string> env_;
  Child node_;
};

TEST_F(SupervisorProcessTest, StartsInOrderReportsStatusAndStopsInReverse) {
  // With a log file open in the supervisor, which its roles must not inherit.
  ASSERT_EQ(::mkdir((dir_ + "/log").c_str(), 0755), 0);
  WriteConfig(fmt::format("runnel.log.dir={}/log\n", dir_));
  StartNode();
  GetStatusResponse status;
  ASSERT_TRUE(WaitFor([&] { return AllServing(&status); })) << node_.Err();
  EXPECT_EQ(status.supervisor_pid(), node_.pid);
  EXPECT_EQ(status.phase(), GetStatusResponse::RUNNING);
  ASSERT_EQ(status.roles_size(), 3);
  EXPECT_EQ(status.roles(0).name(), "controllerd");
  EXPECT_EQ(status.roles(1).name(), "storaged");
  EXPECT_EQ(status.roles(2).name(), "brokerd");

  // Each role started only after the previous one served.
  EXPECT_EQ(Sequence({"start", "serving"}),
            (std::vector<std::string>{"start controllerd", "serving controllerd", "start storaged",
                                      "serving storaged", "start brokerd", "serving brokerd"}));
  for (const Event& e : Events()) {
    if (e.kind != "start") continue;
    EXPECT_EQ(e.details, fmt::format("config={} stdin=/dev/null supervised=1 fds=0,1,2", config_))
        << e.role;
    for (const RoleStatus& r : status.roles()) {
      if (r.name() == e.role) {
        EXPECT_EQ(r.pid(), e.pid);
      }
    }
  }
  EXPECT_EQ(ReadFile(run_dir_ + "/runnel.pid"), fmt::format("{}\n", node_.pid));
  struct stat st;
  ASSERT_EQ(::stat(run_dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u);

  // `runnel status` prints the table.
  Child cli = RunRunnel({"status", "--run-dir", run_dir_}, env_, dir_ + "/status");
  ASSERT_TRUE(cli.Wait());
  EXPECT_EQ(cli.ExitCode(), 0) << cli.Err();
  std::string table = cli.Out();
  EXPECT_EQ(table.rfind("ROLE", 0), 0u) << table;
  for (const RoleStatus& r : status.roles()) {
    EXPECT_TRUE(std::regex_search(
        table,
        std::regex(fmt::format(R"(\n{} +{} +serving +[0-9]+(ms|s) +0\n)", r.name(), r.pid()))))
        << table;
  }
  // ... also when given the config file.
  Child cli2 = RunRunnel({"status", "--config", config_}, env_, dir_ + "/status2");
  ASSERT_TRUE(cli2.Wait());
  EXPECT_EQ(cli2.ExitCode(), 0) << cli2.Err();
  EXPECT_NE(cli2.Out().find("brokerd"), std::string::npos);

  StopNode();
  EXPECT_EQ(Sequence({"term", "exit"}),
            (std::vector<std::string>{"term brokerd", "exit brokerd", "term storaged",
                                      "exit storaged", "term controllerd", "exit controllerd"}));
  for (const Event& e : Events()) EXPECT_FALSE(Alive(e.pid)) << e.role << " pid " << e.pid;
  EXPECT_FALSE(std::filesystem::exists(run_dir_ + "/runnel.pid"));
  EXPECT_FALSE(std::filesystem::exists(run_dir_ + "/supervisor.sock"));

  Child after = RunRunnel({"status", "--run-dir", run_dir_}, env_, dir_ + "/status3");
  ASSERT_TRUE(after.Wait());
  EXPECT_EQ(after.ExitCode(), 1);
  EXPECT_NE(after.Err().find("no supervisor"), std::string::npos) << after.Err();
}

TEST_F(SupervisorProcessTest, RestartsRoleKilledWithSigkill) {
  StartNode();
  GetStatusResponse before;
  ASSERT_TRUE(WaitFor([&] { return AllServing(&before); })) << node_.Err();
  const int old_pid = before.roles(1).pid();
  ASSERT_EQ(before.roles(1).name(), "storaged");
  ASSERT_EQ(::kill(old_pid, SIGKILL), 0);

  GetStatusResponse after;
  ASSERT_TRUE(WaitFor([&] { return AllServing(&after) && after.roles(1).restarts() == 1; }))
      << node_.Err();
  EXPECT_NE(after.roles(1).pid(), old_pid);
  EXPECT_GT(after.roles(1).pid(), 0);
  EXPECT_EQ(after.roles(1).last_exit(), "killed by signal 9 (KILL)");
  EXPECT_EQ(after.roles(0).restarts(), 0);
  EXPECT_EQ(after.roles(0).pid(), before.roles(0).pid());
  EXPECT_EQ(after.roles(2).pid(), before.roles(2).pid());
  EXPECT_FALSE(Alive(old_pid));  // reaped, not a zombie
  std::string err = node_.Err();
  EXPECT_NE(err.find(fmt::format("runnel-storaged (pid {}) died: killed by signal 9", old_pid)),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("restart #1"), std::string::npos) << err;

  StopNode();
  for (const Event& e : Events()) EXPECT_FALSE(Alive(e.pid)) << e.role << " pid " << e.pid;
}

TEST_F(SupervisorProcessTest, RoleExitingAfterStartIsRestartedRepeatedly) {
  env_["FAKE_ROLE_BROKERD"] = "exit-after:150:4";
  StartNode();
  ASSERT_TRUE(WaitFor([&] {
    auto st = AdminStatus();
    return st.ok() && st->roles_size() == 3 && st->roles(2).restarts() >= 2;
  })) << node_.Err();
  auto st = AdminStatus();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->roles(2).last_exit(), "exit code 4");
  EXPECT_EQ(st->roles(0).restarts(), 0);
  StopNode();
}

TEST_F(SupervisorProcessTest, SigkillsRoleIgnoringSigterm) {
  env_["FAKE_ROLE_BROKERD"] = "ignore-term";
  WriteConfig("runnel.supervisor.stop.timeout.ms=1000\n");
  StartNode();
  ASSERT_TRUE(WaitFor([&] { return AllServing(); })) << node_.Err();
  const auto t0 = SteadyClock::now();
  StopNode();
  EXPECT_LT(SteadyClock::now() - t0, 10s);
  EXPECT_EQ(Sequence({"term", "exit"}),
            (std::vector<std::string>{"term brokerd", "term storaged", "exit storaged",
                                      "term controllerd", "exit controllerd"}));
  EXPECT_NE(node_.Err().find("sending SIGKILL"), std::string::npos) << node_.Err();
  for (const Event& e : Events()) EXPECT_FALSE(Alive(e.pid)) << e.role << " pid " << e.pid;
}

TEST_F(SupervisorProcessTest, SigintStopsToo) {
  StartNode();
  ASSERT_TRUE(WaitFor([&] { return AllServing(); })) << node_.Err();
  ASSERT_EQ(::kill(node_.pid, SIGINT), 0);
  ASSERT_TRUE(node_.Wait());
  EXPECT_EQ(node_.ExitCode(), 0);
  for (const Event& e : Events()) EXPECT_FALSE(Alive(e.pid)) << e.role << " pid " << e.pid;
}

TEST_F(SupervisorProcessTest, StartupFailureNamesTheRole) {
  env_["FAKE_ROLE_STORAGED"] = "exit:3";
  StartNode();
  ASSERT_TRUE(node_.Wait()) << node_.Err();
  EXPECT_EQ(node_.ExitCode(), 1);
  EXPECT_NE(node_.Err().find("runnel: startup failed: runnel-storaged exited during startup "
                             "(exit code 3)"),
            std::string::npos)
      << node_.Err();
  // controllerd was stopped, brokerd never started.
  EXPECT_EQ(Sequence({"start", "term"}),
            (std::vector<std::string>{"start controllerd", "start storaged", "term controllerd"}));
  for (const Event& e : Events()) EXPECT_FALSE(Alive(e.pid)) << e.role << " pid " << e.pid;
  EXPECT_FALSE(std::filesystem::exists(run_dir_ + "/runnel.pid"));
}

TEST_F(SupervisorProcessTest, RoleThatNeverAnswersFailsStartup) {
  env_["FAKE_ROLE_BROKERD"] = "silent";
  WriteConfig("runnel.supervisor.ready.timeout.ms=600\n");
  StartNode();
  ASSERT_TRUE(node_.Wait()) << node_.Err();
  EXPECT_EQ(node_.ExitCode(), 1);
  EXPECT_NE(node_.Err().find("runnel-brokerd"), std::string::npos) << node_.Err();
  EXPECT_NE(node_.Err().find("did not become ready within 600 ms"), std::string::npos)
      << node_.Err();
  EXPECT_EQ(Sequence({"term"}),
            (std::vector<std::string>{"term brokerd", "term storaged", "term controllerd"}));
}

TEST_F(SupervisorProcessTest, RoleThatAnswersNotServingIsWaitedForPastTheTimeout) {
  env_["FAKE_ROLE_BROKERD"] = "never-ready";
  WriteConfig("runnel.supervisor.ready.timeout.ms=300\n");
  StartNode();
  // Five times the ready timeout: still up, brokerd still given time. (A sleep: the node must
  // not give up in it.)
  std::this_thread::sleep_for(1500ms);
  ASSERT_FALSE(node_.Wait(0ms)) << node_.Err();
  EXPECT_NE(node_.Err().find("runnel-brokerd"), std::string::npos) << node_.Err();
  EXPECT_NE(node_.Err().find("is up but not serving"), std::string::npos) << node_.Err();
  EXPECT_TRUE(Sequence({"term"}).empty());
  StopNode();
  EXPECT_EQ(Sequence({"term"}),
            (std::vector<std::string>{"term brokerd", "term storaged", "term controllerd"}));
}

TEST_F(SupervisorProcessTest, SlowRoleIsWaitedFor) {
  env_["FAKE_ROLE_CONTROLLERD"] = "ready-after:400";
  StartNode();
  ASSERT_TRUE(WaitFor([&] { return AllServing(); })) << node_.Err();
  EXPECT_EQ(Sequence({"start", "serving"}).at(1), "serving controllerd");
  StopNode();
}

TEST_F(SupervisorProcessTest, ControllerOnlyNodeRunsOnlyControllerd) {
  WriteConfig("process.roles=controller\n");
  StartNode();
  GetStatusResponse status;
  ASSERT_TRUE(WaitFor([&] { return AllServing(&status); })) << node_.Err();
  ASSERT_EQ(status.roles_size(), 1);
  EXPECT_EQ(status.roles(0).name(), "controllerd");
  StopNode();
  EXPECT_EQ(Sequence({"start"}), std::vector<std::string>{"start controllerd"});
}

TEST_F(SupervisorProcessTest, MissingRoleBinaryIsAStartupError) {
  std::filesystem::remove(bin_dir_ + "/runnel-brokerd");
  StartNode();
  ASSERT_TRUE(node_.Wait());
  EXPECT_EQ(node_.ExitCode(), 1);
  EXPECT_NE(node_.Err().find(bin_dir_ + "/runnel-brokerd not found"), std::string::npos)
      << node_.Err();
  EXPECT_TRUE(Events().empty());  // nothing was started
}

TEST_F(SupervisorProcessTest, BadConfigValueExits2NamingTheKey) {
  WriteConfig("bogus.key=1\nrunnel.supervisor.stop.timeout.ms=soon\n");
  StartNode();
  ASSERT_TRUE(node_.Wait());
  EXPECT_EQ(node_.ExitCode(), 2);
  std::string err = node_.Err();
  EXPECT_NE(err.find("config error: runnel.supervisor.stop.timeout.ms=soon: not a whole number"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("unknown key 'bogus.key'"), std::string::npos) << err;
  EXPECT_TRUE(Events().empty());
}

TEST_F(SupervisorProcessTest, MissingConfigFileExits2) {
  node_ = RunRunnel({"--config", dir_ + "/nope.properties"}, env_, dir_ + "/runnel");
  ASSERT_TRUE(node_.Wait());
  EXPECT_EQ(node_.ExitCode(), 2);
  EXPECT_NE(node_.Err().find("nope.properties"), std::string::npos) << node_.Err();
}

TEST_F(SupervisorProcessTest, UsageErrorsAndDocs) {
  Child bad = RunRunnel({"--frobnicate"}, env_, dir_ + "/bad");
  ASSERT_TRUE(bad.Wait());
  EXPECT_EQ(bad.ExitCode(), 2);
  EXPECT_NE(bad.Err().find("unknown argument '--frobnicate'"), std::string::npos);
  Child docs = RunRunnel({"--config-docs"}, env_, dir_ + "/docs");
  ASSERT_TRUE(docs.Wait());
  EXPECT_EQ(docs.ExitCode(), 0);
  EXPECT_NE(docs.Out().find("`runnel.supervisor.stop.timeout.ms`"), std::string::npos);
  Child help = RunRunnel({"--help"}, env_, dir_ + "/help");
  ASSERT_TRUE(help.Wait());
  EXPECT_EQ(help.ExitCode(), 0);
  EXPECT_NE(help.Out().find("Usage:"), std::string::npos);
}

TEST_F(SupervisorProcessTest, SecondSupervisorOnSameRunDirIsRefused) {
  StartNode();
  ASSERT_TRUE(WaitFor([&] { return AllServing(); })) << node_.Err();
  Child second = RunRunnel({"--config", config_}, env_, dir_ + "/second");
  ASSERT_TRUE(second.Wait());
  EXPECT_EQ(second.ExitCode(), 1);
  EXPECT_NE(second.Err().find(fmt::format("another runnel supervisor (pid {})", node_.pid)),
            std::string::npos)
      << second.Err();
  EXPECT_TRUE(AllServing());  // the first one is untouched
  StopNode();
}

TEST_F(SupervisorProcessTest, RolesStopWhenSupervisorIsKilled) {
  StartNode();
  ASSERT_TRUE(WaitFor([&] { return AllServing(); })) << node_.Err();
  ASSERT_EQ(::kill(node_.pid, SIGKILL), 0);
  ASSERT_TRUE(node_.Wait());
  for (const Event& e : Events()) {
    EXPECT_TRUE(WaitFor([&] { return !Running(e.pid); }, 10s)) << e.role << " pid " << e.pid;
  }
}

}  // namespace
}  // namespace runnel::supervisor
