// PartitionView: the watch stream's messages and the append answers that run ahead of them.
#include "brokerd/storage/partition_view.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace runnel::brokerd {
namespace {

storage::PartitionChange Change(const std::string& topic, int32_t partition,
                                const std::string& topic_id, int64_t high_watermark) {
  storage::PartitionChange c;
  storage::PartitionState* s = c.add_partitions();
  s->set_topic(topic);
  s->set_partition(partition);
  s->set_topic_id(topic_id);
  s->set_log_end_offset(high_watermark);
  s->set_high_watermark(high_watermark);
  return c;
}

class PartitionStatesAdvanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    states_.Apply(Change("t", 0, "id-a", 5), /*snapshot=*/true);
    states_.OnLayoutChange([this] { ++listener_runs_; });
    listener_runs_ = 0;
  }
  // Watches t-0; counts how often the watch ran.
  void WatchT0() {
    states_.Watch({PartitionKey("t", 0)}, [this] { ++fired_; });
  }
  int64_t Hw() const { return states_.Find("t", 0)->high_watermark; }

  PartitionView states_;
  int fired_ = 0;
  int listener_runs_ = 0;
};

TEST_F(PartitionStatesAdvanceTest, AnAppendAnswerMovesTheHighWatermarkAndWakesTheWatch) {
  WatchT0();
  const uint64_t layout = states_.layout_version();
  states_.Advance("t", 0, "id-a", 9);
  EXPECT_EQ(fired_, 1);
  EXPECT_EQ(Hw(), 9);
  EXPECT_EQ(states_.Find("t", 0)->log_end_offset, 9);
  // Offsets only: no layout change, and the listeners that follow the layout do not run.
  EXPECT_EQ(states_.layout_version(), layout);
  EXPECT_EQ(listener_runs_, 0);
  // The watch ran once and is gone.
  states_.Advance("t", 0, "id-a", 10);
  EXPECT_EQ(fired_, 1);
  EXPECT_EQ(Hw(), 10);
}

TEST_F(PartitionStatesAdvanceTest, AMarkersAnswerMovesTheLastStableOffsetAndWakesTheWatch) {
  // A transaction from offset 5 holds the last stable offset while the end moves on.
  states_.Advance("t", 0, "id-a", 8, 5);
  EXPECT_EQ(states_.Find("t", 0)->last_stable_offset, 5);
  WatchT0();
  states_.Advance("t", 0, "id-a", 8, 5);
  EXPECT_EQ(fired_, 0);
  // Its marker's answer: the end and the last stable offset move; a read_committed fetch
  // waiting at 5 wakes.
  states_.Advance("t", 0, "id-a", 9, 9);
  EXPECT_EQ(fired_, 1);
  EXPECT_EQ(states_.Find("t", 0)->last_stable_offset, 9);
  // A stream message taken before it does not set it back; a snapshot sets it as it is.
  storage::PartitionChange stale = Change("t", 0, "id-a", 8);
  stale.mutable_partitions(0)->set_last_stable_offset(5);
  states_.Apply(stale, /*snapshot=*/false);
  EXPECT_EQ(states_.Find("t", 0)->last_stable_offset, 9);
  states_.Apply(stale, /*snapshot=*/true);
  EXPECT_EQ(states_.Find("t", 0)->last_stable_offset, 5);
}

TEST_F(PartitionStatesAdvanceTest, AnAnswerBehindWhatIsKnownChangesNothing) {
  WatchT0();
  states_.Advance("t", 0, "id-a", 5);
  states_.Advance("t", 0, "id-a", 3);
  EXPECT_EQ(fired_, 0);
  EXPECT_EQ(Hw(), 5);
}

TEST_F(PartitionStatesAdvanceTest, AnAnswerFromAnotherLogOrAnUnknownPartitionIsIgnored) {
  WatchT0();
  // The topic was deleted and created again: the answer is about the old log.
  states_.Advance("t", 0, "id-old", 50);
  states_.Advance("t", 1, "id-a", 50);
  states_.Advance("u", 0, "id-a", 50);
  EXPECT_EQ(fired_, 0);
  EXPECT_EQ(Hw(), 5);
  EXPECT_EQ(states_.Find("t", 1), nullptr);
  EXPECT_EQ(states_.Find("u", 0), nullptr);
}

