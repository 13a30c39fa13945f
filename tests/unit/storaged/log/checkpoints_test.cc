#include "storaged/log/checkpoints.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

namespace fs = std::filesystem;

class CheckpointsTest : public ::testing::Test {
 protected:
  void SetUp() override { root_.emplace("ckpt"); }
  void TearDown() override { root_.reset(); }

  std::string Path(const std::string& name) const { return root_->path() + "/" + name; }
  static std::string ReadText(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static void WriteText(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
  }

  std::optional<runnel::testing::TempDir> root_;
};

void ExpectDataLossAt(const Status& s, const std::string& where, const std::string& what) {
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(where), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find(what), absl::string_view::npos) << s;
}

// ---------------------------------------------------------------- OffsetCheckpointFile

TEST_F(CheckpointsTest, OffsetCheckpointMissingFileIsEmpty) {
  OffsetCheckpointFile file(Path("recovery-point-offset-checkpoint"));
  auto read = file.Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->empty());
}

TEST_F(CheckpointsTest, OffsetCheckpointRoundTripInKafkaFormat) {
  OffsetCheckpointFile file(Path("recovery-point-offset-checkpoint"));
  std::map<TopicPartition, int64_t> offsets = {
      {{"orders", 0}, 1500},
      {{"orders", 1}, 1499},
      {{"my-topic.v2_x", 12}, 0},
      {{"__consumer_offsets", 49}, INT64_MAX},
  };
  ASSERT_TRUE(file.Write(offsets).ok());
  EXPECT_EQ(ReadText(file.path()),
            "0\n4\n__consumer_offsets 49 9223372036854775807\nmy-topic.v2_x 12 0\n"
            "orders 0 1500\norders 1 1499\n");
  EXPECT_FALSE(fs::exists(file.path() + ".tmp"));
  auto read = file.Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, offsets);

  ASSERT_TRUE(file.Write({}).ok());
  EXPECT_EQ(ReadText(file.path()), "0\n0\n");
  read = file.Read();
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->empty());
}

TEST_F(CheckpointsTest, OffsetCheckpointReadsKafkaWhitespace) {
  OffsetCheckpointFile file(Path("cp"));
  WriteText(file.path(), "0\n2\nt  3\t77\nu 0 5");  // runs of blanks, no final newline
  auto read = file.Read();
  ASSERT_TRUE(read.ok()) << read.status();
  std::map<TopicPartition, int64_t> want = {{{"t", 3}, 77}, {{"u", 0}, 5}};
  EXPECT_EQ(*read, want);
}

TEST_F(CheckpointsTest, OffsetCheckpointParseErrorsNameFileAndLine) {
  struct Case {
    std::string text;
    std::string where;
    std::string what;
  };
  const std::vector<Case> cases = {
      {"", ":1:", "empty file"},
      {"1\n0\n", ":1:", "unsupported version '1'"},
      {"0\n", ":2:", "missing the entry count"},
      {"0\nx\n", ":2:", "bad entry count 'x'"},
      {"0\n-1\n", ":2:", "bad entry count"},
      {"0\n2\nt 0 5\n", ":2:", "the entry count is 2 but 1 entry lines follow"},
      {"0\n1\nt 0 5\nt 1 6\n", ":2:", "the entry count is 1 but 2"},
      {"0\n2\nt 0 5\nt 1\n", ":4:", "expected 3 fields, got 't 1'"},
      {"0\n1\nmy topic 0 5\n", ":3:", "expected 3 fields"},  // a space in a topic
      {"0\n1\nt 0 5 9\n", ":3:", "expected 3 fields"},
      {"0\n1\nt x 5\n", ":3:", "bad partition 'x'"},
      {"0\n1\nt -1 5\n", ":3:", "bad partition '-1'"},
      {"0\n1\nt 0 5x\n", ":3:", "bad offset '5x'"},
      {"0\n1\nt 0 99999999999999999999\n", ":3:", "bad offset"},
      {"0\n1\nt/x 0 5\n", ":3:", "invalid topic name 't/x'"},
      {"0\n1\n.. 0 5\n", ":3:", "invalid topic name"},
      {"0\n2\nt 0 5\nt 0 6\n", ":4:", "t-0 appears twice"},
      {"0\n1\n\n", ":3:", "expected 3 fields"},
  };
  OffsetCheckpointFile file(Path("log-start-offset-checkpoint"));
  for (const Case& c : cases) {
    WriteText(file.path(), c.text);
    ExpectDataLossAt(file.Read().status(), file.path() + c.where, c.what);
  }
}

