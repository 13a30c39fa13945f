// Pure functions of the supervisor: arguments, backoff, role list, wait status text,
// status table.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/config/config.h"
#include "supervisor/admin_service.h"
#include "supervisor/args.h"
#include "supervisor/backoff.h"
#include "supervisor/process.h"
#include "supervisor/roles.h"
#include "supervisor/status_cli.h"
#include "tests/util/temp_dir.h"

namespace runnel::supervisor {
namespace {

using std::chrono::milliseconds;

StatusOr<Args> Parse(std::vector<std::string> args) { return ParseArgs(args); }

TEST(ArgsTest, RunWithConfig) {
  for (auto argv : std::vector<std::vector<std::string>>{{"--config", "n.properties"},
                                                         {"--config=n.properties"},
                                                         {"run", "--config", "n.properties"}}) {
    auto a = Parse(argv);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->command, Command::kRun);
    EXPECT_EQ(a->config_path, "n.properties");
  }
}

TEST(ArgsTest, Status) {
  auto a = Parse({"status", "--run-dir", "/run/runnel"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->command, Command::kStatus);
  EXPECT_EQ(a->run_dir, "/run/runnel");
  a = Parse({"status", "--config", "x.properties"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->config_path, "x.properties");
  a = Parse({"status"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->command, Command::kStatus);
}

TEST(ArgsTest, DocsAndHelp) {
  EXPECT_EQ(Parse({"--config-docs"})->command, Command::kConfigDocs);
  EXPECT_EQ(Parse({"--help"})->command, Command::kHelp);
  EXPECT_EQ(Parse({"-h"})->command, Command::kHelp);
  EXPECT_EQ(Parse({"--config", "x", "--help"})->command, Command::kHelp);
  EXPECT_NE(Usage().find("runnel status"), std::string::npos);
}

TEST(ArgsTest, Errors) {
  auto expect_error = [](std::vector<std::string> argv, const std::string& needle) {
    auto a = ParseArgs(argv);
    ASSERT_FALSE(a.ok()) << "accepted: " << ::testing::PrintToString(argv);
    EXPECT_NE(std::string(a.status().message()).find(needle), std::string::npos)
        << a.status().message();
  };
  expect_error({}, "--config FILE is required");
  expect_error({"run"}, "--config FILE is required");
  expect_error({"--config"}, "--config needs a value");
  expect_error({"--config="}, "--config needs a file name");
  expect_error({"--bogus"}, "unknown argument '--bogus'");
  expect_error({"--config", "a", "extra"}, "unknown argument 'extra'");
  expect_error({"--config", "a", "--run-dir", "d"}, "--run-dir is for `runnel status`");
  expect_error({"status", "--config", "a", "--run-dir", "d"}, "not both");
  expect_error({"--config-docs", "--config", "a"}, "--config-docs takes no other argument");
}

TEST(BackoffTest, DoublesUpToTheCap) {
  const milliseconds initial(200), max(3000);
  EXPECT_EQ(RestartBackoff(initial, max, 1), milliseconds(200));
  EXPECT_EQ(RestartBackoff(initial, max, 2), milliseconds(400));
  EXPECT_EQ(RestartBackoff(initial, max, 3), milliseconds(800));
  EXPECT_EQ(RestartBackoff(initial, max, 4), milliseconds(1600));
  EXPECT_EQ(RestartBackoff(initial, max, 5), milliseconds(3000));
  EXPECT_EQ(RestartBackoff(initial, max, 6), milliseconds(3000));
}

TEST(BackoffTest, EdgeCases) {
  EXPECT_EQ(RestartBackoff(milliseconds(200), milliseconds(30000), 0), milliseconds(200));
  EXPECT_EQ(RestartBackoff(milliseconds(200), milliseconds(30000), -5), milliseconds(200));
  // Huge failure counts neither overflow nor loop long.
  EXPECT_EQ(RestartBackoff(milliseconds(200), milliseconds(30000), 1 << 30), milliseconds(30000));
  EXPECT_EQ(RestartBackoff(milliseconds(1), milliseconds(INT64_MAX / 2), 200),
            milliseconds(INT64_MAX / 2));
  // A cap below the initial delay wins.
  EXPECT_EQ(RestartBackoff(milliseconds(500), milliseconds(100), 1), milliseconds(100));
  // Exactly reaching the cap.
  EXPECT_EQ(RestartBackoff(milliseconds(250), milliseconds(1000), 3), milliseconds(1000));
  EXPECT_EQ(RestartBackoff(milliseconds(0), milliseconds(10), 2), milliseconds(2));
}

TEST(BackoffTest, ResetAfter) {
  EXPECT_EQ(BackoffResetAfter(milliseconds(200)), milliseconds(10000));
  EXPECT_EQ(BackoffResetAfter(milliseconds(5000)), milliseconds(50000));
}

TEST(RolesTest, NamesInStartOrder) {
  using V = std::vector<std::string>;
  EXPECT_EQ(RoleNamesFor({"controller"}), (V{"controllerd"}));
  // A broker-only node's controllerd follows the quorum as an observer.
  EXPECT_EQ(RoleNamesFor({"broker"}), (V{"controllerd", "storaged", "brokerd"}));
  EXPECT_EQ(RoleNamesFor({"broker", "controller"}), (V{"controllerd", "storaged", "brokerd"}));
  EXPECT_EQ(RoleNamesFor({"controller", "broker", "broker"}),
            (V{"controllerd", "storaged", "brokerd"}));
  EXPECT_EQ(RoleNamesFor({}), V{});
}

TEST(RolesTest, FromProcessRolesConfig) {
  auto config = config::Config::Parse("process.roles = controller\n", nullptr);
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(RoleNamesFor(config->GetList("process.roles")),
            std::vector<std::string>{"controllerd"});
  auto defaults = config::Config::Parse("", nullptr);
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(RoleNamesFor(defaults->GetList("process.roles")).size(), 3u);
  auto bad = config::Config::Parse("process.roles=broker,zookeeper\n", nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("process.roles"), std::string::npos);
}

TEST(RolesTest, BuildSpecsChecksBinaries) {
  runnel::testing::TempDir dir("supervisor");
  auto write = [&](const std::string& name, mode_t mode) {
    std::string p = dir.path() + "/" + name;
    std::ofstream(p) << "#!/bin/sh\n";
    ::chmod(p.c_str(), mode);
  };
  write("runnel-controllerd", 0755);
  write("runnel-storaged", 0644);

  auto ok = BuildRoleSpecs({"controllerd"}, dir.path(), "/etc/runnel/node.properties", "/run/r");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].binary, dir.path() + "/runnel-controllerd");
  EXPECT_EQ((*ok)[0].args, (std::vector<std::string>{"--config", "/etc/runnel/node.properties"}));
  EXPECT_EQ((*ok)[0].env, std::vector<std::string>{"RUNNEL_SUPERVISED=1"});
  EXPECT_EQ((*ok)[0].socket_path, "/run/r/controllerd.sock");
  EXPECT_EQ((*ok)[0].DisplayName(), "runnel-controllerd");

  auto not_exec = BuildRoleSpecs({"controllerd", "storaged"}, dir.path(), "/c", "/r");
  ASSERT_FALSE(not_exec.ok());
  EXPECT_NE(std::string(not_exec.status().message()).find("runnel-storaged is not an executable"),
            std::string::npos)
      << not_exec.status();

  auto missing = BuildRoleSpecs({"controllerd", "brokerd"}, dir.path(), "/c", "/r");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find("runnel-brokerd not found"),
            std::string::npos)
      << missing.status();
}

TEST(RolesTest, BinDirFromEnvironment) {
  ::setenv("RUNNEL_BIN_DIR", "/opt/runnel/bin", 1);
  auto from_env = RoleBinDir();
  ::unsetenv("RUNNEL_BIN_DIR");
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(*from_env, "/opt/runnel/bin");
  auto from_exe = RoleBinDir();
  ASSERT_TRUE(from_exe.ok());
  EXPECT_EQ(*from_exe, std::filesystem::read_symlink("/proc/self/exe").parent_path().string());
}

TEST(RolesTest, AbsolutePath) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  EXPECT_EQ(*AbsolutePath("/a/b/../c"), "/a/c");
  EXPECT_EQ(*AbsolutePath("x/./y.properties"), std::string(cwd) + "/x/y.properties");
}

