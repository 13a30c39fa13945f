// Transactions in a partition log: the last stable offset, the transaction index of aborted
// transactions (.txnindex) through restarts, truncation, retention and compaction, and
// read_committed reads and offset lookups (Kafka's rules).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/record/control.h"
#include "storaged/log/cleaner.h"
#include "storaged/log/log.h"
#include "tests/unit/storaged/log/log_test_util.h"
#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

namespace fs = std::filesystem;
using protocol::ErrorCode;
using runnel::testing::TempDir;
using testing::Span;

constexpr int64_t kA = 1000;
constexpr int64_t kB = 2000;
constexpr int64_t kNow = 1'700'000'000'000;

// A batch of `count` keyed records of producer `pid` (epoch 0) from sequence `seq`, stamped
// kNow + 1000 + sequence (after every plain batch's timestamps).
std::vector<uint8_t> TxnBatch(int64_t pid, int32_t seq, int count, bool transactional = true) {
  record::BatchBuilder::Options o;
  o.producer_id = pid;
  o.producer_epoch = 0;
  o.base_sequence = seq;
  o.transactional = transactional;
  record::BatchBuilder b(o);
  for (int i = 0; i < count; ++i) {
    std::string k = "k" + std::to_string(pid) + "-" + std::to_string(seq + i);
    b.Add(kNow + 1000 + seq + i, Span(k), Span(k));
  }
  StatusOr<std::vector<uint8_t>> built = b.Build();
  EXPECT_TRUE(built.ok()) << built.status();
  return built.ok() ? *built : std::vector<uint8_t>{};
}

class LogTxnTest : public ::testing::Test {
 protected:
  std::string LogDir() const { return dir_.path() + "/orders-0"; }
  std::unique_ptr<Log> Open(bool clean = true) {
    LogOptions o;
    o.dir = LogDir();
    o.tp = {"orders", 0};
    o.config = config_;
    o.files = &files_;
    o.now_ms = [] { return kNow; };
    StatusOr<std::unique_ptr<Log>> log =
        Log::Open(std::move(o), "AAAAAAAAAAAAAAAAAAAAAA", 0, 0, clean, nullptr);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(*log) : nullptr;
  }
  AppendResult Data(Log& log, int64_t pid, int32_t seq, int count, bool transactional = true) {
    std::vector<uint8_t> bytes = TxnBatch(pid, seq, count, transactional);
    return log.Append(bytes, 0);
  }
  AppendResult Marker(Log& log, int64_t pid, bool commit) {
    std::vector<uint8_t> bytes =
        record::BuildEndTxnMarkerBatch(pid, 0, record::EndTxnMarker{commit, 1}, kNow);
    return log.Append(bytes, 0, AppendOrigin::kCoordinator);
  }
  // Rolls a new segment at the next append (whatever its timestamps: segment.ms counts
  // from the segment's first batch's timestamp to the new batch's).
  void RollNext(Log& log) {
    LogConfig c = log.config();
    c.segment_ms = -1'000'000;
    log.SetConfig(c);
  }
  std::vector<std::string> TxnIndexFiles() const {
    std::vector<std::string> out;
    for (const auto& f : fs::directory_iterator(LogDir())) {
      std::string name = f.path().filename().string();
      if (name.find(".txnindex") != std::string::npos) out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // The base offsets of the batches a read returned.
  static std::vector<int64_t> Bases(const ReadResult& r) {
    std::vector<int64_t> out;
    for (const std::vector<uint8_t>& b : testing::ReadBatches(r)) {
      StatusOr<record::BatchView> v = record::BatchView::Parse(b);
      if (v.ok()) out.push_back(v->base_offset());
    }
    return out;
  }
  // Offsets 0..2 plain; A's transaction 3..4; B's 5..6; A aborted at 7; B committed at 8.
  void WriteTwoTransactions(Log& log) {
    std::vector<uint8_t> plain = testing::MakeBatch(3, kNow);
    ASSERT_EQ(log.Append(plain, 0).error, ErrorCode::kNone);
    ASSERT_EQ(Data(log, kA, 0, 2).error, ErrorCode::kNone);
    AppendResult b = Data(log, kB, 0, 2);
    ASSERT_EQ(b.error, ErrorCode::kNone);
    EXPECT_EQ(b.last_stable_offset, 3);
    AppendResult abort = Marker(log, kA, false);
    ASSERT_EQ(abort.error, ErrorCode::kNone) << abort.error_message;
    EXPECT_EQ(abort.base_offset, 7);
    EXPECT_EQ(abort.last_stable_offset, 5);
    AppendResult commit = Marker(log, kB, true);
    ASSERT_EQ(commit.error, ErrorCode::kNone) << commit.error_message;
    EXPECT_EQ(commit.last_stable_offset, 9);
  }

  LogConfig config_;
  TempDir dir_{"logtxn"};
  FileCache files_{16};
};

TEST_F(LogTxnTest, TheLastStableOffsetStopsAtTheEarliestOngoingTransaction) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  std::vector<uint8_t> plain = testing::MakeBatch(3, kNow);
  ASSERT_EQ(log->Append(plain, 0).error, ErrorCode::kNone);
  EXPECT_EQ(log->LastStableOffset(), 3);
  ASSERT_EQ(Data(*log, kA, 0, 2).error, ErrorCode::kNone);
  ASSERT_EQ(Data(*log, kB, 0, 2).error, ErrorCode::kNone);
  EXPECT_EQ(log->LastStableOffset(), 3);
  EXPECT_EQ(log->State().last_stable_offset, 3);
  EXPECT_EQ(log->State().high_watermark, 7);
  // read_committed reads stop there; read_uncommitted ones do not.
  EXPECT_EQ(Bases(log->Read(0, 1 << 20, true, std::nullopt, /*read_committed=*/true)),
            (std::vector<int64_t>{0}));
  EXPECT_EQ(Bases(log->Read(0, 1 << 20, true)), (std::vector<int64_t>{0, 3, 5}));
  ReadResult at_lso = log->Read(3, 1 << 20, true, std::nullopt, true);
  EXPECT_EQ(at_lso.error, ErrorCode::kNone);
  EXPECT_TRUE(at_lso.ranges.empty());
  EXPECT_EQ(at_lso.last_stable_offset, 3);
  // ListOffsets: latest is the last stable offset; a timestamp past it finds nothing.
  EXPECT_EQ(log->ListOffset(kLatestTimestamp, true).offset, 3);
  EXPECT_EQ(log->ListOffset(kLatestTimestamp, false).offset, 7);
  EXPECT_EQ(log->ListOffset(kNow + 1000, true).offset, -1);
  EXPECT_EQ(log->ListOffset(kNow + 1000, false).offset, 3);
  EXPECT_EQ(log->ListOffset(kNow, true).offset, 0);
  EXPECT_EQ(log->ListOffset(kMaxTimestamp, true).offset, -1);
  EXPECT_EQ(log->ListOffset(kEarliestTimestamp, true).offset, 0);
  // A's abort moves it to B's transaction, B's commit to the end.
  ASSERT_EQ(Marker(*log, kA, false).error, ErrorCode::kNone);
  EXPECT_EQ(log->LastStableOffset(), 5);
  ASSERT_EQ(Marker(*log, kB, true).error, ErrorCode::kNone);
  EXPECT_EQ(log->LastStableOffset(), 9);
  EXPECT_EQ(log->ListOffset(kLatestTimestamp, true).offset, 9);
}

TEST_F(LogTxnTest, AnAbortIsIndexedAndReadCommittedReadsListIt) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  WriteTwoTransactions(*log);
  ASSERT_EQ(TxnIndexFiles(), (std::vector<std::string>{"00000000000000000000.txnindex"}));
  EXPECT_EQ(fs::file_size(LogDir() + "/00000000000000000000.txnindex"), kAbortedTxnSize);
  // The entry: A's transaction from 3 to its marker at 7; B's ongoing one held the last
  // stable offset at 5.
  ASSERT_EQ(log->Segments().size(), 1u);
  EXPECT_EQ(log->Segments()[0]->AbortedTxns(), (std::vector<AbortedTxn>{{kA, 3, 7, 5}}));

