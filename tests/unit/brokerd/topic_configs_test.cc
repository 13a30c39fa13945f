#include "brokerd/controller/topic_configs.h"

#include <gtest/gtest.h>

#include "common/config/synonyms.h"
#include "common/config/topic_config.h"

namespace runnel::brokerd {
namespace {

using runnel::controller::MetadataUpdate;
using runnel::metadata::CONFIG_RESOURCE_BROKER;
using Map = std::map<std::string, std::string>;
using S = ConfigSource;

constexpr int32_t kNode = 1;

config::Config File(const Map& values) {
  auto c = config::Config::FromMap(values);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : config::Config();
}

// A cache holding the given dynamic broker configs ("" = cluster default, "1" = this node).
MetadataCache CacheWith(const std::map<std::string, Map>& broker_configs) {
  MetadataCache cache;
  MetadataUpdate u;
  u.set_offset(1);
  u.set_is_snapshot(true);
  for (const auto& [resource, configs] : broker_configs) {
    for (const auto& [key, value] : configs) {
      auto* c = u.add_records()->mutable_config();
      c->set_resource_type(CONFIG_RESOURCE_BROKER);
      c->set_resource_name(resource);
      c->set_name(key);
      c->set_value(value);
    }
  }
  EXPECT_TRUE(cache.Apply(u));
  return cache;
}

TopicInfo Topic(const Map& configs = {}) {
  TopicInfo t;
  t.name = "t";
  t.configs = configs;
  return t;
}

const DescribedConfig& Find(const std::vector<DescribedConfig>& configs, const std::string& name) {
  for (const auto& c : configs) {
    if (c.name == name) return c;
  }
  static const DescribedConfig kMissing;
  ADD_FAILURE() << name << " not described";
  return kMissing;
}

std::vector<DescribedConfig> DescribeTopic(const config::Config& file, const MetadataCache& cache,
                                           const TopicInfo& topic) {
  return DescribeTopicConfigs(NodeConfigView::Of(file, cache, kNode), topic);
}

TEST(SynonymTableTest, AgreesWithTheKeyDeclarations) {
  for (const config::TopicSynonyms& t : config::AllTopicSynonyms()) {
    const config::KeyDef* topic_def = config::FindTopicKey(t.topic_key);
    ASSERT_NE(topic_def, nullptr) << t.topic_key;
    ASSERT_FALSE(t.node_keys.empty()) << t.topic_key;
    for (const config::NodeSynonym& s : t.node_keys) {
      const config::KeyDef* node_def = config::FindKey(s.name);
      ASSERT_NE(node_def, nullptr) << s.name;
      EXPECT_TRUE(config::IsDynamicNodeKey(s.name)) << s.name;
      // Every form of a node key defaults to the topic config's default.
      EXPECT_EQ(config::ToTopicUnit(s, std::string(node_def->default_value)),
                topic_def->default_value)
          << s.name << " vs " << t.topic_key;
    }
  }
  EXPECT_FALSE(config::IsDynamicNodeKey("log.dirs"));
  EXPECT_FALSE(config::IsDynamicNodeKey("node.id"));
  EXPECT_FALSE(config::IsDynamicNodeKey("log.flush.scheduler.interval.ms"));
  EXPECT_EQ(config::NodeKeyGroup("log.retention.minutes"),
            (std::vector<std::string_view>{"log.retention.ms", "log.retention.minutes",
                                           "log.retention.hours"}));
  EXPECT_EQ(config::NodeKeyGroup("node.id"), (std::vector<std::string_view>{"node.id"}));
}

TEST(TopicConfigsTest, DefaultsOnly) {
  config::Config file = File({});
  MetadataCache cache = CacheWith({});
  auto configs = DescribeTopic(file, cache, Topic());
  ASSERT_EQ(configs.size(), config::AllTopicKeys().size());
  for (const auto& c : configs) {
    const config::KeyDef* def = config::FindTopicKey(c.name);
    ASSERT_NE(def, nullptr) << c.name;
    EXPECT_EQ(c.value, std::string(def->default_value)) << c.name;
    EXPECT_EQ(c.source, S::kDefault) << c.name;
    EXPECT_FALSE(c.read_only) << c.name;
    EXPECT_FALSE(c.sensitive) << c.name;
    EXPECT_FALSE(c.documentation.empty()) << c.name;
  }
  // As Kafka 4.4 lists them: log.retention.ms has no default in Kafka (log.retention.hours
  // gives it), so retention.ms has no synonym, like segment.ms and flush.ms.
  EXPECT_TRUE(Find(configs, "retention.ms").synonyms.empty());
  EXPECT_TRUE(Find(configs, "segment.ms").synonyms.empty());
  EXPECT_TRUE(Find(configs, "flush.ms").synonyms.empty());
  EXPECT_EQ(Find(configs, "max.message.bytes").synonyms,
            (std::vector<ConfigSynonym>{{"message.max.bytes", "1048588", S::kDefault}}));
  // Kafka's broker keys that Runnel does not declare: their defaults.
  EXPECT_EQ(Find(configs, "compression.type").synonyms,
            (std::vector<ConfigSynonym>{{"compression.type", "producer", S::kDefault}}));
  EXPECT_EQ(Find(configs, "local.retention.ms").synonyms,
            (std::vector<ConfigSynonym>{{"log.local.retention.ms", "-2", S::kDefault}}));
  EXPECT_EQ(Find(configs, "min.insync.replicas").synonyms,
            (std::vector<ConfigSynonym>{{"min.insync.replicas", "1", S::kDefault}}));
  // Topic-only keys.
  EXPECT_TRUE(Find(configs, "remote.storage.enable").synonyms.empty());
  EXPECT_TRUE(Find(configs, "errors.deadletterqueue.group.enable").synonyms.empty());
  // Kafka's type ids.
  EXPECT_EQ(Find(configs, "retention.ms").type, 5);
  EXPECT_EQ(Find(configs, "segment.bytes").type, 3);
  EXPECT_EQ(Find(configs, "cleanup.policy").type, 7);
  EXPECT_EQ(Find(configs, "preallocate").type, 1);
  EXPECT_EQ(Find(configs, "compression.type").type, 2);
  EXPECT_EQ(Find(configs, "min.cleanable.dirty.ratio").type, 6);
}

TEST(TopicConfigsTest, StaticNodeKeysAndUnits) {
  MetadataCache cache = CacheWith({});
  auto configs = DescribeTopic(
      File({{"log.retention.hours", "2"}, {"log.segment.bytes", "4096"}, {"log.roll.hours", "1"}}),
      cache, Topic());
  const auto& retention = Find(configs, "retention.ms");
  // Kafka drops the synonyms before log.retention.ms's first one: none here, so the source
  // is DEFAULT_CONFIG although the value is the hours' (as a Kafka 4.4 node shows it).
  EXPECT_EQ(retention.value, "7200000");
  EXPECT_EQ(retention.source, S::kDefault);
  EXPECT_TRUE(retention.synonyms.empty());
  EXPECT_EQ(Find(configs, "segment.bytes").value, "4096");
  EXPECT_EQ(Find(configs, "segment.bytes").source, S::kStaticBroker);
  EXPECT_EQ(Find(configs, "segment.ms").value, "3600000");
  configs = DescribeTopic(File({{"log.retention.hours", "-1"}}), cache, Topic());
  EXPECT_EQ(Find(configs, "retention.ms").value, "-1") << "a negative coarse duration is -1";

  // The finest unit set wins within a level.
  configs = DescribeTopic(File({{"log.retention.hours", "2"}, {"log.retention.ms", "100"}}), cache,
                          Topic());
  EXPECT_EQ(Find(configs, "retention.ms").value, "100");
  EXPECT_EQ(Find(configs, "retention.ms").synonyms,
            (std::vector<ConfigSynonym>{{"log.retention.ms", "100", S::kStaticBroker},
                                        {"log.retention.hours", "2", S::kStaticBroker},
                                        {"log.retention.hours", "168", S::kDefault}}));
}

TEST(TopicConfigsTest, EveryLevelInKafkasOrder) {
  config::Config file = File({{"log.retention.ms", "100"}});
  MetadataCache cache =
      CacheWith({{"", {{"log.retention.ms", "5000"}}},
                 {"1", {{"log.retention.minutes", "3"}}},
                 {"2", {{"log.retention.ms", "1"}}}});  // another node's: not ours
  auto configs = DescribeTopic(file, cache, Topic({{"retention.ms", "42"}}));
  const auto& r = Find(configs, "retention.ms");
  EXPECT_EQ(r.value, "42");
  EXPECT_EQ(r.source, S::kTopic);
  EXPECT_EQ(r.synonyms, (std::vector<ConfigSynonym>{
                            {"retention.ms", "42", S::kTopic},
                            // Kafka drops what comes before log.retention.ms's first entry
                            // (this node's log.retention.minutes), and log.retention.ms has no
                            // default in Kafka: log.retention.hours' is listed.
                            {"log.retention.ms", "5000", S::kDynamicDefaultBroker},
                            {"log.retention.ms", "100", S::kStaticBroker},
                            {"log.retention.hours", "168", S::kDefault},
                        }));
  // Without the topic's own value this node's dynamic one (in minutes) wins in Runnel, as
  // storaged resolves it; the source is the first synonym, as Kafka reports it. (Kafka merges
  // the levels per key name before picking the finest unit, so it would take the cluster's
  // log.retention.ms=5000: a known difference, in a mix of units across levels.)
  configs = DescribeTopic(file, cache, Topic());
  EXPECT_EQ(Find(configs, "retention.ms").value, "180000");
  EXPECT_EQ(Find(configs, "retention.ms").source, S::kDynamicDefaultBroker);
  // Then the cluster-wide one.
  MetadataCache cluster_only = CacheWith({{"", {{"log.retention.ms", "5000"}}}});
  configs = DescribeTopic(file, cluster_only, Topic());
  EXPECT_EQ(Find(configs, "retention.ms").value, "5000");
  EXPECT_EQ(Find(configs, "retention.ms").source, S::kDynamicDefaultBroker);
}

TEST(TopicConfigsTest, OneValueAgreesWithTheDescription) {
  struct Setup {
    config::Config file;
    MetadataCache cache;
    TopicInfo topic;
  };
  std::vector<Setup> setups;
  setups.push_back({File({}), CacheWith({}), Topic()});
  setups.push_back(
      {File({{"log.retention.hours", "2"}, {"min.insync.replicas", "2"}}), CacheWith({}), Topic()});
  setups.push_back({File({{"log.retention.ms", "100"}, {"min.insync.replicas", "2"}}),
                    CacheWith({{"", {{"log.retention.ms", "5000"}, {"min.insync.replicas", "3"}}},
                               {"1", {{"log.retention.minutes", "3"}}},
                               {"2", {{"min.insync.replicas", "9"}}}}),
                    Topic()});
  setups.push_back({File({{"min.insync.replicas", "2"}}),
                    CacheWith({{"1", {{"min.insync.replicas", "4"}}}}),
                    Topic({{"min.insync.replicas", "5"}, {"retention.ms", "42"}})});
  for (size_t i = 0; i < setups.size(); ++i) {
    const NodeConfigView node = NodeConfigView::Of(setups[i].file, setups[i].cache, kNode);
    for (const DescribedConfig& c : DescribeTopicConfigs(node, setups[i].topic)) {
      if (c.sensitive) continue;
      EXPECT_EQ(TopicConfigValue(node, setups[i].topic, c.name), c.value)
          << "setup " << i << ": " << c.name;
    }
  }
  // min.insync.replicas by level: topic, this node's dynamic, cluster-wide, file, default.
  auto min_isr = [](const Setup& s) {
    return TopicConfigValue(NodeConfigView::Of(s.file, s.cache, kNode), s.topic,
                            "min.insync.replicas");
  };
  EXPECT_EQ(min_isr(setups[0]), "1");
  EXPECT_EQ(min_isr(setups[1]), "2");
  EXPECT_EQ(min_isr(setups[2]), "3") << "another node's dynamic value is not ours";
  EXPECT_EQ(min_isr(setups[3]), "5");
  setups[3].topic = Topic();
  EXPECT_EQ(min_isr(setups[3]), "4");
}

TEST(TopicConfigsTest, BrokerResource) {
  config::Config file = File({{"log.retention.ms", "100"},
                              {"log.segment.bytes", "4096"},
                              {"some.plugin.password", "hunter2"}});
  MetadataCache cache = CacheWith({{"1", {{"log.segment.bytes", "2048"}}}});
  auto configs = DescribeBrokerConfigs(NodeConfigView::Of(file, cache, kNode));
  EXPECT_EQ(configs.size(), config::AllKeys().size() + 1);

  const auto& segment = Find(configs, "log.segment.bytes");
  EXPECT_EQ(segment.value, "2048");
  EXPECT_EQ(segment.source, S::kDynamicBroker);
  EXPECT_FALSE(segment.read_only);
  EXPECT_EQ(segment.synonyms,
            (std::vector<ConfigSynonym>{{"log.segment.bytes", "2048", S::kDynamicBroker},
                                        {"log.segment.bytes", "4096", S::kStaticBroker},
                                        {"log.segment.bytes", "1073741824", S::kDefault}}));
  // A key's own value: log.retention.ms set in the file is not log.retention.hours' value
  // (Kafka drops the synonyms before the key's own first entry).
  const auto& hours = Find(configs, "log.retention.hours");
  EXPECT_EQ(hours.value, "168");
  EXPECT_EQ(hours.source, S::kDefault);
  EXPECT_EQ(hours.synonyms,
            (std::vector<ConfigSynonym>{{"log.retention.hours", "168", S::kDefault}}));
  EXPECT_EQ(Find(configs, "log.retention.ms").source, S::kStaticBroker);
  EXPECT_TRUE(Find(configs, "log.dirs").read_only);
  EXPECT_TRUE(Find(configs, "node.id").read_only);
  EXPECT_EQ(Find(configs, "node.id").type, 3);
  // A key Runnel does not know: listed, never shown.
  const auto& unknown = Find(configs, "some.plugin.password");
  EXPECT_TRUE(unknown.sensitive);
  EXPECT_EQ(unknown.value, std::nullopt);
  EXPECT_EQ(unknown.source, S::kStaticBroker);
  EXPECT_EQ(unknown.synonyms.at(0).value, std::nullopt);
}

TEST(TopicConfigsTest, ClusterDefaultResourceListsOnlyItsOwnKeys) {
  config::Config file = File({{"log.retention.ms", "100"}});
  MetadataCache cache = CacheWith({{"", {{"log.retention.hours", "3"}, {"message.max.bytes", "9"}}},
                                   {"1", {{"log.retention.hours", "4"}}}});
  auto configs = DescribeClusterDefaultConfigs(NodeConfigView::Of(file, cache, kNode));
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(configs[0].name, "log.retention.hours");
  EXPECT_EQ(configs[0].value, "3");
  EXPECT_EQ(configs[0].source, S::kDynamicDefaultBroker);
  EXPECT_EQ(configs[0].synonyms,
            (std::vector<ConfigSynonym>{{"log.retention.hours", "3", S::kDynamicDefaultBroker}}));
  EXPECT_EQ(configs[1].name, "message.max.bytes");
  EXPECT_EQ(configs[1].value, "9");
}

TEST(TopicConfigsTest, StorageConfigsForTopic) {
  MetadataCache cache = CacheWith({{"",
                                    {{"log.retention.hours", "2"},
                                     {"log.segment.bytes", "8192"},
                                     {"message.max.bytes", "5000"}}},
                                   {"1", {{"log.segment.bytes", "4096"}}},
                                   {"7", {{"log.cleanup.policy", "compact"}}}});
  cache.set_local_node_id(kNode);
  auto out = StorageConfigsFor(cache, Topic({{"max.message.bytes", "100"}, {"flush.ms", "5"}}));
  EXPECT_EQ(out, (Map{{"flush.ms", "5"},             // the topic's own
                      {"max.message.bytes", "100"},  // the topic's wins over the default
                      {"retention.ms", "7200000"},   // cluster default, in ms
                      {"segment.bytes", "4096"}}));  // this node's over the cluster's
  // Nothing dynamic: just the topic's own (storaged reads its file for the rest).
  EXPECT_EQ(StorageConfigsFor(CacheWith({}), Topic({{"retention.ms", "1"}})),
            (Map{{"retention.ms", "1"}}));
  // Without its node id the cache knows only the cluster-wide defaults.
  cache.set_local_node_id(-1);
  EXPECT_EQ(StorageConfigsFor(cache, Topic()).at("segment.bytes"), "8192");
}

}  // namespace
}  // namespace runnel::brokerd
