#include "storaged/log/cleaner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/record/batch.h"
#include "storaged/log/file_names.h"
#include "tests/unit/storaged/log/file_faults.h"
#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

namespace fs = std::filesystem;
using record::ByteSpan;
using record::Compression;

constexpr int64_t kT0 = 1'700'000'000'000;

// A record to append: a null value is a tombstone.
struct Rec {
  std::string key;
  std::optional<std::string> value;
};

struct ReadRecord {
  int64_t offset = 0;
  int64_t timestamp = 0;
  std::string key;
  std::optional<std::string> value;
};

struct ReadBatch {
  int64_t base_offset = 0;
  int64_t last_offset = 0;
  int32_t count = 0;
  Compression codec = Compression::kNone;
  bool has_delete_horizon = false;
  int64_t base_timestamp = 0;
  int64_t max_timestamp = 0;
  int64_t producer_id = 0;
  int16_t producer_epoch = 0;
  int32_t base_sequence = 0;
  int32_t leader_epoch = 0;
  std::vector<uint8_t> bytes;
};

struct Contents {
  std::vector<ReadBatch> batches;
  std::vector<ReadRecord> records;
};

ByteSpan Span(const std::string& s) {
  return ByteSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}
std::string Str(ByteSpan s) {
  return std::string(reinterpret_cast<const char*>(s.data()), s.size());
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

class CleanerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_.emplace("cleaner");
    dir_ = root_->path() + "/t-0";
  }
  void TearDown() override {
    log_.reset();
    root_.reset();
  }

  static LogConfig CompactConfig() {
    LogConfig c;
    c.cleanup_compact = true;
    c.cleanup_delete = false;
    c.segment_index_bytes = 4096;
    c.index_interval_bytes = 64;
    c.delete_retention_ms = 1000;
    return c;
  }

  std::shared_ptr<Log> OpenLogAt(const std::string& dir, const LogConfig& config,
                                 LoadReport* report = nullptr, const std::string& topic = "t") {
    LogOptions o;
    o.dir = dir;
    o.tp = {topic, 0};
    o.config = config;
    o.files = &files_;
    o.now_ms = [this] { return now_; };
    StatusOr<std::unique_ptr<Log>> log =
        Log::Open(std::move(o), "", 0, 0, /*clean_shutdown=*/false, report);
    EXPECT_TRUE(log.ok()) << log.status();
    if (!log.ok()) return nullptr;
    return std::shared_ptr<Log>(std::move(*log));
  }
  void OpenLog(const LogConfig& config, LoadReport* report = nullptr) {
    log_ = OpenLogAt(dir_, config, report);
    ASSERT_NE(log_, nullptr);
  }
  void Reopen(LoadReport* report = nullptr) {
    LogConfig config = log_->config();
    ASSERT_TRUE(log_->Close().ok());
    log_.reset();
    OpenLog(config, report);
  }

  Cleaner MakeCleaner(size_t max_map_entries = 1 << 20) {
    CleanerOptions o;
    o.now_ms = [this] { return now_; };
    o.max_map_entries = max_map_entries;
    return Cleaner(std::move(o));
  }

  // Appends one batch of `recs` stamped now_ (rolling a new segment first when `roll`);
  // returns its base offset.
  int64_t AppendTo(Log& log, const std::vector<Rec>& recs, bool roll = false,
                   Compression codec = Compression::kNone,
                   record::BatchBuilder::Options options = {}, int32_t leader_epoch = 0) {
    LogConfig saved = log.config();
    if (roll) {
      // A segment older than segment.ms rolls at the next append.
      LogConfig c = saved;
      c.segment_ms = -1;
      log.SetConfig(c);
    }
    options.compression = codec;
    record::BatchBuilder builder(options);
    for (const Rec& r : recs) {
      std::optional<ByteSpan> value;
      if (r.value) value = Span(*r.value);
      builder.Add(now_, Span(r.key), value);
    }
    StatusOr<std::vector<uint8_t>> bytes = builder.Build();
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) return -1;
    AppendResult r = log.Append(*bytes, leader_epoch);
    if (roll) log.SetConfig(saved);
    EXPECT_EQ(r.error, protocol::ErrorCode::kNone) << r.error_message;
    return r.base_offset;
  }
  int64_t Append(const std::vector<Rec>& recs, bool roll = false,
                 Compression codec = Compression::kNone) {
    return AppendTo(*log_, recs, roll, codec);
  }

  // Everything Log::Read returns from the log start, parsed.
  Contents DumpLog(const Log& log) {
    Contents out;
    LogState state = log.State();
    ReadResult read = log.Read(state.log_start_offset, INT32_MAX, true);
    EXPECT_EQ(read.error, protocol::ErrorCode::kNone);
    for (const FileRange& range : read.ranges) {
      std::vector<uint8_t> bytes(size_t(range.length));
      int fd = ::open(range.path.c_str(), O_RDONLY | O_CLOEXEC);
      EXPECT_GE(fd, 0) << range.path;
      if (fd < 0) return out;
      EXPECT_EQ(::pread(fd, bytes.data(), bytes.size(), range.position), ssize_t(bytes.size()));
      ::close(fd);
      StatusOr<std::vector<record::BatchView>> batches = record::SplitBatches(bytes);
      EXPECT_TRUE(batches.ok()) << batches.status();
      if (!batches.ok()) return out;
      for (const record::BatchView& b : *batches) {
        record::ValidationOptions vo;
        vo.from_client = false;
        vo.require_keys = true;
        protocol::KafkaError e = record::ValidateBatch(b.bytes(), vo);
        EXPECT_TRUE(e.ok()) << "batch at offset " << b.base_offset() << ": " << e.message;
        ReadBatch rb;
        rb.base_offset = b.base_offset();
        rb.last_offset = b.last_offset();
        rb.count = b.record_count();
        rb.codec = b.compression();
        rb.has_delete_horizon = b.has_delete_horizon();
        rb.base_timestamp = b.base_timestamp();
        rb.max_timestamp = b.max_timestamp();
        rb.producer_id = b.producer_id();
        rb.producer_epoch = b.producer_epoch();
        rb.base_sequence = b.base_sequence();
        rb.leader_epoch = b.partition_leader_epoch();
        rb.bytes.assign(b.bytes().begin(), b.bytes().end());
        out.batches.push_back(rb);
        Status s = record::ForEachRecord(b, [&](const record::Record& r) {
          ReadRecord rr;
          rr.offset = b.base_offset() + r.offset_delta;
          rr.timestamp = int64_t(uint64_t(b.base_timestamp()) + uint64_t(r.timestamp_delta));
          rr.key = r.key ? Str(*r.key) : "";
          if (r.value) rr.value = Str(*r.value);
          out.records.push_back(rr);
          return true;
        });
        EXPECT_TRUE(s.ok()) << s;
      }
    }
    return out;
  }
  Contents Dump() { return DumpLog(*log_); }

  // "offset:key=value" (or "key=null") for each record, in order.
  static std::vector<std::string> Describe(const Contents& c) {
    std::vector<std::string> out;
    for (const ReadRecord& r : c.records) {
      out.push_back(fmt::format("{}:{}={}", r.offset, r.key, r.value.value_or("null")));
    }
    return out;
  }

  std::vector<std::string> FilesWith(const std::string& dir, std::string_view part) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) {
      std::string name = e.path().filename().string();
      if (name.find(part) != std::string::npos) out.push_back(name);
    }
    return out;
  }

  std::optional<runnel::testing::TempDir> root_;
  std::string dir_;
  int64_t now_ = kT0;
  FileCache files_{64};
  std::shared_ptr<Log> log_;
  std::vector<std::shared_ptr<Segment>> to_unlink_;
};

