#include "storaged/log/file_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

namespace fs = std::filesystem;

bool FdIsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

class FileCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_.emplace("fc");
    for (int i = 0; i < 5; ++i) std::ofstream(Path(i)) << "file " << i;
  }
  void TearDown() override { root_.reset(); }

  std::string Path(int i) const { return root_->path() + "/f" + std::to_string(i); }

  std::optional<runnel::testing::TempDir> root_;
};

TEST_F(FileCacheTest, OpensReadWriteAndCloseOnExec) {
  FileCache cache(4);
  auto h = cache.Get(Path(0));
  ASSERT_TRUE(h.ok()) << h.status();
  int fd = (*h)->fd();
  EXPECT_EQ(::fcntl(fd, F_GETFL) & O_ACCMODE, O_RDWR);
  EXPECT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  char buf[6] = {};
  ASSERT_EQ(::pread(fd, buf, 6, 0), 6);
  EXPECT_EQ(std::string(buf, 6), "file 0");
  ASSERT_EQ(::pwrite(fd, "F", 1, 0), 1);
  EXPECT_EQ(cache.opens(), 1u);
  EXPECT_EQ(cache.open_count(), 1u);
  EXPECT_EQ(cache.max_open(), 4u);
}

TEST_F(FileCacheTest, SecondGetReusesTheHandle) {
  FileCache cache(4);
  auto a = cache.Get(Path(0));
  auto b = cache.Get(Path(0));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(cache.opens(), 1u);
}

TEST_F(FileCacheTest, MissingFileAndCreate) {
  FileCache cache(4);
  std::string path = root_->path() + "/new.log";
  auto missing = cache.Get(path);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), absl::string_view::npos);
  EXPECT_EQ(cache.opens(), 0u);
  EXPECT_EQ(cache.open_count(), 0u);

  mode_t old_umask = ::umask(0);
  auto created = cache.Get(path, /*create=*/true);
  ::umask(old_umask);
  ASSERT_TRUE(created.ok()) << created.status();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_EQ(cache.opens(), 1u);
  // An existing file is opened, not truncated, when `create` is set.
  auto existing = cache.Get(Path(1), true);
  ASSERT_TRUE(existing.ok());
  EXPECT_EQ(fs::file_size(Path(1)), 6u);
}

TEST_F(FileCacheTest, EvictsLeastRecentlyUsedAndRespectsMaxOpen) {
  FileCache cache(3);
  int fds[5];
  for (int i = 0; i < 3; ++i) {
    auto h = cache.Get(Path(i));
    ASSERT_TRUE(h.ok());
    fds[i] = (*h)->fd();
  }  // nobody but the cache holds them now
  EXPECT_EQ(cache.open_count(), 3u);
  // Touch f0 so that f1 is the least recently used.
  ASSERT_TRUE(cache.Get(Path(0)).ok());
  {
    auto h = cache.Get(Path(3));
    ASSERT_TRUE(h.ok());
    fds[3] = (*h)->fd();
  }
  EXPECT_EQ(cache.open_count(), 3u);
  EXPECT_FALSE(FdIsOpen(fds[1]));
  EXPECT_TRUE(FdIsOpen(fds[0]));
  EXPECT_TRUE(FdIsOpen(fds[2]));
  EXPECT_TRUE(FdIsOpen(fds[3]));
  EXPECT_EQ(cache.opens(), 4u);

  // f1 again: opened anew, and f2 (now the least recent) goes.
  ASSERT_TRUE(cache.Get(Path(1)).ok());
  EXPECT_EQ(cache.opens(), 5u);
  EXPECT_FALSE(FdIsOpen(fds[2]));
  EXPECT_EQ(cache.open_count(), 3u);
  // f0 and f3 stayed cached.
  ASSERT_TRUE(cache.Get(Path(0)).ok());
  ASSERT_TRUE(cache.Get(Path(3)).ok());
  EXPECT_EQ(cache.opens(), 5u);

  // Many files through a small cache: never more than max_open held.
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(cache.Get(Path(i)).ok());
      EXPECT_LE(cache.open_count(), cache.max_open());
    }
  }
}

TEST_F(FileCacheTest, EvictionDoesNotCloseAHandleInUse) {
  FileCache cache(1);
  auto held = cache.Get(Path(0));
  ASSERT_TRUE(held.ok());
  std::shared_ptr<FileHandle> handle = *held;
  int fd = handle->fd();
  ASSERT_TRUE(cache.Get(Path(1)).ok());  // evicts f0 from the cache
  EXPECT_EQ(cache.open_count(), 1u);
  EXPECT_TRUE(FdIsOpen(fd));  // still usable by its holder
  char c = 0;
  EXPECT_EQ(::pread(handle->fd(), &c, 1, 0), 1);
  EXPECT_EQ(c, 'f');
  held = absl::UnknownError("drop the other reference");
  EXPECT_TRUE(FdIsOpen(fd));
  handle.reset();  // the last user lets go
  EXPECT_FALSE(FdIsOpen(fd));
}

TEST_F(FileCacheTest, ZeroMaxOpenCachesNothing) {
  FileCache cache(0);
  auto h = cache.Get(Path(0));
  ASSERT_TRUE(h.ok());
  int fd = (*h)->fd();
  EXPECT_TRUE(FdIsOpen(fd));
  EXPECT_EQ(cache.open_count(), 0u);
  ASSERT_TRUE(cache.Get(Path(0)).ok());
  EXPECT_EQ(cache.opens(), 2u);
  h = absl::UnknownError("drop");
  EXPECT_FALSE(FdIsOpen(fd));
}

TEST_F(FileCacheTest, Forget) {
  FileCache cache(4);
  int fd;
  {
    auto h = cache.Get(Path(0));
    ASSERT_TRUE(h.ok());
    fd = (*h)->fd();
  }
  auto held = cache.Get(Path(1));
  ASSERT_TRUE(held.ok());
  int held_fd = (*held)->fd();
  cache.Forget(Path(0));
  cache.Forget(Path(1));
  cache.Forget(Path(4));  // never opened: nothing happens
  EXPECT_EQ(cache.open_count(), 0u);
  EXPECT_FALSE(FdIsOpen(fd));      // nobody held it
  EXPECT_TRUE(FdIsOpen(held_fd));  // its holder still has it

  // After a rename, the old name is opened afresh.
  fs::rename(Path(0), root_->path() + "/renamed");
  EXPECT_EQ(cache.Get(Path(0)).status().code(), absl::StatusCode::kNotFound);
  auto again = cache.Get(root_->path() + "/renamed");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(cache.opens(), 3u);
}

}  // namespace
}  // namespace runnel::storaged
