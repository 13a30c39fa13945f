#include "storaged/log/log_config.h"

#include <gtest/gtest.h>

namespace runnel::storaged {
namespace {

config::Config Node(const std::map<std::string, std::string>& values) {
  StatusOr<config::Config> c = config::Config::FromMap(values);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : config::Config();
}

TEST(LogConfigTest, NodeDefaultsAreKafkas) {
  LogConfig c = LogConfig::FromNode(Node({}));
  EXPECT_EQ(c.segment_bytes, 1073741824);
  EXPECT_EQ(c.segment_ms, 604800000);
  EXPECT_EQ(c.segment_index_bytes, 10485760);
  EXPECT_EQ(c.index_interval_bytes, 4096);
  EXPECT_EQ(c.retention_ms, 604800000);
  EXPECT_EQ(c.retention_bytes, -1);
  EXPECT_TRUE(c.cleanup_delete);
  EXPECT_FALSE(c.cleanup_compact);
  EXPECT_EQ(c.flush_messages, INT64_MAX);
  EXPECT_EQ(c.flush_ms, INT64_MAX);
  EXPECT_FALSE(c.SyncEveryAppend());
  EXPECT_EQ(c.max_message_bytes, 1048588);
  EXPECT_EQ(c.timestamp_type, record::TimestampType::kCreateTime);
  EXPECT_EQ(c.timestamp_before_max_ms, INT64_MAX);
  EXPECT_EQ(c.timestamp_after_max_ms, 3600000);  // Kafka 4 (KIP-1030)
  EXPECT_EQ(c.delete_retention_ms, 86400000);
  EXPECT_EQ(c.min_compaction_lag_ms, 0);
  EXPECT_EQ(c.max_compaction_lag_ms, INT64_MAX);
  EXPECT_DOUBLE_EQ(c.min_cleanable_dirty_ratio, 0.5);
  EXPECT_EQ(c.file_delete_delay_ms, 60000);
  EXPECT_FALSE(c.preallocate);
}

TEST(LogConfigTest, EveryNodeKeyReachesItsField) {
  LogConfig c = LogConfig::FromNode(Node({
      {"log.segment.bytes", "1000"},
      {"log.roll.ms", "2000"},
      {"log.index.size.max.bytes", "4096"},
      {"log.index.interval.bytes", "100"},
      {"log.retention.ms", "3000"},
      {"log.retention.bytes", "5000"},
      {"log.cleanup.policy", "compact"},
      {"log.flush.interval.messages", "1"},
      {"log.flush.interval.ms", "50"},
      {"message.max.bytes", "2048"},
      {"log.message.timestamp.type", "LogAppendTime"},
      {"log.message.timestamp.before.max.ms", "11"},
      {"log.message.timestamp.after.max.ms", "12"},
      {"log.cleaner.delete.retention.ms", "13"},
      {"log.cleaner.min.compaction.lag.ms", "14"},
      {"log.cleaner.max.compaction.lag.ms", "15"},
      {"log.cleaner.min.cleanable.ratio", "0.25"},
      {"log.segment.delete.delay.ms", "16"},
      {"log.preallocate", "true"},
  }));
  EXPECT_EQ(c.segment_bytes, 1000);
  EXPECT_EQ(c.segment_ms, 2000);
  EXPECT_EQ(c.segment_index_bytes, 4096);
  EXPECT_EQ(c.index_interval_bytes, 100);
  EXPECT_EQ(c.retention_ms, 3000);
  EXPECT_EQ(c.retention_bytes, 5000);
  EXPECT_FALSE(c.cleanup_delete);
  EXPECT_TRUE(c.cleanup_compact);
  EXPECT_EQ(c.flush_messages, 1);
  EXPECT_EQ(c.flush_ms, 50);
  EXPECT_TRUE(c.SyncEveryAppend());
  EXPECT_EQ(c.max_message_bytes, 2048);
  EXPECT_EQ(c.timestamp_type, record::TimestampType::kLogAppendTime);
  EXPECT_EQ(c.timestamp_before_max_ms, 11);
  EXPECT_EQ(c.timestamp_after_max_ms, 12);
  EXPECT_EQ(c.delete_retention_ms, 13);
  EXPECT_EQ(c.min_compaction_lag_ms, 14);
  EXPECT_EQ(c.max_compaction_lag_ms, 15);
  EXPECT_DOUBLE_EQ(c.min_cleanable_dirty_ratio, 0.25);
  EXPECT_EQ(c.file_delete_delay_ms, 16);
  EXPECT_TRUE(c.preallocate);
}

TEST(LogConfigTest, HoursAndMinutesApplyOnlyWhenMsIsNotSet) {
  EXPECT_EQ(LogConfig::FromNode(Node({{"log.retention.hours", "2"}})).retention_ms, 7200000);
  EXPECT_EQ(LogConfig::FromNode(Node({{"log.retention.minutes", "3"}})).retention_ms, 180000);
  EXPECT_EQ(
      LogConfig::FromNode(Node({{"log.retention.hours", "2"}, {"log.retention.minutes", "3"}}))
          .retention_ms,
      180000)
      << "minutes win over hours";
  EXPECT_EQ(LogConfig::FromNode(Node({{"log.retention.hours", "2"},
                                      {"log.retention.minutes", "3"},
                                      {"log.retention.ms", "42"}}))
                .retention_ms,
            42)
      << "ms wins over both";
  EXPECT_EQ(LogConfig::FromNode(Node({{"log.retention.hours", "-1"}})).retention_ms, -1)
      << "a negative coarse value means no limit, not -3600000";
  EXPECT_EQ(LogConfig::FromNode(Node({{"log.roll.hours", "1"}})).segment_ms, 3600000);
  EXPECT_EQ(LogConfig::FromNode(Node({{"log.roll.hours", "1"}, {"log.roll.ms", "7"}})).segment_ms,
            7);
}

TEST(LogConfigTest, CleanupPolicyBoth) {
  LogConfig c = LogConfig::FromNode(Node({{"log.cleanup.policy", "compact,delete"}}));
  EXPECT_TRUE(c.cleanup_delete);
  EXPECT_TRUE(c.cleanup_compact);
}

TEST(LogConfigTest, BadNodeValuesAreRejectedByTheSharedValidators) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"log.cleanup.policy", "shred"},
           {"log.message.timestamp.type", "WallTime"},
           {"log.cleaner.min.cleanable.ratio", "1.5"},
           {"log.segment.bytes", "13"},
       }) {
    StatusOr<config::Config> c = config::Config::FromMap({{key, value}});
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_NE(std::string(c.status().message()).find(key), std::string::npos) << c.status();
  }
}

