// A full disk and I/O errors through storaged's file seam (file_io.h): a failed write fails
// one append and leaves the log as it was; a failed fsync takes the log offline until a
// restart recovers it; rolls and checkpoint writes fail cleanly.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "storaged/log/checkpoints.h"
#include "storaged/log/file_io.h"
#include "storaged/log/log.h"
#include "storaged/log/log_manager.h"
#include "tests/unit/storaged/log/file_faults.h"
#include "tests/unit/storaged/log/log_test_util.h"
#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

using protocol::ErrorCode;
using runnel::testing::TempDir;
using testing::FaultInjector;
using testing::MakeBatch;
using testing::ReadBatches;

constexpr char kTopicId[] = "AAAAAAAAAAAAAAAAAAAAAA";
constexpr char kFirstLog[] = "00000000000000000000.log";

int64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : -1;
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class FaultInjectionTest : public ::testing::Test {
 protected:
  std::string LogDir() const { return dir_.path() + "/orders-0"; }
  std::unique_ptr<Log> Open(LogConfig config, bool clean = true, int64_t recovery_point = 0,
                            LoadReport* report = nullptr) {
    LogOptions o;
    o.dir = LogDir();
    o.tp = {"orders", 0};
    o.config = config;
    o.files = &files_;
    o.now_ms = [this] { return now_; };
    o.on_offline = [this](const TopicPartition&, const std::string& why) {
      ++offline_calls_;
      offline_reason_ = why;
    };
    StatusOr<std::unique_ptr<Log>> log =
        Log::Open(std::move(o), kTopicId, recovery_point, 0, clean, report);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(*log) : nullptr;
  }
  // Appends a batch of `count` records; when acknowledged, keeps its bytes as written (the
  // log assigns offsets in place) to compare with what is read back.
  AppendResult Append(Log& log, int count, size_t value_size = 0) {
    std::vector<uint8_t> batch = MakeBatch(count, now_, "v", value_size);
    AppendResult r = log.Append(batch, 0);
    if (r.error == ErrorCode::kNone) acked_.push_back(batch);
    return r;
  }
  // Every acknowledged batch reads back byte for byte, in order, from offset 0.
  void ExpectAckedIntact(const Log& log) {
    ReadResult r = log.Read(0, 1 << 30, true);
    ASSERT_EQ(r.error, ErrorCode::kNone);
    std::vector<std::vector<uint8_t>> got = ReadBatches(r);
    ASSERT_GE(got.size(), acked_.size());
    for (size_t i = 0; i < acked_.size(); ++i) EXPECT_EQ(got[i], acked_[i]) << "batch " << i;
  }
  int64_t AckedEnd() const {
    if (acked_.empty()) return 0;
    StatusOr<record::BatchView> v = record::BatchView::Parse(acked_.back());
    return v.ok() ? v->last_offset() + 1 : -1;
  }

  TempDir dir_{"fsfault"};
  FileCache files_{64};
  int64_t now_ = 1'700'000'000'000;
  std::vector<std::vector<uint8_t>> acked_;
  int offline_calls_ = 0;
  std::string offline_reason_;
};

TEST_F(FaultInjectionTest, AFullDiskFailsTheAppendAndLeavesTheLogAsItWas) {
  auto log = Open({});
  ASSERT_NE(log, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Append(*log, 4).error, ErrorCode::kNone);
  const std::string segment = LogDir() + "/" + kFirstLog;
  const int64_t size = FileSize(segment);
  const int64_t end = log->State().log_end_offset;
  ASSERT_EQ(end, 12);

  FaultInjector faults;
  // The disk fills mid-batch: 30 bytes land, then ENOSPC.
  faults.Fail(FileOp::kWrite, kFirstLog, ENOSPC, 0, -1, /*torn_bytes=*/30);
  for (int i = 0; i < 3; ++i) {
    AppendResult r = Append(*log, 4);
    EXPECT_EQ(r.error, ErrorCode::kKafkaStorageError);
    EXPECT_NE(r.error_message.find("No space left on device"), std::string::npos)
        << r.error_message;
  }
  EXPECT_EQ(faults.injected(), 3);
  EXPECT_EQ(log->State().log_end_offset, end);
  EXPECT_EQ(FileSize(segment), size) << "the torn part is cut back";
  EXPECT_FALSE(log->offline()) << "a full disk is retriable";
  ExpectAckedIntact(*log);

  // Room again: the next append goes on where the log ended.
  faults.Clear();
  AppendResult r = Append(*log, 4);
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.error_message;
  EXPECT_EQ(r.base_offset, end);
  ExpectAckedIntact(*log);
  ASSERT_TRUE(log->Close().ok());

  // And a start that recovers every segment finds exactly the acknowledged batches.
  log.reset();
  LoadReport report;
  log = Open({}, /*clean=*/false, 0, &report);
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(report.truncated_bytes, 0);
  EXPECT_EQ(log->State().log_end_offset, AckedEnd());
  ExpectAckedIntact(*log);
}

