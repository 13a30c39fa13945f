// deploy/: the example configs load without error or warning, and the systemd units agree
// with them (paths, user, run dir).
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "common/config/config.h"
#include "supervisor/roles.h"

namespace runnel::supervisor {
namespace {

std::string Read(const std::string& rel) {
  std::ifstream in(std::string(RUNNEL_SOURCE_DIR) + "/" + rel);
  EXPECT_TRUE(in.good()) << rel;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

config::Config Load(const std::string& rel) {
  std::vector<std::string> warnings;
  auto config = config::Config::Parse(Read(rel), &warnings);
  EXPECT_TRUE(config.ok()) << rel << ": " << config.status();
  EXPECT_TRUE(warnings.empty()) << rel << ": " << testing::PrintToString(warnings);
  return config.ok() ? *config : *config::Config::Parse("", nullptr);
}

TEST(DeployConfigTest, ExamplesLoadCleanlyWithTheirRoles) {
  using V = std::vector<std::string>;
  struct Case {
    std::string file;
    V roles;
  };
  for (const Case& c :
       {Case{"deploy/config/node.properties", {"controllerd", "storaged", "brokerd"}},
        Case{"deploy/config/controller.properties", {"controllerd"}},
        Case{"deploy/config/broker.properties", {"controllerd", "storaged", "brokerd"}}}) {
    config::Config config = Load(c.file);
    EXPECT_EQ(RoleNamesFor(config.GetList("process.roles")), c.roles) << c.file;
    EXPECT_EQ(config.GetString("runnel.run.dir"), "/run/runnel") << c.file;
    EXPECT_EQ(config.GetString("runnel.log.dir"), "/var/log/runnel") << c.file;
    EXPECT_EQ(config.GetString("metadata.log.dir"), "/var/lib/runnel/metadata") << c.file;
    if (c.file != "deploy/config/controller.properties") {
      EXPECT_EQ(config.GetList("log.dirs"), V{"/var/lib/runnel/logs"}) << c.file;
    }
  }
}

TEST(DeploySystemdTest, UnitsRunAsRunnelWithTheRunDir) {
  for (const char* unit : {"runnel", "runnel-controllerd", "runnel-storaged", "runnel-brokerd"}) {
    std::string text = Read(std::string("deploy/systemd/") + unit + ".service");
    EXPECT_NE(text.find("\nUser=runnel\n"), std::string::npos) << unit;
    EXPECT_NE(text.find("\nGroup=runnel\n"), std::string::npos) << unit;
    EXPECT_NE(text.find("\nRuntimeDirectory=runnel\n"), std::string::npos) << unit;
    EXPECT_NE(text.find("\nRuntimeDirectoryMode=0750\n"), std::string::npos) << unit;
    EXPECT_TRUE(
        std::regex_search(text, std::regex(std::string("\nExecStart=/usr/local/bin/") + unit +
                                           " --config /etc/runnel/node.properties\n")))
        << unit;
    // Per-role units share /run/runnel: none may delete it when it stops.
    if (std::string(unit) != "runnel") {
      EXPECT_NE(text.find("\nRuntimeDirectoryPreserve=yes\n"), std::string::npos) << unit;
      EXPECT_NE(text.find("\nConflicts=runnel.service\n"), std::string::npos) << unit;
    }
  }
  // The supervisor does the ordered stop itself.
  EXPECT_NE(Read("deploy/systemd/runnel.service").find("\nKillMode=mixed\n"), std::string::npos);
  EXPECT_NE(Read("deploy/systemd/tmpfiles.d/runnel.conf")
                .find("d     /run/runnel      0750 runnel runnel"),
            std::string::npos);
  EXPECT_NE(Read("deploy/systemd/sysusers.d/runnel.conf").find("\nu     runnel "),
            std::string::npos);
}

}  // namespace
}  // namespace runnel::supervisor
