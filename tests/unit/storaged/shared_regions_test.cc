// SharedRegions: a brokerd's memfd is mapped by /proc/<pid>/fd/<fd>, and anything that is not
// exactly that region is refused. The test process plays the brokerd.
#include "storaged/shared_regions.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace runnel::storaged {
namespace {

struct Memfd {
  explicit Memfd(size_t size) {
    fd = ::memfd_create("runnel-append-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
    struct stat st;
    EXPECT_EQ(::fstat(fd, &st), 0);
    inode = st.st_ino;
    base = static_cast<uint8_t*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    this->size = size;
  }
  ~Memfd() {
    ::munmap(base, size);
    ::close(fd);
  }
  storage::SharedBytes Ref(uint64_t offset, uint64_t length) const {
    storage::SharedBytes r;
    r.set_pid(::getpid());
    r.set_fd(fd);
    r.set_inode(inode);
    r.set_offset(offset);
    r.set_length(length);
    return r;
  }
  int fd;
  uint64_t inode;
  uint8_t* base;
  size_t size;
};

TEST(SharedRegionsTest, MapsTheRegionAndEditsAreSeenByBothSides) {
  Memfd m(1 << 16);
  std::memcpy(m.base + 4096, "hello", 5);
  SharedRegions regions;
  std::shared_ptr<SharedRegions::Mapping> hold;
  auto bytes = regions.Resolve(m.Ref(4096, 5), &hold);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(hold);
  EXPECT_EQ(std::string(bytes->begin(), bytes->end()), "hello");
  (*bytes)[0] = 'j';  // storaged assigns offsets in place
  EXPECT_EQ(m.base[4096], 'j');

  // The mapping is kept: a second call finds the same one.
  std::shared_ptr<SharedRegions::Mapping> hold2;
  auto again = regions.Resolve(m.Ref(0, 1), &hold2);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(hold2, hold);
}

TEST(SharedRegionsTest, BytesOutsideTheRegionAreRefused) {
  Memfd m(8192);
  SharedRegions regions;
  std::shared_ptr<SharedRegions::Mapping> hold;
  for (auto [offset, length] : {std::pair<uint64_t, uint64_t>{8000, 193},
                                {8193, 1},
                                {0, 0},
                                {~uint64_t{0}, 2},
                                {1, ~uint64_t{0}}}) {
    auto bytes = regions.Resolve(m.Ref(offset, length), &hold);
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument) << offset << "+" << length;
  }
  EXPECT_TRUE(regions.Resolve(m.Ref(8000, 192), &hold).ok());
}

TEST(SharedRegionsTest, AnythingButTheNamedMemfdIsRefused) {
  Memfd m(4096);
  SharedRegions regions;
  std::shared_ptr<SharedRegions::Mapping> hold;

  storage::SharedBytes wrong_inode = m.Ref(0, 10);
  wrong_inode.set_inode(m.inode + 1);
  EXPECT_EQ(regions.Resolve(wrong_inode, &hold).status().code(),
            absl::StatusCode::kFailedPrecondition);

  storage::SharedBytes closed = m.Ref(0, 10);
  closed.set_fd(100000);
  EXPECT_EQ(regions.Resolve(closed, &hold).status().code(), absl::StatusCode::kFailedPrecondition);

  // A regular file, even with its own inode named, is not a memfd: storaged would write
  // into it otherwise.
  char path[] = "/tmp/rnl-shared-XXXXXX";
  int file = ::mkstemp(path);
  ASSERT_GE(file, 0);
  ASSERT_EQ(::ftruncate(file, 4096), 0);
  struct stat st;
  ASSERT_EQ(::fstat(file, &st), 0);
  storage::SharedBytes plain = m.Ref(0, 10);
  plain.set_fd(file);
  plain.set_inode(st.st_ino);
  auto refused = regions.Resolve(plain, &hold);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message()).find("not a memfd"), std::string::npos)
      << refused.status();
  ::close(file);
  ::unlink(path);
  EXPECT_FALSE(hold);
}

// A mapping in use outlives its eviction from the cache and the brokerd's own unmap.
TEST(SharedRegionsTest, AMappingInUseStaysValidAfterEviction) {
  SharedRegions regions;
  std::shared_ptr<SharedRegions::Mapping> hold;
  std::span<uint8_t> first;
  {
    Memfd m(4096);
    std::memcpy(m.base, "kept", 4);
    auto bytes = regions.Resolve(m.Ref(0, 4), &hold);
    ASSERT_TRUE(bytes.ok());
    first = *bytes;
  }  // the "brokerd" closed and unmapped its side
  for (size_t i = 0; i < SharedRegions::kKept + 1; ++i) {
    Memfd other(4096);
    std::shared_ptr<SharedRegions::Mapping> h;
    ASSERT_TRUE(regions.Resolve(other.Ref(0, 1), &h).ok());
  }
  EXPECT_EQ(std::string(first.begin(), first.end()), "kept");
}

}  // namespace
}  // namespace runnel::storaged