TEST_F(FaultInjectionTest, AnEioOnWriteIsRetriableToo) {
  auto log = Open({});
  ASSERT_NE(log, nullptr);
  ASSERT_EQ(Append(*log, 2).error, ErrorCode::kNone);
  FaultInjector faults;
  faults.Fail(FileOp::kWrite, kFirstLog, EIO, 0, /*times=*/1);
  AppendResult failed = Append(*log, 2);
  EXPECT_EQ(failed.error, ErrorCode::kKafkaStorageError);
  EXPECT_NE(failed.error_message.find("Input/output error"), std::string::npos)
      << failed.error_message;
  EXPECT_EQ(log->State().log_end_offset, 2);
  EXPECT_FALSE(log->offline());
  AppendResult r = Append(*log, 2);
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.error_message;
  EXPECT_EQ(r.base_offset, 2);
  ExpectAckedIntact(*log);
}

TEST_F(FaultInjectionTest, ATornWriteThatCannotBeCutBackTakesTheLogOffline) {
  auto log = Open({});
  ASSERT_NE(log, nullptr);
  ASSERT_EQ(Append(*log, 3).error, ErrorCode::kNone);
  FaultInjector faults;
  faults.Fail(FileOp::kWrite, kFirstLog, EIO, 0, -1, /*torn_bytes=*/20);
  faults.Fail(FileOp::kTruncate, kFirstLog, EIO);
  EXPECT_EQ(Append(*log, 3).error, ErrorCode::kKafkaStorageError);
  EXPECT_TRUE(log->offline());
  EXPECT_EQ(offline_calls_, 1);
  faults.Clear();
  // The tail is unknown: nothing more goes in until a restart recovers it.
  AppendResult refused = Append(*log, 3);
  EXPECT_EQ(refused.error, ErrorCode::kKafkaStorageError);
  EXPECT_NE(refused.error_message.find("offline"), std::string::npos) << refused.error_message;
  EXPECT_EQ(offline_calls_, 1) << "said once";
  ASSERT_TRUE(log->Close().ok());
  log.reset();

  LoadReport report;
  log = Open({}, /*clean=*/false, 0, &report);
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(report.truncated_bytes, 20) << "recovery cuts the torn tail";
  EXPECT_EQ(log->State().log_end_offset, AckedEnd());
  ExpectAckedIntact(*log);
  EXPECT_EQ(Append(*log, 3).error, ErrorCode::kNone);
}