  ReadResult all = log->Read(0, 1 << 20, true, std::nullopt, true);
  EXPECT_EQ(Bases(all), (std::vector<int64_t>{0, 3, 5, 7, 8}));
  EXPECT_EQ(all.aborted, (std::vector<AbortedTxn>{{kA, 3, 7, 5}}));
  EXPECT_EQ(all.last_stable_offset, 9);
  // From B's batch on: A's transaction still ends after it; from B's marker: none.
  EXPECT_EQ(log->Read(5, 1 << 20, true, std::nullopt, true).aborted.size(), 1u);
  EXPECT_TRUE(log->Read(8, 1 << 20, true, std::nullopt, true).aborted.empty());
  // A read that ends before A's transaction began does not list it.
  ReadResult first = log->Read(0, 1, true, std::nullopt, true);
  EXPECT_EQ(Bases(first), (std::vector<int64_t>{0}));
  EXPECT_TRUE(first.aborted.empty());
  // read_uncommitted reads carry none.
  EXPECT_TRUE(log->Read(0, 1 << 20, true).aborted.empty());
}

TEST_F(LogTxnTest, TheIndexSurvivesRestartsAndAnUncleanOneRebuildsWhatIsMissing) {
  {
    auto log = Open();
    ASSERT_NE(log, nullptr);
    WriteTwoTransactions(*log);
    // A transaction left open across the restart.
    ASSERT_EQ(Data(*log, kA, 2, 1).error, ErrorCode::kNone);  // 9
  }
  {
    auto log = Open(/*clean=*/true);
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(log->LastStableOffset(), 9);
    EXPECT_EQ(log->Read(0, 1 << 20, true, std::nullopt, true).aborted,
              (std::vector<AbortedTxn>{{kA, 3, 7, 5}}));
  }
  // Lost index and snapshots, unclean start: the replay writes the entry again.
  fs::remove(LogDir() + "/00000000000000000000.txnindex");
  for (const auto& f : fs::directory_iterator(LogDir())) {
    if (f.path().extension() == ".snapshot") fs::remove(f.path());
  }
  auto log = Open(/*clean=*/false);
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->LastStableOffset(), 9);
  EXPECT_EQ(log->Segments()[0]->AbortedTxns(), (std::vector<AbortedTxn>{{kA, 3, 7, 5}}));
  EXPECT_EQ(TxnIndexFiles(), (std::vector<std::string>{"00000000000000000000.txnindex"}));
  // A damaged index is dropped and rebuilt the same way.
  log.reset();
  {
    std::ofstream out(LogDir() + "/00000000000000000000.txnindex", std::ios::binary);
    out << "garbage";
  }
  for (const auto& f : fs::directory_iterator(LogDir())) {
    if (f.path().extension() == ".snapshot") fs::remove(f.path());
  }
  log = Open(/*clean=*/false);
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->Segments()[0]->AbortedTxns(), (std::vector<AbortedTxn>{{kA, 3, 7, 5}}));
}

