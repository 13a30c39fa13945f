#include "brokerd/group/assignors.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace runnel::brokerd::group {
namespace {

using protocol::Uuid;

const Uuid kT1 = Uuid::FromBits(1, 1);
const Uuid kT2 = Uuid::FromBits(2, 2);
const Uuid kT3 = Uuid::FromBits(3, 3);

AssignmentSpec::Member Sub(std::set<Uuid> topics, Assignment current = {},
                           std::optional<std::string> instance = std::nullopt) {
  AssignmentSpec::Member m;
  m.topics = std::move(topics);
  m.current = std::move(current);
  m.instance_id = std::move(instance);
  return m;
}

// Every partition of every subscribed topic is owned by exactly one member subscribed to it.
void ExpectComplete(const AssignmentSpec& spec, const std::map<std::string, Assignment>& out) {
  ASSERT_EQ(out.size(), spec.members.size());
  std::set<std::pair<Uuid, int32_t>> seen;
  for (const auto& [id, a] : out) {
    for (const auto& [t, ps] : a) {
      EXPECT_TRUE(spec.members.at(id).topics.contains(t)) << id << " not subscribed";
      for (int32_t p : ps) {
        EXPECT_LT(p, spec.partitions_per_topic.at(t));
        EXPECT_TRUE(seen.insert({t, p}).second) << id << " got a partition twice";
      }
    }
  }
  size_t expected = 0;
  for (const auto& [t, n] : spec.partitions_per_topic) {
    bool subscribed = false;
    for (const auto& [id, m] : spec.members) subscribed |= m.topics.contains(t);
    if (subscribed) expected += n;
  }
  EXPECT_EQ(seen.size(), expected);
}

TEST(UniformAssignorTest, HomogeneousIsBalanced) {
  UniformAssignor a;
  for (int members = 1; members <= 7; ++members) {
    AssignmentSpec spec;
    spec.partitions_per_topic = {{kT1, 6}, {kT2, 5}};
    for (int i = 0; i < members; ++i) spec.members["m" + std::to_string(i)] = Sub({kT1, kT2});
    auto out = a.Assign(spec);
    ExpectComplete(spec, out);
    size_t lo = 11 / members, hi = (11 + members - 1) / members;
    for (const auto& [id, as] : out) {
      EXPECT_GE(PartitionCount(as), lo) << members;
      EXPECT_LE(PartitionCount(as), hi) << members;
    }
  }
}

TEST(UniformAssignorTest, StickyWhenAMemberJoinsAndLeaves) {
  UniformAssignor a;
  AssignmentSpec spec;
  spec.partitions_per_topic = {{kT1, 6}};
  spec.members["a"] = Sub({kT1});
  spec.members["b"] = Sub({kT1});
  auto two = a.Assign(spec);
  ExpectComplete(spec, two);
  EXPECT_EQ(PartitionCount(two["a"]), 3u);

  // A third member: a and b each give up exactly one partition and keep the rest.
  spec.members["a"].current = two["a"];
  spec.members["b"].current = two["b"];
  spec.members["c"] = Sub({kT1});
  auto three = a.Assign(spec);
  ExpectComplete(spec, three);
  for (const std::string id : {"a", "b"}) {
    EXPECT_EQ(PartitionCount(three[id]), 2u);
    for (int32_t p : three[id][kT1]) EXPECT_TRUE(two[id][kT1].contains(p)) << id << " moved";
  }
  EXPECT_EQ(PartitionCount(three["c"]), 2u);

  // c leaves: a and b keep theirs and split c's.
  spec.members.erase("c");
  spec.members["a"].current = three["a"];
  spec.members["b"].current = three["b"];
  auto back = a.Assign(spec);
  ExpectComplete(spec, back);
  for (const std::string id : {"a", "b"}) {
    EXPECT_EQ(PartitionCount(back[id]), 3u);
    for (int32_t p : three[id][kT1]) EXPECT_TRUE(back[id][kT1].contains(p));
  }
}

TEST(UniformAssignorTest, DropsWhatIsNoLongerSubscribedOrExists) {
  UniformAssignor a;
  AssignmentSpec spec;
  spec.partitions_per_topic = {{kT1, 2}};
  // a held t2 (unsubscribed now) and t1-5 (the topic shrank: recreated with 2 partitions).
  spec.members["a"] = Sub({kT1}, {{kT2, {0}}, {kT1, {0, 5}}});
  spec.members["b"] = Sub({kT1}, {{kT1, {0}}});  // a duplicate claim: a keeps it (id order)
  auto out = a.Assign(spec);
  ExpectComplete(spec, out);
  EXPECT_EQ(out["a"], (Assignment{{kT1, {0}}}));
  EXPECT_EQ(out["b"], (Assignment{{kT1, {1}}}));
}

TEST(UniformAssignorTest, HeterogeneousSubscriptions) {
  UniformAssignor a;
  AssignmentSpec spec;
  spec.partitions_per_topic = {{kT1, 3}, {kT2, 3}, {kT3, 2}};
  spec.members["a"] = Sub({kT1});
  spec.members["b"] = Sub({kT1, kT2});
  spec.members["c"] = Sub({kT2, kT3});
  auto out = a.Assign(spec);
  ExpectComplete(spec, out);
  // 8 partitions over 3 members, each topic only to its subscribers: 3/3/2 is reachable.
  std::multiset<size_t> counts;
  for (const auto& [id, as] : out) counts.insert(PartitionCount(as));
  EXPECT_EQ(counts, (std::multiset<size_t>{2, 3, 3}));
  // Deterministic.
  EXPECT_EQ(a.Assign(spec), out);
}

TEST(UniformAssignorTest, NoMembersOrNoTopics) {
  UniformAssignor a;
  AssignmentSpec spec;
  spec.partitions_per_topic = {{kT1, 3}};
  EXPECT_TRUE(a.Assign(spec).empty());
  spec.members["a"] = Sub({});
  auto out = a.Assign(spec);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out["a"].empty());
}