TEST_F(FaultInjectionTest, AFailedFsyncTakesTheLogOfflineUntilARestartRecoversIt) {
  LogConfig cfg;
  cfg.flush_messages = 1;  // every append is flushed before it is answered
  auto log = Open(cfg);
  ASSERT_NE(log, nullptr);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(Append(*log, 5).error, ErrorCode::kNone);
  const int64_t recovery_point = log->State().recovery_point;
  ASSERT_EQ(recovery_point, 10);

  FaultInjector faults;
  faults.Fail(FileOp::kSync, kFirstLog, EIO, 0, /*times=*/1);
  AppendResult r = Append(*log, 5);
  EXPECT_EQ(r.error, ErrorCode::kKafkaStorageError) << "not acknowledged: not durable";
  EXPECT_TRUE(log->offline());
  EXPECT_EQ(offline_calls_, 1);
  EXPECT_NE(offline_reason_.find("fdatasync"), std::string::npos) << offline_reason_;
  EXPECT_NE(log->offline_reason().find("Input/output error"), std::string::npos);
  EXPECT_EQ(log->State().recovery_point, recovery_point);

  // The fault is gone, but a second fsync proves nothing: no append, no flush, no retry.
  const int syncs = faults.Calls(FileOp::kSync, "");
  AppendResult refused = Append(*log, 5);
  EXPECT_EQ(refused.error, ErrorCode::kKafkaStorageError);
  EXPECT_FALSE(log->Flush().ok());
  EXPECT_EQ(faults.Calls(FileOp::kSync, ""), syncs);
  EXPECT_EQ(offline_calls_, 1);
  ASSERT_TRUE(log->Close().ok());
  EXPECT_EQ(faults.Calls(FileOp::kSync, ""), syncs) << "close of an offline log syncs nothing";
  EXPECT_EQ(log->State().recovery_point, recovery_point);
  log.reset();

  // A restart recovers from the last good flush: every acknowledged record is there.
  LoadReport report;
  log = Open(cfg, /*clean=*/false, recovery_point, &report);
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(report.recovered_segments, 1);
  EXPECT_GE(log->State().log_end_offset, AckedEnd());
  ExpectAckedIntact(*log);
  EXPECT_FALSE(log->offline());
  EXPECT_EQ(Append(*log, 5).error, ErrorCode::kNone);
}

TEST_F(FaultInjectionTest, ABackgroundFlushFailureTakesTheLogOfflineToo) {
  auto log = Open({});
  ASSERT_NE(log, nullptr);
  ASSERT_EQ(Append(*log, 5).error, ErrorCode::kNone);
  FaultInjector faults;
  faults.Fail(FileOp::kSync, kFirstLog, EIO);
  EXPECT_FALSE(log->Flush().ok());
  EXPECT_TRUE(log->offline());
  EXPECT_EQ(log->State().recovery_point, 0);
  faults.Clear();
  EXPECT_EQ(Append(*log, 5).error, ErrorCode::kKafkaStorageError);
}

TEST_F(FaultInjectionTest, ARollWhoseNewSegmentCannotBeCreatedLeavesTheOldOneActive) {
  LogConfig cfg;
  cfg.segment_bytes = 1000;
  auto log = Open(cfg);
  ASSERT_NE(log, nullptr);
  ASSERT_EQ(Append(*log, 3, 100).error, ErrorCode::kNone);
  ASSERT_EQ(Append(*log, 3, 100).error, ErrorCode::kNone);  // about 800 bytes: the next rolls
  const int64_t end = log->State().log_end_offset;
  ASSERT_EQ(log->State().segments, 1);
  const std::string new_log = SegmentFilePath(LogDir(), end, kLogSuffix);
  const std::string new_index = SegmentFilePath(LogDir(), end, kIndexSuffix);
  const std::string new_time = SegmentFilePath(LogDir(), end, kTimeIndexSuffix);

  FaultInjector faults;
  // First the .log itself, then (the .log made) its time index.
  faults.Fail(FileOp::kCreate, new_log.substr(new_log.rfind('/')), ENOSPC, 0, 1);
  EXPECT_EQ(Append(*log, 3, 100).error, ErrorCode::kKafkaStorageError);
  EXPECT_FALSE(Exists(new_log));
  faults.Fail(FileOp::kCreate, new_time.substr(new_time.rfind('/')), ENOSPC, 0, 1);
  EXPECT_EQ(Append(*log, 3, 100).error, ErrorCode::kKafkaStorageError);
  EXPECT_EQ(faults.injected(), 2);
  EXPECT_FALSE(Exists(new_log)) << "half a segment is removed";
  EXPECT_FALSE(Exists(new_index));
  EXPECT_FALSE(Exists(new_time));
  EXPECT_EQ(log->State().log_end_offset, end);
  EXPECT_EQ(log->State().segments, 1);
  EXPECT_TRUE(log->Segments().back()->active()) << "the old segment is not sealed";
  EXPECT_FALSE(log->offline());
  ExpectAckedIntact(*log);

  faults.Clear();
  AppendResult r = Append(*log, 3, 100);
  ASSERT_EQ(r.error, ErrorCode::kNone) << r.error_message;
  EXPECT_EQ(r.base_offset, end);
  EXPECT_EQ(log->State().segments, 2);
  ExpectAckedIntact(*log);
  ASSERT_TRUE(log->Close().ok());
  log.reset();
  log = Open(cfg, /*clean=*/true, AckedEnd());
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->State().log_end_offset, AckedEnd());
  ExpectAckedIntact(*log);
}

