#include "common/config/topic_config.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace runnel::config {
namespace {

std::string Error(const std::map<std::string, std::string>& configs) {
  Status st = ValidateTopicConfigs(configs);
  return st.ok() ? "" : std::string(st.message());
}

TEST(TopicConfigTest, KafkaDefaults) {
  struct {
    const char* key;
    const char* value;
  } cases[] = {
      {"cleanup.policy", "delete"},
      {"compression.type", "producer"},
      {"delete.retention.ms", "86400000"},
      {"file.delete.delay.ms", "60000"},
      {"flush.messages", "9223372036854775807"},
      {"flush.ms", "9223372036854775807"},
      {"index.interval.bytes", "4096"},
      {"max.compaction.lag.ms", "9223372036854775807"},
      {"max.message.bytes", "1048588"},
      {"message.downconversion.enable", "true"},
      {"message.timestamp.after.max.ms", "9223372036854775807"},
      {"message.timestamp.before.max.ms", "9223372036854775807"},
      {"message.timestamp.type", "CreateTime"},
      {"min.cleanable.dirty.ratio", "0.5"},
      {"min.compaction.lag.ms", "0"},
      {"min.insync.replicas", "1"},
      {"preallocate", "false"},
      {"retention.bytes", "-1"},
      {"retention.ms", "604800000"},
      {"segment.bytes", "1073741824"},
      {"segment.index.bytes", "10485760"},
      {"segment.jitter.ms", "0"},
      {"segment.ms", "604800000"},
      {"unclean.leader.election.enable", "false"},
  };
  for (const auto& c : cases) {
    const KeyDef* def = FindTopicKey(c.key);
    ASSERT_NE(def, nullptr) << c.key;
    EXPECT_EQ(def->default_value, c.value) << c.key;
    // Every default passes its own validation.
    EXPECT_EQ(CheckValue(*def, def->default_value), "") << c.key;
  }
  for (const KeyDef& def : AllTopicKeys()) {
    EXPECT_EQ(CheckValue(def, def.default_value), "") << def.name;
  }
  EXPECT_TRUE(std::is_sorted(AllTopicKeys().begin(), AllTopicKeys().end(),
                             [](const KeyDef& a, const KeyDef& b) { return a.name < b.name; }));
  EXPECT_EQ(FindTopicKey("no.such.key"), nullptr);
  EXPECT_EQ(FindTopicKey("num.partitions"), nullptr);  // a node key, not a topic key
}

TEST(TopicConfigTest, ValidValuesPass) {
  EXPECT_EQ(Error({}), "");
  EXPECT_EQ(Error({{"cleanup.policy", "compact"},
                   {"compression.type", "zstd"},
                   {"retention.ms", "-1"},
                   {"min.cleanable.dirty.ratio", "0.01"},
                   {"message.timestamp.type", "LogAppendTime"},
                   {"preallocate", "true"},
                   {"leader.replication.throttled.replicas", "0:1,1:2"},
                   {"follower.replication.throttled.replicas", "*"}}),
            "");
  EXPECT_EQ(Error({{"cleanup.policy", "compact,delete"}}), "");
  EXPECT_EQ(Error({{"cleanup.policy", "delete, compact"}}), "");
  EXPECT_EQ(Error({{"min.cleanable.dirty.ratio", "1"}}), "");
  EXPECT_EQ(Error({{"min.cleanable.dirty.ratio", "0"}}), "");
}

TEST(TopicConfigTest, ErrorsNameTheKey) {
  EXPECT_EQ(Error({{"retention.mss", "1"}}), "Unknown topic config name: retention.mss");
  EXPECT_EQ(Error({{"cleanup.policy", "bogus"}}),
            "Invalid value bogus for configuration cleanup.policy: 'bogus' is not one of "
            "compact, delete");
  EXPECT_EQ(Error({{"cleanup.policy", ""}}),
            "Invalid value  for configuration cleanup.policy: must be delete, compact or "
            "compact,delete");
  EXPECT_EQ(Error({{"compression.type", "brotli"}}),
            "Invalid value brotli for configuration compression.type: String must be one of: "
            "uncompressed, zstd, lz4, snappy, gzip, producer");
  EXPECT_EQ(Error({{"min.insync.replicas", "0"}}),
            "Invalid value 0 for configuration min.insync.replicas: must be between 1 and "
            "2147483647");
  EXPECT_EQ(Error({{"retention.ms", "abc"}}),
            "Invalid value abc for configuration retention.ms: not a whole number (expected "
            "long)");
  EXPECT_EQ(Error({{"retention.ms", "-2"}}),
            "Invalid value -2 for configuration retention.ms: must be between -1 and "
            "9223372036854775807");
  EXPECT_EQ(Error({{"max.message.bytes", "3000000000"}}),
            "Invalid value 3000000000 for configuration max.message.bytes: must be between 0 and "
            "2147483647");
  EXPECT_EQ(Error({{"preallocate", "yes"}}),
            "Invalid value yes for configuration preallocate: must be true or false");
  EXPECT_EQ(Error({{"min.cleanable.dirty.ratio", "1.5"}}),
            "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be "
            "between 0 and 1");
  EXPECT_EQ(Error({{"min.cleanable.dirty.ratio", "half"}}),
            "Invalid value half for configuration min.cleanable.dirty.ratio: not a number "
            "(expected double)");
  EXPECT_EQ(Error({{"message.timestamp.type", "createtime"}}),
            "Invalid value createtime for configuration message.timestamp.type: String must be "
            "one of: CreateTime, LogAppendTime");
  EXPECT_NE(Error({{"leader.replication.throttled.replicas", "0-1"}}), "");
  EXPECT_NE(Error({{"segment.bytes", "13"}}), "");
}

TEST(TopicConfigTest, EffectiveConfigsMergeDefaults) {
  auto effective = EffectiveTopicConfigs({{"retention.ms", "1000"}});
  EXPECT_EQ(effective.size(), AllTopicKeys().size());
  EXPECT_EQ(effective["retention.ms"], "1000");
  EXPECT_EQ(effective["cleanup.policy"], "delete");
}

}  // namespace
}  // namespace runnel::config
