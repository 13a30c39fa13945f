#include "common/config/topic_config.h"

#include <fmt/format.h>
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
      {"compression.gzip.level", "-1"},
      {"compression.lz4.level", "9"},
      {"compression.type", "producer"},
      {"compression.zstd.level", "3"},
      {"delete.retention.ms", "86400000"},
      {"errors.deadletterqueue.group.enable", "false"},
      {"file.delete.delay.ms", "60000"},
      {"flush.messages", "9223372036854775807"},
      {"flush.ms", "9223372036854775807"},
      {"index.interval.bytes", "4096"},
      {"max.compaction.lag.ms", "9223372036854775807"},
      {"local.retention.bytes", "-2"},
      {"local.retention.ms", "-2"},
      {"max.decompressed.message.bytes", "2147483639"},
      {"max.message.bytes", "1048588"},
      {"message.timestamp.after.max.ms", "3600000"},  // Kafka 4 (KIP-1030)
      {"message.timestamp.before.max.ms", "9223372036854775807"},
      {"message.timestamp.type", "CreateTime"},
      {"min.cleanable.dirty.ratio", "0.5"},
      {"min.compaction.lag.ms", "0"},
      {"min.insync.replicas", "1"},
      {"preallocate", "false"},
      {"remote.copy.lag.bytes", "-1"},
      {"remote.copy.lag.ms", "0"},
      {"remote.log.copy.disable", "false"},
      {"remote.log.delete.on.disable", "false"},
      {"remote.storage.enable", "false"},
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
  // Kafka 4.4's set, no more: the test's list above is all of it.
  EXPECT_EQ(AllTopicKeys().size(), std::size(cases) + 2);  // + the two throttled-replicas lists
  EXPECT_EQ(FindTopicKey("message.downconversion.enable"), nullptr);  // gone in Kafka 4.0
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
            "Invalid value bogus for configuration cleanup.policy: String must be one of: "
            "compact, delete");
  EXPECT_EQ(Error({{"cleanup.policy", "compact,Delete"}}),
            "Invalid value Delete for configuration cleanup.policy: String must be one of: "
            "compact, delete");
  EXPECT_EQ(Error({{"cleanup.policy", "delete,delete"}}), "");
  EXPECT_EQ(Error({{"cleanup.policy", ""}}),
            "Invalid value  for configuration cleanup.policy: must be delete, compact or "
            "compact,delete");
  EXPECT_EQ(Error({{"compression.type", "brotli"}}),
            "Invalid value brotli for configuration compression.type: String must be one of: "
            "uncompressed, zstd, lz4, snappy, gzip, producer");
  EXPECT_EQ(Error({{"min.insync.replicas", "0"}}),
            "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1");
  EXPECT_EQ(Error({{"retention.ms", "abc"}}),
            "Invalid value abc for configuration retention.ms: Not a number of type LONG");
  EXPECT_EQ(Error({{"retention.ms", "-2"}}),
            "Invalid value -2 for configuration retention.ms: Value must be at least -1");
  EXPECT_EQ(Error({{"max.message.bytes", "3000000000"}}),
            "Invalid value 3000000000 for configuration max.message.bytes: Not a number of type "
            "INT");
  EXPECT_EQ(Error({{"preallocate", "yes"}}),
            "Invalid value yes for configuration preallocate: Expected value to be either true "
            "or false");
  EXPECT_EQ(Error({{"preallocate", "TRUE"}, {"retention.ms", " +5 "}}), "");
  EXPECT_EQ(Error({{"min.cleanable.dirty.ratio", "1.5"}}),
            "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no "
            "more than 1");
  EXPECT_EQ(Error({{"min.cleanable.dirty.ratio", "half"}}),
            "Invalid value half for configuration min.cleanable.dirty.ratio: Not a number of "
            "type DOUBLE");
  EXPECT_EQ(Error({{"message.timestamp.type", "createtime"}}),
            "Invalid value createtime for configuration message.timestamp.type: String must be "
            "one of: CreateTime, LogAppendTime");
  EXPECT_EQ(Error({{"leader.replication.throttled.replicas", "0-1"}}),
            "Invalid value [0-1] for configuration leader.replication.throttled.replicas: "
            "leader.replication.throttled.replicas must be the literal '*' or a list of replicas "
            "in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...");
  EXPECT_NE(Error({{"segment.bytes", "13"}}), "");
}