TEST_F(LogTxnTest, TruncationDropsAbortsPastTheNewEndAndReopensTheirTransactions) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  WriteTwoTransactions(*log);
  ASSERT_TRUE(log->TruncateTo(7).ok());
  EXPECT_TRUE(log->Segments()[0]->AbortedTxns().empty());
  EXPECT_TRUE(TxnIndexFiles().empty());
  EXPECT_EQ(log->LastStableOffset(), 3);
  EXPECT_TRUE(log->Read(0, 1 << 20, true, std::nullopt, true).aborted.empty());
}

TEST_F(LogTxnTest, RetentionTakesTheIndexWithItsSegment) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  WriteTwoTransactions(*log);
  RollNext(*log);
  std::vector<uint8_t> plain = testing::MakeBatch(1, kNow);
  ASSERT_EQ(log->Append(plain, 0).error, ErrorCode::kNone);  // 9, a new segment
  log->SetConfig(config_);
  ASSERT_EQ(log->Segments().size(), 2u);
  ErrorCode error;
  ASSERT_TRUE(log->DeleteRecordsBefore(9, &error).ok());
  std::vector<std::shared_ptr<Segment>> doomed;
  EXPECT_EQ(log->DeleteOldSegments(&doomed), 1);
  EXPECT_EQ(TxnIndexFiles(), (std::vector<std::string>{"00000000000000000000.txnindex.deleted"}));
  for (const std::shared_ptr<Segment>& s : doomed) ASSERT_TRUE(s->Delete().ok());
  EXPECT_TRUE(TxnIndexFiles().empty());
  EXPECT_TRUE(log->Read(9, 1 << 20, true, std::nullopt, true).aborted.empty());
}

TEST_F(LogTxnTest, CompactionKeepsTheAbortedTransactionsOfTheSegmentsItRewrites) {
  config_.cleanup_compact = true;
  config_.cleanup_delete = false;
  auto log = Open();
  ASSERT_NE(log, nullptr);
  // Two segments of data, the abort in the second; a third (active) one.
  std::vector<uint8_t> plain = testing::MakeBatch(3, kNow);
  ASSERT_EQ(log->Append(plain, 0).error, ErrorCode::kNone);
  std::vector<uint8_t> again = testing::MakeBatch(3, kNow);
  ASSERT_EQ(log->Append(again, 0).error, ErrorCode::kNone);  // 3..5 replace 0..2
  ASSERT_EQ(Data(*log, kA, 0, 2).error, ErrorCode::kNone);   // 6..7
  RollNext(*log);
  ASSERT_EQ(Marker(*log, kA, false).error, ErrorCode::kNone);  // 8, second segment
  log->SetConfig(config_);
  RollNext(*log);
  std::vector<uint8_t> tail = testing::MakeBatch(1, kNow);
  ASSERT_EQ(log->Append(tail, 0).error, ErrorCode::kNone);  // 9, active
  log->SetConfig(config_);
  ASSERT_EQ(log->Segments().size(), 3u);
  CleanerOptions o;
  o.now_ms = [] { return kNow; };
  Cleaner cleaner(std::move(o));
  std::vector<std::shared_ptr<Segment>> to_unlink;
  StatusOr<CleanerStats> stats = cleaner.Clean(*log, &to_unlink);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GT(stats->records_removed, 0);
  ASSERT_EQ(log->Segments().size(), 2u);
  EXPECT_EQ(log->Segments()[0]->AbortedTxns(), (std::vector<AbortedTxn>{{kA, 6, 8, 9}}));
  for (const std::shared_ptr<Segment>& s : to_unlink) ASSERT_TRUE(s->Delete().ok());
  EXPECT_EQ(TxnIndexFiles(), (std::vector<std::string>{"00000000000000000000.txnindex"}));
  EXPECT_EQ(log->Read(0, 1 << 20, true, std::nullopt, true).aborted,
            (std::vector<AbortedTxn>{{kA, 6, 8, 9}}));
  log.reset();
  log = Open(/*clean=*/true);
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->Segments()[0]->AbortedTxns(), (std::vector<AbortedTxn>{{kA, 6, 8, 9}}));
}

}  // namespace
}  // namespace runnel::storaged
