#include "storaged/log/log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/unit/storaged/log/log_test_util.h"
#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

using protocol::ErrorCode;
using runnel::testing::TempDir;
using testing::MakeBatch;
using testing::ReadBatches;

class LogTest : public ::testing::Test {
 protected:
  LogOptions Options(LogConfig config = {}) {
    LogOptions o;
    o.dir = dir_.path() + "/orders-0";
    o.tp = {"orders", 0};
    o.config = config;
    o.files = &files_;
    o.now_ms = [this] { return now_; };
    return o;
  }
  std::unique_ptr<Log> Open(LogConfig config = {}, bool clean = true, int64_t recovery_point = 0,
                            LoadReport* report = nullptr) {
    StatusOr<std::unique_ptr<Log>> log =
        Log::Open(Options(config), "AAAAAAAAAAAAAAAAAAAAAA", recovery_point, 0, clean, report);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(*log) : nullptr;
  }
  AppendResult Append(Log& log, int count, int64_t ts, size_t value_size = 0) {
    std::vector<uint8_t> batch = MakeBatch(count, ts, "v", value_size);
    return log.Append(batch, 0);
  }
  std::string SegmentPath(int64_t base, std::string_view suffix = kLogSuffix) {
    return SegmentFilePath(dir_.path() + "/orders-0", base, suffix);
  }

  TempDir dir_{"log"};
  FileCache files_{64};
  int64_t now_ = 1'700'000'000'000;
};

TEST_F(LogTest, AppendAssignsOffsetsAndReadReturnsWholeBatches) {
  auto log = Open();
  AppendResult a = Append(*log, 3, now_);
  ASSERT_EQ(a.error, ErrorCode::kNone) << a.error_message;
  EXPECT_EQ(a.base_offset, 0);
  EXPECT_EQ(a.last_offset, 2);
  AppendResult b = Append(*log, 2, now_);
  EXPECT_EQ(b.base_offset, 3);
  EXPECT_EQ(b.last_offset, 4);
  EXPECT_EQ(log->State().log_end_offset, 5);

  ReadResult r = log->Read(0, 1 << 20, true);
  ASSERT_EQ(r.error, ErrorCode::kNone);
  auto batches = ReadBatches(r);
  ASSERT_EQ(batches.size(), 2u);
  auto v0 = record::BatchView::Parse(batches[0]);
  auto v1 = record::BatchView::Parse(batches[1]);
  EXPECT_EQ(v0->base_offset(), 0);
  EXPECT_EQ(v1->base_offset(), 3);
  EXPECT_TRUE(v1->CrcValid());
  EXPECT_EQ(v1->partition_leader_epoch(), 0);

  // An offset inside the second batch returns that whole batch.
  ReadResult mid = log->Read(4, 1 << 20, true);
  auto mid_batches = ReadBatches(mid);
  ASSERT_EQ(mid_batches.size(), 1u);
  EXPECT_EQ(record::BatchView::Parse(mid_batches[0])->base_offset(), 3);

  // At the end: nothing, no error; past it: out of range.
  EXPECT_TRUE(log->Read(5, 1 << 20, true).ranges.empty());
  EXPECT_EQ(log->Read(5, 1 << 20, true).error, ErrorCode::kNone);
  EXPECT_EQ(log->Read(6, 1 << 20, true).error, ErrorCode::kOffsetOutOfRange);
}

TEST_F(LogTest, ReadNeverSplitsABatchAndHonoursMaxBytes) {
  auto log = Open();
  for (int i = 0; i < 10; ++i) ASSERT_EQ(Append(*log, 5, now_, 100).error, ErrorCode::kNone);
  ReadResult all = log->Read(0, 1 << 20, true);
  int64_t batch_size = all.bytes / 10;
  ReadResult some = log->Read(0, int32_t(batch_size * 3 + batch_size / 2), true);
  EXPECT_EQ(some.bytes, batch_size * 3);
  EXPECT_EQ(ReadBatches(some).size(), 3u);
  // Smaller than one batch: the first batch anyway when min_one_batch, else nothing.
  EXPECT_EQ(log->Read(0, 10, true).bytes, batch_size);
  EXPECT_EQ(log->Read(0, 10, false).bytes, 0);
  // max_offset bounds what is returned (a consumer's high watermark).
  ReadResult bounded = log->Read(0, 1 << 20, true, 15);
  EXPECT_EQ(ReadBatches(bounded).size(), 3u);
}