// Kafka 4.4's answers, checked against a Kafka 4.4 node.
TEST(TopicConfigTest, RemovedKeysAreUnknown) {
  EXPECT_EQ(Error({{"message.downconversion.enable", "true"}}),
            "Unknown topic config name: message.downconversion.enable");
}

TEST(TopicConfigTest, CompressionLevels) {
  for (const char* ok : {"-1", "1", "9", " 5"}) {
    EXPECT_EQ(Error({{"compression.gzip.level", ok}}), "") << ok;
  }
  for (const char* bad : {"0", "10", "-2"}) {
    EXPECT_EQ(Error({{"compression.gzip.level", bad}}),
              fmt::format("Invalid value {} for configuration compression.gzip.level: Value "
                          "must be between 1 and 9 or equal to -1",
                          bad));
  }
  EXPECT_EQ(Error({{"compression.gzip.level", "x"}}),
            "Invalid value x for configuration compression.gzip.level: Not a number of type INT");
  EXPECT_EQ(Error({{"compression.lz4.level", "1"}}), "");
  EXPECT_EQ(Error({{"compression.lz4.level", "17"}}), "");
  EXPECT_EQ(Error({{"compression.lz4.level", "0"}}),
            "Invalid value 0 for configuration compression.lz4.level: Value must be at least 1");
  EXPECT_EQ(Error({{"compression.lz4.level", "18"}}),
            "Invalid value 18 for configuration compression.lz4.level: Value must be no more "
            "than 17");
  EXPECT_EQ(Error({{"compression.zstd.level", "-131072"}}), "");
  EXPECT_EQ(Error({{"compression.zstd.level", "0"}}), "");
  EXPECT_EQ(Error({{"compression.zstd.level", "22"}}), "");
  EXPECT_EQ(Error({{"compression.zstd.level", "-131073"}}),
            "Invalid value -131073 for configuration compression.zstd.level: Value must be at "
            "least -131072");
  EXPECT_EQ(Error({{"compression.zstd.level", "23"}}),
            "Invalid value 23 for configuration compression.zstd.level: Value must be no more "
            "than 22");
}

TEST(TopicConfigTest, NewKafka4Keys) {
  EXPECT_EQ(Error({{"max.decompressed.message.bytes", "1"},
                   {"remote.copy.lag.bytes", "-1"},
                   {"remote.copy.lag.ms", "-1"},
                   {"remote.log.copy.disable", "true"},
                   {"remote.log.delete.on.disable", "true"},
                   {"errors.deadletterqueue.group.enable", "true"}}),
            "");
  EXPECT_EQ(Error({{"max.decompressed.message.bytes", "0"}}),
            "Invalid value 0 for configuration max.decompressed.message.bytes: Value must be at "
            "least 1");
  EXPECT_EQ(Error({{"remote.copy.lag.bytes", "-2"}}),
            "Invalid value -2 for configuration remote.copy.lag.bytes: Value must be at least -1");
  EXPECT_EQ(Error({{"remote.copy.lag.ms", "-2"}}),
            "Invalid value -2 for configuration remote.copy.lag.ms: Value must be at least -1");
  EXPECT_EQ(Error({{"errors.deadletterqueue.group.enable", "maybe"}}),
            "Invalid value maybe for configuration errors.deadletterqueue.group.enable: Expected "
            "value to be either true or false");
  EXPECT_EQ(Error({{"message.timestamp.after.max.ms", "-1"}}),
            "Invalid value -1 for configuration message.timestamp.after.max.ms: Value must be at "
            "least 0");
}

TEST(TopicConfigTest, TieredStorageIsRefused) {
  EXPECT_EQ(Error({{"remote.storage.enable", "false"}}), "");
  for (const char* on : {"true", "TRUE"}) {
    EXPECT_EQ(Error({{"remote.storage.enable", on}}),
              "Tiered Storage functionality is disabled in the broker. Topic cannot be "
              "configured with remote log storage.")
        << on;
  }
  // A bad value elsewhere is reported first.
  EXPECT_EQ(Error({{"remote.storage.enable", "true"}, {"segment.ms", "0"}}),
            "Invalid value 0 for configuration segment.ms: Value must be at least 1");
}

TEST(TopicConfigTest, EffectiveConfigsMergeDefaults) {
  auto effective = EffectiveTopicConfigs({{"retention.ms", "1000"}});
  EXPECT_EQ(effective.size(), AllTopicKeys().size());
  EXPECT_EQ(effective["retention.ms"], "1000");
  EXPECT_EQ(effective["cleanup.policy"], "delete");
}

}  // namespace
}  // namespace runnel::config
