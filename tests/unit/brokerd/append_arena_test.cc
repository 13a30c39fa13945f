// AppendArena's pieces without storaged: the ring allocator's reuse rules, and the arena's
// promise never to write a block again after a failed call.
#include "brokerd/storage/append_arena.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <numeric>
#include <span>
#include <vector>

namespace runnel::brokerd {
namespace {

TEST(RingAllocatorTest, TakesBlocksInOrderAndRoundsTo64) {
  RingAllocator ring(1024);
  EXPECT_EQ(ring.Alloc(1), 0u);
  EXPECT_EQ(ring.Alloc(64), 64u);
  EXPECT_EQ(ring.Alloc(65), 128u);
  EXPECT_EQ(ring.live_blocks(), 3u);
  EXPECT_EQ(ring.Alloc(0), std::nullopt);
  EXPECT_EQ(ring.Alloc(1025), std::nullopt);
}

TEST(RingAllocatorTest, FullUntilTheOldestBlockIsFreed) {
  RingAllocator ring(256);
  ASSERT_EQ(ring.Alloc(128), 0u);
  ASSERT_EQ(ring.Alloc(128), 128u);
  EXPECT_EQ(ring.Alloc(64), std::nullopt);
  // Freeing the newer block first gives nothing back: space returns from the oldest.
  EXPECT_TRUE(ring.Free(128));
  EXPECT_EQ(ring.Alloc(64), std::nullopt);
  EXPECT_TRUE(ring.Free(0));
  EXPECT_EQ(ring.live_blocks(), 0u);
  EXPECT_EQ(ring.Alloc(256), 0u);
}

TEST(RingAllocatorTest, WrapsToTheStartAndNeverOverlapsALiveBlock) {
  RingAllocator ring(512);
  ASSERT_EQ(ring.Alloc(192), 0u);
  ASSERT_EQ(ring.Alloc(192), 192u);
  EXPECT_TRUE(ring.Free(0));
  // 128 left at the end: a 192-byte block wraps to 0, below the live block at 192.
  EXPECT_EQ(ring.Alloc(192), 0u);
  // Wrapped: [192, 384) is live, so nothing more fits before it.
  EXPECT_EQ(ring.Alloc(64), std::nullopt);
  EXPECT_TRUE(ring.Free(192));
  // Now the live block is [0, 192): the space after it is free again.
  EXPECT_EQ(ring.Alloc(320), 192u);
  EXPECT_FALSE(ring.Free(64));  // no block starts there
}

// Random sizes and frees, with every live block checked against every other.
TEST(RingAllocatorTest, LiveBlocksNeverOverlapUnderChurn) {
  RingAllocator ring(1 << 16);
  struct Live {
    uint64_t offset, length;
  };
  std::vector<Live> live;
  uint32_t seed = 12345;
  auto next = [&seed] { return seed = seed * 1103515245u + 12345u; };
  int allocated = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || next() % 3 != 0) {
      uint64_t length = 1 + next() % 9000;
      if (auto off = ring.Alloc(length)) {
        ++allocated;
        uint64_t rounded = (length + 63) / 64 * 64;
        ASSERT_LE(*off + rounded, uint64_t{1} << 16);
        for (const Live& l : live) {
          ASSERT_TRUE(*off + rounded <= l.offset || l.offset + l.length <= *off)
              << "step " << step << ": [" << *off << ", +" << rounded << ") overlaps [" << l.offset
              << ", +" << l.length << ")";
        }
        live.push_back({*off, rounded});
      }
    } else {
      // Mostly the oldest, sometimes another (appends complete nearly in order).
      size_t i = next() % 4 == 0 ? next() % live.size() : 0;
      ASSERT_TRUE(ring.Free(live[i].offset));
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  EXPECT_GT(allocated, 5000);
}

std::vector<uint8_t> Bytes(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), seed);
  return v;
}