TEST_F(CheckpointsTest, OffsetCheckpointRefusesTopicsKafkaWouldNot) {
  OffsetCheckpointFile file(Path("cp"));
  ASSERT_TRUE(file.Write({{{"good", 0}, 1}}).ok());
  for (const TopicPartition& bad : {TopicPartition{"my topic", 0}, TopicPartition{"a\nb", 0},
                                    TopicPartition{"", 0}, TopicPartition{"t", -1}}) {
    Status s = file.Write({{{"good", 0}, 2}, {bad, 1}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad.ToString();
  }
  // The file on disk is still the last good one.
  EXPECT_EQ(ReadText(file.path()), "0\n1\ngood 0 1\n");
}

// ---------------------------------------------------------------- LeaderEpochCache

TEST_F(CheckpointsTest, LeaderEpochCacheAssignAndReload) {
  std::string path = Path("leader-epoch-checkpoint");
  auto cache = LeaderEpochCache::Load(path);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_TRUE(cache->entries().empty());
  EXPECT_FALSE(cache->Latest().has_value());
  EXPECT_FALSE(fs::exists(path));

  ASSERT_TRUE(cache->Assign(0, 0).ok());
  ASSERT_TRUE(cache->Assign(3, 1200).ok());
  EXPECT_EQ(ReadText(path), "0\n2\n0 0\n3 1200\n");
  EXPECT_EQ(cache->Latest(), (EpochEntry{3, 1200}));

  auto reloaded = LeaderEpochCache::Load(path);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->entries(), cache->entries());
  // The reloaded cache writes to the same file.
  ASSERT_TRUE(reloaded->Assign(4, 1300).ok());
  EXPECT_EQ(ReadText(path), "0\n3\n0 0\n3 1200\n4 1300\n");
}

TEST_F(CheckpointsTest, LeaderEpochCacheWritesOnlyOnChange) {
  std::string path = Path("leader-epoch-checkpoint");
  auto cache = LeaderEpochCache::Load(path);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(cache->Assign(2, 100).ok());
  fs::remove(path);
  // Later batches of the same epoch change nothing, so nothing is written.
  ASSERT_TRUE(cache->Assign(2, 100).ok());
  ASSERT_TRUE(cache->Assign(2, 150).ok());
  ASSERT_TRUE(cache->TruncateFromEnd(101).ok());
  ASSERT_TRUE(cache->TruncateFromStart(50).ok());
  ASSERT_TRUE(cache->TruncateFromStart(100).ok());  // already starts there
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{2, 100}}));
}

TEST_F(CheckpointsTest, LeaderEpochCacheAssignFollowsKafkasRule) {
  auto cache = LeaderEpochCache::Load(Path("leader-epoch-checkpoint"));
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(cache->Assign(1, 0).ok());
  ASSERT_TRUE(cache->Assign(2, 100).ok());
  ASSERT_TRUE(cache->Assign(3, 200).ok());
  // A newer epoch starting at or below older epochs' starts replaces them.
  ASSERT_TRUE(cache->Assign(5, 100).ok());
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{1, 0}, {5, 100}}));
  // The same epoch seen at a lower offset moves its start down.
  ASSERT_TRUE(cache->Assign(5, 90).ok());
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{1, 0}, {5, 90}}));
  // An older epoch (a rewritten log) drops the later ones.
  ASSERT_TRUE(cache->Assign(4, 95).ok());
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{1, 0}, {4, 95}}));
  ASSERT_TRUE(cache->Assign(0, 0).ok());
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{0, 0}}));

  EXPECT_EQ(cache->Assign(-1, 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->Assign(7, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{0, 0}}));
  auto reloaded = LeaderEpochCache::Load(Path("leader-epoch-checkpoint"));
  ASSERT_TRUE(reloaded.ok());
  EXPECT_EQ(reloaded->entries(), cache->entries());
}

