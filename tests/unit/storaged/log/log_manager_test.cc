#include "storaged/log/log_manager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/unit/storaged/log/log_test_util.h"
#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

using runnel::testing::TempDir;
using testing::MakeBatch;

constexpr char kTopicId[] = "AAAAAAAAAAAAAAAAAAAAAQ";

class LogManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<LogManager> Open() {
    LogManagerOptions o;
    o.dirs = {a_.path(), b_.path()};
    o.defaults.segment_bytes = 1000;
    o.now_ms = [this] { return now_; };
    StatusOr<std::unique_ptr<LogManager>> m = LogManager::Open(o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  static void Append(Log& log, int batches) {
    for (int i = 0; i < batches; ++i) {
      std::vector<uint8_t> b = MakeBatch(5, testing::NowMs());
      ASSERT_EQ(log.Append(b, 0).error, protocol::ErrorCode::kNone);
    }
  }
  static bool Exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }
  static int CountSuffix(const std::string& dir, std::string_view suffix) {
    int n = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
      if (e.path().string().ends_with(suffix)) ++n;
    }
    return n;
  }

  TempDir a_{"logmgr"}, b_{"logmgr"};
  int64_t now_ = testing::NowMs();
};

TEST_F(LogManagerTest, SpreadsLogsOverDirsAndReloadsThemAfterACleanStop) {
  {
    auto m = Open();
    for (int p = 0; p < 4; ++p) {
      auto log = m->CreateLog({"t", p}, kTopicId, {});
      ASSERT_TRUE(log.ok()) << log.status();
      Append(**log, 3);
    }
    EXPECT_TRUE(Exists(a_.path() + "/t-0") != Exists(b_.path() + "/t-0"));
    int in_a = 0;
    for (int p = 0; p < 4; ++p) in_a += Exists(a_.path() + "/t-" + std::to_string(p));
    EXPECT_EQ(in_a, 2);
    ASSERT_TRUE(m->Shutdown().ok());
  }
  EXPECT_TRUE(Exists(a_.path() + "/.kafka_cleanshutdown"));
  EXPECT_TRUE(Exists(b_.path() + "/.kafka_cleanshutdown"));
  auto m = Open();
  EXPECT_EQ(m->AllLogs().size(), 4u);
  EXPECT_EQ(m->load_report().recovered_segments, 0);
  // The marker goes at start: a crash from now on is an unclean stop.
  EXPECT_FALSE(Exists(a_.path() + "/.kafka_cleanshutdown"));
  EXPECT_EQ(m->GetLog({"t", 2})->State().log_end_offset, 15);
  // The same partition with another topic id is refused; with its own, it is returned.
  EXPECT_EQ(m->CreateLog({"t", 2}, "AAAAAAAAAAAAAAAAAAAAAg", {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(m->CreateLog({"t", 2}, kTopicId, {}).ok());
}

TEST_F(LogManagerTest, AShutdownSnapshotsOnlyLogsWhoseProducersChanged) {
  record::BatchBuilder::Options o;
  o.producer_id = 77;
  o.producer_epoch = 0;
  o.base_sequence = 0;
  record::BatchBuilder builder(o);
  builder.Add(now_, testing::Span("k"), testing::Span("v"));
  StatusOr<std::vector<uint8_t>> idempotent = builder.Build();
  ASSERT_TRUE(idempotent.ok());
  {
    auto m = Open();
    Append(**m->CreateLog({"plain", 0}, kTopicId, {}), 2);
    std::vector<uint8_t> bytes = *idempotent;
    ASSERT_EQ((*m->CreateLog({"idem", 0}, "AAAAAAAAAAAAAAAAAAAAAg", {}))->Append(bytes, 0).error,
              protocol::ErrorCode::kNone);
    ASSERT_TRUE(m->Shutdown().ok());
  }
  EXPECT_EQ(CountSuffix(a_.path(), ".snapshot") + CountSuffix(b_.path(), ".snapshot"), 1);
  auto m = Open();
  std::shared_ptr<Log> log = m->GetLog({"idem", 0});
  ASSERT_NE(log, nullptr);
  std::vector<uint8_t> retry = *idempotent;
  AppendResult dup = log->Append(retry, 0);
  EXPECT_EQ(dup.error, protocol::ErrorCode::kNone);
  EXPECT_EQ(dup.base_offset, 0);
  EXPECT_EQ(log->State().log_end_offset, 1);
  // producer.id.expiration.ms (a day by default) after its last batch, it is forgotten.
  EXPECT_EQ(m->RemoveExpiredProducers(), 0);
  now_ += 86400000;
  EXPECT_EQ(m->RemoveExpiredProducers(), 1);
  EXPECT_EQ(log->ProducerCount(), 0u);
}

TEST_F(LogManagerTest, UncleanStopRecoversFromTheCheckpoints) {
  {
    auto m = Open();
    Append(**m->CreateLog({"t", 0}, kTopicId, {}), 10);
    ASSERT_TRUE(m->Shutdown().ok());
  }
  // As if the process had died: no marker.
  ASSERT_EQ(::unlink((a_.path() + "/.kafka_cleanshutdown").c_str()), 0);
  ASSERT_EQ(::unlink((b_.path() + "/.kafka_cleanshutdown").c_str()), 0);
  auto m = Open();
  // The recovery point checkpoint says everything was flushed: only the last segment is
  // rescanned.
  EXPECT_EQ(m->load_report().recovered_segments, 1);
  EXPECT_EQ(m->GetLog({"t", 0})->State().log_end_offset, 50);
}

TEST_F(LogManagerTest, RetentionRenamesThenUnlinksAfterTheDelay) {
  auto m = Open();
  auto log = m->CreateLog({"t", 0}, kTopicId, {{"retention.bytes", "1000"}});
  ASSERT_TRUE(log.ok()) << log.status();
  Append(**log, 20);
  int segments = (*log)->State().segments;
  m->RunRetention();
  EXPECT_LT((*log)->State().segments, segments);
  EXPECT_GT((*log)->State().log_start_offset, 0);
  // Renamed, still on disk for readers that hold them (file.delete.delay.ms).
  EXPECT_GT(CountSuffix(a_.path(), ".log.deleted") + CountSuffix(b_.path(), ".log.deleted"), 0);
  ASSERT_TRUE(m->Shutdown().ok());
  EXPECT_EQ(CountSuffix(a_.path(), ".deleted") + CountSuffix(b_.path(), ".deleted"), 0);
}

TEST_F(LogManagerTest, DeletedLogsAreGoneAndStayGone) {
  {
    auto m = Open();
    Append(**m->CreateLog({"t", 0}, kTopicId, {}), 3);
    std::vector<std::pair<TopicPartition, LogState>> seen;
    m->Subscribe([&](const TopicPartition& tp, const LogState& s) { seen.emplace_back(tp, s); });
    ASSERT_TRUE(m->DeleteLog({"t", 0}).ok());
    EXPECT_EQ(m->DeleteLog({"t", 0}).code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(m->GetLog({"t", 0}), nullptr);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back().second.log_end_offset, -1);
    ASSERT_TRUE(m->Shutdown().ok());
  }
  EXPECT_FALSE(Exists(a_.path() + "/t-0"));
  EXPECT_FALSE(Exists(b_.path() + "/t-0"));
  auto m = Open();
  EXPECT_TRUE(m->AllLogs().empty());
}

TEST_F(LogManagerTest, BadTopicConfigsAreRefusedNamingTheKey) {
  auto m = Open();
  auto log = m->CreateLog({"t", 0}, kTopicId, {{"segment.bytes", "-5"}});
  ASSERT_FALSE(log.ok());
  EXPECT_NE(std::string(log.status().message()).find("segment.bytes"), std::string::npos);
  EXPECT_EQ(m->GetLog({"t", 0}), nullptr);
}

// A partition that cannot be loaded (here: its index is a directory, as a file that cannot be
// opened) goes offline at start; the rest of the node serves, the checkpoints keep what they
// said of it, and CreateLog loads it once the cause is gone.
TEST_F(LogManagerTest, APartitionThatCannotLoadGoesOfflineAndTheRestServe) {
  std::string t1_dir;
  {
    auto m = Open();
    Append(**m->CreateLog({"t", 0}, kTopicId, {}), 3);
    auto t1 = m->CreateLog({"t", 1}, kTopicId, {});
    ASSERT_TRUE(t1.ok()) << t1.status();
    Append(**t1, 6);
    protocol::ErrorCode error = protocol::ErrorCode::kNone;
    ASSERT_TRUE((*t1)->DeleteRecordsBefore(10, &error).ok());
    ASSERT_EQ(error, protocol::ErrorCode::kNone);
    t1_dir = Exists(a_.path() + "/t-1") ? a_.path() + "/t-1" : b_.path() + "/t-1";
    ASSERT_TRUE(m->Shutdown().ok());
  }
  const std::string index = t1_dir + "/00000000000000000000.index";
  std::filesystem::remove(index);
  std::filesystem::create_directory(index);
  {
    auto m = Open();
    ASSERT_NE(m, nullptr) << "one partition must not stop the node";
    EXPECT_NE(m->GetLog({"t", 0}), nullptr);
    EXPECT_EQ(m->GetLog({"t", 1}), nullptr);
    std::map<TopicPartition, std::string> offline = m->OfflineLogs();
    ASSERT_EQ(offline.size(), 1u);
    EXPECT_NE(offline.begin()->second.find("00000000000000000000.index"), std::string::npos)
        << offline.begin()->second;
    // Still broken: CreateLog tries to load it, fails with the reason, creates nothing else.
    auto again = m->CreateLog({"t", 1}, kTopicId, {});
    EXPECT_FALSE(again.ok());
    EXPECT_EQ(m->OfflineLogs().size(), 1u);
    ASSERT_TRUE(m->WriteCheckpoints().ok());
    ASSERT_TRUE(m->Shutdown().ok());  // a clean stop, with the partition still offline
  }
  // Mended: the next start loads it with its data and its log start offset.
  std::filesystem::remove(index);
  auto m = Open();
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->OfflineLogs().empty());
  std::shared_ptr<Log> t1 = m->GetLog({"t", 1});
  ASSERT_NE(t1, nullptr);
  EXPECT_EQ(t1->State().log_end_offset, 30);
  EXPECT_EQ(t1->State().log_start_offset, 10) << "the checkpoint kept the log start";
}

TEST_F(LogManagerTest, AnOfflinePartitionIsLoadedByCreateLogOnceMended) {
  std::string t0_dir;
  {
    auto m = Open();
    Append(**m->CreateLog({"t", 0}, kTopicId, {}), 4);
    t0_dir = Exists(a_.path() + "/t-0") ? a_.path() + "/t-0" : b_.path() + "/t-0";
    ASSERT_TRUE(m->Shutdown().ok());
  }
  const std::string index = t0_dir + "/00000000000000000000.timeindex";
  std::filesystem::remove(index);
  std::filesystem::create_directory(index);
  auto m = Open();
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->OfflineLogs().size(), 1u);
  std::filesystem::remove(index);
  auto log = m->CreateLog({"t", 0}, kTopicId, {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->State().log_end_offset, 20);
  EXPECT_TRUE(m->OfflineLogs().empty());
  EXPECT_EQ(m->GetLog({"t", 0}), *log);
}

// A creation that fails after making the partition's directory removes it: nothing half
// created stays. The failure: a log dir so deep that the partition's directory fits within
// PATH_MAX but its files do not (ENAMETOOLONG).
TEST_F(LogManagerTest, AFailedCreationLeavesNothingBehind) {
  std::string deep = a_.path();
  const std::string component(200, 'd');
  while (deep.size() + 1 + component.size() <= 4050) deep += "/" + component;
  deep += "/" + std::string(4050 - deep.size() - 1, 'e');
  ASSERT_EQ(deep.size(), 4050u);
  ASSERT_TRUE(std::filesystem::create_directories(deep));
  LogManagerOptions o;
  o.dirs = {deep};
  o.now_ms = [this] { return now_; };
  StatusOr<std::unique_ptr<LogManager>> m = LogManager::Open(o);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string topic = "abcdefghijklmnopqrstuvwx";  // "<topic>-0" is 26 characters
  auto log = (*m)->CreateLog({topic, 0}, kTopicId, {});
  ASSERT_FALSE(log.ok());
  EXPECT_NE(std::string(log.status().message()).find("too long"), std::string::npos)
      << log.status();
  EXPECT_FALSE(Exists(deep + "/" + topic + "-0"));
  EXPECT_EQ((*m)->GetLog({topic, 0}), nullptr);
  // A shorter name fits and is created.
  EXPECT_TRUE((*m)->CreateLog({"t", 0}, kTopicId, {}).ok());
  ASSERT_TRUE((*m)->Shutdown().ok());
}

// A new partition's partition.metadata is written without waiting for the disk (creating
// thousands of partitions would wait for two flushes each); it is synced before any of the
// log's data is, and an empty one (a crash cut its write short) reads as missing.
TEST_F(LogManagerTest, NewPartitionMetadataIsSyncedBeforeData) {
  auto m = Open();
  auto log = m->CreateLog({"t", 0}, kTopicId, {});
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_FALSE((*log)->metadata_synced());
  Append(**log, 2);
  ASSERT_TRUE((*log)->Flush().ok());
  EXPECT_TRUE((*log)->metadata_synced());
  const std::string dir = (*log)->dir();
  ASSERT_TRUE(m->Shutdown().ok());
  m.reset();
  log->reset();

  // The file as a crash right after its creation may leave it: empty.
  { std::ofstream truncate(dir + "/partition.metadata", std::ios::trunc); }
  auto again = Open();
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->OfflineLogs().empty()) << "an empty partition.metadata is no damage";
  std::shared_ptr<Log> loaded = again->GetLog({"t", 0});
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->topic_id(), "");
  EXPECT_EQ(loaded->State().log_end_offset, 10);
}

}  // namespace
}  // namespace runnel::storaged
