#include "storaged/log/log_manager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

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

}  // namespace
}  // namespace runnel::storaged
