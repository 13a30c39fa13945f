// brokerd/fetch_sessions.h: what a session keeps, what an incremental answer must hold, and
// which session gives up its slot when the cache is full. The wire side (epochs, errors,
// a real consumer) is tests/integration/test_fetch_sessions.py.
#include "brokerd/fetch_sessions.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::FetchRequest;
using protocol::FetchResponse;
using Clock = FetchSessionCache::Clock;

FetchSession::Partition Named(const std::string& topic, int32_t partition, int64_t offset = 0) {
  FetchSession::Partition p;
  p.topic = topic;
  p.in.partition = partition;
  p.in.fetch_offset = offset;
  return p;
}

FetchResponse::PartitionData Answer(int32_t partition, int64_t high_watermark,
                                    int64_t log_start_offset = 0, bool records = false) {
  FetchResponse::PartitionData out;
  out.partition_index = partition;
  out.high_watermark = high_watermark;
  out.log_start_offset = log_start_offset;
  out.records.data.emplace();
  if (records) out.records.data->push_back(1);
  return out;
}

std::vector<std::pair<std::string, int32_t>> Order(const FetchSession& s) {
  std::vector<std::pair<std::string, int32_t>> out;
  for (const auto& p : s.partitions()) out.emplace_back(p.topic, p.in.partition);
  return out;
}

TEST(FetchSessionTest, AnIncrementalFetchUpdatesAddsAndForgetsAndMovesTheEpochOn) {
  FetchSessionCache cache(10);
  auto s =
      cache.Create({Named("a", 0, 5), Named("a", 1, 7), Named("b", 0, 9)}, false, Clock::now());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->epoch(), 1);

  FetchRequest req;
  req.session_id = s->id();
  req.session_epoch = 1;
  FetchRequest::FetchTopic& a = req.topics.emplace_back();
  a.topic = "a";
  a.partitions.emplace_back().partition = 1;
  a.partitions.back().fetch_offset = 12;
  FetchRequest::FetchTopic& c = req.topics.emplace_back();
  c.topic = "c";
  c.partitions.emplace_back().partition = 3;
  FetchRequest::ForgottenTopic& gone = req.forgotten_topics_data.emplace_back();
  gone.topic = "b";
  gone.partitions = {0, 4};  // 4 was never in the session
  s->ApplyIncremental(req);

  EXPECT_EQ(s->epoch(), 2);
  EXPECT_EQ(Order(*s),
            (std::vector<std::pair<std::string, int32_t>>{{"a", 0}, {"a", 1}, {"c", 3}}));
  std::vector<int64_t> offsets;
  for (const auto& p : s->partitions()) offsets.push_back(p.in.fetch_offset);
  EXPECT_EQ(offsets, (std::vector<int64_t>{5, 12, 0}));
}

TEST(FetchSessionTest, TheEpochAfterInt32MaxIsOne) {
  FetchRequest req;
  FetchSession s(1, false, std::numeric_limits<int32_t>::max() - 1);
  s.ApplyIncremental(req);
  EXPECT_EQ(s.epoch(), std::numeric_limits<int32_t>::max());
  s.ApplyIncremental(req);
  EXPECT_EQ(s.epoch(), 1);
  s.ApplyIncremental(req);
  EXPECT_EQ(s.epoch(), 2);
}

TEST(FetchSessionTest, AnAnswerIsSentOnlyWhenSomethingChanged) {
  FetchSessionCache cache(10);
  auto s = cache.Create({Named("a", 0), Named("a", 1)}, false, Clock::now());
  ASSERT_NE(s, nullptr);
  // First answers: the session knew nothing yet.
  EXPECT_TRUE(s->Answered("a", {}, Answer(0, 10)));
  EXPECT_TRUE(s->Answered("a", {}, Answer(1, 20)));
  // Nothing new.
  EXPECT_FALSE(s->Answered("a", {}, Answer(0, 10)));
  EXPECT_FALSE(s->Answered("a", {}, Answer(1, 20)));
  // A moved high watermark, a moved log start, records: each is sent.
  EXPECT_TRUE(s->Answered("a", {}, Answer(0, 11)));
  EXPECT_FALSE(s->Answered("a", {}, Answer(0, 11)));
  EXPECT_TRUE(s->Answered("a", {}, Answer(0, 11, 3)));
  EXPECT_FALSE(s->Answered("a", {}, Answer(0, 11, 3)));
  EXPECT_TRUE(s->Answered("a", {}, Answer(0, 11, 3, /*records=*/true)));
  // A moved last stable offset (a transaction ended) is sent too.
  FetchResponse::PartitionData stable = Answer(0, 11, 3);
  stable.last_stable_offset = 9;
  EXPECT_TRUE(s->Answered("a", {}, stable));
  EXPECT_FALSE(s->Answered("a", {}, stable));
  // An error is sent each time, and so is the first answer after it.
  FetchResponse::PartitionData failed = Answer(1, -1, -1);
  failed.error_code = ErrorCode::kNotLeaderOrFollower;
  EXPECT_TRUE(s->Answered("a", {}, failed));
  EXPECT_TRUE(s->Answered("a", {}, failed));
  EXPECT_TRUE(s->Answered("a", {}, Answer(1, 20)));
  EXPECT_FALSE(s->Answered("a", {}, Answer(1, 20)));
  // A partition the session does not hold is never part of its answer.
  EXPECT_FALSE(s->Answered("a", {}, Answer(7, 1)));
  EXPECT_FALSE(s->Answered("b", {}, Answer(0, 1)));
}