TEST_F(CleanerTest, KeepsTheLastRecordOfEachKeyAtItsOffset) {
  OpenLog(CompactConfig());
  Append({{"a", "1"}, {"b", "1"}});     // 0, 1
  Append({{"a", "2"}, {"c", "1"}});     // 2, 3
  Append({{"b", "2"}}, /*roll=*/true);  // 4, in a second segment
  Append({{"z", "1"}}, /*roll=*/true);  // 5, the active segment
  ASSERT_EQ(log_->Segments().size(), 3u);

  Cleaner cleaner = MakeCleaner();
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->records_removed, 2);
  EXPECT_EQ(stats->tombstones_removed, 0);
  // The two non-active segments are merged into one.
  EXPECT_EQ(stats->segments_cleaned, 2);
  EXPECT_EQ(stats->segments_written, 1);
  EXPECT_EQ(stats->end_offset, 5);
  EXPECT_FALSE(stats->aborted);
  EXPECT_EQ(log_->first_dirty_offset(), 5);
  ASSERT_EQ(to_unlink_.size(), 2u);
  EXPECT_TRUE(to_unlink_[0]->log_path().ends_with(".log.deleted")) << to_unlink_[0]->log_path();
  EXPECT_TRUE(FilesWith(dir_, ".cleaned").empty());
  EXPECT_EQ(log_->Segments().size(), 2u);

  std::vector<std::string> want = {"2:a=2", "3:c=1", "4:b=2", "5:z=1"};
  Contents c = Dump();
  EXPECT_EQ(Describe(c), want);
  // The batch that lost both records is gone; the others keep their base offsets.
  ASSERT_EQ(c.batches.size(), 3u);
  EXPECT_EQ(c.batches[0].base_offset, 2);
  EXPECT_EQ(c.batches[1].base_offset, 4);
  EXPECT_EQ(c.batches[2].base_offset, 5);
  EXPECT_EQ(log_->State().log_end_offset, 6);

  // Reads from inside the gap start at the next batch; the cleaned segment survives a reopen.
  ReadResult from_gap = log_->Read(1, INT32_MAX, true);
  ASSERT_EQ(from_gap.error, protocol::ErrorCode::kNone);
  ASSERT_FALSE(from_gap.ranges.empty());
  EXPECT_EQ(from_gap.ranges[0].position, 0);
  Reopen();
  EXPECT_EQ(Describe(Dump()), want);
  EXPECT_EQ(log_->State().log_end_offset, 6);
  EXPECT_EQ(Append({{"a", "3"}}), 6);
}

TEST_F(CleanerTest, AFullDiskFailsThePassAndLeavesTheLogAsItWas) {
  OpenLog(CompactConfig());
  Append({{"a", "1"}, {"b", "1"}});
  Append({{"a", "2"}, {"c", "1"}});
  Append({{"b", "2"}}, /*roll=*/true);
  Append({{"z", "1"}}, /*roll=*/true);
  const std::vector<std::string> before = Describe(Dump());
  Cleaner cleaner = MakeCleaner();
  for (FileOp op : {FileOp::kWrite, FileOp::kSync, FileOp::kRename}) {
    SCOPED_TRACE(int(op));
    testing::FaultInjector faults;
    faults.Fail(op, ".cleaned", ENOSPC);
    StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
    EXPECT_FALSE(stats.ok());
    EXPECT_GE(faults.injected(), 1);
    EXPECT_TRUE(FilesWith(dir_, ".cleaned").empty());
    EXPECT_TRUE(FilesWith(dir_, ".swap").empty());
    EXPECT_TRUE(to_unlink_.empty());
    EXPECT_EQ(log_->Segments().size(), 3u);
    EXPECT_EQ(log_->first_dirty_offset(), 0);
    EXPECT_EQ(Describe(Dump()), before);
    EXPECT_FALSE(log_->offline()) << "the log's own files are untouched";
  }
  // Room again: the next pass cleans.
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->records_removed, 2);
  EXPECT_EQ(Describe(Dump()), (std::vector<std::string>{"2:a=2", "3:c=1", "4:b=2", "5:z=1"}));
  Reopen();
  EXPECT_EQ(Describe(Dump()), (std::vector<std::string>{"2:a=2", "3:c=1", "4:b=2", "5:z=1"}));
}

TEST_F(CleanerTest, RewrittenBatchKeepsItsHeaderFields) {
  OpenLog(CompactConfig());
  record::BatchBuilder::Options o;
  o.producer_id = 7;
  o.producer_epoch = 2;
  o.base_sequence = 0;
  Append({{"x", "0"}});  // 0
  AppendTo(*log_, {{"k1", "a"}, {"k2", "b"}, {"k1", "c"}, {"k3", "d"}}, false, Compression::kNone,
           o, /*leader_epoch=*/3);        // 1..4
  Append({{"k3", "e"}}, /*roll=*/false);  // 5
  Append({{"z", "1"}}, /*roll=*/true);
  Cleaner cleaner = MakeCleaner();
  ASSERT_TRUE(cleaner.Clean(*log_, &to_unlink_).ok());

  Contents c = Dump();
  EXPECT_EQ(Describe(c),
            (std::vector<std::string>{"0:x=0", "2:k2=b", "3:k1=c", "5:k3=e", "6:z=1"}));
  ASSERT_EQ(c.batches.size(), 4u);
  const ReadBatch& b = c.batches[1];
  EXPECT_EQ(b.base_offset, 1);
  EXPECT_EQ(b.last_offset, 4);  // the last offset delta is kept, so is the last sequence
  EXPECT_EQ(b.count, 2);
  EXPECT_EQ(b.producer_id, 7);
  EXPECT_EQ(b.producer_epoch, 2);
  EXPECT_EQ(b.base_sequence, 0);
  EXPECT_EQ(b.leader_epoch, 3);
  EXPECT_FALSE(b.has_delete_horizon);
}

