#include "storaged/log/file_names.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace runnel::storaged {
namespace {

TEST(FileNamesTest, OffsetStemIsTwentyDigits) {
  struct Case {
    int64_t offset;
    std::string stem;
  };
  const std::vector<Case> cases = {
      {0, "00000000000000000000"},
      {42, "00000000000000000042"},
      {1234567890123, "00000001234567890123"},
      {INT64_MAX, "09223372036854775807"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(OffsetFileStem(c.offset), c.stem);
    EXPECT_EQ(OffsetFileStem(c.offset).size(), 20u);
  }
}

TEST(FileNamesTest, SegmentFilePaths) {
  EXPECT_EQ(SegmentFilePath("/d/t-0", 42, kIndexSuffix), "/d/t-0/00000000000000000042.index");
  EXPECT_EQ(SegmentFilePath("/d/t-0", 0, kLogSuffix), "/d/t-0/00000000000000000000.log");
  EXPECT_EQ(SegmentFilePath("/d/t-0", 7, kTimeIndexSuffix),
            "/d/t-0/00000000000000000007.timeindex");
  EXPECT_EQ(SegmentFilePath("/d/t-0", 7, std::string(kLogSuffix) + std::string(kDeletedSuffix)),
            "/d/t-0/00000000000000000007.log.deleted");
}

TEST(FileNamesTest, ParseSegmentFileName) {
  struct Case {
    std::string name;
    std::string_view suffix;
    std::optional<int64_t> want;
  };
  const std::string deleted_log = std::string(kLogSuffix) + std::string(kDeletedSuffix);
  const std::vector<Case> cases = {
      {"00000000000000000000.log", kLogSuffix, 0},
      {"00000000000000000042.log", kLogSuffix, 42},
      {"00000000000000000042.index", kIndexSuffix, 42},
      {"00000000000000000042.timeindex", kTimeIndexSuffix, 42},
      {"00000000000000000042.snapshot", kProducerSnapshotSuffix, 42},
      {"00000000000000000042.snapshot.tmp", kProducerSnapshotSuffix, std::nullopt},
      {"09223372036854775807.log", kLogSuffix, INT64_MAX},
      {"00000000000000000042.log.deleted", deleted_log, 42},
      {"00000000000000000042.log.cleaned", ".log.cleaned", 42},
      // Wrong suffix, or the suffix is only a prefix of the rest.
      {"00000000000000000042.index", kLogSuffix, std::nullopt},
      {"00000000000000000042.log.deleted", kLogSuffix, std::nullopt},
      {"00000000000000000042.timeindex", kIndexSuffix, std::nullopt},
      // Not exactly 20 digits.
      {"0000000000000000042.log", kLogSuffix, std::nullopt},
      {"000000000000000000042.log", kLogSuffix, std::nullopt},
      {"42.log", kLogSuffix, std::nullopt},
      {".log", kLogSuffix, std::nullopt},
      {"", kLogSuffix, std::nullopt},
      // Negative, signed, or not digits.
      {"-0000000000000000001.log", kLogSuffix, std::nullopt},
      {"+0000000000000000001.log", kLogSuffix, std::nullopt},
      {"0000000000000000000a.log", kLogSuffix, std::nullopt},
      {"0000000000 000000001.log", kLogSuffix, std::nullopt},
      // Above int64's range.
      {"09223372036854775808.log", kLogSuffix, std::nullopt},
      {"99999999999999999999.log", kLogSuffix, std::nullopt},
      {"leader-epoch-checkpoint", kLogSuffix, std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ParseSegmentFileName(c.name, c.suffix), c.want) << c.name << " / " << c.suffix;
  }
}

TEST(FileNamesTest, SegmentNamesRoundTrip) {
  for (int64_t offset : {int64_t{0}, int64_t{1}, int64_t{999}, int64_t{1} << 40, INT64_MAX}) {
    std::string name = OffsetFileStem(offset) + std::string(kTimeIndexSuffix);
    EXPECT_EQ(ParseSegmentFileName(name, kTimeIndexSuffix), offset);
  }
}

TEST(FileNamesTest, PartitionDirNames) {
  struct Case {
    std::string dir;
    std::optional<TopicPartition> want;
  };
  const std::string long_topic(249, 'a');
  const std::vector<Case> cases = {
      {"orders-0", TopicPartition{"orders", 0}},
      {"orders-17", TopicPartition{"orders", 17}},
      {"my-topic-3", TopicPartition{"my-topic", 3}},
      {"a-b-c-12", TopicPartition{"a-b-c", 12}},
      {"my.topic_v2-1", TopicPartition{"my.topic_v2", 1}},
      {"__consumer_offsets-49", TopicPartition{"__consumer_offsets", 49}},
      {"-t-0", TopicPartition{"-t", 0}},
      {"t--1", TopicPartition{"t-", 1}},  // topic "t-", partition 1 (never a negative)
      {"t-2147483647", TopicPartition{"t", 2147483647}},
      {long_topic + "-0", TopicPartition{long_topic, 0}},
      // Not a partition directory.
      {"orders", std::nullopt},
      {"orders-", std::nullopt},
      {"-0", std::nullopt},
      {"orders-x", std::nullopt},
      {"orders-01", std::nullopt},  // would not round-trip
      {"orders-+1", std::nullopt},
      {"orders-2147483648", std::nullopt},
      {".-0", std::nullopt},
      {"..-0", std::nullopt},
      {"or ders-0", std::nullopt},
      {"orders/x-0", std::nullopt},
      {long_topic + "a-0", std::nullopt},  // 250 characters
      {"meta.properties", std::nullopt},
      {"recovery-point-offset-checkpoint", std::nullopt},
      {"log-start-offset-checkpoint", std::nullopt},
      {"cleaner-offset-checkpoint", std::nullopt},
      {".kafka_cleanshutdown", std::nullopt},
      // Deleted, future and stray directories are not loaded.
      {"orders-0.0123456789abcdef0123456789abcdef-delete", std::nullopt},
      {"orders-0.0123456789abcdef0123456789abcdef-future", std::nullopt},
      {"orders-0.0123456789abcdef0123456789abcdef-stray", std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ParsePartitionDirName(c.dir), c.want) << c.dir;
    if (c.want) {
      EXPECT_EQ(PartitionDirName(*c.want), c.dir);
    }
  }
  EXPECT_EQ((TopicPartition{"orders", 3}).ToString(), "orders-3");
}

TEST(FileNamesTest, ValidTopicNames) {
  for (const std::string& ok : std::vector<std::string>{
           "a", "A.b_c-D9", "...", "__consumer_offsets", std::string(249, 'x')}) {
    EXPECT_TRUE(IsValidTopicName(ok)) << ok;
  }
  for (const std::string& bad : std::vector<std::string>{
           "", ".", "..", "a b", "a\tb", "a\nb", "a/b", "\xc3\xa9", "a:b", std::string(250, 'x')}) {
    EXPECT_FALSE(IsValidTopicName(bad)) << bad;
  }
}

TEST(FileNamesTest, DeletedPartitionDirNames) {
  const std::string hex = "0123456789abcdef0123456789abcdef";
  TopicPartition tp{"my-topic", 3};
  std::string name = DeletedPartitionDirName(tp, hex);
  EXPECT_EQ(name, "my-topic-3." + hex + "-delete");
  EXPECT_TRUE(IsDeletedPartitionDirName(name));
  EXPECT_FALSE(ParsePartitionDirName(name).has_value());

  // A long topic is cut so that the name fits in 255 bytes, and still reads as deleted.
  TopicPartition long_tp{std::string(249, 't'), 2147483647};
  std::string long_name = DeletedPartitionDirName(long_tp, hex);
  EXPECT_EQ(long_name.size(), 255u);
  EXPECT_TRUE(long_name.ends_with("-2147483647." + hex + "-delete"));
  EXPECT_TRUE(IsDeletedPartitionDirName(long_name));

  struct Case {
    std::string dir;
    bool deleted;
  };
  const std::vector<Case> cases = {
      {"a.b_c-0." + hex + "-delete", true},
      {"orders-0", false},
      {"orders-0." + hex, false},
      {"orders-0." + hex + "-future", false},
      {"orders-0-delete", false},
      {"orders-0." + hex.substr(1) + "-delete", false},             // 31 hex digits
      {"orders-0.0123456789ABCDEF0123456789abcdef-delete", false},  // upper case
      {"orders-0.0123456789abcdeg0123456789abcdef-delete", false},  // not hex
      {"orders-0x" + hex + "-delete", false},                       // no dot
      {"orders." + hex + "-delete", false},                         // no partition
      {"-0." + hex + "-delete", false},                             // no topic
      {"or ders-0." + hex + "-delete", false},
  };
  for (const Case& c : cases) EXPECT_EQ(IsDeletedPartitionDirName(c.dir), c.deleted) << c.dir;
}

}  // namespace
}  // namespace runnel::storaged