TEST_F(PartitionStatesAdvanceTest, AStaleMessageDoesNotSetTheHighWatermarkBack) {
  states_.Advance("t", 0, "id-a", 9);
  // A message taken before the append arrives after its answer.
  states_.Apply(Change("t", 0, "id-a", 7), /*snapshot=*/false);
  EXPECT_EQ(Hw(), 9);
  // The stream still moves it on.
  WatchT0();
  states_.Apply(Change("t", 0, "id-a", 12), /*snapshot=*/false);
  EXPECT_EQ(Hw(), 12);
  EXPECT_EQ(fired_, 1);
  // A snapshot (storaged restarted) and a new log set it as they find it.
  states_.Apply(Change("t", 0, "id-a", 4), /*snapshot=*/true);
  EXPECT_EQ(Hw(), 4);
  states_.Apply(Change("t", 0, "id-b", 1), /*snapshot=*/false);
  EXPECT_EQ(Hw(), 1);
}

TEST_F(PartitionStatesAdvanceTest, LayoutListenersRunWhenLogsComeGoOrChangeIdNotForOffsets) {
  // The stream's messages while appends go on: offsets only.
  states_.Apply(Change("t", 0, "id-a", 8), /*snapshot=*/false);
  states_.Apply(Change("t", 0, "id-a", 9), /*snapshot=*/false);
  EXPECT_EQ(listener_runs_, 0);
  // A new log.
  states_.Apply(Change("t", 1, "id-a", 0), /*snapshot=*/false);
  EXPECT_EQ(listener_runs_, 1);
  // One message with an offset move and a new log runs them once.
  storage::PartitionChange both = Change("t", 0, "id-a", 10);
  *both.add_partitions() = Change("u", 0, "id-u", 0).partitions(0);
  states_.Apply(both, /*snapshot=*/false);
  EXPECT_EQ(listener_runs_, 2);
  // The topic deleted and created again under a new id.
  states_.Apply(Change("u", 0, "id-u2", 0), /*snapshot=*/false);
  EXPECT_EQ(listener_runs_, 3);
  // A log deleted.
  storage::PartitionChange gone = Change("t", 1, "id-a", 0);
  gone.mutable_partitions(0)->set_deleted(true);
  states_.Apply(gone, /*snapshot=*/false);
  EXPECT_EQ(listener_runs_, 4);
  // A deletion of a log not known changes nothing.
  states_.Apply(gone, /*snapshot=*/false);
  EXPECT_EQ(listener_runs_, 4);
  // The stream lost, then a snapshot (storaged restarted), even of the same logs.
  states_.MarkLost();
  EXPECT_EQ(listener_runs_, 5);
  states_.Apply(Change("t", 0, "id-a", 10), /*snapshot=*/true);
  EXPECT_EQ(listener_runs_, 6);
  states_.Apply(Change("t", 0, "id-a", 10), /*snapshot=*/true);
  EXPECT_EQ(listener_runs_, 7);
}

TEST_F(PartitionStatesAdvanceTest, NothingIsAdvancedWhileTheStreamIsLost) {
  states_.MarkLost();
  states_.Advance("t", 0, "id-a", 9);
  EXPECT_EQ(states_.Find("t", 0), nullptr);
  EXPECT_FALSE(states_.ready());
}

// ---- The tail: where this brokerd's latest appends lie -------------------------------------

storage::FileRange Range(const std::string& path, int64_t position, int32_t length,
                         uint64_t inode = 7) {
  storage::FileRange r;
  r.set_path(path);
  r.set_position(position);
  r.set_length(length);
  r.set_inode(inode);
  return r;
}

class PartitionStatesTailTest : public ::testing::Test {
 protected:
  void SetUp() override { states_.Apply(Change("t", 0, "id-a", 0), /*snapshot=*/true); }

  // Appends `count` one-batch appends of `length` bytes after the log end, each answered.
  void Append(int count, int32_t length, int64_t records_per_batch = 1,
              const std::string& path = "/seg0") {
    for (int i = 0; i < count; ++i) {
      const StoredPartition* p = states_.Find("t", 0);
      const int64_t base = p->high_watermark;
      position_ = path == path_ ? position_ : 0;
      path_ = path;
      states_.Appended("t", 0, "id-a", base, base + records_per_batch - 1,
                       Range(path, position_, length));
      states_.Advance("t", 0, "id-a", base + records_per_batch);
      position_ += length;
    }
  }