TEST_F(FaultInjectionTest, ARollWhoseOldIndexCannotBeWrittenFailsCleanlyAndIsRetried) {
  LogConfig cfg;
  cfg.segment_bytes = 2000;
  cfg.index_interval_bytes = 1;  // an index entry per batch, to be written at the roll
  auto log = Open(cfg);
  ASSERT_NE(log, nullptr);
  for (int i = 0; i < 6; ++i) ASSERT_EQ(Append(*log, 2, 100).error, ErrorCode::kNone);
  const int64_t end = log->State().log_end_offset;
  ASSERT_EQ(log->State().segments, 1);
  const std::string old_index = SegmentFilePath(LogDir(), 0, kIndexSuffix);
  const int entries = log->Segments().front()->offset_index().entries();
  ASSERT_GE(entries, 5);
  const int64_t grow = 2000 - log->Segments().front()->size();

  FaultInjector faults;
  faults.Fail(FileOp::kWrite, "00000000000000000000.index", ENOSPC);
  AppendResult failed = Append(*log, 2, size_t(grow));  // does not fit: a roll
  EXPECT_EQ(failed.error, ErrorCode::kKafkaStorageError);
  EXPECT_GE(faults.injected(), 1);
  EXPECT_EQ(log->State().log_end_offset, end);
  EXPECT_EQ(log->State().segments, 1);
  EXPECT_FALSE(Exists(SegmentFilePath(LogDir(), end, kLogSuffix)));
  EXPECT_TRUE(log->Segments().front()->active());
  EXPECT_FALSE(log->offline());

  faults.Clear();
  ASSERT_EQ(Append(*log, 2, size_t(grow)).error, ErrorCode::kNone);
  EXPECT_EQ(log->State().segments, 2);
  EXPECT_FALSE(log->Segments().front()->active());
  EXPECT_EQ(FileSize(old_index), 8 * entries) << "every entry written at the retried roll";
  ASSERT_TRUE(log->Close().ok());
  log.reset();
  // A clean load trusts the index written at the retried roll; every offset is found.
  log = Open(cfg, /*clean=*/true, AckedEnd());
  ASSERT_NE(log, nullptr);
  EXPECT_FALSE(log->Segments().front()->rebuilt_indexes());
  ExpectAckedIntact(*log);
  for (int64_t offset = 0; offset < AckedEnd(); ++offset) {
    ReadResult r = log->Read(offset, 1, true);
    ASSERT_EQ(r.error, ErrorCode::kNone);
    std::vector<std::vector<uint8_t>> got = ReadBatches(r);
    ASSERT_EQ(got.size(), 1u) << offset;
    EXPECT_EQ(got[0], acked_[size_t(offset / 2)]) << offset;
  }
}