TEST_F(LogTest, RollsBySegmentBytesAndReadsAcrossSegments) {
  LogConfig config;
  config.segment_bytes = 2000;
  config.index_interval_bytes = 100;
  auto log = Open(config);
  for (int i = 0; i < 40; ++i) ASSERT_EQ(Append(*log, 4, now_, 50).error, ErrorCode::kNone);
  LogState s = log->State();
  EXPECT_GT(s.segments, 5);
  EXPECT_EQ(s.log_end_offset, 160);
  // Every offset reads back the batch holding it.
  for (int64_t o = 0; o < 160; o += 7) {
    ReadResult r = log->Read(o, 300, true);
    auto batches = ReadBatches(r);
    ASSERT_FALSE(batches.empty()) << o;
    auto v = record::BatchView::Parse(batches[0]);
    EXPECT_LE(v->base_offset(), o);
    EXPECT_GE(v->last_offset(), o);
  }
  // A big read spans segments with contiguous offsets.
  ReadResult big = log->Read(0, 1 << 20, true);
  int64_t expected = 0;
  for (const auto& b : ReadBatches(big)) {
    auto v = record::BatchView::Parse(b);
    EXPECT_EQ(v->base_offset(), expected);
    expected = v->last_offset() + 1;
  }
  EXPECT_EQ(expected, 160);
  // Rolled segments have trimmed indexes.
  struct stat st;
  ASSERT_EQ(::stat(SegmentPath(0, kIndexSuffix).c_str(), &st), 0);
  EXPECT_LT(st.st_size, 4096);
}

TEST_F(LogTest, RollsBySegmentMs) {
  LogConfig config;
  config.segment_ms = 1000;
  auto log = Open(config);
  Append(*log, 1, now_);
  now_ += 500;
  Append(*log, 1, now_);
  EXPECT_EQ(log->State().segments, 1);
  now_ += 1000;
  Append(*log, 1, now_);
  EXPECT_EQ(log->State().segments, 2);
}

TEST_F(LogTest, RejectsBadBatchesAndChangesNothing) {
  LogConfig config;
  config.max_message_bytes = 500;
  auto log = Open(config);
  std::vector<uint8_t> good = MakeBatch(2, now_);
  std::vector<uint8_t> corrupt = good;
  corrupt.back() ^= 0x55;
  std::vector<uint8_t> both = good;
  both.insert(both.end(), corrupt.begin(), corrupt.end());
  AppendResult r = log->Append(both, 0);
  EXPECT_EQ(r.error, ErrorCode::kCorruptMessage);
  EXPECT_EQ(r.batch_index, 1);
  std::vector<uint8_t> big = MakeBatch(2, now_, "v", 600);
  EXPECT_EQ(log->Append(big, 0).error, ErrorCode::kMessageTooLarge);
  EXPECT_EQ(log->State().log_end_offset, 0);
  EXPECT_EQ(log->State().size_bytes, 0);
}

TEST_F(LogTest, CompactedTopicRejectsNullKeys) {
  LogConfig config;
  config.cleanup_compact = true;
  auto log = Open(config);
  record::BatchBuilder b({});
  b.Add(now_, std::nullopt, testing::Span("value"));
  std::vector<uint8_t> batch = *b.Build();
  AppendResult r = log->Append(batch, 0);
  EXPECT_EQ(r.error, ErrorCode::kInvalidRecord);
  EXPECT_NE(r.error_message.find("orders-0"), std::string::npos) << r.error_message;
}

TEST_F(LogTest, LogAppendTimeStampsBatches) {
  LogConfig config;
  config.timestamp_type = record::TimestampType::kLogAppendTime;
  auto log = Open(config);
  AppendResult r = Append(*log, 2, 5);
  EXPECT_EQ(r.log_append_time, now_);
  auto batches = ReadBatches(log->Read(0, 1 << 20, true));
  auto v = record::BatchView::Parse(batches.at(0));
  EXPECT_EQ(v->timestamp_type(), record::TimestampType::kLogAppendTime);
  EXPECT_EQ(v->max_timestamp(), now_);
  EXPECT_TRUE(v->CrcValid());
}

