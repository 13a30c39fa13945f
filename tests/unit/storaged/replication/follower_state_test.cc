// FollowerState: the next fetch, Kafka's truncation point for a diverging epoch, and the
// follower's high watermark.
#include "storaged/replication/follower_state.h"

#include <gtest/gtest.h>

namespace runnel::storaged::replication {
namespace {

using Entries = std::vector<EpochEntry>;
using Truncation = FollowerState::Truncation;

TEST(FollowerState, NextFetchIsFromTheLogEndWithTheLatestEpoch) {
  FollowerState f(2, 1, 7, 5, 40);
  FollowerFetch fetch = f.NextFetch(EpochHistory(Entries{{3, 0}, {6, 30}}), 40);
  EXPECT_EQ(fetch.replica, 2);
  EXPECT_EQ(fetch.current_leader_epoch, 7);
  EXPECT_EQ(fetch.fetch_offset, 40);
  EXPECT_EQ(fetch.last_fetched_epoch, 6);
  EXPECT_EQ(f.NextFetch(EpochHistory(), 0).last_fetched_epoch, -1);
}

TEST(FollowerState, OnlyTheAnswerToTheCurrentFetchApplies) {
  FollowerState f(2, 1, 7, 5, 40);
  EpochHistory epochs(Entries{{3, 0}, {6, 30}});
  FollowerFetch sent = f.NextFetch(epochs, 40);
  EXPECT_TRUE(f.IsCurrent(sent, epochs, 40));
  // The log moved (records appended, or a truncation) since it was sent.
  EXPECT_FALSE(f.IsCurrent(sent, epochs, 41));
  EXPECT_FALSE(f.IsCurrent(sent, EpochHistory(Entries{{3, 0}}), 40));
  // Sent under another leader epoch.
  FollowerState g(2, 1, 8, 5, 40);
  EXPECT_FALSE(g.IsCurrent(sent, epochs, 40));
}

TEST(FollowerState, TruncatesToTheLowerEndOfTheDivergingEpoch) {
  EpochHistory ours(Entries{{3, 0}, {6, 30}});
  // We know epoch 3: min(the leader's end 25, ours 30).
  Truncation t = FollowerState::TruncationFor({3, 25}, ours, 40);
  EXPECT_EQ(t.offset, 25);
  EXPECT_TRUE(t.complete);
  // The leader's end above ours: ours.
  t = FollowerState::TruncationFor({3, 35}, ours, 40);
  EXPECT_EQ(t.offset, 30);
  EXPECT_TRUE(t.complete);
  // We do not know epoch 5: cut to the end of our epoch 3 and ask again.
  t = FollowerState::TruncationFor({5, 33}, ours, 40);
  EXPECT_EQ(t.offset, 30);
  EXPECT_FALSE(t.complete);
  // An epoch below all of ours: it ends where our first epoch starts (EndOffsetFor), so
  // everything we hold is from an epoch the leader does not have there.
  t = FollowerState::TruncationFor({2, 12}, ours, 40);
  EXPECT_EQ(t.offset, 0);
  EXPECT_TRUE(t.complete);
  // No epochs at all: the leader's end offset.
  t = FollowerState::TruncationFor({2, 12}, EpochHistory(), 40);
  EXPECT_EQ(t.offset, 12);
  EXPECT_TRUE(t.complete);
  // Never above our log end.
  t = FollowerState::TruncationFor({6, 100}, ours, 40);
  EXPECT_EQ(t.offset, 40);
}

TEST(FollowerState, HighWatermarkIsTheLowerOfTheLeadersAndTheLogEnd) {
  FollowerState f(2, 1, 7, 50, 40);
  EXPECT_EQ(f.high_watermark(), 40);  // never above the log end
  EXPECT_EQ(f.OnFetchAnswer(30, 40), 30);
  EXPECT_EQ(f.OnFetchAnswer(60, 45), 45);
  f.OnTruncated(20);
  EXPECT_EQ(f.high_watermark(), 20);
}

}  // namespace
}  // namespace runnel::storaged::replication
