// EpochHistory: the pure leader-epoch rules LeaderEpochCache persists (its file tests are in
// log/checkpoints_test.cc).
#include "storaged/replication/epoch_history.h"

#include <gtest/gtest.h>

namespace runnel::storaged {
namespace {

using Entries = std::vector<EpochEntry>;

TEST(EpochHistory, AssignFollowsKafkasRule) {
  EpochHistory h;
  EXPECT_TRUE(h.Assign(1, 0));
  EXPECT_FALSE(h.Assign(1, 10));  // known to start earlier
  EXPECT_TRUE(h.Assign(5, 100));
  EXPECT_EQ(h.entries(), (Entries{{1, 0}, {5, 100}}));
  EXPECT_TRUE(h.Assign(5, 90));  // the same epoch starting earlier replaces it
  EXPECT_EQ(h.entries(), (Entries{{1, 0}, {5, 90}}));
  EXPECT_TRUE(h.Assign(4, 95));  // an older epoch rewrites the later ones
  EXPECT_EQ(h.entries(), (Entries{{1, 0}, {4, 95}}));
  EXPECT_TRUE(h.Assign(0, 0));
  EXPECT_EQ(h.entries(), (Entries{{0, 0}}));
}

TEST(EpochHistory, Truncation) {
  EpochHistory h(Entries{{1, 0}, {2, 100}, {4, 200}});
  EXPECT_FALSE(h.TruncateFromEnd(250));
  EXPECT_TRUE(h.TruncateFromEnd(200));
  EXPECT_EQ(h.entries(), (Entries{{1, 0}, {2, 100}}));
  EpochHistory s(Entries{{1, 0}, {2, 100}, {4, 200}});
  EXPECT_TRUE(s.TruncateFromStart(150));
  EXPECT_EQ(s.entries(), (Entries{{2, 150}, {4, 200}}));
  EXPECT_FALSE(s.TruncateFromStart(150));
  EXPECT_FALSE(s.TruncateFromStart(10));
}

TEST(EpochHistory, EndOffsetForAndEpochAt) {
  EpochHistory h(Entries{{2, 10}, {4, 20}, {7, 30}});
  using P = std::pair<int32_t, int64_t>;
  EXPECT_EQ(h.EndOffsetFor(7, 42), (P{7, 42}));  // latest: the log end
  EXPECT_EQ(h.EndOffsetFor(4, 42), (P{4, 30}));
  EXPECT_EQ(h.EndOffsetFor(5, 42), (P{4, 30}));  // unknown: the largest below it
  EXPECT_EQ(h.EndOffsetFor(1, 42), (P{1, 10}));  // before every entry
  EXPECT_EQ(h.EndOffsetFor(8, 42), std::nullopt);
  EXPECT_EQ(h.EndOffsetFor(-1, 42), std::nullopt);
  EXPECT_EQ(EpochHistory().EndOffsetFor(0, 0), std::nullopt);
  EXPECT_EQ(h.EpochAt(9), std::nullopt);
  EXPECT_EQ(h.EpochAt(10), 2);
  EXPECT_EQ(h.EpochAt(29), 4);
  EXPECT_EQ(h.EpochAt(1000), 7);
}

TEST(EpochHistory, EntriesRise) {
  EXPECT_TRUE(EpochEntriesRise({}));
  EXPECT_TRUE(EpochEntriesRise({{0, 0}, {3, 5}}));
  EXPECT_FALSE(EpochEntriesRise({{3, 0}, {3, 5}}));
  EXPECT_FALSE(EpochEntriesRise({{1, 5}, {3, 5}}));
  EXPECT_FALSE(EpochEntriesRise({{-1, 0}}));
}

}  // namespace
}  // namespace runnel::storaged
