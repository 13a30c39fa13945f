// brokerd's side of storaged: AppendBatcher's ordering and batching, and PartitionStates fed
// by the real watch stream, against a real StorageService on a Unix socket.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <future>
#include <iterator>

#include "brokerd/append_batcher.h"
#include "brokerd/partition_states.h"
#include "common/protocol/uuid.h"
#include "tests/unit/brokerd/real_storage_fixture.h"

namespace runnel::brokerd {
namespace {

using StoragePathTest = RealStorageTest;

// Many appends queued at once to few partitions, with one call in flight at a time and a
// small byte bound per call so they need many calls: every partition's appends get
// consecutive offsets in the order they were queued.
TEST_F(StoragePathTest, AppendsKeepTheirOrderPerPartitionAcrossCalls) {
  CreateTopic(3);
  AppendBatcher batcher(loop_, *storage_, /*max_calls_in_flight=*/2, /*max_bytes_per_call=*/300);
  ExpectOrderedAppends(batcher);
}

// A bad batch fails only its own entry, not the others sharing its call.
TEST_F(StoragePathTest, ABadAppendFailsAlone) {
  CreateTopic(1);
  AppendBatcher batcher(loop_, *storage_);
  std::promise<void> all_done;
  std::vector<int> errors(3, -1);
  int finished = 0;
  OnLoop([&] {
    for (int i = 0; i < 3; ++i) {
      storage::AppendPartition a;
      a.set_topic("t");
      a.set_partition(0);
      std::string bytes = Batch(1, "x");
      if (i == 1) bytes[bytes.size() - 1] ^= 0x5a;  // breaks the CRC
      a.set_records(bytes);
      batcher.Append(std::move(a), std::chrono::seconds(10),
                     [&, i](const grpc::Status& s, const storage::AppendPartitionResult& r) {
                       errors[i] = r.error_code();
                       if (++finished == 3) all_done.set_value();
                     });
    }
  });
  ASSERT_EQ(all_done.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  OnLoop([] {});  // the batcher's last callback has returned
  EXPECT_EQ(errors[0], 0);
  EXPECT_EQ(errors[1], static_cast<int>(protocol::ErrorCode::kCorruptMessage));
  EXPECT_EQ(errors[2], 0);
}

// The same appends through shared memory (partition 0), in the message (partition 1, the
// arena off) and through a region too small for most of them (partition 2, so some go one
// way and some the other) leave byte-identical logs, with the same offsets.
TEST_F(StoragePathTest, SharedMemoryAndMessageAppendsWriteTheSameLog) {
  CreateTopic(3);
  AppendBatcher shared(loop_, *storage_);
  AppendBatcher inline_bytes(loop_, *storage_, AppendBatcher::kDefaultCallsInFlight,
                             AppendBatcher::kDefaultBytesPerCall, /*shared_bytes=*/0);
  AppendBatcher small(loop_, *storage_, AppendBatcher::kDefaultCallsInFlight,
                      AppendBatcher::kDefaultBytesPerCall, /*shared_bytes=*/8192);
  AppendBatcher* batchers[] = {&shared, &inline_bytes, &small};
  constexpr int kAppends = 40;
  std::promise<void> all_done;
  std::vector<int64_t> offsets(3 * kAppends, -2);
  int finished = 0;
  OnLoop([&] {
    for (int i = 0; i < kAppends; ++i) {
      // 1 to 40 records of about 200 bytes: many appends do not fit in 8 KiB with others.
      std::string batch = Batch(1 + i, std::string(200, static_cast<char>('a' + i % 26)));
      for (int p = 0; p < 3; ++p) {
        storage::AppendPartition a;
        a.set_topic("t");
        a.set_partition(p);
        batchers[p]->Append(
            std::move(a),
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(batch.data()), batch.size()),
            std::chrono::seconds(10),
            [&, i, p](const grpc::Status& s, const storage::AppendPartitionResult& r) {
              EXPECT_TRUE(s.ok()) << s.error_message();
              EXPECT_EQ(r.error_code(), 0) << r.error_message();
              offsets[p * kAppends + i] = r.base_offset();
              if (++finished == 3 * kAppends) all_done.set_value();
            });
      }
    }
  });
  ASSERT_EQ(all_done.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  OnLoop([] {});
  int64_t expected = 0;
  for (int i = 0; i < kAppends; ++i) {
    for (int p = 0; p < 3; ++p) EXPECT_EQ(offsets[p * kAppends + i], expected) << p << " " << i;
    expected += 1 + i;
  }
  auto log = [&](int p) {
    std::ifstream f(root_ + "/logs/t-" + std::to_string(p) + "/00000000000000000000.log",
                    std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  const std::string first = log(0);
  EXPECT_GT(first.size(), size_t{kAppends * 200});
  EXPECT_EQ(log(1), first);
  EXPECT_EQ(log(2), first);
}

// Batches that lie in a block ReserveFrame gave (as a produce request read into shared memory)
// reach storaged where they lie: storaged writes their base offsets into that very block,
// which a copy would have left at 0. A frame over an eighth of the region is not placed.
TEST_F(StoragePathTest, BatchesInAReservedBlockAreAppendedWhereTheyLie) {
  CreateTopic(1);
  AppendBatcher batcher(loop_, *storage_, AppendBatcher::kDefaultCallsInFlight,
                        AppendBatcher::kDefaultBytesPerCall, /*shared_bytes=*/1 << 20);
  const std::string first = Batch(3, "first");
  const std::string second = Batch(2, "second");
  std::shared_ptr<PlacedFrame> frame;
  std::promise<void> all_done;
  std::vector<int64_t> offsets(2, -2);
  int finished = 0;
  OnLoop([&] {
    EXPECT_FALSE(batcher.ReserveFrame((1 << 20) / AppendBatcher::kPlacedFrameShare + 1));
    frame = batcher.ReserveFrame(100 + first.size() + second.size());
    ASSERT_TRUE(frame);
    uint8_t* at = frame->data() + 100;  // as after a request header
    std::memcpy(at, first.data(), first.size());
    std::memcpy(at + first.size(), second.data(), second.size());
    const std::span<const uint8_t> parts[] = {{at, first.size()},
                                              {at + first.size(), second.size()}};
    for (int i = 0; i < 2; ++i) {
      storage::AppendPartition a;
      a.set_topic("t");
      a.set_partition(0);
      batcher.Append(
          std::move(a), parts[i], std::chrono::seconds(10),
          [&, i](const grpc::Status& s, const storage::AppendPartitionResult& r) {
            EXPECT_TRUE(s.ok()) << s.error_message();
            EXPECT_EQ(r.error_code(), 0) << r.error_message();
            offsets[i] = r.base_offset();
            if (++finished == 2) all_done.set_value();
          },
          frame);
    }
  });
  ASSERT_EQ(all_done.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  OnLoop([] {});
  EXPECT_EQ(offsets[0], 0);
  EXPECT_EQ(offsets[1], 3);
  auto base_offset = [](const uint8_t* p) {
    int64_t v = 0;
    for (int k = 0; k < 8; ++k) v = (v << 8) | p[k];
    return v;
  };
  EXPECT_EQ(base_offset(frame->data() + 100 + first.size()), 3);  // written in place
  std::ifstream f(root_ + "/logs/t-0/00000000000000000000.log", std::ios::binary);
  const std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(log, std::string(reinterpret_cast<const char*>(frame->data() + 100),
                             first.size() + second.size()));
  OnLoop([&] { frame.reset(); });
}

// The watch stream's snapshot and changes reach PartitionStates, and a Watch on a partition
// fires when an append moves its end.
TEST_F(StoragePathTest, WatchFiresWhenAPartitionGrows) {
  CreateTopic(2);
  PartitionStates states;
  std::promise<void> ready;
  bool ready_set = false;
  OnLoop([&] {
    storage_->StartWatch(
        [&](const storage::PartitionChange& c, bool snapshot) {
          states.Apply(c, snapshot);
          if (!ready_set && states.all().size() == 2) {
            ready_set = true;
            ready.set_value();
          }
        },
        [&] { states.MarkLost(); });
  });
  ASSERT_EQ(ready.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  std::promise<int64_t> fired;
  AppendBatcher batcher(loop_, *storage_);
  OnLoop([&] {
    EXPECT_EQ(states.Find("t", 1)->log_end_offset, 0);
    states.Watch({{"t", 1}}, [&] { fired.set_value(states.Find("t", 1)->log_end_offset); });
    // A change to another partition does not fire it.
    storage::AppendPartition other;
    other.set_topic("t");
    other.set_partition(0);
    other.set_records(Batch(1, "a"));
    batcher.Append(std::move(other), std::chrono::seconds(10),
                   [](const grpc::Status&, const storage::AppendPartitionResult&) {});
  });
  auto f = fired.get_future();
  EXPECT_EQ(f.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  OnLoop([&] {
    storage::AppendPartition a;
    a.set_topic("t");
    a.set_partition(1);
    a.set_records(Batch(3, "b"));
    batcher.Append(std::move(a), std::chrono::seconds(10),
                   [](const grpc::Status&, const storage::AppendPartitionResult&) {});
  });
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), 3);
  OnLoop([&] { EXPECT_EQ(states.watch_count(), 0u); });
  storage_->Stop();  // no more posts into `states`
}

}  // namespace
}  // namespace runnel::brokerd

namespace runnel::brokerd {
namespace {

storage::PartitionChange Change(const std::string& topic, int32_t partition,
                                const std::string& topic_id, int64_t log_end,
                                bool deleted = false) {
  storage::PartitionChange change;
  storage::PartitionState* s = change.add_partitions();
  s->set_topic(topic);
  s->set_partition(partition);
  s->set_topic_id(topic_id);
  s->set_log_end_offset(log_end);
  s->set_deleted(deleted);
  return change;
}

// The layout version moves when which logs exist changes, and not when offsets move (the
// group coordinator reconciles on it, and appends change offsets all the time).
TEST(PartitionStatesTest, LayoutVersionIgnoresOffsetOnlyChanges) {
  PartitionStates states;
  const uint64_t v0 = states.layout_version();
  states.Apply(Change("t", 0, "id1", 0), /*snapshot=*/true);
  const uint64_t v1 = states.layout_version();
  EXPECT_NE(v1, v0);
  states.Apply(Change("t", 0, "id1", 10), false);
  EXPECT_EQ(states.layout_version(), v1);
  states.Apply(Change("t", 1, "id1", 0), false);
  const uint64_t v2 = states.layout_version();
  EXPECT_NE(v2, v1);
  states.Apply(Change("t", 1, "id2", 0), false);  // re-created under a new topic id
  const uint64_t v3 = states.layout_version();
  EXPECT_NE(v3, v2);
  states.Apply(Change("t", 1, "id2", 0, /*deleted=*/true), false);
  const uint64_t v4 = states.layout_version();
  EXPECT_NE(v4, v3);
  states.Apply(Change("gone", 0, "x", 0, /*deleted=*/true), false);  // unknown: no change
  EXPECT_EQ(states.layout_version(), v4);
  states.MarkLost();
  EXPECT_NE(states.layout_version(), v4);
}

}  // namespace
}  // namespace runnel::brokerd