TEST(LogConfigTest, TopicOverridesWinOverNodeDefaults) {
  LogConfig node =
      LogConfig::FromNode(Node({{"log.retention.ms", "1000"}, {"log.segment.bytes", "100000"}}));
  StatusOr<LogConfig> c = LogConfig::WithOverrides(
      node, {{"retention.ms", "-1"},
             {"cleanup.policy", "compact,delete"},
             {"flush.messages", "1"},
             {"message.timestamp.type", "LogAppendTime"},
             {"min.cleanable.dirty.ratio", "0.75"},
             {"max.message.bytes", "77"},
             {"segment.ms", "99"},
             {"segment.index.bytes", "1024"},
             {"index.interval.bytes", "10"},
             {"retention.bytes", "123"},
             {"flush.ms", "5"},
             {"message.timestamp.before.max.ms", "1"},
             {"message.timestamp.after.max.ms", "2"},
             {"delete.retention.ms", "3"},
             {"min.compaction.lag.ms", "4"},
             {"max.compaction.lag.ms", "6"},
             {"file.delete.delay.ms", "8"},
             {"preallocate", "TRUE"},
             {"compression.type", "zstd"},  // valid, not the log's business
             {"min.insync.replicas", "2"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->retention_ms, -1);
  EXPECT_EQ(c->segment_bytes, 100000) << "not overridden: the node's value";
  EXPECT_TRUE(c->cleanup_compact);
  EXPECT_TRUE(c->cleanup_delete);
  EXPECT_EQ(c->flush_messages, 1);
  EXPECT_EQ(c->timestamp_type, record::TimestampType::kLogAppendTime);
  EXPECT_DOUBLE_EQ(c->min_cleanable_dirty_ratio, 0.75);
  EXPECT_EQ(c->max_message_bytes, 77);
  EXPECT_EQ(c->segment_ms, 99);
  EXPECT_EQ(c->segment_index_bytes, 1024);
  EXPECT_EQ(c->index_interval_bytes, 10);
  EXPECT_EQ(c->retention_bytes, 123);
  EXPECT_EQ(c->flush_ms, 5);
  EXPECT_EQ(c->timestamp_before_max_ms, 1);
  EXPECT_EQ(c->timestamp_after_max_ms, 2);
  EXPECT_EQ(c->delete_retention_ms, 3);
  EXPECT_EQ(c->min_compaction_lag_ms, 4);
  EXPECT_EQ(c->max_compaction_lag_ms, 6);
  EXPECT_EQ(c->file_delete_delay_ms, 8);
  EXPECT_TRUE(c->preallocate);
}

TEST(LogConfigTest, CompactOnlyDropsDelete) {
  StatusOr<LogConfig> c = LogConfig::WithOverrides(LogConfig{}, {{"cleanup.policy", "compact"}});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->cleanup_compact);
  EXPECT_FALSE(c->cleanup_delete);
}

TEST(LogConfigTest, BadOverridesNameTheKey) {
  struct Case {
    std::map<std::string, std::string> configs;
    const char* expected;
  } cases[] = {
      {{{"retention.mss", "1"}}, "Unknown topic config name: retention.mss"},
      {{{"segment.bytes", "10"}}, "Invalid value 10 for configuration segment.bytes"},
      {{{"cleanup.policy", "forever"}}, "Invalid value forever for configuration cleanup.policy"},
      {{{"min.cleanable.dirty.ratio", "2"}},
       "Invalid value 2 for configuration min.cleanable.dirty.ratio"},
      {{{"message.timestamp.type", "Now"}},
       "Invalid value Now for configuration message.timestamp.type"},
  };
  for (const Case& c : cases) {
    StatusOr<LogConfig> r = LogConfig::WithOverrides(LogConfig{}, c.configs);
    ASSERT_FALSE(r.ok()) << c.expected;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(c.expected), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace runnel::storaged
