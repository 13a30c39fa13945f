#include "storaged/log_dirs.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

namespace fs = std::filesystem;

class LogDirsTest : public ::testing::Test {
 protected:
  void SetUp() override { root_.emplace("ld"); }
  void TearDown() override { root_.reset(); }

  std::string Dir(const std::string& name) { return (fs::path(root_->path()) / name).string(); }

  std::optional<runnel::testing::TempDir> root_;
};

TEST_F(LogDirsTest, CreatesDirectoriesAndMetaProperties) {
  auto dirs = LogDirs::Open({Dir("a"), Dir("b/c")}, 7);
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  ASSERT_EQ(dirs->dirs().size(), 2u);
  for (const LogDirState& d : dirs->dirs()) {
    EXPECT_TRUE(fs::is_directory(d.path));
    auto props = ReadProperties(d.path + "/meta.properties");
    ASSERT_TRUE(props.ok());
    std::map<std::string, std::string> m(props->begin(), props->end());
    EXPECT_EQ(m["node.id"], "7");
    EXPECT_EQ(m["version"], "1");
    EXPECT_EQ(m["directory.id"], d.directory_id);
    EXPECT_EQ(d.directory_id.size(), 22u);
  }
  EXPECT_NE(dirs->dirs()[0].directory_id, dirs->dirs()[1].directory_id);
}

TEST_F(LogDirsTest, DirectoryIdIsStableAcrossReopen) {
  std::string first;
  {
    auto dirs = LogDirs::Open({Dir("a")}, 1);
    ASSERT_TRUE(dirs.ok());
    first = dirs->dirs()[0].directory_id;
  }
  auto again = LogDirs::Open({Dir("a")}, 1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->dirs()[0].directory_id, first);
}

TEST_F(LogDirsTest, AnotherNodesDirectoryIsRefused) {
  ASSERT_TRUE(LogDirs::Open({Dir("a")}, 1).ok());
  auto other = LogDirs::Open({Dir("a")}, 2);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(std::string(other.status().message()).find("node.id=1"), std::string::npos);
}

TEST_F(LogDirsTest, SecondProcessCannotTakeTheLock) {
  auto dirs = LogDirs::Open({Dir("a")}, 1);
  ASSERT_TRUE(dirs.ok());
  pid_t pid = fork();
  if (pid == 0) {
    auto second = LogDirs::Open({Dir("a")}, 1);
    _exit(!second.ok() && std::string(second.status().message()).find("in use") != std::string::npos
              ? 0
              : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(LogDirsTest, UnwritablePathIsAClearError) {
  std::ofstream(Dir("file")) << "x";
  auto dirs = LogDirs::Open({Dir("file/sub")}, 1);
  ASSERT_FALSE(dirs.ok());
  EXPECT_NE(std::string(dirs.status().message()).find("log.dirs"), std::string::npos);
}

TEST_F(LogDirsTest, MalformedMetaPropertiesIsAnError) {
  fs::create_directories(Dir("a"));
  std::ofstream(Dir("a/meta.properties")) << "this is not a property line\n";
  EXPECT_FALSE(LogDirs::Open({Dir("a")}, 1).ok());
}

TEST_F(LogDirsTest, UsageReportsTheFileSystem) {
  auto usage = LogDirs::Usage(root_->path());
  ASSERT_TRUE(usage.ok());
  EXPECT_GT(usage->total_bytes, 0);
  EXPECT_LE(usage->usable_bytes, usage->total_bytes);
}

}  // namespace
}  // namespace runnel::storaged