TEST_F(LogTest, ListOffsetsByTimestamp) {
  LogConfig config;
  config.segment_bytes = 1000;
  config.index_interval_bytes = 64;
  auto log = Open(config);
  // Batch i has records at timestamps 1000*i .. 1000*i+4.
  for (int i = 1; i <= 30; ++i) ASSERT_EQ(Append(*log, 5, 1000 * i).error, ErrorCode::kNone);
  EXPECT_EQ(log->ListOffset(kEarliestTimestamp).offset, 0);
  EXPECT_EQ(log->ListOffset(kLatestTimestamp).offset, 150);
  OffsetLookup max = log->ListOffset(kMaxTimestamp);
  EXPECT_EQ(max.offset, 149);
  EXPECT_EQ(max.timestamp, 30004);
  // The first record with timestamp >= T.
  OffsetLookup t = log->ListOffset(7002);
  EXPECT_EQ(t.offset, 32);  // batch 7 starts at offset 30 with ts 7000
  EXPECT_EQ(t.timestamp, 7002);
  EXPECT_EQ(log->ListOffset(7005).offset, 35);  // past batch 7: the first record of batch 8
  EXPECT_EQ(log->ListOffset(0).offset, 0);
  OffsetLookup none = log->ListOffset(999999);
  EXPECT_EQ(none.offset, -1);
  EXPECT_EQ(none.timestamp, -1);
}

// DeleteRecords moves the log start inside a segment: a timestamp that the deleted records
// match finds the first record left, also when the batch the time index points to lies
// wholly below the log start.
TEST_F(LogTest, ListOffsetsByTimestampSkipsDeletedRecords) {
  auto log = Open(LogConfig());
  ASSERT_EQ(Append(*log, 3, 100).error, ErrorCode::kNone);  // offsets 0-2, ts 100-102
  ASSERT_EQ(Append(*log, 3, 103).error, ErrorCode::kNone);  // offsets 3-5, ts 103-105
  ErrorCode error;
  ASSERT_TRUE(log->DeleteRecordsBefore(4, &error).ok());
  OffsetLookup t = log->ListOffset(100);
  EXPECT_EQ(t.offset, 4);
  EXPECT_EQ(t.timestamp, 104);
  EXPECT_EQ(log->ListOffset(105).offset, 5);
  EXPECT_EQ(log->ListOffset(106).offset, -1);
}

TEST_F(LogTest, DeleteRecordsMovesLogStartAndRetentionDropsWholeSegments) {
  LogConfig config;
  config.segment_bytes = 1000;
  auto log = Open(config);
  for (int i = 0; i < 30; ++i) Append(*log, 5, now_);
  ErrorCode error;
  EXPECT_EQ(*log->DeleteRecordsBefore(151, &error), 0);
  EXPECT_EQ(error, ErrorCode::kOffsetOutOfRange);
  EXPECT_EQ(*log->DeleteRecordsBefore(42, &error), 42);
  EXPECT_EQ(error, ErrorCode::kNone);
  EXPECT_EQ(log->Read(41, 1000, true).error, ErrorCode::kOffsetOutOfRange);
  EXPECT_EQ(log->ListOffset(kEarliestTimestamp).offset, 42);
  std::vector<std::shared_ptr<Segment>> doomed;
  int removed = log->DeleteOldSegments(&doomed);
  EXPECT_GT(removed, 0);
  // Segments go only when wholly below the log start offset.
  EXPECT_LE(log->Segments().front()->base_offset(), 42);
  EXPECT_EQ(log->State().log_start_offset, 42);
  for (const auto& s : doomed) {
    EXPECT_NE(s->log_path().find(".deleted"), std::string::npos);
    EXPECT_TRUE(s->Delete().ok());
  }
  EXPECT_EQ(log->Read(42, 1 << 20, true).error, ErrorCode::kNone);
}

TEST_F(LogTest, RetentionByBytesAndTime) {
  LogConfig config;
  config.segment_bytes = 1000;
  config.retention_bytes = 3000;
  auto log = Open(config);
  for (int i = 0; i < 40; ++i) Append(*log, 5, now_);
  std::vector<std::shared_ptr<Segment>> doomed;
  log->DeleteOldSegments(&doomed);
  LogState s = log->State();
  EXPECT_LE(s.size_bytes, 3000 + 1000);
  EXPECT_GE(s.size_bytes, 3000 - 1000);
  EXPECT_EQ(s.log_end_offset, 200);

  // Everything older than retention.ms: the active segment is rolled and goes too.
  LogConfig timed = config;
  timed.retention_bytes = -1;
  timed.retention_ms = 1000;
  log->SetConfig(timed);
  now_ += 5000;
  log->DeleteOldSegments(&doomed);
  s = log->State();
  EXPECT_EQ(s.log_start_offset, 200);
  EXPECT_EQ(s.log_end_offset, 200);
  EXPECT_EQ(s.size_bytes, 0);
  EXPECT_EQ(Append(*log, 1, now_).base_offset, 200);
}