TEST_F(CheckpointsTest, LeaderEpochCacheTruncation) {
  auto cache = LeaderEpochCache::Load(Path("leader-epoch-checkpoint"));
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(cache->Reset({{1, 0}, {2, 100}, {4, 200}, {6, 300}}).ok());

  ASSERT_TRUE(cache->TruncateFromEnd(250).ok());  // epoch 6 started after the new end
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{1, 0}, {2, 100}, {4, 200}}));
  ASSERT_TRUE(cache->TruncateFromEnd(200).ok());  // an epoch starting at the end goes
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{1, 0}, {2, 100}}));
  ASSERT_TRUE(cache->TruncateFromEnd(-1).ok());  // undefined: no change
  EXPECT_EQ(cache->entries().size(), 2u);

  ASSERT_TRUE(cache->Reset({{1, 0}, {2, 100}, {4, 200}, {6, 300}}).ok());
  ASSERT_TRUE(cache->TruncateFromStart(150).ok());  // epoch 2 now starts at the log start
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{2, 150}, {4, 200}, {6, 300}}));
  ASSERT_TRUE(cache->TruncateFromStart(300).ok());  // exactly at an epoch's start
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{6, 300}}));
  ASSERT_TRUE(cache->TruncateFromStart(1000).ok());
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{6, 1000}}));
  EXPECT_EQ(ReadText(Path("leader-epoch-checkpoint")), "0\n1\n6 1000\n");

  ASSERT_TRUE(cache->TruncateFromEnd(0).ok());
  EXPECT_TRUE(cache->entries().empty());
  EXPECT_EQ(ReadText(Path("leader-epoch-checkpoint")), "0\n0\n");
  ASSERT_TRUE(cache->TruncateFromStart(5).ok());  // empty: nothing to move
  EXPECT_TRUE(cache->entries().empty());
}

TEST_F(CheckpointsTest, LeaderEpochCacheEndOffsetFor) {
  auto cache = LeaderEpochCache::Load(Path("leader-epoch-checkpoint"));
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ(cache->EndOffsetFor(0, 500), std::nullopt);  // empty cache
  ASSERT_TRUE(cache->Reset({{2, 100}, {4, 200}, {7, 300}}).ok());
  using P = std::pair<int32_t, int64_t>;
  EXPECT_EQ(cache->EndOffsetFor(7, 500), P(7, 500));  // latest: the log end offset
  EXPECT_EQ(cache->EndOffsetFor(4, 500), P(4, 300));  // known: the next epoch's start
  EXPECT_EQ(cache->EndOffsetFor(2, 500), P(2, 200));
  EXPECT_EQ(cache->EndOffsetFor(5, 500), P(4, 300));  // unknown: the epoch below it
  EXPECT_EQ(cache->EndOffsetFor(3, 500), P(2, 200));
  EXPECT_EQ(cache->EndOffsetFor(1, 500), P(1, 100));  // before every entry
  EXPECT_EQ(cache->EndOffsetFor(0, 500), P(0, 100));
  EXPECT_EQ(cache->EndOffsetFor(8, 500), std::nullopt);   // above the latest
  EXPECT_EQ(cache->EndOffsetFor(-1, 500), std::nullopt);  // UNDEFINED_EPOCH
}

TEST_F(CheckpointsTest, LeaderEpochCacheResetValidates) {
  auto cache = LeaderEpochCache::Load(Path("leader-epoch-checkpoint"));
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE(cache->Reset({{1, 0}}).ok());
  for (const std::vector<EpochEntry>& bad : std::vector<std::vector<EpochEntry>>{
           {{2, 10}, {2, 20}}, {{2, 10}, {3, 10}}, {{3, 10}, {2, 20}}, {{-1, 0}}, {{0, -5}}}) {
    EXPECT_EQ(cache->Reset(bad).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{1, 0}}));
  ASSERT_TRUE(cache->Reset({}).ok());
  EXPECT_EQ(ReadText(Path("leader-epoch-checkpoint")), "0\n0\n");
}

