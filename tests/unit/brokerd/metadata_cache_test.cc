#include "brokerd/controller/metadata_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/brokerd/metadata_records.h"

namespace runnel::brokerd {
namespace {

using metadata_records::AddTopic;
using metadata_records::Id;
using runnel::controller::MetadataUpdate;

MetadataUpdate Update(int64_t offset, bool snapshot) {
  MetadataUpdate u;
  u.set_offset(offset);
  u.set_is_snapshot(snapshot);
  return u;
}

TEST(MetadataCacheTest, SnapshotThenDeltas) {
  MetadataCache cache;
  EXPECT_FALSE(cache.ready());
  MetadataUpdate snap = Update(4, true);
  snap.add_records()->mutable_cluster_id()->set_cluster_id("abc");
  auto* b = snap.add_records()->mutable_register_broker();
  b->set_broker_id(1);
  auto* ep = b->add_endpoints();
  ep->set_name("PLAINTEXT");
  ep->set_host("127.0.0.1");
  ep->set_port(9092);
  AddTopic(snap, "a", 1, 3);
  ASSERT_TRUE(cache.Apply(snap));
  EXPECT_TRUE(cache.ready());
  EXPECT_EQ(cache.cluster_id(), "abc");
  ASSERT_NE(cache.FindTopic("a"), nullptr);
  EXPECT_EQ(cache.FindTopic("a")->partitions.size(), 3u);
  EXPECT_EQ(cache.brokers().at(1).endpoints.size(), 1u);

  MetadataUpdate delta = Update(5, false);
  AddTopic(delta, "b", 2, 1);
  ASSERT_TRUE(cache.Apply(delta));
  EXPECT_NE(cache.FindTopicById(UuidFromBytes(Id(2))), nullptr);

  MetadataUpdate remove = Update(6, false);
  remove.add_records()->mutable_remove_topic()->set_topic_id(Id(1));
  ASSERT_TRUE(cache.Apply(remove));
  EXPECT_EQ(cache.FindTopic("a"), nullptr);
  EXPECT_EQ(cache.FindTopicById(UuidFromBytes(Id(1))), nullptr);
  EXPECT_EQ(cache.offset(), 6);
}

TEST(MetadataCacheTest, DeltaMustFollowTheLastOffset) {
  MetadataCache cache;
  EXPECT_FALSE(cache.Apply(Update(0, false)));  // no image yet
  ASSERT_TRUE(cache.Apply(Update(3, true)));
  MetadataUpdate gap = Update(5, false);
  AddTopic(gap, "x", 9, 1);
  EXPECT_FALSE(cache.Apply(gap));
  EXPECT_EQ(cache.FindTopic("x"), nullptr);
  EXPECT_FALSE(cache.Apply(Update(3, false)));  // a resend
  EXPECT_TRUE(cache.Apply(Update(4, false)));
}

TEST(MetadataCacheTest, SnapshotReplacesEverything) {
  MetadataCache cache;
  MetadataUpdate first = Update(1, true);
  AddTopic(first, "old", 1, 1);
  ASSERT_TRUE(cache.Apply(first));
  MetadataUpdate second = Update(9, true);
  AddTopic(second, "new", 2, 2);
  ASSERT_TRUE(cache.Apply(second));
  EXPECT_EQ(cache.FindTopic("old"), nullptr);
  EXPECT_EQ(cache.topics().size(), 1u);
}

// A topic's produce/fetch counters come and go with it, and live on across a metadata image
// that still has it.
TEST(MetadataCacheTest, TopicMetricsFollowTheTopic) {
  auto bytes_in = [](const std::string& topic) -> std::optional<uint64_t> {
    for (const metrics::FamilyText& f : metrics::ProcessRegistry().Collect()) {
      if (f.name != "runnel_broker_topic_bytes_in_total") continue;
      const std::string prefix = "runnel_broker_topic_bytes_in_total{topic=\"" + topic + "\"} ";
      for (const std::string& line : f.samples) {
        if (line.rfind(prefix, 0) == 0) return std::stoull(line.substr(prefix.size()));
      }
    }
    return std::nullopt;
  };
  MetadataCache cache;
  MetadataUpdate first = Update(1, true);
  AddTopic(first, "metered", 1, 1);
  AddTopic(first, "dropped", 2, 1);
  ASSERT_TRUE(cache.Apply(first));
  ASSERT_NE(cache.FindTopic("metered")->metrics, nullptr);
  cache.FindTopic("metered")->metrics->bytes_in->Inc(7);
  EXPECT_EQ(bytes_in("metered"), 7u);
  EXPECT_EQ(bytes_in("dropped"), 0u);

  MetadataUpdate image = Update(5, true);  // "dropped" is gone, "metered" stays
  AddTopic(image, "metered", 1, 1);
  ASSERT_TRUE(cache.Apply(image));
  EXPECT_EQ(bytes_in("metered"), 7u);
  EXPECT_EQ(bytes_in("dropped"), std::nullopt);

  // Held by a call in flight when deleted: its series stays until that call lets go.
  std::shared_ptr<TopicMetrics> held = cache.FindTopic("metered")->metrics;
  MetadataUpdate remove = Update(6, false);
  remove.add_records()->mutable_remove_topic()->set_topic_id(Id(1));
  ASSERT_TRUE(cache.Apply(remove));
  EXPECT_EQ(bytes_in("metered"), 7u);
  held.reset();
  EXPECT_EQ(bytes_in("metered"), std::nullopt);
}

// After a failover the watch may reconnect to a controller that has applied less: its image
// is older than what the cache holds and must not replace it.
TEST(MetadataCacheTest, AnOlderSnapshotIsSkippedAndItsDeltasCatchUp) {
  MetadataCache cache;
  MetadataUpdate current = Update(9, true);
  AddTopic(current, "kept", 1, 1);
  AddTopic(current, "later", 2, 1);
  ASSERT_TRUE(cache.Apply(current));
  MetadataUpdate older = Update(7, true);
  AddTopic(older, "kept", 1, 1);
  EXPECT_FALSE(cache.Apply(older));
  EXPECT_NE(cache.FindTopic("later"), nullptr);
  EXPECT_EQ(cache.offset(), 9);
  EXPECT_FALSE(cache.Apply(Update(8, false)));  // the lagging controller's deltas: held
  EXPECT_FALSE(cache.Apply(Update(9, false)));
  EXPECT_TRUE(cache.Apply(Update(10, false)));
  EXPECT_EQ(cache.offset(), 10);
}

TEST(MetadataCacheTest, FollowsTheActiveControllerByEpoch) {
  MetadataCache cache;
  EXPECT_EQ(cache.active_controller(), -1);
  MetadataUpdate snap = Update(3, true);
  snap.set_leader_id(2);
  snap.set_leader_epoch(5);
  ASSERT_TRUE(cache.Apply(snap));
  EXPECT_EQ(cache.active_controller(), 2);

  // An update without a leader (its controller knew none) keeps the one known.
  ASSERT_TRUE(cache.Apply(Update(4, false)));
  EXPECT_EQ(cache.active_controller(), 2);
  // A controller that still believes in an older leader does not move it back.
  MetadataUpdate stale = Update(5, false);
  stale.set_leader_id(1);
  stale.set_leader_epoch(4);
  ASSERT_TRUE(cache.Apply(stale));
  EXPECT_EQ(cache.active_controller(), 2);
  // A new leader's epoch moves it, even on a delta the cache holds back.
  MetadataUpdate newer = Update(9, false);
  newer.set_leader_id(3);
  newer.set_leader_epoch(6);
  EXPECT_FALSE(cache.Apply(newer));
  EXPECT_EQ(cache.active_controller(), 3);
  EXPECT_EQ(cache.offset(), 5);
  // Node 0 is a valid leader id.
  MetadataUpdate zero = Update(6, false);
  zero.set_leader_id(0);
  zero.set_leader_epoch(7);
  ASSERT_TRUE(cache.Apply(zero));
  EXPECT_EQ(cache.active_controller(), 0);
}

TEST(MetadataCacheTest, WaitersRunAfterTheNextUpdate) {
  MetadataCache cache;
  int runs = 0;
  cache.OnNextUpdate([&] { ++runs; });
  EXPECT_FALSE(cache.Apply(Update(2, false)));
  EXPECT_EQ(runs, 0);
  ASSERT_TRUE(cache.Apply(Update(2, true)));
  EXPECT_EQ(runs, 1);
  ASSERT_TRUE(cache.Apply(Update(3, false)));
  EXPECT_EQ(runs, 1);
}

void AddConfig(MetadataUpdate& u, runnel::metadata::ConfigResourceType type,
               const std::string& resource, const std::string& key,
               std::optional<std::string> value) {
  auto* c = u.add_records()->mutable_config();
  c->set_resource_type(type);
  c->set_resource_name(resource);
  c->set_name(key);
  if (value) c->set_value(*value);
}

TEST(MetadataCacheTest, KeepsTopicAndBrokerConfigs) {
  using runnel::metadata::CONFIG_RESOURCE_BROKER;
  using runnel::metadata::CONFIG_RESOURCE_TOPIC;
  MetadataCache cache;
  MetadataUpdate snap = Update(1, true);
  AddTopic(snap, "t", 1, 1);
  AddConfig(snap, CONFIG_RESOURCE_TOPIC, "t", "retention.ms", "5");
  AddConfig(snap, CONFIG_RESOURCE_BROKER, "", "log.retention.ms", "7");
  AddConfig(snap, CONFIG_RESOURCE_BROKER, "1", "log.segment.bytes", "4096");
  ASSERT_TRUE(cache.Apply(snap));
  EXPECT_EQ(cache.FindTopic("t")->configs.at("retention.ms"), "5");
  EXPECT_EQ(cache.BrokerConfigs("").at("log.retention.ms"), "7");
  EXPECT_EQ(cache.BrokerConfigs("1").at("log.segment.bytes"), "4096");
  EXPECT_TRUE(cache.BrokerConfigs("2").empty());

  MetadataUpdate delta = Update(2, false);
  AddConfig(delta, CONFIG_RESOURCE_BROKER, "1", "log.segment.bytes", std::nullopt);
  AddConfig(delta, CONFIG_RESOURCE_BROKER, "", "log.cleanup.policy", "compact");
  AddConfig(delta, CONFIG_RESOURCE_TOPIC, "t", "retention.ms", std::nullopt);
  ASSERT_TRUE(cache.Apply(delta));
  EXPECT_EQ(cache.broker_configs().count("1"), 0u) << "a resource without keys is gone";
  EXPECT_EQ(cache.BrokerConfigs("").size(), 2u);
  EXPECT_TRUE(cache.FindTopic("t")->configs.empty());

  // A new image replaces the broker configs too.
  ASSERT_TRUE(cache.Apply(Update(5, true)));
  EXPECT_TRUE(cache.broker_configs().empty());
}

// OnApplied listeners hear what each update changed: topics created, removed or
// reconfigured; partitions added or moved (not a leader or ISR change); broker configs.
TEST(MetadataCacheTest, ListenersHearWhatAnUpdateChanged) {
  MetadataCache cache;
  std::vector<MetadataChanges> heard;
  cache.OnApplied([&](const MetadataChanges& c) { heard.push_back(c); });
  MetadataUpdate snap = Update(1, true);
  AddTopic(snap, "a", 1, 3);
  ASSERT_TRUE(cache.Apply(snap));
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_TRUE(heard[0].image);

  MetadataUpdate delta = Update(2, false);
  AddTopic(delta, "b", 2, 2);  // its partitions come with it: the topic alone
  auto partition = [&](int32_t id, std::vector<int32_t> replicas, int32_t leader) {
    auto* r = delta.add_records()->mutable_partition();
    r->set_topic_id(Id(1));
    r->set_partition_id(id);
    for (int32_t b : replicas) r->add_replicas(b);
    r->set_leader(leader);
  };
  partition(0, {1}, 1);     // the same replicas, the same leader: nothing
  partition(1, {1, 2}, 1);  // moved
  partition(2, {1}, 2);     // another leader only
  partition(3, {2}, 2);     // added
  auto* config = delta.add_records()->mutable_config();
  config->set_resource_type(runnel::metadata::CONFIG_RESOURCE_BROKER);
  config->set_resource_name("");
  config->set_name("log.retention.ms");
  config->set_value("1000");
  ASSERT_TRUE(cache.Apply(delta));
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_FALSE(heard[1].image);
  EXPECT_EQ(heard[1].topics, (std::set<std::string>{"b"}));
  EXPECT_EQ(heard[1].placements, (std::set<std::pair<std::string, int32_t>>{{"a", 1}, {"a", 3}}));
  EXPECT_EQ(heard[1].broker_configs, (std::set<std::string>{""}));

  MetadataUpdate more = Update(3, false);
  config = more.add_records()->mutable_config();
  config->set_resource_type(runnel::metadata::CONFIG_RESOURCE_TOPIC);
  config->set_resource_name("a");
  config->set_name("retention.ms");
  config->set_value("1");
  more.add_records()->mutable_remove_topic()->set_topic_id(Id(2));
  ASSERT_TRUE(cache.Apply(more));
  ASSERT_EQ(heard.size(), 3u);
  EXPECT_EQ(heard[2].topics, (std::set<std::string>{"a", "b"}));
  EXPECT_TRUE(heard[2].placements.empty());

  EXPECT_FALSE(cache.Apply(Update(9, false)));  // not applied: not heard of
  EXPECT_EQ(heard.size(), 3u);
}

}  // namespace
}  // namespace runnel::brokerd