TEST_F(LogTest, CleanReopenKeepsEverything) {
  LogConfig config;
  config.segment_bytes = 1000;
  {
    auto log = Open(config);
    for (int i = 0; i < 20; ++i) Append(*log, 5, now_ + i);
    ASSERT_TRUE(log->Close().ok());
  }
  LoadReport report;
  auto log = Open(config, /*clean=*/true, 100, &report);
  EXPECT_EQ(report.recovered_segments, 0);
  EXPECT_EQ(log->State().log_end_offset, 100);
  EXPECT_EQ(Append(*log, 1, now_).base_offset, 100);
  EXPECT_EQ(log->ListOffset(kMaxTimestamp).timestamp, now_ + 19 + 4);
}

TEST_F(LogTest, RecoveryTruncatesATornTail) {
  int64_t good_size = 0;
  {
    auto log = Open();
    for (int i = 0; i < 10; ++i) Append(*log, 5, now_);
    good_size = log->State().size_bytes;
    ASSERT_TRUE(log->Close().ok());
  }
  // Half a batch more, as a crash mid-write leaves it.
  std::vector<uint8_t> extra = MakeBatch(5, now_);
  {
    std::ofstream f(SegmentPath(0), std::ios::app | std::ios::binary);
    f.write(reinterpret_cast<const char*>(extra.data()), std::streamsize(extra.size() / 2));
  }
  LoadReport report;
  auto log = Open({}, /*clean=*/false, 0, &report);
  EXPECT_EQ(report.recovered_segments, 1);
  EXPECT_EQ(report.truncated_bytes, int64_t(extra.size() / 2));
  ASSERT_FALSE(report.notes.empty());
  EXPECT_NE(report.notes[0].find("truncated"), std::string::npos) << report.notes[0];
  EXPECT_EQ(log->State().size_bytes, good_size);
  EXPECT_EQ(log->State().log_end_offset, 50);
  EXPECT_EQ(Append(*log, 1, now_).base_offset, 50);
}