TEST_F(CleanerTest, TombstoneKeptUntilItsDeleteHorizonThenRemoved) {
  LogConfig config = CompactConfig();
  config.delete_retention_ms = 10000;
  OpenLog(config);
  Append({{"k", "v"}});           // 0
  Append({{"k", std::nullopt}});  // 1: tombstone
  Append({{"j", "1"}});           // 2
  Append({{"z", "1"}}, /*roll=*/true);
  Append({{"j", std::nullopt}});  // 4: a tombstone in the active segment is never touched
  Cleaner cleaner = MakeCleaner();

  // First clean: the value goes, the tombstone stays and gets its horizon.
  StatusOr<CleanerStats> first = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->records_removed, 1);
  EXPECT_EQ(first->tombstones_removed, 0);
  Contents c = Dump();
  EXPECT_EQ(Describe(c), (std::vector<std::string>{"1:k=null", "2:j=1", "3:z=1", "4:j=null"}));
  ASSERT_GE(c.batches.size(), 1u);
  EXPECT_TRUE(c.batches[0].has_delete_horizon);
  EXPECT_EQ(c.batches[0].base_timestamp, kT0 + 10000);
  EXPECT_EQ(c.records[0].timestamp, kT0);         // the record keeps its own timestamp
  EXPECT_FALSE(c.batches[1].has_delete_horizon);  // no tombstone in it

  // Just before the horizon: still there, and the horizon does not move.
  now_ = kT0 + 9999;
  StatusOr<CleanerStats> second = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->tombstones_removed, 0);
  c = Dump();
  EXPECT_EQ(Describe(c), (std::vector<std::string>{"1:k=null", "2:j=1", "3:z=1", "4:j=null"}));
  EXPECT_EQ(c.batches[0].base_timestamp, kT0 + 10000);

  // At the horizon it goes (the key is gone for good); the active one stays.
  now_ = kT0 + 10000;
  StatusOr<CleanerStats> third = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->tombstones_removed, 1);
  EXPECT_EQ(Describe(Dump()), (std::vector<std::string>{"2:j=1", "3:z=1", "4:j=null"}));
}

TEST_F(CleanerTest, TombstoneFollowedByAValueGoesAtOnce) {
  // A value written after a tombstone: the tombstone goes without waiting for a horizon.
  OpenLog(CompactConfig());
  Append({{"k", "1"}, {"k", std::nullopt}});
  Append({{"k", "2"}});
  Append({{"z", "1"}}, /*roll=*/true);
  Cleaner cleaner = MakeCleaner();
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->records_removed, 2);
  EXPECT_EQ(stats->tombstones_removed, 1);
  EXPECT_EQ(Describe(Dump()), (std::vector<std::string>{"2:k=2", "3:z=1"}));
}

TEST_F(CleanerTest, ActiveSegmentIsNeverTouched) {
  OpenLog(CompactConfig());
  for (int i = 0; i < 5; ++i) Append({{"k", std::to_string(i)}, {"d", std::nullopt}});
  ASSERT_EQ(log_->Segments().size(), 1u);
  std::string path = log_->Segments().back()->log_path();
  std::vector<uint8_t> before = ReadFile(path);
  now_ += 1'000'000;
  Cleaner cleaner = MakeCleaner();
  EXPECT_FALSE(cleaner.NeedsCleaning(*log_));
  EXPECT_EQ(cleaner.DirtyRatio(*log_), 0.0);
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->segments_cleaned, 0);
  EXPECT_EQ(stats->records_removed, 0);
  EXPECT_EQ(ReadFile(path), before);
  EXPECT_EQ(Dump().records.size(), 10u);
  EXPECT_TRUE(to_unlink_.empty());
  EXPECT_TRUE(FilesWith(dir_, ".cleaned").empty());
}

TEST_F(CleanerTest, SegmentsNewerThanMinCompactionLagWait) {
  LogConfig config = CompactConfig();
  config.min_compaction_lag_ms = 10000;
  OpenLog(config);
  Append({{"a", "1"}});  // 0 at T0
  now_ = kT0 + 8000;
  Append({{"a", "2"}}, /*roll=*/true);  // 1 at T0 + 8000, second segment
  Append({{"z", "1"}}, /*roll=*/true);  // active
  Cleaner cleaner = MakeCleaner();

  // The second segment's records are 4 s old: only the first segment is cleanable, and it
  // holds the newest "a" the cleaner may look at.
  now_ = kT0 + 12000;
  StatusOr<CleanerStats> early = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->records_removed, 0);
  EXPECT_EQ(log_->first_dirty_offset(), 1);
  EXPECT_EQ(Describe(Dump()), (std::vector<std::string>{"0:a=1", "1:a=2", "2:z=1"}));

  now_ = kT0 + 18000;
  StatusOr<CleanerStats> later = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->records_removed, 1);
  EXPECT_EQ(log_->first_dirty_offset(), 2);
  EXPECT_EQ(Describe(Dump()), (std::vector<std::string>{"1:a=2", "2:z=1"}));
}

TEST_F(CleanerTest, DirtyRatioDecidesWhichLogIsCleaned) {
  LogConfig config = CompactConfig();
  config.min_cleanable_dirty_ratio = 0.5;
  OpenLog(config);
  std::vector<Rec> many;
  for (int i = 0; i < 20; ++i) many.push_back({fmt::format("key-{:02}", i), "value"});
  Append(many);
  Append({{"z", "1"}}, /*roll=*/true);
  Cleaner cleaner = MakeCleaner();
  EXPECT_EQ(cleaner.DirtyRatio(*log_), 1.0);
  EXPECT_TRUE(cleaner.NeedsCleaning(*log_));

  // A log that is not compacted is never picked, however dirty.
  LogConfig delete_only = config;
  delete_only.cleanup_compact = false;
  delete_only.cleanup_delete = true;
  std::shared_ptr<Log> other = OpenLogAt(root_->path() + "/u-0", delete_only, nullptr, "u");
  ASSERT_NE(other, nullptr);
  AppendTo(*other, {{"a", "1"}});
  AppendTo(*other, {{"a", "2"}}, /*roll=*/true);
  EXPECT_FALSE(cleaner.NeedsCleaning(*other));

  StatusOr<bool> cleaned = cleaner.CleanOnce({other, log_}, &to_unlink_);
  ASSERT_TRUE(cleaned.ok()) << cleaned.status();
  EXPECT_TRUE(*cleaned);
  EXPECT_EQ(log_->first_dirty_offset(), 20);
  EXPECT_EQ(cleaner.DirtyRatio(*log_), 0.0);
  EXPECT_EQ(other->first_dirty_offset(), 0);
  EXPECT_FALSE(cleaner.Clean(*other, &to_unlink_).ok());  // not compacted: refused

  // One small dirty segment against a big clean one: below the threshold.
  Append({{"key-00", "new"}}, /*roll=*/true);
  std::vector<std::shared_ptr<Segment>> segs = log_->Segments();
  ASSERT_EQ(segs.size(), 3u);
  double want = double(segs[1]->size()) / double(segs[0]->size() + segs[1]->size());
  EXPECT_DOUBLE_EQ(cleaner.DirtyRatio(*log_), want);
  ASSERT_LT(want, 0.5);
  EXPECT_FALSE(cleaner.NeedsCleaning(*log_));
  cleaned = cleaner.CleanOnce({other, log_}, &to_unlink_);
  ASSERT_TRUE(cleaned.ok());
  EXPECT_FALSE(*cleaned);
  EXPECT_EQ(log_->first_dirty_offset(), 20);

  // Enough dirty bytes: above it.
  for (int i = 0; i < 30 && cleaner.DirtyRatio(*log_) <= 0.5; ++i) {
    Append({{fmt::format("key-{:02}", i % 20), "newer"}}, /*roll=*/true);
  }
  EXPECT_GT(cleaner.DirtyRatio(*log_), 0.5);
  EXPECT_TRUE(cleaner.NeedsCleaning(*log_));
  cleaned = cleaner.CleanOnce({other, log_}, &to_unlink_);
  ASSERT_TRUE(cleaned.ok());
  EXPECT_TRUE(*cleaned);
  EXPECT_EQ(log_->first_dirty_offset(), log_->Segments().back()->base_offset());
}