  // The tail's answer as (path, position, length) triples; "none" when it defers to storaged.
  std::string Read(int64_t offset, int64_t max_bytes, bool min_one = true) const {
    auto slices = states_.ReadTail("t", 0, offset, max_bytes, min_one);
    if (!slices) return "none";
    std::string out;
    for (const TailSlice& s : *slices) {
      out +=
          s.segment->path + ":" + std::to_string(s.position) + "+" + std::to_string(s.length) + " ";
    }
    return out;
  }

  PartitionView states_;
  std::string path_ = "/seg0";
  int64_t position_ = 0;
};

TEST_F(PartitionStatesTailTest, ConsecutiveAppendsAreOneRangeCutAtWholeAppends) {
  Append(5, 100);
  EXPECT_EQ(Read(0, 1 << 20), "/seg0:0+500 ");
  EXPECT_EQ(Read(2, 1 << 20), "/seg0:200+300 ");
  EXPECT_EQ(Read(0, 250), "/seg0:0+200 ");  // whole appends within max_bytes
  EXPECT_EQ(Read(4, 100), "/seg0:400+100 ");
}

TEST_F(PartitionStatesTailTest, AnOffsetInsideAnAppendStartsAtThatAppend) {
  Append(3, 100, /*records_per_batch=*/10);  // offsets 0-9, 10-19, 20-29
  EXPECT_EQ(Read(15, 1 << 20), "/seg0:100+200 ");
  EXPECT_EQ(Read(29, 1 << 20), "/seg0:200+100 ");
}

TEST_F(PartitionStatesTailTest, AFirstAppendOverMaxBytesIsLeftToStoragedOrNotSent) {
  Append(2, 1000);
  // With min_one storaged sends one batch of it: the tail does not guess, it defers.
  EXPECT_EQ(Read(0, 500, /*min_one=*/true), "none");
  // Without (a later partition of the fetch): nothing fits, as storaged would answer.
  EXPECT_EQ(Read(0, 500, /*min_one=*/false), "");
  EXPECT_EQ(Read(0, 0, /*min_one=*/false), "");
}

TEST_F(PartitionStatesTailTest, OffsetsOutsideTheTailOrTheLogDeferToStoraged) {
  Append(3, 100);
  EXPECT_EQ(Read(3, 1 << 20), "none");  // the high watermark: nothing to read
  EXPECT_EQ(Read(9, 1 << 20), "none");  // past the log end: OFFSET_OUT_OF_RANGE is storaged's
  EXPECT_EQ(Read(-1, 1 << 20), "none");
  EXPECT_EQ(Read(0, 1 << 20, true), "/seg0:0+300 ");
  // DeleteRecords moved the log start past offset 0: offset 0 is storaged's to refuse.
  storage::PartitionChange c = Change("t", 0, "id-a", 3);
  c.mutable_partitions(0)->set_log_start_offset(1);
  states_.Apply(c, /*snapshot=*/false);
  EXPECT_EQ(Read(0, 1 << 20), "none");
  EXPECT_EQ(Read(1, 1 << 20), "/seg0:100+200 ");
  EXPECT_EQ(states_.Find("t", 0)->tail.size(), 2u);  // the append below the log start went
}

TEST_F(PartitionStatesTailTest, OnlyRecordsBelowTheHighWatermarkAreSent) {
  Append(3, 100);
  // An append answered after the append stream's answer but not yet committed (as a
  // replicated log's may be): its records wait for the high watermark.
  states_.Appended("t", 0, "id-a", 3, 3, Range("/seg0", 300, 100));
  EXPECT_EQ(Read(0, 1 << 20), "/seg0:0+300 ");
  EXPECT_EQ(Read(3, 1 << 20), "none");
  states_.Advance("t", 0, "id-a", 4);
  EXPECT_EQ(Read(3, 1 << 20), "/seg0:300+100 ");
}