TEST_F(LogTest, RecoveryCutsAtACorruptBatchAndDropsLaterSegments) {
  LogConfig config;
  config.segment_bytes = 1000;
  {
    auto log = Open(config);
    for (int i = 0; i < 30; ++i) Append(*log, 5, now_);
    ASSERT_GE(log->State().segments, 3);
    ASSERT_TRUE(log->Close().ok());
  }
  // Flip a byte in the middle of the first segment (inside a record: CRC mismatch).
  std::string first = SegmentPath(0);
  int64_t size = int64_t(std::filesystem::file_size(first));
  {
    std::fstream f(first, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(size / 2);
    char c;
    f.seekg(size / 2);
    f.get(c);
    f.seekp(size / 2);
    f.put(char(c ^ 0x40));
  }
  LoadReport report;
  auto log = Open(config, /*clean=*/false, 0, &report);
  LogState s = log->State();
  EXPECT_EQ(s.segments, 1);
  EXPECT_LT(s.log_end_offset, 30 * 5);
  EXPECT_GT(report.truncated_bytes, 0);
  // Everything left reads back with valid CRCs and contiguous offsets.
  int64_t expected = 0;
  for (const auto& b : ReadBatches(log->Read(0, 1 << 20, true))) {
    auto v = record::BatchView::Parse(b);
    EXPECT_TRUE(v->CrcValid());
    EXPECT_EQ(v->base_offset(), expected);
    expected = v->last_offset() + 1;
  }
  EXPECT_EQ(expected, s.log_end_offset);
}

TEST_F(LogTest, MissingOrCorruptIndexesAreRebuilt) {
  LogConfig config;
  config.segment_bytes = 1000;
  config.index_interval_bytes = 64;
  {
    auto log = Open(config);
    for (int i = 0; i < 30; ++i) Append(*log, 5, now_);
    ASSERT_TRUE(log->Close().ok());
  }
  ASSERT_EQ(::unlink(SegmentPath(0, kIndexSuffix).c_str()), 0);
  {
    std::ofstream f(SegmentPath(0, kTimeIndexSuffix), std::ios::binary | std::ios::trunc);
    f << "garbage!garbage!garbage!";  // not a multiple of 12 bytes of increasing entries
  }
  LoadReport report;
  auto log = Open(config, /*clean=*/true, 150, &report);
  EXPECT_GE(report.rebuilt_indexes, 1);
  EXPECT_GT(log->Segments().front()->offset_index().entries(), 0);
  for (int64_t o = 0; o < 150; o += 11) {
    auto batches = ReadBatches(log->Read(o, 100, true));
    ASSERT_FALSE(batches.empty());
    EXPECT_LE(record::BatchView::Parse(batches[0])->base_offset(), o);
  }
}

TEST_F(LogTest, FlushPolicyMovesTheRecoveryPoint) {
  LogConfig config;
  config.flush_messages = 10;
  auto log = Open(config);
  Append(*log, 4, now_);
  EXPECT_EQ(log->State().recovery_point, 0);
  Append(*log, 4, now_);
  EXPECT_EQ(log->State().recovery_point, 0);
  Append(*log, 4, now_);  // 12 messages since the last flush
  EXPECT_EQ(log->State().recovery_point, 12);

  LogConfig every = config;
  every.flush_messages = 1;
  log->SetConfig(every);
  Append(*log, 1, now_);
  EXPECT_EQ(log->State().recovery_point, 13);

  LogConfig timed;
  timed.flush_ms = 1000;
  log->SetConfig(timed);
  Append(*log, 1, now_);
  EXPECT_TRUE(log->MaybeTimedFlush().ok());
  EXPECT_EQ(log->State().recovery_point, 13);
  now_ += 1001;
  EXPECT_TRUE(log->MaybeTimedFlush().ok());
  EXPECT_EQ(log->State().recovery_point, 14);
}

TEST_F(LogTest, TruncateToRemovesTheTail) {
  LogConfig config;
  config.segment_bytes = 1000;
  auto log = Open(config);
  for (int i = 0; i < 30; ++i) Append(*log, 5, now_);
  ASSERT_TRUE(log->TruncateTo(52).ok());  // inside a batch: Kafka truncates at batch starts
  EXPECT_EQ(log->State().log_end_offset, 52);
  EXPECT_EQ(Append(*log, 1, now_).base_offset, 52);
  auto batches = ReadBatches(log->Read(45, 1 << 20, true));
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(record::BatchView::Parse(batches[0])->base_offset(), 45);
  EXPECT_EQ(record::BatchView::Parse(batches[1])->base_offset(), 52);
}

TEST_F(LogTest, TopicIdMismatchIsRefused) {
  { auto log = Open(); }
  StatusOr<std::unique_ptr<Log>> other =
      Log::Open(Options(), "BBBBBBBBBBBBBBBBBBBBBB", 0, 0, true, nullptr);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(LogTest, LeaderEpochsAreRecorded) {
  auto log = Open();
  std::vector<uint8_t> b1 = MakeBatch(3, now_);
  log->Append(b1, 0);
  std::vector<uint8_t> b2 = MakeBatch(3, now_);
  log->Append(b2, 4);
  std::vector<EpochEntry> epochs = log->LeaderEpochs();
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_EQ(epochs[1].epoch, 4);
  EXPECT_EQ(epochs[1].start_offset, 3);
  EXPECT_EQ(log->ListOffset(kLatestTimestamp).leader_epoch, 4);
}

}  // namespace
}  // namespace runnel::storaged

namespace runnel::storaged {
namespace {

TEST_F(LogTest, TimestampsOutsideTheAllowedWindowAreRejected) {
  LogConfig config;
  config.timestamp_before_max_ms = 1000;
  config.timestamp_after_max_ms = 1000;
  auto log = Open(config);
  EXPECT_EQ(Append(*log, 2, now_ - 5000).error, protocol::ErrorCode::kInvalidTimestamp);
  EXPECT_EQ(Append(*log, 2, now_ + 5000).error, protocol::ErrorCode::kInvalidTimestamp);
  EXPECT_EQ(Append(*log, 2, now_ - 500).error, protocol::ErrorCode::kNone);
  EXPECT_EQ(log->State().log_end_offset, 2);
}

}  // namespace
}  // namespace runnel::storaged