TEST_F(CleanerTest, CleanOncePicksTheDirtiestLog) {
  LogConfig config = CompactConfig();
  config.min_cleanable_dirty_ratio = 0.05;
  OpenLog(config);
  std::shared_ptr<Log> other = OpenLogAt(root_->path() + "/u-0", config, nullptr, "u");
  ASSERT_NE(other, nullptr);
  // log_: cleaned once, then a little dirt; other: all dirty.
  for (int i = 0; i < 10; ++i) Append({{fmt::format("k{}", i), "v"}});
  Append({{"z", "1"}}, /*roll=*/true);
  Cleaner cleaner = MakeCleaner();
  ASSERT_TRUE(cleaner.Clean(*log_, &to_unlink_).ok());
  Append({{"k1", "w"}}, /*roll=*/true);
  AppendTo(*other, {{"a", "1"}});
  AppendTo(*other, {{"a", "2"}});
  AppendTo(*other, {{"z", "1"}}, /*roll=*/true);
  ASSERT_GT(cleaner.DirtyRatio(*log_), 0.05);
  ASSERT_LT(cleaner.DirtyRatio(*log_), cleaner.DirtyRatio(*other));

  StatusOr<bool> cleaned = cleaner.CleanOnce({log_, other}, &to_unlink_);
  ASSERT_TRUE(cleaned.ok());
  EXPECT_TRUE(*cleaned);
  EXPECT_EQ(other->first_dirty_offset(), 2);
  EXPECT_EQ(log_->first_dirty_offset(), 10);
  EXPECT_EQ(Describe(DumpLog(*other)), (std::vector<std::string>{"1:a=2", "2:z=1"}));
  // The next call takes the other one.
  cleaned = cleaner.CleanOnce({log_, other}, &to_unlink_);
  ASSERT_TRUE(cleaned.ok());
  EXPECT_TRUE(*cleaned);
  EXPECT_EQ(log_->first_dirty_offset(), 11);
}

TEST_F(CleanerTest, MaxCompactionLagForcesCleaningBelowTheRatio) {
  LogConfig config = CompactConfig();
  config.min_cleanable_dirty_ratio = 0.99;
  config.max_compaction_lag_ms = 60000;
  OpenLog(config);
  for (int i = 0; i < 10; ++i) Append({{fmt::format("k{}", i), "v"}});
  now_ = kT0 + 1000;
  Append({{"k1", "w"}}, /*roll=*/true);  // 10, the first batch of its segment, at T0 + 1000
  Cleaner cleaner = MakeCleaner();
  ASSERT_TRUE(cleaner.Clean(*log_, &to_unlink_).ok());
  ASSERT_EQ(log_->first_dirty_offset(), 10);
  Append({{"z", "1"}}, /*roll=*/true);  // the segment of offset 10 is now dirty and cleanable
  ASSERT_LT(cleaner.DirtyRatio(*log_), 0.99);

  now_ = kT0 + 1000 + 60000;
  EXPECT_FALSE(cleaner.NeedsCleaning(*log_));  // exactly the lag: not yet
  StatusOr<bool> cleaned = cleaner.CleanOnce({log_}, &to_unlink_);
  ASSERT_TRUE(cleaned.ok());
  EXPECT_FALSE(*cleaned);
  now_ += 1;
  EXPECT_TRUE(cleaner.NeedsCleaning(*log_));
  cleaned = cleaner.CleanOnce({log_}, &to_unlink_);
  ASSERT_TRUE(cleaned.ok());
  EXPECT_TRUE(*cleaned);
  EXPECT_EQ(log_->first_dirty_offset(), 11);
  Contents c = Dump();
  for (const ReadRecord& r : c.records) EXPECT_FALSE(r.key == "k1" && r.value == "v");
}

class CleanerCodecTest : public CleanerTest, public ::testing::WithParamInterface<Compression> {};

TEST_P(CleanerCodecTest, CompressedBatchIsRewrittenWithItsCodec) {
  const Compression codec = GetParam();
  OpenLog(CompactConfig());
  std::vector<Rec> first;
  for (int i = 0; i < 50; ++i)
    first.push_back({fmt::format("key-{}", i % 10), fmt::format("v{}", i)});
  Append(first, false, codec);  // 0..49: keys repeat within the batch
  Append({{"key-3", "last"}, {"key-4", std::nullopt}}, false, codec);  // 50, 51
  Append({{"z", "1"}}, /*roll=*/true);
  Cleaner cleaner = MakeCleaner();
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->records_removed, 42);

  std::vector<std::string> want;
  for (int i = 40; i < 50; ++i) {
    if (i % 10 != 3 && i % 10 != 4) want.push_back(fmt::format("{}:key-{}=v{}", i, i % 10, i));
  }
  want.push_back("50:key-3=last");
  want.push_back("51:key-4=null");
  want.push_back("52:z=1");
  Contents c = Dump();
  EXPECT_EQ(Describe(c), want);
  ASSERT_EQ(c.batches.size(), 3u);
  EXPECT_EQ(c.batches[0].codec, codec);
  EXPECT_EQ(c.batches[0].base_offset, 0);
  EXPECT_EQ(c.batches[0].last_offset, 49);
  EXPECT_EQ(c.batches[0].count, 8);
  EXPECT_EQ(c.batches[1].codec, codec);
  EXPECT_TRUE(c.batches[1].has_delete_horizon);
  Reopen();
  EXPECT_EQ(Describe(Dump()), want);
}