TEST_F(CheckpointsTest, LeaderEpochCacheParseErrorsNameFileAndLine) {
  struct Case {
    std::string text;
    std::string where;
    std::string what;
  };
  const std::vector<Case> cases = {
      {"", ":1:", "empty file"},
      {"2\n0\n", ":1:", "unsupported version"},
      {"0\n1\n", ":2:", "the entry count is 1 but 0"},
      {"0\n1\n3\n", ":3:", "expected 2 fields"},
      {"0\n1\n3 100 7\n", ":3:", "expected 2 fields"},
      {"0\n1\nx 100\n", ":3:", "bad entry 'x 100'"},
      {"0\n1\n-1 100\n", ":3:", "bad entry"},
      {"0\n1\n1 -100\n", ":3:", "bad entry"},
      {"0\n3\n1 0\n3 100\n2 200\n", ":5:", "epoch 2 at offset 200 does not follow epoch 3"},
      {"0\n2\n1 100\n3 100\n", ":4:", "does not follow"},
  };
  std::string path = Path("leader-epoch-checkpoint");
  for (const Case& c : cases) {
    WriteText(path, c.text);
    ExpectDataLossAt(LeaderEpochCache::Load(path).status(), path + c.where, c.what);
  }
}

TEST_F(CheckpointsTest, LeaderEpochCacheKeepsStateWhenTheWriteFails) {
  // The partition directory is gone, so every write fails.
  auto cache = LeaderEpochCache::Load(Path("gone/leader-epoch-checkpoint"));
  ASSERT_TRUE(cache.ok());
  EXPECT_FALSE(cache->Assign(1, 0).ok());
  EXPECT_TRUE(cache->entries().empty());
  EXPECT_FALSE(cache->Reset({{1, 0}, {2, 5}}).ok());
  EXPECT_TRUE(cache->entries().empty());
  fs::create_directory(Path("gone"));
  ASSERT_TRUE(cache->Reset({{1, 0}, {2, 5}}).ok());
  fs::remove_all(Path("gone"));
  EXPECT_FALSE(cache->Assign(3, 10).ok());
  EXPECT_FALSE(cache->TruncateFromEnd(5).ok());
  EXPECT_FALSE(cache->TruncateFromStart(3).ok());
  EXPECT_EQ(cache->entries(), (std::vector<EpochEntry>{{1, 0}, {2, 5}}));
}

// ---------------------------------------------------------------- partition.metadata

TEST_F(CheckpointsTest, PartitionMetadataRoundTrip) {
  std::string path = Path("partition.metadata");
  const std::string id = "7RAW8xrhSRieX2Dbh2V0ZA";
  ASSERT_TRUE(WritePartitionMetadata(path, id).ok());
  EXPECT_EQ(ReadText(path), "version: 0\ntopic_id: 7RAW8xrhSRieX2Dbh2V0ZA\n");
  auto read = ReadPartitionMetadata(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, id);
}

TEST_F(CheckpointsTest, PartitionMetadataErrors) {
  std::string path = Path("partition.metadata");
  EXPECT_EQ(ReadPartitionMetadata(path).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(WritePartitionMetadata(path, "not-an-id").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WritePartitionMetadata(path, "").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(path));

  struct Case {
    std::string text;
    std::string where;
  };
  const std::vector<Case> cases = {
      {"", ":1:"},
      {"version: 1\ntopic_id: 7RAW8xrhSRieX2Dbh2V0ZA\n", ":1:"},
      {"version:0\ntopic_id: 7RAW8xrhSRieX2Dbh2V0ZA\n", ":1:"},
      {"versions: 0\ntopic_id: 7RAW8xrhSRieX2Dbh2V0ZA\n", ":1:"},
      {"version: 0\n", ":2:"},
      {"version: 0\ntopic_id: 7RAW8xrhSRieX2Dbh2V0Z\n", ":2:"},  // 21 characters
      {"version: 0\ntopic_id: 7RAW8xrhSRieX2Dbh2V0ZA=\n", ":2:"},
      {"version: 0\ntopic: 7RAW8xrhSRieX2Dbh2V0ZA\n", ":2:"},
      {"version: 0\ntopic_id: 7RAW8xrhSRieX2Dbh2V0ZA\nextra\n", ":3:"},
  };
  for (const Case& c : cases) {
    WriteText(path, c.text);
    ExpectDataLossAt(ReadPartitionMetadata(path).status(), path + c.where, "");
  }
  // Kafka splits on ":" and any run of blanks.
  WriteText(path, "version:  0\ntopic_id:\t7RAW8xrhSRieX2Dbh2V0ZA");
  auto read = ReadPartitionMetadata(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "7RAW8xrhSRieX2Dbh2V0ZA");
}

}  // namespace
}  // namespace runnel::storaged