TEST(AppendArenaTest, PutsBytesInSharedMemoryAndReusesThemAfterASuccess) {
  AppendArena arena(1 << 20);
  std::vector<uint8_t> bytes = Bytes(1000, 7);
  storage::AppendPartition a;
  AppendArena::Block block = arena.Put(bytes, &a);
  ASSERT_TRUE(block);
  EXPECT_TRUE(a.records().empty());
  ASSERT_TRUE(a.has_shared());
  EXPECT_EQ(a.shared().length(), 1000u);
  EXPECT_EQ(a.shared().pid(), ::getpid());
  EXPECT_EQ(std::vector<uint8_t>(block->region()->base() + a.shared().offset(),
                                 block->region()->base() + a.shared().offset() + 1000),
            bytes);
  const uint64_t first = a.shared().offset();
  std::shared_ptr<SharedRegion> region = block->region();
  arena.Release(block);
  EXPECT_FALSE(block);
  EXPECT_EQ(region->allocator().live_blocks(), 0u);

  storage::AppendPartition b;
  AppendArena::Block again = arena.Put(bytes, &b);
  EXPECT_EQ(again->region(), region);
  EXPECT_EQ(b.shared().offset(), first);  // the released space, reused
}

TEST(AppendArenaTest, AFailedCallsRegionIsNeverWrittenAgain) {
  AppendArena arena(1 << 20);
  std::vector<uint8_t> bytes = Bytes(100, 1);
  storage::AppendPartition a, b;
  AppendArena::Block failed = arena.Put(bytes, &a);
  AppendArena::Block in_flight = arena.Put(bytes, &b);
  ASSERT_TRUE(failed);
  std::shared_ptr<SharedRegion> old = failed->region();
  arena.Abandon(failed, /*shared_unusable=*/false, "deadline exceeded");
  EXPECT_TRUE(old->abandoned);

  storage::AppendPartition c;
  AppendArena::Block next = arena.Put(bytes, &c);
  ASSERT_TRUE(next);
  EXPECT_NE(next->region(), old);
  EXPECT_NE(c.shared().inode(), a.shared().inode());
  // The other block of the old region completes later: the old region stays as it was.
  const uint8_t first_byte = old->base()[b.shared().offset()];
  arena.Release(in_flight);
  EXPECT_EQ(old->base()[b.shared().offset()], first_byte);
  EXPECT_EQ(old->allocator().live_blocks(), 2u);  // abandoned: nothing freed, nothing reused
}

TEST(AppendArenaTest, BytesGoInTheMessageWhenOffFullOrRefused) {
  std::vector<uint8_t> bytes = Bytes(3000, 9);
  AppendArena off(0);
  storage::AppendPartition a;
  EXPECT_FALSE(off.Put(bytes, &a));
  EXPECT_FALSE(a.has_shared());
  EXPECT_EQ(a.records(), std::string(bytes.begin(), bytes.end()));

  AppendArena small(4096);
  storage::AppendPartition b, c;
  AppendArena::Block held = small.Put(bytes, &b);
  ASSERT_TRUE(held);
  EXPECT_FALSE(small.Put(bytes, &c));  // full: in the message
  EXPECT_EQ(c.records().size(), bytes.size());

  // storaged could not map the region: shared memory is off from then on.
  small.Abandon(held, /*shared_unusable=*/true, "cannot open");
  EXPECT_FALSE(small.enabled());
  storage::AppendPartition d;
  EXPECT_FALSE(small.Put(bytes, &d));
  EXPECT_EQ(d.records().size(), bytes.size());
}