TEST_F(PartitionStatesTailTest, AGapInOffsetsStartsTheTailAgain) {
  Append(3, 100);
  // Offsets 3-4 were appended by another writer (the group coordinator), not answered here.
  states_.Advance("t", 0, "id-a", 5);
  states_.Appended("t", 0, "id-a", 5, 5, Range("/seg0", 500, 100));
  states_.Advance("t", 0, "id-a", 6);
  EXPECT_EQ(Read(0, 1 << 20), "none");
  EXPECT_EQ(Read(3, 1 << 20), "none");
  EXPECT_EQ(Read(5, 1 << 20), "/seg0:500+100 ");
}

TEST_F(PartitionStatesTailTest, AppendsAcrossARollAreOneRangePerFile) {
  Append(2, 100, 1, "/seg0");
  Append(2, 100, 1, "/seg2");
  EXPECT_EQ(Read(0, 1 << 20), "/seg0:0+200 /seg2:0+200 ");
  EXPECT_EQ(Read(1, 250), "/seg0:100+100 /seg2:0+100 ");
  auto slices = states_.ReadTail("t", 0, 0, 1 << 20, true);
  ASSERT_TRUE(slices.has_value());
  ASSERT_EQ(slices->size(), 2u);
  EXPECT_NE((*slices)[0].segment, (*slices)[1].segment);
}

TEST_F(PartitionStatesTailTest, TheTailIsBounded) {
  Append(static_cast<int>(AppendTail::kMaxAppends) + 10, 10);
  EXPECT_EQ(states_.Find("t", 0)->tail.size(), AppendTail::kMaxAppends);
  EXPECT_EQ(Read(9, 1 << 20), "none");  // aged out: storaged's
  EXPECT_NE(Read(10, 1 << 20), "none");
  const int32_t big = static_cast<int32_t>(AppendTail::kMaxBytes / 4);
  Append(5, big);
  EXPECT_LE(states_.Find("t", 0)->tail.bytes(), AppendTail::kMaxBytes);
  EXPECT_EQ(states_.Find("t", 0)->tail.size(), 4u);
}

TEST_F(PartitionStatesTailTest, ANewLogASnapshotOrALossForgetsTheTail) {
  Append(2, 100);
  states_.Apply(Change("t", 0, "id-b", 2), /*snapshot=*/false);  // deleted and created again
  EXPECT_TRUE(states_.Find("t", 0)->tail.empty());
  EXPECT_EQ(Read(0, 1 << 20), "none");
  // An answer about the old log is not taken into the new one's tail.
  states_.Appended("t", 0, "id-a", 2, 2, Range("/seg0", 200, 100));
  EXPECT_TRUE(states_.Find("t", 0)->tail.empty());

  states_.Appended("t", 0, "id-b", 2, 2, Range("/new", 0, 100));
  states_.Advance("t", 0, "id-b", 3);
  EXPECT_EQ(Read(2, 1 << 20), "/new:0+100 ");
  states_.Apply(Change("t", 0, "id-b", 3), /*snapshot=*/true);
  EXPECT_EQ(Read(2, 1 << 20), "none");

  states_.Appended("t", 0, "id-b", 3, 3, Range("/new", 100, 100));
  states_.Advance("t", 0, "id-b", 4);
  EXPECT_EQ(Read(3, 1 << 20), "/new:100+100 ");
  states_.MarkLost();
  EXPECT_EQ(states_.Find("t", 0), nullptr);
  EXPECT_EQ(Read(3, 1 << 20), "none");
}

TEST_F(PartitionStatesTailTest, DeleteRecordsAnsweredRaisesTheLogStartAtOnce) {
  Append(4, 100);
  states_.RaiseLogStart("t", 0, 2);
  EXPECT_EQ(states_.Find("t", 0)->log_start_offset, 2);
  EXPECT_EQ(Read(1, 1 << 20), "none");  // storaged answers OFFSET_OUT_OF_RANGE
  EXPECT_EQ(Read(2, 1 << 20), "/seg0:200+200 ");
  EXPECT_EQ(states_.Find("t", 0)->tail.size(), 2u);
  states_.RaiseLogStart("t", 0, 1);  // never down
  EXPECT_EQ(states_.Find("t", 0)->log_start_offset, 2);
  // Nor by a stream message taken before the deletion.
  states_.Apply(Change("t", 0, "id-a", 4), /*snapshot=*/false);
  EXPECT_EQ(states_.Find("t", 0)->log_start_offset, 2);
  EXPECT_EQ(Read(1, 1 << 20), "none");
  states_.RaiseLogStart("u", 0, 9);  // an unknown partition: nothing
  EXPECT_EQ(states_.Find("u", 0), nullptr);
}

