// PartitionStates: the watch stream's messages and the append answers that run ahead of them.
#include "brokerd/partition_states.h"

#include <gtest/gtest.h>

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
    states_.OnEveryChange([this] { ++listener_runs_; });
    listener_runs_ = 0;
  }
  // Watches t-0; counts how often the watch ran.
  void WatchT0() {
    states_.Watch({PartitionKey("t", 0)}, [this] { ++fired_; });
  }
  int64_t Hw() const { return states_.Find("t", 0)->high_watermark; }

  PartitionStates states_;
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

TEST_F(PartitionStatesAdvanceTest, TheStreamStaysAuthoritative) {
  states_.Advance("t", 0, "id-a", 9);
  // A message taken before the append arrives after its answer: states are absolute.
  states_.Apply(Change("t", 0, "id-a", 7), /*snapshot=*/false);
  EXPECT_EQ(Hw(), 7);
  EXPECT_EQ(listener_runs_, 1);
  // Then the message about the append itself.
  WatchT0();
  states_.Apply(Change("t", 0, "id-a", 9), /*snapshot=*/false);
  EXPECT_EQ(Hw(), 9);
  EXPECT_EQ(fired_, 1);
}

TEST_F(PartitionStatesAdvanceTest, NothingIsAdvancedWhileTheStreamIsLost) {
  states_.MarkLost();
  states_.Advance("t", 0, "id-a", 9);
  EXPECT_EQ(states_.Find("t", 0), nullptr);
  EXPECT_FALSE(states_.ready());
}

}  // namespace
}  // namespace runnel::brokerd