TEST(AppendArenaTest, BytesInsideAReservedBlockAreNamedWhereTheyLieAndFreedWithTheLastHolder) {
  AppendArena arena(1 << 20);
  AppendArena::Block frame = arena.ReserveFrame(5000);
  ASSERT_TRUE(frame);
  ASSERT_EQ(frame->size(), 5000u);
  std::vector<uint8_t> bytes = Bytes(5000, 3);
  std::memcpy(frame->data(), bytes.data(), bytes.size());
  std::shared_ptr<SharedRegion> region = frame->region();

  // Two appends of parts of the frame: no copy, each named at its place in the region.
  std::shared_ptr<PlacedFrame> placed = frame;
  storage::AppendPartition a, b;
  AppendArena::Block first = arena.Put(std::span(frame->data() + 100, 900), &a, placed);
  AppendArena::Block second = arena.Put(std::span(frame->data() + 1000, 4000), &b, placed);
  EXPECT_EQ(first, frame);
  EXPECT_EQ(second, frame);
  EXPECT_TRUE(a.records().empty());
  EXPECT_EQ(a.shared().length(), 900u);
  EXPECT_EQ(b.shared().offset() - a.shared().offset(), 900u);
  EXPECT_EQ(std::vector<uint8_t>(region->base() + b.shared().offset(),
                                 region->base() + b.shared().offset() + 4000),
            std::vector<uint8_t>(bytes.begin() + 1000, bytes.end()));
  EXPECT_EQ(region->allocator().live_blocks(), 1u);

  // Bytes outside the block are copied into a block of their own, in the copies' region.
  std::vector<uint8_t> other = Bytes(10, 1);
  storage::AppendPartition c;
  AppendArena::Block copied = arena.Put(other, &c, placed);
  ASSERT_TRUE(copied);
  EXPECT_NE(copied, frame);
  EXPECT_NE(copied->region(), region);
  EXPECT_NE(c.shared().inode(), a.shared().inode());
  EXPECT_EQ(region->allocator().live_blocks(), 1u);

  // The space comes back only when the calls and the request have all let go.
  arena.Release(first);
  arena.Release(second);
  frame.reset();
  EXPECT_EQ(region->allocator().live_blocks(), 1u);
  placed.reset();
  EXPECT_EQ(region->allocator().live_blocks(), 0u);
  std::shared_ptr<SharedRegion> copies = copied->region();
  arena.Release(copied);
  EXPECT_EQ(copies->allocator().live_blocks(), 0u);
}

// A call naming bytes of a frame failed: the frames' region is not written again, so the
// rest of that frame is copied from then on, and the next frame comes from a new region.
TEST(AppendArenaTest, AReservedBlockInAnAbandonedRegionIsCopiedNotNamed) {
  AppendArena arena(1 << 20);
  std::vector<uint8_t> bytes = Bytes(200, 1);
  std::shared_ptr<PlacedFrame> frame = arena.ReserveFrame(200);
  ASSERT_TRUE(frame);
  std::memcpy(frame->data(), bytes.data(), bytes.size());
  storage::AppendPartition a;
  AppendArena::Block failed = arena.Put(std::span(frame->data(), 100), &a, frame);
  ASSERT_EQ(failed, frame);
  arena.Abandon(failed, /*shared_unusable=*/false, "deadline exceeded");

  storage::AppendPartition b;
  AppendArena::Block block = arena.Put(std::span(frame->data() + 100, 100), &b, frame);
  ASSERT_TRUE(block);
  EXPECT_NE(block, frame);
  EXPECT_NE(b.shared().inode(), a.shared().inode());  // a copy, in the copies' region
  AppendArena::Block next = arena.ReserveFrame(200);
  ASSERT_TRUE(next);
  EXPECT_NE(next->region(), std::dynamic_pointer_cast<SharedBlock>(frame)->region());
}

TEST(AppendArenaTest, ReserveFrameIsNullWhenOffOrFull) {
  AppendArena off(0);
  EXPECT_FALSE(off.ReserveFrame(100));
  AppendArena small(4096);
  AppendArena::Block held = small.ReserveFrame(4096);
  ASSERT_TRUE(held);
  EXPECT_FALSE(small.ReserveFrame(1));
  held.reset();
  EXPECT_TRUE(small.ReserveFrame(4096));
}

// A frame whose request is still arriving (a slow client) holds its block for as long. The
// copies of other appends go on through shared memory around and around their own region
// all the while, instead of stopping once their ring comes back to the held block.
TEST(AppendArenaTest, AFrameHeldLongDoesNotStopTheCopies) {
  AppendArena arena(8192);
  AppendArena::Block slow = arena.ReserveFrame(1024);
  ASSERT_TRUE(slow);
  std::vector<uint8_t> bytes = Bytes(4096, 5);
  for (int i = 0; i < 10; ++i) {
    storage::AppendPartition a;
    AppendArena::Block block = arena.Put(bytes, &a);
    ASSERT_TRUE(block) << "copy " << i << " went in the message";
    EXPECT_TRUE(a.records().empty());
    arena.Release(block);
  }
}

}  // namespace
}  // namespace runnel::brokerd