TEST_F(FaultInjectionTest, AFailedIndexSyncAtARollTakesTheLogOffline) {
  LogConfig cfg;
  cfg.segment_bytes = 1000;
  auto log = Open(cfg);
  ASSERT_NE(log, nullptr);
  ASSERT_EQ(Append(*log, 3, 100).error, ErrorCode::kNone);
  ASSERT_EQ(Append(*log, 3, 100).error, ErrorCode::kNone);
  const int64_t end = log->State().log_end_offset;
  FaultInjector faults;
  faults.Fail(FileOp::kSync, ".timeindex", EIO);
  EXPECT_EQ(Append(*log, 3, 100).error, ErrorCode::kKafkaStorageError);
  EXPECT_TRUE(log->offline());
  EXPECT_EQ(log->State().log_end_offset, end);
  EXPECT_FALSE(Exists(SegmentFilePath(LogDir(), end, kLogSuffix)));
  faults.Clear();
  EXPECT_EQ(Append(*log, 3, 100).error, ErrorCode::kKafkaStorageError);
}

TEST_F(FaultInjectionTest, AFailedCheckpointWriteLeavesTheOldCheckpoint) {
  const std::string path = dir_.path() + "/" + std::string(kRecoveryPointCheckpoint);
  OffsetCheckpointFile file(path);
  const std::map<TopicPartition, int64_t> old{{{"orders", 0}, 100}, {{"orders", 1}, 7}};
  ASSERT_TRUE(file.Write(old).ok());
  const std::string old_bytes = Slurp(path);
  std::map<TopicPartition, int64_t> next = old;
  next[{"orders", 0}] = 250;

  struct Case {
    FileOp op;
    std::string_view on;
    size_t torn;
  };
  for (const Case& c : {Case{FileOp::kCreate, ".tmp", 0}, Case{FileOp::kWrite, ".tmp", 9},
                        Case{FileOp::kSync, ".tmp", 0}, Case{FileOp::kRename, ".tmp", 0}}) {
    SCOPED_TRACE(int(c.op));
    {
      FaultInjector faults;
      faults.Fail(c.op, std::string(c.on), ENOSPC, 0, -1, c.torn);
      Status s = file.Write(next);
      EXPECT_FALSE(s.ok());
      EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
      EXPECT_EQ(faults.injected(), 1);
    }
    EXPECT_EQ(Slurp(path), old_bytes);
    EXPECT_FALSE(Exists(path + ".tmp")) << "the temp file goes";
    StatusOr<std::map<TopicPartition, int64_t>> read = file.Read();
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, old);
  }
  // A failed sync of the directory after the rename: the new file is in place (the
  // rename happened) and whole; the write still reports the failure. (The first sync under
  // the directory, skipped, is the temp file's.)
  {
    FaultInjector faults;
    faults.Fail(FileOp::kSync, dir_.path(), EIO, /*skip=*/1);
    EXPECT_FALSE(file.Write(next).ok());
    EXPECT_EQ(faults.injected(), 1);
  }
  StatusOr<std::map<TopicPartition, int64_t>> read = file.Read();
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, next);
  ASSERT_TRUE(file.Write(next).ok());
}

// Through the log manager: a log a failed fsync took offline is out of service, reported
// gone, refused by CreateLog, left unclean at shutdown, and loaded by the next start.
class FaultInjectionManagerTest : public ::testing::Test {
 protected:
  std::unique_ptr<LogManager> Open() {
    LogManagerOptions o;
    o.dirs = {dir_.path()};
    o.defaults.flush_messages = 1;
    o.now_ms = [] { return testing::NowMs(); };
    StatusOr<std::unique_ptr<LogManager>> m = LogManager::Open(o);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? std::move(*m) : nullptr;
  }
  TempDir dir_{"fsfaultmgr"};
};