TEST(ProcessTest, MergeEnvironment) {
  char a[] = "PATH=/bin", b[] = "RUNNEL_SUPERVISED=0", c[] = "HOME=/root", d[] = "NOEQUALS";
  char* base[] = {a, b, c, d, nullptr};
  EXPECT_EQ(MergeEnvironment(base, {"RUNNEL_SUPERVISED=1", "X=y=z"}),
            (std::vector<std::string>{"PATH=/bin", "HOME=/root", "NOEQUALS", "RUNNEL_SUPERVISED=1",
                                      "X=y=z"}));
  EXPECT_EQ(MergeEnvironment(nullptr, {"A=1"}), std::vector<std::string>{"A=1"});
}

TEST(ProcessTest, DescribeWaitStatus) {
  EXPECT_EQ(DescribeWaitStatus(0), "exit code 0");
  EXPECT_EQ(DescribeWaitStatus(3 << 8), "exit code 3");
  EXPECT_EQ(DescribeWaitStatus(SIGKILL), "killed by signal 9 (KILL)");
  EXPECT_EQ(DescribeWaitStatus(SIGSEGV | 0x80), "killed by signal 11 (SEGV), core dumped");
}

TEST(StatusCliTest, FormatDuration) {
  EXPECT_EQ(FormatDuration(-3), "0ms");
  EXPECT_EQ(FormatDuration(850), "850ms");
  EXPECT_EQ(FormatDuration(42'000), "42s");
  EXPECT_EQ(FormatDuration(303'000), "5m03s");
  EXPECT_EQ(FormatDuration(7'500'000), "2h05m");
  EXPECT_EQ(FormatDuration(273'600'000), "3d04h");
}

TEST(StatusCliTest, TableFromSnapshot) {
  SupervisorSnapshot snap;
  snap.phase = Phase::kRunning;
  snap.uptime = milliseconds(65'000);
  snap.roles = {
      {"controllerd", 4242, RoleState::kServing, milliseconds(64'000), 0, ""},
      {"storaged", 4300, RoleState::kStarting, milliseconds(120), 12, "exit code 1"},
      {"brokerd", 0, RoleState::kBackoff, milliseconds(0), 3, "killed by signal 9 (KILL)"},
  };
  GetStatusResponse proto;
  SnapshotToProto(snap, 77, &proto);
  EXPECT_EQ(proto.supervisor_pid(), 77);
  EXPECT_EQ(proto.supervisor_uptime_ms(), 65'000);
  EXPECT_EQ(proto.phase(), GetStatusResponse::RUNNING);
  ASSERT_EQ(proto.roles_size(), 3);
  EXPECT_EQ(proto.roles(1).state(), RoleStatus::STARTING);
  EXPECT_EQ(proto.roles(1).restarts(), 12);
  EXPECT_EQ(proto.roles(2).last_exit(), "killed by signal 9 (KILL)");

  EXPECT_EQ(FormatStatusTable(proto),
            "ROLE         PID   STATE     UPTIME  RESTARTS\n"
            "controllerd  4242  serving   1m04s   0\n"
            "storaged     4300  starting  120ms   12\n"
            "brokerd      -     backoff   -       3\n"
            "last exit of storaged: exit code 1\n"
            "last exit of brokerd: killed by signal 9 (KILL)\n");
}

TEST(StatusCliTest, NoSupervisor) {
  runnel::testing::TempDir dir("supervisor");
  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  EXPECT_EQ(RunStatus(dir.path(), 1000, out, err), 1);
  std::rewind(err);
  char buf[512] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, err);
  std::string msg(buf, n);
  EXPECT_NE(msg.find("no supervisor is running with run dir " + dir.path()), std::string::npos)
      << msg;
  std::fclose(out);
  std::fclose(err);
}

}  // namespace
}  // namespace runnel::supervisor