namespace runnel::storaged {
namespace {

TEST_F(LogTest, OldTimestampsDoNotRollEveryAppend) {
  LogConfig config;
  config.segment_ms = 1000;
  auto log = Open(config);
  for (int i = 0; i < 5; ++i) Append(*log, 1, 1000 + i);  // long ago, 1 ms apart
  EXPECT_EQ(log->State().segments, 1);
  Append(*log, 1, 5000);  // 4 s after the segment's first batch
  EXPECT_EQ(log->State().segments, 2);
}

}  // namespace
}  // namespace runnel::storaged

namespace runnel::storaged {
namespace {

// flush.messages=1: every append returns only once it is on disk, and appends that wait
// together share one fdatasync.
TEST_F(LogTest, ConcurrentDurableAppendsShareFlushes) {
  LogConfig config;
  config.flush_messages = 1;
  auto log = Open(config);
  constexpr int kThreads = 8;
  constexpr int kAppends = 25;
  std::atomic<int> not_durable{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kAppends; ++i) {
        std::vector<uint8_t> batch = MakeBatch(1, now_);
        AppendResult r = log->Append(batch, 0);
        if (r.error != protocol::ErrorCode::kNone ||
            log->State().recovery_point < r.last_offset + 1) {
          not_durable++;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(not_durable.load(), 0);
  EXPECT_EQ(log->State().log_end_offset, kThreads * kAppends);
  EXPECT_LT(log->flush_count(), uint64_t(kThreads * kAppends) * 9 / 10) << "no flush was shared";
}

}  // namespace
}  // namespace runnel::storaged

namespace runnel::storaged {
namespace {

using EpochEnd = std::pair<int32_t, int64_t>;

TEST_F(LogTest, EndOffsetForEpochFollowsKafkasRules) {
  auto log = Open();
  EXPECT_EQ(log->EndOffsetForEpoch(0), EpochEnd(-1, -1)) << "no epoch known yet";
  // Epoch 1: offsets 0-2; epoch 3: 3-4; epoch 5: 5-8.
  std::vector<uint8_t> b1 = MakeBatch(3, now_);
  ASSERT_EQ(log->Append(b1, 1).error, ErrorCode::kNone);
  std::vector<uint8_t> b2 = MakeBatch(2, now_);
  ASSERT_EQ(log->Append(b2, 3).error, ErrorCode::kNone);
  std::vector<uint8_t> b3 = MakeBatch(4, now_);
  ASSERT_EQ(log->Append(b3, 5).error, ErrorCode::kNone);

  EXPECT_EQ(log->EndOffsetForEpoch(5), EpochEnd(5, 9)) << "the latest epoch ends at the end";
  EXPECT_EQ(log->EndOffsetForEpoch(3), EpochEnd(3, 5));
  EXPECT_EQ(log->EndOffsetForEpoch(4), EpochEnd(3, 5)) << "the largest epoch <= the one asked";
  EXPECT_EQ(log->EndOffsetForEpoch(1), EpochEnd(1, 3));
  EXPECT_EQ(log->EndOffsetForEpoch(2), EpochEnd(1, 3));
  EXPECT_EQ(log->EndOffsetForEpoch(0), EpochEnd(0, 0)) << "below every epoch: the first start";
  EXPECT_EQ(log->EndOffsetForEpoch(6), EpochEnd(-1, -1)) << "above the latest: undefined";
  EXPECT_EQ(log->EndOffsetForEpoch(-1), EpochEnd(-1, -1));

  // The latest epoch's end follows appends.
  std::vector<uint8_t> b4 = MakeBatch(2, now_);
  ASSERT_EQ(log->Append(b4, 5).error, ErrorCode::kNone);
  EXPECT_EQ(log->EndOffsetForEpoch(5), EpochEnd(5, 11));

  // Deleting records moves the first known epoch's start up with the log start.
  ErrorCode error;
  ASSERT_TRUE(log->DeleteRecordsBefore(4, &error).ok());
  ASSERT_EQ(error, ErrorCode::kNone);
  EXPECT_EQ(log->EndOffsetForEpoch(1), EpochEnd(1, 4));
  EXPECT_EQ(log->EndOffsetForEpoch(3), EpochEnd(3, 5));
}

}  // namespace
}  // namespace runnel::storaged
