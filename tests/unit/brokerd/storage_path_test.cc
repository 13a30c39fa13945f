// brokerd's side of storaged: AppendBatcher's ordering and batching, and PartitionView fed
// by the real watch stream, against a real StorageService on a Unix socket.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <future>
#include <iterator>
#include <optional>
#include <set>

#include "brokerd/storage/append_batcher.h"
#include "brokerd/storage/partition_view.h"
#include "common/protocol/uuid.h"
#include "tests/unit/brokerd/real_storage_fixture.h"

namespace runnel::brokerd {
namespace {

class StoragePathTest : public RealStorageTest {
 protected:
  // Feeds `states` from storaged's watch stream and waits until it knows `partitions`.
  // The stream goes on feeding `states` until storage_->Stop().
  void WatchInto(PartitionView& states, size_t partitions) {
    auto ready = std::make_shared<std::promise<void>>();
    auto ready_set = std::make_shared<bool>(false);
    std::future<void> known = ready->get_future();
    OnLoop([&] {
      storage_->StartWatch(
          [&states, ready, ready_set, partitions](const storage::PartitionChange& c,
                                                  bool snapshot) {
            states.Apply(c, snapshot);
            if (!*ready_set && states.all().size() == partitions) {
              *ready_set = true;
              ready->set_value();
            }
          },
          [&states] { states.MarkLost(); });
    });
    ASSERT_EQ(known.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  }
};

// Many appends queued at once to few partitions, with one call in flight at a time and a
// small byte bound per call so they need many calls: every partition's appends get
// consecutive offsets in the order they were queued.
TEST_F(StoragePathTest, AppendsKeepTheirOrderPerPartitionAcrossCalls) {
  CreateTopic(3);
  AppendBatcher batcher(loop_, *storage_, view_, /*max_calls_in_flight=*/2,
                        /*max_bytes_per_call=*/300);
  ExpectOrderedAppends(batcher);
}

// A bad batch fails only its own entry, not the others sharing its call.
TEST_F(StoragePathTest, ABadAppendFailsAlone) {
  CreateTopic(1);
  AppendBatcher batcher(loop_, *storage_, view_);
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
  AppendBatcher shared(loop_, *storage_, view_);
  AppendBatcher inline_bytes(loop_, *storage_, view_, AppendBatcher::kDefaultCallsInFlight,
                             AppendBatcher::kDefaultBytesPerCall, /*shared_bytes=*/0);
  AppendBatcher small(loop_, *storage_, view_, AppendBatcher::kDefaultCallsInFlight,
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
  AppendBatcher batcher(loop_, *storage_, view_, AppendBatcher::kDefaultCallsInFlight,
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
    // Bytes, not C strings.
    std::memcpy(at, first.data(), first.size());   // NOLINT(bugprone-not-null-terminated-result)
    std::memcpy(at + first.size(), second.data(),  // NOLINT(bugprone-not-null-terminated-result)
                second.size());
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

// The watch stream's snapshot and changes reach PartitionView, and a Watch on a partition
// fires when an append moves its end.
TEST_F(StoragePathTest, WatchFiresWhenAPartitionGrows) {
  CreateTopic(2);
  PartitionView states;
  WatchInto(states, 2);
  if (HasFatalFailure()) return;
  std::promise<int64_t> fired;
  AppendBatcher batcher(loop_, *storage_, view_);
  // Both appends' answers are awaited before the batcher goes out of scope.
  std::promise<void> answered[2];
  OnLoop([&] {
    EXPECT_EQ(states.Find("t", 1)->log_end_offset, 0);
    states.Watch({{"t", 1}}, [&] { fired.set_value(states.Find("t", 1)->log_end_offset); });
    // A change to another partition does not fire it.
    storage::AppendPartition other;
    other.set_topic("t");
    other.set_partition(0);
    other.set_records(Batch(1, "a"));
    batcher.Append(std::move(other), std::chrono::seconds(10),
                   [&](const grpc::Status&, const storage::AppendPartitionResult&) {
                     answered[0].set_value();
                   });
  });
  auto f = fired.get_future();
  EXPECT_EQ(f.wait_for(std::chrono::milliseconds(500)), std::future_status::timeout);
  OnLoop([&] {
    storage::AppendPartition a;
    a.set_topic("t");
    a.set_partition(1);
    a.set_records(Batch(3, "b"));
    batcher.Append(std::move(a), std::chrono::seconds(10),
                   [&](const grpc::Status&, const storage::AppendPartitionResult&) {
                     answered[1].set_value();
                   });
  });
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(), 3);
  for (auto& a : answered) {
    ASSERT_EQ(a.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  }
  OnLoop([] {});  // the batcher's last callback has returned
  OnLoop([&] { EXPECT_EQ(states.watch_count(), 0u); });
  storage_->Stop();  // no more posts into `states`
}

// The ranges the append answers name hold what storaged's own Read sends for the same
// offset and byte bound, across segment rolls, so a fetch answered from the tail gets the
// bytes a Read would have given it; where they would differ the tail defers (nullopt).
TEST_F(StoragePathTest, TheTailAnswersAsStoragedsReadDoes) {
  storage::PartitionsRequest create;
  auto* spec = create.add_partitions();
  spec->set_topic("t");
  spec->set_partition(0);
  spec->set_topic_id(protocol::Uuid::Random().ToString());
  (*spec->mutable_configs())["segment.bytes"] = "3000";  // a roll every few appends
  CreatePartitions(create);
  PartitionView states;
  WatchInto(states, 1);
  if (HasFatalFailure()) return;

  // 24 appends of 1-4 records of 100-700 bytes, answered in order into the tail.
  constexpr int kAppends = 24;
  // The batcher reports every answer to `states` itself.
  AppendBatcher batcher(loop_, *storage_, states);
  std::promise<void> all_done;
  int finished = 0;
  OnLoop([&] {
    for (int i = 0; i < kAppends; ++i) {
      storage::AppendPartition a;
      a.set_topic("t");
      a.set_partition(0);
      a.set_records(Batch(1 + i % 4, std::string(100 + (i * 97) % 600, char('a' + i))));
      batcher.Append(std::move(a), std::chrono::seconds(10),
                     [&](const grpc::Status& s, const storage::AppendPartitionResult& r) {
                       EXPECT_TRUE(s.ok()) << s.error_message();
                       EXPECT_EQ(r.error_code(), 0) << r.error_message();
                       if (++finished == kAppends) all_done.set_value();
                     });
    }
  });
  ASSERT_EQ(all_done.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  int64_t end = 0;
  size_t tail_files = 0;
  OnLoop([&] {
    const StoredPartition* p = states.Find("t", 0);
    end = p->high_watermark;
    EXPECT_EQ(p->tail.size(), static_cast<size_t>(kAppends));
    std::set<std::string> paths;
    for (const TailAppend& a : p->tail.appends()) paths.insert(a.segment->path);
    tail_files = paths.size();
  });
  EXPECT_GT(tail_files, 2u);  // the appends rolled segments

  // storaged's Read of (offset, max_bytes, min_one), as bytes.
  auto storaged_read = [&](int64_t offset, int32_t max_bytes, bool min_one) {
    storage::ReadRequest req;
    req.set_want_bytes(true);
    storage::ReadPartition* r = req.add_partitions();
    r->set_topic("t");
    r->set_partition(0);
    r->set_offset(offset);
    r->set_max_bytes(max_bytes);
    r->set_min_one_batch(min_one);
    r->set_max_offset(end);
    std::promise<std::string> got;
    OnLoop([&] {
      storage_->Read(req, std::chrono::seconds(10),
                     [&](const grpc::Status& s, storage::ReadResponse& resp) {
                       EXPECT_TRUE(s.ok()) << s.error_message();
                       got.set_value(s.ok() ? resp.partitions(0).records() : "error");
                     });
    });
    return got.get_future().get();
  };
  // The tail's answer for the same, read from its files.
  auto tail_read = [&](int64_t offset, int32_t max_bytes, bool min_one) {
    std::optional<std::string> out;
    OnLoop([&] {
      auto slices = states.ReadTail("t", 0, offset, max_bytes, min_one);
      if (!slices) return;
      out.emplace();
      for (const TailSlice& slice : *slices) {
        std::ifstream f(slice.segment->path, std::ios::binary);
        f.seekg(slice.position);
        std::string bytes(static_cast<size_t>(slice.length), '\0');
        f.read(bytes.data(), slice.length);
        EXPECT_TRUE(f.good()) << slice.segment->path;
        *out += bytes;
      }
    });
    return out;
  };
  int answered = 0, deferred = 0;
  for (int64_t offset = 0; offset < end; offset += 3) {
    for (int32_t max_bytes : {1, 700, 1500, 2600, 1 << 20}) {
      for (bool min_one : {true, false}) {
        std::optional<std::string> tail = tail_read(offset, max_bytes, min_one);
        if (!tail) {
          ++deferred;
          // Only a first batch over the bound, sent whole by storaged, is deferred.
          EXPECT_TRUE(min_one) << offset << " " << max_bytes;
          continue;
        }
        ++answered;
        EXPECT_EQ(*tail, storaged_read(offset, max_bytes, min_one))
            << "offset " << offset << " max_bytes " << max_bytes << " min_one " << min_one;
      }
    }
  }
  EXPECT_GT(answered, 50);
  EXPECT_GT(deferred, 5);
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
  PartitionView states;
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