TEST(FetchSessionTest, APartitionAnsweredWithRecordsGoesToTheEnd) {
  FetchSessionCache cache(10);
  auto s = cache.Create({Named("a", 0), Named("a", 1), Named("a", 2)}, false, Clock::now());
  ASSERT_NE(s, nullptr);
  s->Answered("a", {}, Answer(0, 5, 0, /*records=*/true));
  s->Answered("a", {}, Answer(1, 5));
  EXPECT_EQ(Order(*s),
            (std::vector<std::pair<std::string, int32_t>>{{"a", 1}, {"a", 2}, {"a", 0}}));
}

TEST(FetchSessionTest, TopicIdSessionsKeyOnTheIdNotTheName) {
  FetchSessionCache cache(10);
  protocol::Uuid x{};
  x.bytes[15] = 1;
  protocol::Uuid y{};
  y.bytes[15] = 2;
  FetchSession::Partition p;
  p.topic_id = x;
  p.in.partition = 0;
  auto s = cache.Create({p}, true, Clock::now());
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->uses_topic_ids());
  EXPECT_TRUE(s->Answered("", x, Answer(0, 1)));
  EXPECT_FALSE(s->Answered("", y, Answer(0, 1)));  // another topic, same partition index
  s->Forget("", y, 0);
  EXPECT_EQ(s->size(), 1u);
  s->Forget("", x, 0);
  EXPECT_EQ(s->size(), 0u);
}

TEST(FetchSessionCacheTest, ARepeatedPartitionIsKeptOnceWithItsLastParameters) {
  FetchSessionCache cache(1);
  auto s =
      cache.Create({Named("a", 0, 1), Named("a", 1, 2), Named("a", 0, 3)}, false, Clock::now());
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ(s->partitions().front().in.partition, 0);
  EXPECT_EQ(s->partitions().front().in.fetch_offset, 3);
}

TEST(FetchSessionCacheTest, FindRemoveAndDistinctIds) {
  FetchSessionCache cache(100);
  std::vector<int32_t> ids;
  for (int i = 0; i < 100; ++i) {
    auto s = cache.Create({Named("a", i)}, false, Clock::now());
    ASSERT_NE(s, nullptr);
    EXPECT_GT(s->id(), 0);
    ids.push_back(s->id());
  }
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end());
  EXPECT_EQ(cache.size(), 100u);
  EXPECT_NE(cache.Find(ids[7], Clock::now()), nullptr);
  cache.Remove(ids[7]);
  EXPECT_EQ(cache.Find(ids[7], Clock::now()), nullptr);
  EXPECT_EQ(cache.Find(0, Clock::now()), nullptr);
  EXPECT_EQ(cache.size(), 99u);
}

TEST(FetchSessionCacheTest, ZeroSlotsMakesNoSession) {
  FetchSessionCache cache(0);
  EXPECT_EQ(cache.Create({Named("a", 0)}, false, Clock::now()), nullptr);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(FetchSessionCacheTest, AFullCacheGivesUpAStaleSessionFirst) {
  FetchSessionCache cache(2);
  const Clock::time_point t0 = Clock::now();
  auto big = cache.Create({Named("a", 0), Named("a", 1), Named("a", 2)}, false, t0);
  auto small = cache.Create({Named("b", 0)}, false, t0 + std::chrono::seconds(100));
  ASSERT_NE(big, nullptr);
  ASSERT_NE(small, nullptr);
  // Before two minutes, a one-partition session cannot push out either.
  EXPECT_EQ(cache.Create({Named("c", 0)}, false, t0 + std::chrono::seconds(110)), nullptr);
  // After two minutes idle, the big one goes: staleness comes before size.
  auto next = cache.Create({Named("c", 0)}, false, t0 + FetchSessionCache::kEvictionAge);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(cache.Find(big->id(), Clock::now()), nullptr);
  EXPECT_NE(cache.Find(small->id(), Clock::now()), nullptr);
}

TEST(FetchSessionCacheTest, AFullCacheGivesTheSmallestSlotToABiggerSession) {
  FetchSessionCache cache(2);
  const Clock::time_point t0 = Clock::now();
  auto two = cache.Create({Named("a", 0), Named("a", 1)}, false, t0);
  auto one = cache.Create({Named("b", 0)}, false, t0);
  ASSERT_NE(two, nullptr);
  ASSERT_NE(one, nullptr);
  // As big as the smallest: no room.
  EXPECT_EQ(cache.Create({Named("c", 0)}, false, t0), nullptr);
  auto three = cache.Create({Named("c", 0), Named("c", 1), Named("c", 2)}, false, t0);
  ASSERT_NE(three, nullptr);
  EXPECT_EQ(cache.Find(one->id(), t0), nullptr);
  EXPECT_NE(cache.Find(two->id(), t0), nullptr);
  EXPECT_EQ(cache.size(), 2u);
}

TEST(FetchSessionCacheTest, UseKeepsASessionFromGoingStale) {
  FetchSessionCache cache(1);
  const Clock::time_point t0 = Clock::now();
  auto s = cache.Create({Named("a", 0), Named("a", 1)}, false, t0);
  ASSERT_NE(s, nullptr);
  ASSERT_NE(cache.Find(s->id(), t0 + std::chrono::seconds(100)), nullptr);
  EXPECT_EQ(cache.Create({Named("b", 0)}, false, t0 + std::chrono::seconds(200)), nullptr);
  EXPECT_NE(cache.Create({Named("b", 0)}, false, t0 + std::chrono::seconds(221)), nullptr);
}

}  // namespace
}  // namespace runnel::brokerd
