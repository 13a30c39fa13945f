// DescribeTopicPartitions' answer from a metadata cache: paging by the partition limit, the
// cursor, unknown and invalid topics, refused cursors, replicas offline to the listener.
#include "brokerd/handlers/describe_topic_partitions.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "brokerd/handlers/handler.h"
#include "tests/unit/brokerd/metadata_records.h"

namespace runnel::brokerd {
namespace {

using metadata_records::AddBroker;
using metadata_records::AddTopic;
using metadata_records::Id;
using protocol::DescribeTopicPartitionsRequest;
using protocol::DescribeTopicPartitionsResponse;
using protocol::ErrorCode;
using runnel::controller::MetadataUpdate;

const std::string kListener = "PLAINTEXT";

// Topics "a" (3 partitions), "b" (2), "c" (4), on broker 1.
class DescribeTopicPartitionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MetadataUpdate snap;
    snap.set_offset(1);
    snap.set_is_snapshot(true);
    AddBroker(snap, 1, kListener, false);
    AddTopic(snap, "c", 3, 4);
    AddTopic(snap, "a", 1, 3);
    AddTopic(snap, "b", 2, 2);
    ASSERT_TRUE(cache_.Apply(snap));
  }

  DescribeTopicPartitionsResponse Describe(
      std::vector<std::string> names, int32_t limit = 2000,
      std::optional<std::pair<std::string, int32_t>> cursor = std::nullopt, int32_t cap = 2000,
      const LocalLogs& local = {}) {
    DescribeTopicPartitionsRequest req;
    for (std::string& n : names) req.topics.push_back({std::move(n), {}});
    req.response_partition_limit = limit;
    if (cursor)
      req.cursor = DescribeTopicPartitionsRequest::Cursor{cursor->first, cursor->second, {}};
    return DescribeTopicPartitions(cache_, req, kListener, cap, local);
  }

  MetadataCache cache_;
};

// "topic:partition" of every partition listed, in order.
std::vector<std::string> Listed(const DescribeTopicPartitionsResponse& resp) {
  std::vector<std::string> out;
  for (const auto& t : resp.topics) {
    for (const auto& p : t.partitions) {
      out.push_back(t.name.value_or("?") + ":" + std::to_string(p.partition_index));
    }
  }
  return out;
}

std::optional<std::pair<std::string, int32_t>> Next(const DescribeTopicPartitionsResponse& r) {
  if (!r.next_cursor) return std::nullopt;
  return std::make_pair(r.next_cursor->topic_name, r.next_cursor->partition_index);
}

TEST_F(DescribeTopicPartitionsTest, AllTopicsInNameOrderWithEveryField) {
  DescribeTopicPartitionsResponse resp = Describe({});
  ASSERT_EQ(resp.topics.size(), 3u);
  EXPECT_EQ(Listed(resp), (std::vector<std::string>{"a:0", "a:1", "a:2", "b:0", "b:1", "c:0", "c:1",
                                                    "c:2", "c:3"}));
  EXPECT_FALSE(resp.next_cursor.has_value());
  const auto& a = resp.topics[0];
  EXPECT_EQ(a.error_code, ErrorCode::kNone);
  EXPECT_EQ(a.topic_id, UuidFromBytes(Id(1)));
  EXPECT_FALSE(a.is_internal);
  EXPECT_EQ(a.topic_authorized_operations, kAllTopicOperations);
  const auto& p = a.partitions[2];
  EXPECT_EQ(p.error_code, ErrorCode::kNone);
  EXPECT_EQ(p.leader_id, NodeId(1));
  EXPECT_EQ(p.leader_epoch, 5);
  EXPECT_EQ(p.replica_nodes, std::vector<NodeId>{NodeId(1)});
  EXPECT_EQ(p.isr_nodes, std::vector<NodeId>{NodeId(1)});
  EXPECT_TRUE(p.offline_replicas.empty());
  // No ELR: empty lists, as Kafka with ELR off, never null.
  ASSERT_TRUE(p.eligible_leader_replicas.has_value());
  EXPECT_TRUE(p.eligible_leader_replicas->empty());
  ASSERT_TRUE(p.last_known_elr.has_value());
  EXPECT_TRUE(p.last_known_elr->empty());
}