TEST(RangeAssignorTest, ContiguousRangesPerTopic) {
  RangeAssignor a;
  AssignmentSpec spec;
  spec.partitions_per_topic = {{kT1, 7}, {kT2, 7}};
  spec.members["b"] = Sub({kT1, kT2});
  spec.members["a"] = Sub({kT1, kT2});
  spec.members["c"] = Sub({kT1, kT2});
  auto out = a.Assign(spec);
  ExpectComplete(spec, out);
  EXPECT_EQ(out["a"], (Assignment{{kT1, {0, 1, 2}}, {kT2, {0, 1, 2}}}));
  EXPECT_EQ(out["b"], (Assignment{{kT1, {3, 4}}, {kT2, {3, 4}}}));
  EXPECT_EQ(out["c"], (Assignment{{kT1, {5, 6}}, {kT2, {5, 6}}}));
}

TEST(RangeAssignorTest, StaticMembersFirstAndHeterogeneous) {
  RangeAssignor a;
  AssignmentSpec spec;
  spec.partitions_per_topic = {{kT1, 4}, {kT2, 2}};
  spec.members["a"] = Sub({kT1});
  spec.members["z"] = Sub({kT1, kT2}, {}, "instance-1");
  auto out = a.Assign(spec);
  ExpectComplete(spec, out);
  EXPECT_EQ(out["z"], (Assignment{{kT1, {0, 1}}, {kT2, {0, 1}}}));
  EXPECT_EQ(out["a"], (Assignment{{kT1, {2, 3}}}));
}

TEST(AssignorTest, FindByName) {
  ASSERT_NE(FindAssignor("uniform"), nullptr);
  EXPECT_EQ(FindAssignor("uniform")->name(), "uniform");
  ASSERT_NE(FindAssignor("range"), nullptr);
  EXPECT_EQ(FindAssignor("range")->name(), "range");
  EXPECT_EQ(FindAssignor("sticky"), nullptr);
}

}  // namespace
}  // namespace runnel::brokerd::group