INSTANTIATE_TEST_SUITE_P(Codecs, CleanerCodecTest,
                         ::testing::Values(Compression::kNone, Compression::kGzip,
                                           Compression::kSnappy, Compression::kLz4,
                                           Compression::kZstd),
                         [](const ::testing::TestParamInfo<Compression>& info) {
                           switch (info.param) {
                             case Compression::kNone:
                               return std::string("None");
                             case Compression::kGzip:
                               return std::string("Gzip");
                             case Compression::kSnappy:
                               return std::string("Snappy");
                             case Compression::kLz4:
                               return std::string("Lz4");
                             case Compression::kZstd:
                               return std::string("Zstd");
                           }
                           return std::string("Unknown");
                         });

TEST_F(CleanerTest, LogAppendTimeBatchKeepsItsAppendTime) {
  LogConfig config = CompactConfig();
  config.timestamp_type = record::TimestampType::kLogAppendTime;
  OpenLog(config);
  // Records created at T0, appended at T0 + 500.
  record::BatchBuilder builder({});
  builder.Add(kT0, Span("a"), Span("1"));
  builder.Add(kT0, Span("b"), Span("1"));
  StatusOr<std::vector<uint8_t>> bytes = builder.Build();
  ASSERT_TRUE(bytes.ok());
  now_ = kT0 + 500;
  ASSERT_EQ(log_->Append(*bytes, 0).error, protocol::ErrorCode::kNone);
  Append({{"a", "2"}});
  Append({{"z", "1"}}, /*roll=*/true);
  Cleaner cleaner = MakeCleaner();
  ASSERT_TRUE(cleaner.Clean(*log_, &to_unlink_).ok());
  Contents c = Dump();
  EXPECT_EQ(Describe(c), (std::vector<std::string>{"1:b=1", "2:a=2", "3:z=1"}));
  ASSERT_EQ(c.batches.size(), 3u);
  EXPECT_EQ(c.batches[0].count, 1);
  EXPECT_EQ(c.batches[0].max_timestamp, kT0 + 500);
  EXPECT_EQ(c.records[0].timestamp, kT0);
}

TEST_F(CleanerTest, RecordsBelowTheLogStartOffsetAreNotKept) {
  OpenLog(CompactConfig());
  Append({{"a", "1"}, {"b", "1"}, {"c", "1"}});  // 0..2
  Append({{"d", "1"}});                          // 3
  Append({{"z", "1"}}, /*roll=*/true);
  protocol::ErrorCode error;
  ASSERT_TRUE(log_->DeleteRecordsBefore(2, &error).ok());
  ASSERT_EQ(error, protocol::ErrorCode::kNone);
  Cleaner cleaner = MakeCleaner();
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->records_removed, 2);
  Contents c = Dump();
  EXPECT_EQ(Describe(c), (std::vector<std::string>{"2:c=1", "3:d=1", "4:z=1"}));
  EXPECT_EQ(c.batches[0].base_offset, 0);  // the batch keeps its base offset
  EXPECT_EQ(c.batches[0].count, 1);
}

TEST_F(CleanerTest, BoundedOffsetMapCleansInSeveralPasses) {
  OpenLog(CompactConfig());
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 6; ++k) Append({{fmt::format("k{}", k), fmt::format("r{}", round)}});
  }
  Append({{"big0", "x"}, {"big1", "x"}, {"big2", "x"}});  // 18..20: more keys than the map holds
  Append({{"z", "1"}}, /*roll=*/true);                    // 21
  Cleaner cleaner = MakeCleaner(/*max_map_entries=*/2);
  int64_t previous = log_->first_dirty_offset();
  int passes = 0;
  for (; passes < 30 && log_->first_dirty_offset() < 21; ++passes) {
    StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
    ASSERT_TRUE(stats.ok()) << stats.status();
    ASSERT_GT(log_->first_dirty_offset(), previous) << "a pass made no progress";
    if (passes == 0) {
      EXPECT_EQ(stats->end_offset, 2);  // two one-key batches fill the map
    }
    previous = log_->first_dirty_offset();
  }
  EXPECT_EQ(log_->first_dirty_offset(), 21);
  EXPECT_GT(passes, 5);
  std::vector<std::string> want;
  for (int k = 0; k < 6; ++k) want.push_back(fmt::format("{}:k{}=r2", 12 + k, k));
  want.push_back("18:big0=x");
  want.push_back("19:big1=x");
  want.push_back("20:big2=x");
  want.push_back("21:z=1");
  EXPECT_EQ(Describe(Dump()), want);
}

TEST_F(CleanerTest, LeftoverCleanedFilesAreRemovedAtLoad) {
  OpenLog(CompactConfig());
  Append({{"a", "1"}});
  Append({{"a", "2"}});
  Append({{"z", "1"}}, /*roll=*/true);
  std::vector<std::string> want = Describe(Dump());
  ASSERT_TRUE(log_->Close().ok());
  log_.reset();
  // A crash while writing the cleaned copy of segment 0.
  for (std::string_view kind : {kLogSuffix, kIndexSuffix, kTimeIndexSuffix}) {
    std::ofstream(SegmentFilePath(dir_, 0, kind) + std::string(kCleanedSuffix)) << "partial";
  }
  LoadReport report;
  OpenLog(CompactConfig(), &report);
  EXPECT_EQ(report.removed_files, 3);
  EXPECT_TRUE(FilesWith(dir_, ".cleaned").empty());
  EXPECT_EQ(Describe(Dump()), want);
  // The cleaner can write its copy at that base again.
  Cleaner cleaner = MakeCleaner();
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(Describe(Dump()), (std::vector<std::string>{"1:a=2", "2:z=1"}));
}