TEST_F(DescribeTopicPartitionsTest, NamedTopicsAreSortedAndDeduplicated) {
  DescribeTopicPartitionsResponse resp = Describe({"c", "a", "c"});
  EXPECT_EQ(Listed(resp),
            (std::vector<std::string>{"a:0", "a:1", "a:2", "c:0", "c:1", "c:2", "c:3"}));
}

TEST_F(DescribeTopicPartitionsTest, PagesThroughEveryPartitionWithTheCursor) {
  // Limit 2 over 9 partitions: five pages, each picking up where the last stopped.
  std::vector<std::string> all;
  std::vector<std::pair<std::string, int32_t>> cursors;
  std::optional<std::pair<std::string, int32_t>> cursor;
  for (int page = 0; page < 10; ++page) {
    DescribeTopicPartitionsResponse resp = Describe({}, 2, cursor);
    std::vector<std::string> got = Listed(resp);
    EXPECT_LE(got.size(), 2u);
    all.insert(all.end(), got.begin(), got.end());
    cursor = Next(resp);
    if (!cursor) break;
    cursors.push_back(*cursor);
  }
  EXPECT_EQ(all, (std::vector<std::string>{"a:0", "a:1", "a:2", "b:0", "b:1", "c:0", "c:1", "c:2",
                                           "c:3"}));
  // A page goes on into the next topic when the limit allows.
  EXPECT_EQ(cursors,
            (std::vector<std::pair<std::string, int32_t>>{{"a", 2}, {"b", 1}, {"c", 1}, {"c", 3}}));
}

TEST_F(DescribeTopicPartitionsTest, TheBrokerCapBoundsTheRequestsLimit) {
  EXPECT_EQ(Listed(Describe({}, 2000, std::nullopt, 4)),
            (std::vector<std::string>{"a:0", "a:1", "a:2", "b:0"}));
  // A limit below 1 is taken as 1.
  DescribeTopicPartitionsResponse one = Describe({}, 0);
  EXPECT_EQ(Listed(one), std::vector<std::string>{"a:0"});
  EXPECT_EQ(Next(one), std::make_pair(std::string("a"), 1));
  EXPECT_EQ(Listed(Describe({}, -5)), std::vector<std::string>{"a:0"});
}

TEST_F(DescribeTopicPartitionsTest, AFullPageEndsWithTheNextTopicAtPartitionZero) {
  // "a" fills the page exactly: the next topic is named, and not listed.
  DescribeTopicPartitionsResponse resp = Describe({"a", "b"}, 3);
  ASSERT_EQ(resp.topics.size(), 1u);
  EXPECT_EQ(Next(resp), std::make_pair(std::string("b"), 0));
  // A topic named after the page is full is named by the cursor even when it is unknown.
  resp = Describe({"a", "nope"}, 3);
  ASSERT_EQ(resp.topics.size(), 1u);
  EXPECT_EQ(Next(resp), std::make_pair(std::string("nope"), 0));
  // The last topic filling the page exactly leaves no cursor.
  resp = Describe({"b"}, 2);
  EXPECT_EQ(Listed(resp), (std::vector<std::string>{"b:0", "b:1"}));
  EXPECT_FALSE(resp.next_cursor.has_value());
}

TEST_F(DescribeTopicPartitionsTest, CursorStartsInsideItsTopicAndSkipsEarlierNames) {
  DescribeTopicPartitionsResponse resp = Describe({"a", "b", "c"}, 2000, {{"b", 1}});
  EXPECT_EQ(Listed(resp), (std::vector<std::string>{"b:1", "c:0", "c:1", "c:2", "c:3"}));
  // With every topic, a cursor naming a topic that is gone starts at the next name.
  resp = Describe({}, 2000, {{"bb", 7}});
  EXPECT_EQ(Listed(resp), (std::vector<std::string>{"c:0", "c:1", "c:2", "c:3"}));
  // A partition index past the topic's last lists the topic with no partitions.
  resp = Describe({"b"}, 2000, {{"b", 9}});
  ASSERT_EQ(resp.topics.size(), 1u);
  EXPECT_EQ(resp.topics[0].error_code, ErrorCode::kNone);
  EXPECT_TRUE(resp.topics[0].partitions.empty());
  EXPECT_FALSE(resp.next_cursor.has_value());
}