TEST_F(PartitionStatesTailTest, DropTailForgetsOnePartition) {
  Append(2, 100);
  states_.DropTail("t", 0);
  EXPECT_EQ(Read(0, 1 << 20), "none");
  Append(1, 100);
  EXPECT_EQ(Read(2, 1 << 20), "/seg0:200+100 ");
}

TEST_F(PartitionStatesAdvanceTest, CreateFailuresAreKeptUntilTheLogAppearsAndWakeWaiters) {
  int changes = 0;
  states_.OnNextChange([&] { ++changes; });
  states_.SetCreateFailures({{PartitionKey("t", 1), "no space"}, {PartitionKey("t", 0), "x"}});
  EXPECT_EQ(changes, 1);
  // t-0 exists: a failure recorded for it says nothing.
  EXPECT_EQ(states_.CreateFailure("t", 0), nullptr);
  ASSERT_NE(states_.CreateFailure("t", 1), nullptr);
  EXPECT_EQ(*states_.CreateFailure("t", 1), "no space");
  EXPECT_EQ(listener_runs_, 0) << "a failure changes no log: the reconciler must not rerun";
  // The same set again is no change.
  states_.OnNextChange([&] { ++changes; });
  states_.SetCreateFailures({{PartitionKey("t", 1), "no space"}});
  EXPECT_EQ(changes, 1);
  // The log appears (a later pass created it): the failure goes with that message.
  states_.Apply(Change("t", 1, "id-a", 0), /*snapshot=*/false);
  EXPECT_EQ(states_.CreateFailure("t", 1), nullptr);
  EXPECT_TRUE(states_.create_failures().empty());
}

// The OnLayoutKeys listeners hear which logs appeared, went or became another log, and of a
// snapshot or a loss as a reset; offsets moving is no layout change.
TEST(PartitionViewLayoutKeysTest, ListenersHearWhichLogsChanged) {
  PartitionView states;
  std::vector<std::pair<std::vector<PartitionKey>, bool>> heard;
  int plain_runs_before = -1;
  int plain_runs = 0;
  states.OnLayoutChange([&] { ++plain_runs; });
  states.OnLayoutKeys([&](const std::vector<PartitionKey>& changed, bool reset) {
    heard.emplace_back(changed, reset);
    plain_runs_before = plain_runs;
  });
  states.Apply(Change("t", 0, "id-a", 5), /*snapshot=*/true);
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_TRUE(heard[0].second);
  EXPECT_TRUE(heard[0].first.empty());
  EXPECT_EQ(plain_runs_before, 0);  // before the OnLayoutChange listeners
  EXPECT_EQ(plain_runs, 1);

  states.Apply(Change("t", 0, "id-a", 9), /*snapshot=*/false);  // offsets only
  storage::PartitionChange two = Change("t", 1, "id-a", 0);
  *two.add_partitions() = Change("t", 0, "id-b", 0).partitions(0);  // another log
  states.Apply(two, /*snapshot=*/false);
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_FALSE(heard[1].second);
  EXPECT_EQ(heard[1].first, (std::vector<PartitionKey>{{"t", 1}, {"t", 0}}));

  storage::PartitionChange gone = Change("t", 1, "id-a", 0);
  gone.mutable_partitions(0)->set_deleted(true);
  states.Apply(gone, /*snapshot=*/false);
  states.Apply(gone, /*snapshot=*/false);  // not known any more: no change
  ASSERT_EQ(heard.size(), 3u);
  EXPECT_EQ(heard[2].first, (std::vector<PartitionKey>{{"t", 1}}));

  states.MarkLost();
  ASSERT_EQ(heard.size(), 4u);
  EXPECT_TRUE(heard[3].second);
  EXPECT_TRUE(heard[3].first.empty());
}

}  // namespace
}  // namespace runnel::brokerd