TEST_F(CleanerTest, SwapFileIsFinishedAtLoad) {
  OpenLog(CompactConfig());
  Append({{"a", "1"}, {"b", "1"}});
  Append({{"a", "2"}});
  Append({{"b", "2"}, {"c", "1"}});
  Append({{"z", "1"}}, /*roll=*/true);
  ASSERT_TRUE(log_->Close().ok());
  log_.reset();
  // Two copies of the uncleaned log; the cleaned segment from a third.
  const std::string before_old_renamed = root_->path() + "/t-1";
  const std::string after_old_renamed = root_->path() + "/t-2";
  fs::copy(dir_, before_old_renamed);
  fs::copy(dir_, after_old_renamed);
  OpenLog(CompactConfig());
  Cleaner cleaner = MakeCleaner();
  ASSERT_TRUE(cleaner.Clean(*log_, &to_unlink_).ok());
  std::vector<std::string> want = {"2:a=2", "3:b=2", "4:c=1", "5:z=1"};
  ASSERT_EQ(Describe(Dump()), want);
  ASSERT_TRUE(log_->Close().ok());
  log_.reset();
  const std::string cleaned = SegmentFilePath(dir_, 0, kLogSuffix);
  const std::string swap_name =
      OffsetFileStem(0) + std::string(kLogSuffix) + std::string(kSwapSuffix);

  // Crash after the copy was named .swap, before the old segment was renamed .deleted.
  fs::copy_file(cleaned, before_old_renamed + "/" + swap_name);
  // Crash after the old segment was renamed .deleted, before the swap took the final name.
  fs::copy_file(cleaned, after_old_renamed + "/" + swap_name);
  fs::rename(SegmentFilePath(after_old_renamed, 0, kLogSuffix),
             SegmentFilePath(after_old_renamed, 0, kLogSuffix) + std::string(kDeletedSuffix));

  for (const std::string& dir : {before_old_renamed, after_old_renamed}) {
    SCOPED_TRACE(dir);
    LoadReport report;
    std::shared_ptr<Log> log = OpenLogAt(dir, CompactConfig(), &report);
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(Describe(DumpLog(*log)), want);
    EXPECT_TRUE(FilesWith(dir, ".swap").empty());
    EXPECT_TRUE(FilesWith(dir, ".deleted").empty());
    EXPECT_EQ(ReadFile(SegmentFilePath(dir, 0, kLogSuffix)), ReadFile(cleaned));
    EXPECT_EQ(log->State().log_end_offset, 6);
  }
}

TEST_F(CleanerTest, PassAbortsWhenRetentionRemovesTheSegment) {
  OpenLog(CompactConfig());
  Append({{"a", "1"}, {"b", "1"}});     // 0, 1
  Append({{"a", "2"}}, /*roll=*/true);  // 2
  Append({{"z", "1"}}, /*roll=*/true);  // 3
  CleanerOptions o;
  o.now_ms = [this] { return now_; };
  std::vector<std::shared_ptr<Segment>> retained;
  o.before_swap = [&](Log& log, const Segment& segment) {
    if (segment.base_offset() != 0) return;
    protocol::ErrorCode error;
    ASSERT_TRUE(log.DeleteRecordsBefore(2, &error).ok());
    ASSERT_EQ(log.DeleteOldSegments(&retained), 1);
  };
  Cleaner cleaner(o);
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE(stats->aborted);
  EXPECT_EQ(stats->segments_cleaned, 0);
  EXPECT_TRUE(to_unlink_.empty());
  EXPECT_TRUE(FilesWith(dir_, ".cleaned").empty());
  EXPECT_EQ(log_->first_dirty_offset(), 2);  // moved by retention, not by the cleaner
  EXPECT_EQ(Describe(Dump()), (std::vector<std::string>{"2:a=2", "3:z=1"}));
}

TEST_F(CleanerTest, PassAbortsWhenTheLogIsTruncatedBelowWhatItMapped) {
  OpenLog(CompactConfig());
  Append({{"a", "1"}, {"b", "1"}});     // 0, 1
  Append({{"c", "1"}}, /*roll=*/true);  // 2
  Append({{"a", "2"}}, /*roll=*/true);  // 3
  Append({{"z", "1"}}, /*roll=*/true);  // 4
  CleanerOptions o;
  o.now_ms = [this] { return now_; };
  o.before_swap = [&](Log& log, const Segment& segment) {
    // A follower truncating to its new leader: offset 3, which the map says is a's last
    // record, is gone; a@0 must stay.
    if (segment.base_offset() == 0) {
      ASSERT_TRUE(log.TruncateTo(3).ok());
    }
  };
  Cleaner cleaner(o);
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE(stats->aborted);
  EXPECT_TRUE(FilesWith(dir_, ".cleaned").empty());
  EXPECT_EQ(Describe(Dump()), (std::vector<std::string>{"0:a=1", "1:b=1", "2:c=1"}));
}

TEST_F(CleanerTest, CorruptBatchMakesTheLogUncleanable) {
  LogConfig config = CompactConfig();
  config.min_cleanable_dirty_ratio = 0.1;
  OpenLog(config);
  Append({{"a", "1"}, {"b", "1"}});
  Append({{"a", "2"}});
  Append({{"z", "1"}}, /*roll=*/true);
  // Flip a byte in the records of the first batch: its CRC no longer matches.
  std::string path = log_->Segments().front()->log_path();
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(int64_t(record::kBatchHeaderSize) + 3);
    f.put('\x7f');
  }
  Cleaner cleaner = MakeCleaner();
  StatusOr<bool> first = cleaner.CleanOnce({log_}, &to_unlink_);
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(first.status().message().find("t-0"), std::string::npos) << first.status();
  EXPECT_NE(first.status().message().find("CRC"), std::string::npos) << first.status();
  EXPECT_TRUE(FilesWith(dir_, ".cleaned").empty());
  EXPECT_EQ(log_->first_dirty_offset(), 0);
  // Not tried again.
  EXPECT_TRUE(cleaner.NeedsCleaning(*log_));
  StatusOr<bool> second = cleaner.CleanOnce({log_}, &to_unlink_);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE(*second);
}