TEST_F(DescribeTopicPartitionsTest, UnknownAndInvalidNamedTopics) {
  DescribeTopicPartitionsResponse resp =
      Describe({"zz", "a", "bad name", "__transaction_state"}, 2);
  // Name order: "__transaction_state" < "a" < "bad name" < "zz"; an unknown topic counts no
  // partitions, so the page holds a:0, a:1 and stops at a:2.
  ASSERT_EQ(resp.topics.size(), 2u);
  EXPECT_EQ(resp.topics[0].name, "__transaction_state");
  EXPECT_EQ(resp.topics[0].error_code, ErrorCode::kUnknownTopicOrPartition);
  EXPECT_TRUE(resp.topics[0].is_internal);
  EXPECT_TRUE(resp.topics[0].topic_id.IsZero());
  EXPECT_EQ(resp.topics[0].topic_authorized_operations, kAllTopicOperations);
  EXPECT_EQ(resp.topics[1].name, "a");
  EXPECT_EQ(resp.topics[1].partitions.size(), 2u);
  EXPECT_EQ(Next(resp), std::make_pair(std::string("a"), 2));

  resp = Describe({"zz", "bad name", "", "a"}, 2000, {{"a", 2}});
  ASSERT_EQ(resp.topics.size(), 3u);
  EXPECT_EQ(resp.topics[0].name, "a");
  EXPECT_EQ(resp.topics[1].name, "bad name");
  EXPECT_EQ(resp.topics[1].error_code, ErrorCode::kInvalidTopicException);
  EXPECT_EQ(resp.topics[2].name, "zz");
  EXPECT_EQ(resp.topics[2].error_code, ErrorCode::kUnknownTopicOrPartition);
  EXPECT_TRUE(resp.topics[2].partitions.empty());
}

TEST_F(DescribeTopicPartitionsTest, RefusedCursorsFailEveryNamedTopic) {
  // The cursor's topic must be one of the named ones.
  DescribeTopicPartitionsResponse resp = Describe({"b", "a", "b"}, 2000, {{"c", 0}});
  ASSERT_EQ(resp.topics.size(), 3u);
  std::vector<std::string> names;
  for (const auto& t : resp.topics) {
    names.push_back(*t.name);
    EXPECT_EQ(t.error_code, ErrorCode::kInvalidRequest);
    EXPECT_TRUE(t.partitions.empty());
    EXPECT_EQ(t.topic_authorized_operations, INT32_MIN);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"b", "a", "b"}));  // as asked
  EXPECT_FALSE(resp.next_cursor.has_value());
  // A negative partition index, named topics or not.
  resp = Describe({"a"}, 2000, {{"a", -1}});
  ASSERT_EQ(resp.topics.size(), 1u);
  EXPECT_EQ(resp.topics[0].error_code, ErrorCode::kInvalidRequest);
  EXPECT_TRUE(Describe({}, 2000, {{"a", -1}}).topics.empty());
  // With every topic, the cursor's topic need not exist (see above), and may even be "".
  EXPECT_EQ(Listed(Describe({}, 1, {{"", 0}})), std::vector<std::string>{"a:0"});
  // An empty name with no cursor: Kafka fails the request (UNKNOWN_SERVER_ERROR for all).
  resp = Describe({"a", ""});
  ASSERT_EQ(resp.topics.size(), 2u);
  EXPECT_EQ(resp.topics[0].error_code, ErrorCode::kUnknownServerError);
  EXPECT_EQ(resp.topics[1].error_code, ErrorCode::kUnknownServerError);
  // With the cursor at "", the empty name is only an invalid one.
  resp = Describe({""}, 2000, {{"", 0}});
  ASSERT_EQ(resp.topics.size(), 1u);
  EXPECT_EQ(resp.topics[0].error_code, ErrorCode::kInvalidTopicException);
  // A partition index at the top of int32 lists the topic with nothing, and no cursor.
  resp = Describe({"a"}, 2000, {{"a", INT32_MAX}});
  ASSERT_EQ(resp.topics.size(), 1u);
  EXPECT_TRUE(resp.topics[0].partitions.empty());
  EXPECT_FALSE(resp.next_cursor.has_value());
}