TEST_F(FaultInjectionManagerTest, AFailedFsyncTakesThePartitionOutOfServiceUntilARestart) {
  std::vector<std::vector<uint8_t>> acked;
  {
    std::vector<std::pair<TopicPartition, LogState>> changes;  // outlives the manager
    auto m = Open();
    ASSERT_NE(m, nullptr);
    auto t0 = m->CreateLog({"t", 0}, kTopicId, {});
    auto t1 = m->CreateLog({"t", 1}, kTopicId, {});
    ASSERT_TRUE(t0.ok() && t1.ok());
    m->Subscribe([&](const TopicPartition& tp, const LogState& s) { changes.emplace_back(tp, s); });
    for (int i = 0; i < 3; ++i) {
      std::vector<uint8_t> b = MakeBatch(4, testing::NowMs());
      ASSERT_EQ((*t0)->Append(b, 0).error, ErrorCode::kNone);
      acked.push_back(b);
      std::vector<uint8_t> c = MakeBatch(4, testing::NowMs());
      ASSERT_EQ((*t1)->Append(c, 0).error, ErrorCode::kNone);
    }
    ASSERT_TRUE(m->WriteCheckpoints().ok());
    {
      FaultInjector faults;
      faults.Fail(FileOp::kSync, "t-0/", EIO);
      std::vector<uint8_t> b = MakeBatch(4, testing::NowMs());
      EXPECT_EQ((*t0)->Append(b, 0).error, ErrorCode::kKafkaStorageError);
    }
    changes.clear();
    m->TakeFailedLogsOffline();
    EXPECT_EQ(m->GetLog({"t", 0}), nullptr);
    EXPECT_TRUE(m->IsOffline({"t", 0}));
    std::map<TopicPartition, std::string> offline = m->OfflineLogs();
    ASSERT_EQ(offline.size(), 1u);
    EXPECT_NE(offline.begin()->second.find("Input/output error"), std::string::npos)
        << offline.begin()->second;
    ASSERT_EQ(changes.size(), 1u);
    EXPECT_EQ(changes[0].first, (TopicPartition{"t", 0}));
    EXPECT_LT(changes[0].second.log_end_offset, 0) << "reported gone";
    // Only a restart brings it back: CreateLog (brokerd's retries) is refused.
    auto again = m->CreateLog({"t", 0}, kTopicId, {});
    ASSERT_FALSE(again.ok());
    EXPECT_NE(again.status().message().find("until storaged restarts"), std::string::npos);
    // The other partition serves on.
    std::vector<uint8_t> c = MakeBatch(4, testing::NowMs());
    EXPECT_EQ((*t1)->Append(c, 0).error, ErrorCode::kNone);
    ASSERT_TRUE(m->Shutdown().ok());
  }
  EXPECT_FALSE(Exists(dir_.path() + "/.kafka_cleanshutdown"))
      << "a log left offline by a failed fsync is recovered at the next start";
  auto m = Open();
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->OfflineLogs().empty());
  EXPECT_GE(m->load_report().recovered_segments, 1);
  std::shared_ptr<Log> t0 = m->GetLog({"t", 0});
  ASSERT_NE(t0, nullptr);
  ReadResult r = t0->Read(0, 1 << 30, true);
  ASSERT_EQ(r.error, ErrorCode::kNone);
  std::vector<std::vector<uint8_t>> got = ReadBatches(r);
  ASSERT_GE(got.size(), acked.size());
  for (size_t i = 0; i < acked.size(); ++i) EXPECT_EQ(got[i], acked[i]) << i;
  std::vector<uint8_t> b = MakeBatch(4, testing::NowMs());
  EXPECT_EQ(t0->Append(b, 0).error, ErrorCode::kNone);
  EXPECT_EQ(m->GetLog({"t", 1})->State().log_end_offset, 16);
}

TEST_F(FaultInjectionManagerTest, TheBackgroundThreadTakesAFailedLogOutOfService) {
  auto m = Open();
  ASSERT_NE(m, nullptr);
  auto t0 = m->CreateLog({"t", 0}, kTopicId, {});
  ASSERT_TRUE(t0.ok()) << t0.status();
  m->Start();
  {
    FaultInjector faults;
    faults.Fail(FileOp::kSync, "t-0/", EIO);
    std::vector<uint8_t> b = MakeBatch(4, testing::NowMs());
    EXPECT_EQ((*t0)->Append(b, 0).error, ErrorCode::kKafkaStorageError);
  }
  // The failure wakes the background thread, which passes at least once a second anyway.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (m->GetLog({"t", 0}) != nullptr && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(m->GetLog({"t", 0}), nullptr);
  EXPECT_TRUE(m->IsOffline({"t", 0}));
  ASSERT_TRUE(m->Shutdown().ok());
}

}  // namespace
}  // namespace runnel::storaged