// The property the issue asks for: for random key/value/tombstone streams cleaned at random
// points, the log always yields the model's latest-value map, every surviving record is the
// one appended at its offset, offsets increase, and once the delete horizon has passed the
// cleaned part holds one record per key and no tombstone.
TEST_F(CleanerTest, PropertyCompactedLogMatchesModel) {
  constexpr int kSeeds = 50;
  constexpr int kSteps = 40;
  constexpr Compression kCodecs[] = {Compression::kNone,   Compression::kNone, Compression::kGzip,
                                     Compression::kSnappy, Compression::kLz4,  Compression::kZstd};
  for (int seed = 1; seed <= kSeeds && !HasFailure(); ++seed) {
    SCOPED_TRACE(fmt::format("seed {}", seed));
    std::mt19937_64 rng{uint64_t(seed)};
    auto uniform = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    log_.reset();
    fs::remove_all(dir_);
    to_unlink_.clear();
    now_ = kT0;
    LogConfig config = CompactConfig();
    config.segment_bytes = int32_t(uniform(150, 700));
    config.index_interval_bytes = int32_t(uniform(1, 300));
    config.delete_retention_ms = uniform(0, 3000);
    config.min_compaction_lag_ms = uniform(0, 2) == 0 ? uniform(1, 1500) : 0;
    constexpr size_t kMapSizes[] = {2, 3, 5, 8, 1000, 1000};
    Cleaner cleaner = MakeCleaner(kMapSizes[uniform(0, 5)]);
    const int keys = int(uniform(2, 8));
    OpenLog(config);
    ASSERT_NE(log_, nullptr);

    std::map<std::string, std::string> model;
    std::map<int64_t, Rec> appended;  // offset -> what was appended there

    auto check = [&](bool horizon_passed) {
      Contents c = Dump();
      std::map<std::string, std::string> seen;
      int64_t previous = -1;
      const int64_t first_dirty = log_->first_dirty_offset();
      std::map<std::string, int> clean_keys;
      for (const ReadRecord& r : c.records) {
        ASSERT_GT(r.offset, previous) << "offsets must increase";
        previous = r.offset;
        auto it = appended.find(r.offset);
        ASSERT_NE(it, appended.end()) << "no record was appended at offset " << r.offset;
        ASSERT_EQ(r.key, it->second.key) << "offset " << r.offset;
        ASSERT_EQ(r.value, it->second.value) << "offset " << r.offset;
        if (r.value) {
          seen[r.key] = *r.value;
        } else {
          seen.erase(r.key);
        }
        if (r.offset < first_dirty) {
          ASSERT_EQ(++clean_keys[r.key], 1) << "key " << r.key << " twice below the first "
                                            << "dirty offset " << first_dirty;
          if (horizon_passed) {
            ASSERT_TRUE(r.value) << "tombstone at " << r.offset;
          }
        }
      }
      ASSERT_EQ(seen, model);
    };

    for (int step = 0; step < kSteps && !HasFailure(); ++step) {
      int64_t op = uniform(0, 9);
      now_ += uniform(0, 400);
      if (op <= 6) {
        std::vector<Rec> recs;
        int64_t n = uniform(1, 5);
        for (int64_t i = 0; i < n; ++i) {
          Rec r{fmt::format("k{}", uniform(0, keys - 1)), std::nullopt};
          if (uniform(0, 3) != 0) r.value = fmt::format("v{}-{}", step, i);
          recs.push_back(r);
        }
        int64_t base = AppendTo(*log_, recs, false, kCodecs[uniform(0, 5)]);
        ASSERT_GE(base, 0);
        for (int64_t i = 0; i < n; ++i) {
          appended[base + i] = recs[size_t(i)];
          if (recs[size_t(i)].value) {
            model[recs[size_t(i)].key] = *recs[size_t(i)].value;
          } else {
            model.erase(recs[size_t(i)].key);
          }
        }
      } else if (op <= 8) {
        StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
        ASSERT_TRUE(stats.ok()) << stats.status();
        ASSERT_FALSE(stats->aborted);
        check(false);
      } else {
        Reopen();
        ASSERT_NE(log_, nullptr);
        check(false);
      }
    }
    if (HasFailure()) break;

    // Clean everything below the active segment, let every horizon pass, clean again.
    now_ += config.min_compaction_lag_ms + 1;
    const int64_t active_base = log_->Segments().back()->base_offset();
    for (int pass = 0; pass < 200 && log_->first_dirty_offset() < active_base; ++pass) {
      StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
      ASSERT_TRUE(stats.ok()) << stats.status();
    }
    ASSERT_EQ(log_->first_dirty_offset(), active_base);
    check(false);
    now_ += config.delete_retention_ms + 1;
    StatusOr<CleanerStats> last = cleaner.Clean(*log_, &to_unlink_);
    ASSERT_TRUE(last.ok()) << last.status();
    check(true);
    Reopen();
    check(true);
  }
}

TEST_F(CleanerTest, ManySmallSegmentsAreMergedIntoOne) {
  OpenLog(CompactConfig());
  // Ten one-batch segments over three keys, then the active segment.
  for (int i = 0; i < 10; ++i) {
    Append({{fmt::format("k{}", i % 3), fmt::format("v{}", i)}}, /*roll=*/i > 0);
  }
  Append({{"z", "1"}}, /*roll=*/true);  // 10, the active segment
  ASSERT_EQ(log_->Segments().size(), 11u);

  Cleaner cleaner = MakeCleaner();
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->segments_cleaned, 10);
  EXPECT_EQ(stats->segments_written, 1);
  EXPECT_EQ(to_unlink_.size(), 10u);
  std::vector<std::shared_ptr<Segment>> segments = log_->Segments();
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[0]->base_offset(), 0);
  EXPECT_EQ(segments[1]->base_offset(), 10);
  std::vector<std::string> want = {"7:k1=v7", "8:k2=v8", "9:k0=v9", "10:z=1"};
  EXPECT_EQ(Describe(Dump()), want);
  EXPECT_TRUE(FilesWith(dir_, ".cleaned").empty());
  EXPECT_TRUE(FilesWith(dir_, ".swap").empty());
  Reopen();
  EXPECT_EQ(log_->Segments().size(), 2u);
  EXPECT_EQ(Describe(Dump()), want);
  EXPECT_EQ(Append({{"k0", "x"}}), 11);
}

TEST_F(CleanerTest, MergedGroupsStayWithinSegmentBytes) {
  OpenLog(CompactConfig());
  for (int i = 0; i < 6; ++i) Append({{fmt::format("k{}", i), "v"}}, /*roll=*/i > 0);
  Append({{"z", "1"}}, /*roll=*/true);
  std::vector<std::shared_ptr<Segment>> segments = log_->Segments();
  segments.pop_back();
  const int64_t one = segments[0]->size();
  for (const auto& s : segments) ASSERT_EQ(s->size(), one);
  // Room for two segments and a bit, not three.
  std::vector<std::vector<std::shared_ptr<Segment>>> groups =
      GroupSegmentsBySize(segments, 3 * one - 1, 1 << 20);
  ASSERT_EQ(groups.size(), 3u);
  for (const auto& g : groups) EXPECT_EQ(g.size(), 2u);
  EXPECT_EQ(groups[1][0]->base_offset(), 2);
  // Exactly three fit.
  groups = GroupSegmentsBySize(segments, 3 * one, 1 << 20);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[1][0]->base_offset(), 3);
  // A limit below one segment leaves each alone.
  EXPECT_EQ(GroupSegmentsBySize(segments, one - 1, 1 << 20).size(), 6u);

  // Through a cleaning pass: six segments become three, each within segment.bytes.
  LogConfig c = CompactConfig();
  c.segment_bytes = int32_t(2 * one);
  log_->SetConfig(c);
  Cleaner cleaner = MakeCleaner();
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->segments_written, 3);
  segments = log_->Segments();
  ASSERT_EQ(segments.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(segments[i]->base_offset(), int64_t(2 * i));
    EXPECT_LE(segments[i]->size(), 2 * one);
  }
  EXPECT_EQ(Describe(Dump()), (std::vector<std::string>{"0:k0=v", "1:k1=v", "2:k2=v", "3:k3=v",
                                                        "4:k4=v", "5:k5=v", "6:z=1"}));
}