TEST_F(DescribeTopicPartitionsTest, LeaderAndOfflineReplicasFollowTheListener) {
  MetadataUpdate delta;
  delta.set_offset(2);
  AddBroker(delta, 2, kListener, true);    // fenced
  AddBroker(delta, 3, "INTERNAL", false);  // not on the client's listener
  AddTopic(delta, "d", 4, 1, {2, 3, 4, 1}, 3);
  AddTopic(delta, "e", 5, 1, {1}, -1);
  ASSERT_TRUE(cache_.Apply(delta));
  DescribeTopicPartitionsResponse resp = Describe({"d", "e"});
  ASSERT_EQ(resp.topics.size(), 2u);
  const auto& d = resp.topics[0].partitions.at(0);
  EXPECT_EQ(d.error_code, ErrorCode::kNone);
  EXPECT_EQ(d.leader_id, NodeId(-1));
  EXPECT_EQ(d.replica_nodes, (std::vector<NodeId>{NodeId(2), NodeId(3), NodeId(4), NodeId(1)}));
  EXPECT_EQ(d.isr_nodes, d.replica_nodes);
  EXPECT_EQ(d.offline_replicas, (std::vector<NodeId>{NodeId(2), NodeId(3), NodeId(4)}));
  const auto& e = resp.topics[1].partitions.at(0);
  EXPECT_EQ(e.error_code, ErrorCode::kNone);  // no leader is said by leader_id alone
  EXPECT_EQ(e.leader_id, NodeId(-1));
}

// A partition led here whose log storaged does not hold is not claimed: no leader, and this
// broker among its offline replicas when storaged refused to create the log.
TEST_F(DescribeTopicPartitionsTest, PartitionsWithoutALogHereHaveNoLeader) {
  PartitionView view;
  storage::PartitionChange snapshot;
  for (int32_t p : {0, 2}) {
    storage::PartitionState* s = snapshot.add_partitions();
    s->set_topic("a");
    s->set_partition(p);
    s->set_topic_id("id");
  }
  view.Apply(snapshot, /*snapshot=*/true);
  view.SetCreateFailures({{PartitionKey("a", 1), "No space left on device"}});
  DescribeTopicPartitionsResponse resp =
      Describe({"a", "b"}, 2000, std::nullopt, 2000, LocalLogs{&view, 1});
  ASSERT_EQ(resp.topics.size(), 2u);
  const auto& a = resp.topics[0].partitions;
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].leader_id, NodeId(1));
  EXPECT_TRUE(a[0].offline_replicas.empty());
  EXPECT_EQ(a[1].leader_id, NodeId(-1)) << "its creation failed";
  EXPECT_EQ(a[1].offline_replicas, std::vector<NodeId>{NodeId(1)});
  EXPECT_EQ(a[2].leader_id, NodeId(1));
  // b's logs are not there (yet): no leader, not offline.
  for (const auto& p : resp.topics[1].partitions) {
    EXPECT_EQ(p.leader_id, NodeId(-1));
    EXPECT_TRUE(p.offline_replicas.empty());
  }
  // With nothing known of storaged (restarting), the metadata stands.
  view.MarkLost();
  resp = Describe({"b"}, 2000, std::nullopt, 2000, LocalLogs{&view, 1});
  EXPECT_EQ(resp.topics[0].partitions[0].leader_id, NodeId(1));
  // Another broker's partitions are not this broker's to judge.
  view.Apply(snapshot, /*snapshot=*/true);
  resp = Describe({"b"}, 2000, std::nullopt, 2000, LocalLogs{&view, 2});
  EXPECT_EQ(resp.topics[0].partitions[0].leader_id, NodeId(1));
}

}  // namespace
}  // namespace runnel::brokerd