TEST_F(CleanerTest, MergedGroupsStayWithinIndexBytes) {
  LogConfig c = CompactConfig();
  c.index_interval_bytes = 1;  // an index entry per batch
  OpenLog(c);
  for (int i = 0; i < 4; ++i) {
    Append({{fmt::format("k{}", i), "v"}});
    Append({{fmt::format("j{}", i), "v"}});
    Append({{"z", "1"}}, /*roll=*/true);
  }
  std::vector<std::shared_ptr<Segment>> segments = log_->Segments();
  segments.pop_back();
  ASSERT_EQ(segments.size(), 4u);
  const int64_t index = segments[1]->offset_index().SizeInBytes();
  ASSERT_GT(index, 0);
  ASSERT_GE(segments[1]->time_index().SizeInBytes(), 0);
  for (size_t i = 1; i < segments.size(); ++i) {
    ASSERT_EQ(segments[i]->offset_index().SizeInBytes(), index);
  }
  // The .log bytes would allow one group; the offset index (or time index) bytes split it.
  const int64_t index_limit = std::max(2 * index, segments[1]->time_index().SizeInBytes() * 2);
  std::vector<std::vector<std::shared_ptr<Segment>>> groups =
      GroupSegmentsBySize({segments[1], segments[2], segments[3]}, 1 << 30, index_limit);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].size(), 2u);
  EXPECT_EQ(groups[1].size(), 1u);
  EXPECT_EQ(GroupSegmentsBySize({segments[1], segments[2], segments[3]}, 1 << 30, 1 << 20).size(),
            1u);
}

TEST_F(CleanerTest, MergedGroupsFitRelativeOffsets) {
  ASSERT_TRUE(fs::create_directories(dir_));
  // Three segments: at 0, at 2^31 - 1 (its one batch is the last offset a group from 0 can
  // hold) and at 2^31 (one too far).
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  std::vector<std::shared_ptr<Segment>> segments;
  for (int64_t base : {int64_t{0}, kMax, kMax + 1}) {
    StatusOr<std::unique_ptr<Segment>> seg =
        Segment::Open(dir_, base, 4096, /*create=*/true, /*active=*/true, &files_);
    ASSERT_TRUE(seg.ok()) << seg.status();
    record::BatchBuilder builder({});
    builder.Add(now_, Span("k"), Span("v"));
    StatusOr<std::vector<uint8_t>> bytes = builder.Build();
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    record::SetBaseOffset(*bytes, base);
    StatusOr<std::vector<record::BatchView>> views = record::SplitBatches(*bytes);
    ASSERT_TRUE(views.ok()) << views.status();
    ASSERT_TRUE((*seg)->Append(*bytes, *views, 64).ok());
    segments.push_back(std::move(*seg));
  }
  ASSERT_EQ(segments[2]->next_offset(), kMax + 2);
  std::vector<std::vector<std::shared_ptr<Segment>>> groups =
      GroupSegmentsBySize(segments, 1 << 30, 1 << 20);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].size(), 2u);
  ASSERT_EQ(groups[1].size(), 1u);
  EXPECT_EQ(groups[1][0]->base_offset(), kMax + 1);
  // Without the first segment, the other two share one base.
  EXPECT_EQ(GroupSegmentsBySize({segments[1], segments[2]}, 1 << 30, 1 << 20).size(), 1u);
}

TEST_F(CleanerTest, MergedSwapCutShortLoadsEveryRecordOnce) {
  OpenLog(CompactConfig());
  Append({{"a", "1"}, {"b", "1"}});     // 0, 1
  Append({{"a", "2"}}, /*roll=*/true);  // 2
  Append({{"c", "1"}}, /*roll=*/true);  // 3
  Append({{"b", "2"}}, /*roll=*/true);  // 4
  Append({{"z", "1"}}, /*roll=*/true);  // 5, active
  ASSERT_EQ(log_->Segments().size(), 5u);
  ASSERT_TRUE(log_->Close().ok());
  log_.reset();
  // Copies of the uncleaned log: the crash happened after k of the four old segments were
  // renamed .deleted (old segments are renamed in base order), the merged copy named .swap.
  std::vector<std::string> copies;
  for (int k = 0; k <= 4; ++k) {
    copies.push_back(root_->path() + fmt::format("/t-{}", k + 1));
    fs::copy(dir_, copies.back());
  }
  OpenLog(CompactConfig());
  Cleaner cleaner = MakeCleaner();
  StatusOr<CleanerStats> stats = cleaner.Clean(*log_, &to_unlink_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->segments_written, 1);
  std::vector<std::string> want = {"2:a=2", "3:c=1", "4:b=2", "5:z=1"};
  ASSERT_EQ(Describe(Dump()), want);
  ASSERT_EQ(log_->Segments().size(), 2u);
  ASSERT_TRUE(log_->Close().ok());
  log_.reset();
  const std::string cleaned = SegmentFilePath(dir_, 0, kLogSuffix);
  const std::string swap_name =
      OffsetFileStem(0) + std::string(kLogSuffix) + std::string(kSwapSuffix);
  const int64_t old_bases[] = {0, 2, 3, 4};
  for (int k = 0; k <= 4; ++k) {
    SCOPED_TRACE(fmt::format("{} old segment(s) renamed .deleted", k));
    const std::string& dir = copies[size_t(k)];
    fs::copy_file(cleaned, dir + "/" + swap_name);
    for (int i = 0; i < k; ++i) {
      for (std::string_view kind : {kLogSuffix, kIndexSuffix, kTimeIndexSuffix}) {
        std::string path = SegmentFilePath(dir, old_bases[i], kind);
        fs::rename(path, path + std::string(kDeletedSuffix));
      }
    }
    LoadReport report;
    std::shared_ptr<Log> log = OpenLogAt(dir, CompactConfig(), &report);
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(Describe(DumpLog(*log)), want);
    EXPECT_EQ(log->Segments().size(), 2u);
    EXPECT_TRUE(FilesWith(dir, ".swap").empty());
    EXPECT_TRUE(FilesWith(dir, ".deleted").empty());
    EXPECT_EQ(ReadFile(SegmentFilePath(dir, 0, kLogSuffix)), ReadFile(cleaned));
    EXPECT_EQ(log->State().log_end_offset, 6);
    // Loaded again, nothing changes.
    ASSERT_TRUE(log->Close().ok());
    log.reset();
    log = OpenLogAt(dir, CompactConfig());
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(Describe(DumpLog(*log)), want);
  }
}

}  // namespace
}  // namespace runnel::storaged
