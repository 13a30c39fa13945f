// Damage on disk, then recovery through LogManager: a flipped byte or a torn tail in the
// active segment, a damaged or missing index, a flipped byte in an older segment (recovered
// because the recovery point is before it), garbage after the last batch. After each, the
// reopened log must be valid (whole batches, contiguous offsets, good CRCs, reads and appends
// work at the log end offset), hold every batch before the damage byte for byte, and the
// load report's notes must say what was cut, naming the segment and the byte counts.
//
// Every log is built with the crash workload (crash_workload.h), shut down, and then made
// unclean by removing the clean shutdown marker, so the active segment is recovered.
// RUNNEL_CORRUPTION_SEED fixes the random choices (printed otherwise); RUNNEL_CORRUPTION_KEEP=1
// keeps the directory for a look after a failure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/log/log.h"
#include "tests/fault/log_check.h"
#include "tests/util/temp_dir.h"

namespace runnel::storaged::fault {
namespace {

constexpr int64_t kBatches = 100;
constexpr uint64_t kWorkloadSeed = 20240601;

// Where one batch lies in a segment file.
struct BatchAt {
  int64_t n = 0;
  int64_t position = 0;
  int64_t size = 0;
};

struct SegmentFile {
  int64_t base = 0;
  std::string path;  // the .log
  int64_t size = 0;
  std::vector<BatchAt> batches;
  std::string Index() const { return path.substr(0, path.size() - 4) + ".index"; }
  std::string TimeIndex() const { return path.substr(0, path.size() - 4) + ".timeindex"; }
};

int64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? int64_t(st.st_size) : -1;
}

std::string ReadFile(const std::string& path) {
  StatusOr<std::vector<uint8_t>> bytes = PreadRange(path, 0, std::max<int64_t>(FileSize(path), 0));
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : std::string();
}

void WriteAt(const std::string& path, int64_t position, const std::string& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), position), ssize_t(bytes.size())) << path;
  ::close(fd);
}

void FlipBit(const std::string& path, int64_t position, int bit) {
  std::string all = ReadFile(path);
  ASSERT_LT(position, int64_t(all.size()));
  std::string one(1, char(uint8_t(all[size_t(position)]) ^ uint8_t(1u << bit)));
  WriteAt(path, position, one);
}

void Truncate(const std::string& path, int64_t size) {
  ASSERT_EQ(::truncate(path.c_str(), size), 0) << path;
}

class StorageCorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log::Options lo;
    lo.role = "storage_corruption_test";
    lo.level = "error";
    log::Init(lo);
    root_.emplace("corrupt", "RUNNEL_CORRUPTION_KEEP");
    const char* env = std::getenv("RUNNEL_CORRUPTION_SEED");
    seed_ = env != nullptr ? std::strtoull(env, nullptr, 10)
                           : (uint64_t(std::random_device{}()) << 1 >> 1);
    std::printf("RUNNEL_CORRUPTION_SEED=%llu\n", static_cast<unsigned long long>(seed_));
    rng_ = Rng(seed_);
  }
  void TearDown() override { root_.reset(); }

  LogManagerOptions Options() const {
    LogManagerOptions o = CrashOptions(log_dir_, INT64_MAX);
    o.defaults.segment_bytes = 16 << 10;
    o.defaults.segment_index_bytes = 4096;
    return o;
  }
  std::string PartitionDir() const { return log_dir_ + "/" + PartitionDirName(CrashPartition()); }

  // A log of kBatches batches in a fresh log dir `name`, shut down, then made unclean.
  // Fills segments_ with where every batch lies.
  void Build(const std::string& name) {
    log_dir_ = root_->path() + "/" + name;
    ASSERT_EQ(::mkdir(log_dir_.c_str(), 0755), 0);
    StatusOr<std::unique_ptr<LogManager>> m = LogManager::Open(Options());
    ASSERT_TRUE(m.ok()) << m.status();
    StatusOr<std::shared_ptr<Log>> log = (*m)->CreateLog(CrashPartition(), kTopicId, {});
    ASSERT_TRUE(log.ok()) << log.status();
    for (int64_t n = 0; n < kBatches; ++n) {
      StatusOr<std::vector<uint8_t>> batch = BuildBatch(kWorkloadSeed, n);
      ASSERT_TRUE(batch.ok()) << batch.status();
      AppendResult r = (*log)->Append(*batch, EpochOf(n));
      ASSERT_EQ(r.error, protocol::ErrorCode::kNone) << r.error_message;
      ASSERT_EQ(r.base_offset, expected_.BaseOffset(n));
    }
    ASSERT_TRUE((*m)->Shutdown().ok());
    m->reset();
    MakeUnclean();

    segments_.clear();
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(PartitionDir())) {
      names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    for (const std::string& file : names) {
      std::optional<int64_t> base = ParseSegmentFileName(file, kLogSuffix);
      if (!base) continue;
      SegmentFile s;
      s.base = *base;
      s.path = PartitionDir() + "/" + file;
      s.size = FileSize(s.path);
      std::string bytes = ReadFile(s.path);
      StatusOr<std::vector<record::BatchView>> views = record::SplitBatches(
          record::ByteSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
      ASSERT_TRUE(views.ok()) << views.status();
      int64_t position = 0;
      for (const record::BatchView& v : *views) {
        s.batches.push_back({BatchNumberOf(v), position, int64_t(v.size_in_bytes())});
        position += int64_t(v.size_in_bytes());
      }
      segments_.push_back(std::move(s));
    }
    ASSERT_GE(segments_.size(), 5u) << "the log should have several segments";
    ASSERT_FALSE(segments_.back().batches.empty()) << "the active segment should hold batches";
    ASSERT_EQ(segments_.back().batches.back().n, kBatches - 1);
  }

  void MakeUnclean() {
    ASSERT_EQ(::unlink((log_dir_ + "/" + std::string(kCleanShutdownMarker)).c_str()), 0);
  }

  // Recovery points: everything from segment `index` on is recovered at the next load.
  void SetRecoveryPointToSegment(size_t index) {
    OffsetCheckpointFile f(log_dir_ + "/" + std::string(kRecoveryPointCheckpoint));
    ASSERT_TRUE(f.Write({{CrashPartition(), segments_[index].base}}).ok());
  }

  std::unique_ptr<LogManager> Reopen() {
    StatusOr<std::unique_ptr<LogManager>> m = LogManager::Open(Options());
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return nullptr;
    notes_ = fmt::format("{}", fmt::join((*m)->load_report().notes, "\n"));
    return std::move(*m);
  }

  void ExpectNote(const std::string& text) {
    EXPECT_NE(notes_.find(text), std::string::npos) << "no note \"" << text << "\" in:\n" << notes_;
  }

  // A random bit of batch `b` that its CRC covers, or its magic or length (both checked).
  std::pair<int64_t, int> DamageablePosition(const BatchAt& b) {
    int64_t at = 0;
    // 1 in 8 the magic, 1 in 8 the batchLength, else the crc field up to the end.
    switch (rng_.Below(8)) {
      case 0:
        at = 16;
        break;
      case 1:
        at = 8 + int64_t(rng_.Below(4));
        break;
      default:
        at = 17 + int64_t(rng_.Below(uint64_t(b.size - 17)));
        break;
    }
    return {b.position + at, int(rng_.Below(8))};
  }

  // The reopened log holds exactly batches [0, keep), works, takes appends at its end, and
  // loads cleanly afterwards.
  void CheckAfterDamage(std::unique_ptr<LogManager> m, int64_t keep) {
    ASSERT_NE(m, nullptr);
    std::shared_ptr<Log> log = m->GetLog(CrashPartition());
    ASSERT_NE(log, nullptr);
    Found found;
    ASSERT_EQ(VerifyLog(*log, expected_, rng_, &found), "") << "notes:\n" << notes_;
    EXPECT_EQ(found.batches, keep);
    // Nothing but the live segments' files is left.
    std::vector<std::string> on_disk, live;
    for (const auto& e : std::filesystem::directory_iterator(PartitionDir())) {
      std::string name = e.path().filename().string();
      if (SegmentBaseOfAnyKind(name)) on_disk.push_back(name);
    }
    for (const std::shared_ptr<Segment>& s : log->Segments()) {
      for (std::string_view kind : {kLogSuffix, kIndexSuffix, kTimeIndexSuffix}) {
        live.push_back(OffsetFileStem(s->base_offset()) + std::string(kind));
      }
    }
    std::sort(on_disk.begin(), on_disk.end());
    std::sort(live.begin(), live.end());
    EXPECT_EQ(on_disk, live);

    // Two more batches go at the end: in one append when they share a leader epoch.
    const bool together = EpochOf(keep) == EpochOf(keep + 1);
    for (int64_t n = keep; n < keep + 2;) {
      const int64_t count = together ? 2 : 1;
      std::vector<uint8_t> more;
      for (int64_t i = n; i < n + count; ++i) {
        StatusOr<std::vector<uint8_t>> b = BuildBatch(kWorkloadSeed, i);
        ASSERT_TRUE(b.ok());
        more.insert(more.end(), b->begin(), b->end());
      }
      AppendResult r = log->Append(more, EpochOf(n));
      ASSERT_EQ(r.error, protocol::ErrorCode::kNone) << r.error_message;
      EXPECT_EQ(r.base_offset, expected_.BaseOffset(n));
      EXPECT_EQ(r.last_offset, expected_.BaseOffset(n + count) - 1);
      n += count;
    }
    ASSERT_EQ(VerifyLog(*log, expected_, rng_, &found), "");
    EXPECT_EQ(found.batches, keep + 2);
    log.reset();
    ASSERT_TRUE(m->Shutdown().ok());
    m.reset();

    std::unique_ptr<LogManager> again = Reopen();
    ASSERT_NE(again, nullptr);
    EXPECT_EQ(notes_, "") << "a clean load after recovery should find nothing to fix";
    ASSERT_EQ(VerifyLog(*again->GetLog(CrashPartition()), expected_, rng_, &found), "");
    EXPECT_EQ(found.batches, keep + 2);
  }

  static bool SegmentBaseOfAnyKind(const std::string& name) {
    for (std::string_view kind : {kLogSuffix, kIndexSuffix, kTimeIndexSuffix}) {
      if (ParseSegmentFileName(name, kind)) return true;
    }
    return false;
  }

  std::optional<runnel::testing::TempDir> root_;
  std::string log_dir_;
  uint64_t seed_ = 0;
  Rng rng_{0};
  ExpectedBatches expected_{kWorkloadSeed};
  std::vector<SegmentFile> segments_;
  std::string notes_;
};

TEST_F(StorageCorruptionTest, FlippedBitInActiveSegmentCutsFromThatBatch) {
  for (int trial = 0; trial < 4; ++trial) {
    SCOPED_TRACE(fmt::format("trial {}", trial));
    ASSERT_NO_FATAL_FAILURE(Build(fmt::format("flip{}", trial)));
    const SegmentFile& active = segments_.back();
    // The first trial damages the segment's first batch, so the active segment ends empty.
    const BatchAt& victim =
        trial == 0 ? active.batches[0] : active.batches[rng_.Below(active.batches.size())];
    auto [position, bit] = DamageablePosition(victim);
    SCOPED_TRACE(fmt::format("batch {} at byte {} of {}, bit {} of byte {}", victim.n,
                             victim.position, active.path, bit, position));
    ASSERT_NO_FATAL_FAILURE(FlipBit(active.path, position, bit));
    std::unique_ptr<LogManager> m = Reopen();
    ASSERT_NE(m, nullptr);
    ExpectNote(fmt::format("truncated segment {} from {} to {} bytes", OffsetFileStem(active.base),
                           active.size, victim.position));
    EXPECT_EQ(m->load_report().truncated_bytes, active.size - victim.position);
    CheckAfterDamage(std::move(m), victim.n);
  }
}

TEST_F(StorageCorruptionTest, TornTailOfActiveSegmentIsCut) {
  ASSERT_NO_FATAL_FAILURE(Build("probe"));
  const int64_t last_size = segments_.back().batches.back().size;
  // Into the header, just past it, a random point, one byte short, and the whole batch.
  const std::vector<int64_t> cuts = {
      1, 11, 60, 61, 62, 1 + int64_t(rng_.Below(uint64_t(last_size))), last_size - 1, last_size};
  for (size_t c = 0; c < cuts.size(); ++c) {
    const int64_t k = cuts[c];
    SCOPED_TRACE(fmt::format("cut {} of the last batch's {} bytes", k, last_size));
    ASSERT_NO_FATAL_FAILURE(Build(fmt::format("tail{}", c)));
    const SegmentFile& active = segments_.back();
    const BatchAt& last = active.batches.back();
    ASSERT_EQ(last.size, last_size);  // the same workload every time
    ASSERT_NO_FATAL_FAILURE(Truncate(active.path, active.size - k));
    std::unique_ptr<LogManager> m = Reopen();
    ASSERT_NE(m, nullptr);
    if (k < last.size) {
      ExpectNote(fmt::format("truncated segment {} from {} to {} bytes",
                             OffsetFileStem(active.base), active.size - k, last.position));
      EXPECT_EQ(m->load_report().truncated_bytes, last.size - k);
    } else {
      // The file ends at a batch boundary: nothing to cut, the batch is simply not there.
      EXPECT_EQ(notes_.find("truncated"), std::string::npos) << notes_;
      EXPECT_EQ(m->load_report().truncated_bytes, 0);
    }
    CheckAfterDamage(std::move(m), last.n);
  }
}

TEST_F(StorageCorruptionTest, IndexesTruncatedMidEntryAreRebuilt) {
  ASSERT_NO_FATAL_FAILURE(Build("index-cut"));
  // Two older segments (below the recovery point: loaded with their indexes, not recovered).
  const SegmentFile& a = segments_[1];
  const SegmentFile& b = segments_[segments_.size() - 2];
  const std::string original_index = ReadFile(a.Index());
  ASSERT_GE(original_index.size(), 16u) << "segment " << a.path << " has too few index entries";
  ASSERT_GE(FileSize(b.TimeIndex()), 24);
  ASSERT_NO_FATAL_FAILURE(Truncate(a.Index(), FileSize(a.Index()) - 3));
  ASSERT_NO_FATAL_FAILURE(Truncate(b.TimeIndex(), FileSize(b.TimeIndex()) - 5));
  std::unique_ptr<LogManager> m = Reopen();
  ASSERT_NE(m, nullptr);
  ExpectNote(fmt::format("rebuilt the indexes of segment {}", OffsetFileStem(a.base)));
  ExpectNote(fmt::format("rebuilt the indexes of segment {}", OffsetFileStem(b.base)));
  EXPECT_GE(m->load_report().rebuilt_indexes, 2);
  EXPECT_EQ(m->load_report().truncated_bytes, 0);
  // Rebuilt exactly as the appends had written it.
  EXPECT_EQ(ReadFile(a.Index()), original_index);
  EXPECT_EQ(FileSize(b.TimeIndex()) % TimeIndex::kEntrySize, 0);
  CheckAfterDamage(std::move(m), kBatches);
}

TEST_F(StorageCorruptionTest, GarbageIndexesAreRebuilt) {
  ASSERT_NO_FATAL_FAILURE(Build("index-garbage"));
  const SegmentFile& a = segments_[0];
  const SegmentFile& b = segments_[2];
  const std::string original_index = ReadFile(a.Index());
  for (const std::string& path : {a.Index(), b.TimeIndex()}) {
    std::string garbage(size_t(FileSize(path)), '\0');
    ASSERT_FALSE(garbage.empty()) << path;
    for (char& c : garbage) c = char(rng_.Next());
    ASSERT_NO_FATAL_FAILURE(WriteAt(path, 0, garbage));
  }
  std::unique_ptr<LogManager> m = Reopen();
  ASSERT_NE(m, nullptr);
  ExpectNote(fmt::format("rebuilt the indexes of segment {}", OffsetFileStem(a.base)));
  ExpectNote(fmt::format("rebuilt the indexes of segment {}", OffsetFileStem(b.base)));
  EXPECT_EQ(ReadFile(a.Index()), original_index);
  // Every batch of the two segments is found through the rebuilt indexes.
  std::shared_ptr<Log> log = m->GetLog(CrashPartition());
  for (const SegmentFile* s : {&a, &b}) {
    for (const BatchAt& at : s->batches) {
      int64_t last_offset = expected_.BaseOffset(at.n + 1) - 1;
      ReadResult r = log->Read(last_offset, 1, true);
      ASSERT_EQ(r.ranges.size(), 1u);
      EXPECT_EQ(r.ranges[0].position, at.position);
      EXPECT_EQ(r.ranges[0].length, at.size);
      OffsetLookup t = log->ListOffset(kBaseTimestamp + at.n * kTimestampStep);
      EXPECT_EQ(t.offset, expected_.BaseOffset(at.n)) << "time lookup of batch " << at.n;
    }
  }
  log.reset();
  CheckAfterDamage(std::move(m), kBatches);
}

TEST_F(StorageCorruptionTest, MissingIndexesAreRebuilt) {
  ASSERT_NO_FATAL_FAILURE(Build("index-missing"));
  const SegmentFile& a = segments_[1];
  const SegmentFile& b = segments_[2];
  const SegmentFile& c = segments_[3];
  const std::string original_index = ReadFile(a.Index());
  ASSERT_EQ(::unlink(a.Index().c_str()), 0);
  ASSERT_EQ(::unlink(b.TimeIndex().c_str()), 0);
  ASSERT_EQ(::unlink(c.Index().c_str()), 0);
  ASSERT_EQ(::unlink(c.TimeIndex().c_str()), 0);
  std::unique_ptr<LogManager> m = Reopen();
  ASSERT_NE(m, nullptr);
  for (const SegmentFile* s : {&a, &b, &c}) {
    ExpectNote(fmt::format("rebuilt the indexes of segment {}", OffsetFileStem(s->base)));
    EXPECT_GE(FileSize(s->Index()), 0) << s->Index();
    EXPECT_GE(FileSize(s->TimeIndex()), 0) << s->TimeIndex();
  }
  EXPECT_EQ(ReadFile(a.Index()), original_index);
  CheckAfterDamage(std::move(m), kBatches);
}

TEST_F(StorageCorruptionTest, FlippedBitInOlderSegmentCutsItAndDropsLaterSegments) {
  for (int trial = 0; trial < 3; ++trial) {
    SCOPED_TRACE(fmt::format("trial {}", trial));
    ASSERT_NO_FATAL_FAILURE(Build(fmt::format("older{}", trial)));
    // A crash after the recovery point reached segment `s`: it and the later ones are
    // recovered at the next load, the earlier ones are trusted.
    const size_t s = 1 + size_t(rng_.Below(segments_.size() - 2));
    ASSERT_NO_FATAL_FAILURE(SetRecoveryPointToSegment(s));
    const SegmentFile& seg = segments_[s];
    const BatchAt& victim = seg.batches[rng_.Below(seg.batches.size())];
    auto [position, bit] = DamageablePosition(victim);
    SCOPED_TRACE(fmt::format("segment {} of {}, batch {} at byte {}, bit {} of byte {}", s,
                             segments_.size(), victim.n, victim.position, bit, position));
    ASSERT_NO_FATAL_FAILURE(FlipBit(seg.path, position, bit));
    std::unique_ptr<LogManager> m = Reopen();
    ASSERT_NE(m, nullptr);
    ExpectNote(fmt::format("truncated segment {} from {} to {} bytes", OffsetFileStem(seg.base),
                           seg.size, victim.position));
    int64_t later_bytes = 0;
    for (size_t later = s + 1; later < segments_.size(); ++later) {
      ExpectNote(fmt::format("deleted segment {} after the truncated one",
                             OffsetFileStem(segments_[later].base)));
      EXPECT_EQ(FileSize(segments_[later].path), -1) << segments_[later].path;
      later_bytes += segments_[later].size;
    }
    EXPECT_EQ(m->load_report().truncated_bytes, seg.size - victim.position);
    (void)later_bytes;
    // The damaged segment is the active one now.
    std::vector<std::shared_ptr<Segment>> live = m->GetLog(CrashPartition())->Segments();
    ASSERT_EQ(live.size(), s + 1);
    EXPECT_TRUE(live.back()->active());
    CheckAfterDamage(std::move(m), victim.n);
  }
}

TEST_F(StorageCorruptionTest, GarbageAfterLastBatchIsCut) {
  struct Case {
    std::string name;
    std::string bytes;
  };
  std::string noise(1 + rng_.Below(300), '\0');
  for (char& c : noise) c = char(rng_.Next());
  std::string short_noise(60, '\0');  // fewer bytes than a batch header
  for (char& c : short_noise) c = char(rng_.Next());
  // A header that claims more bytes than follow (a torn write of a big batch).
  std::string torn(200, 'x');
  {
    StatusOr<std::vector<uint8_t>> b = BuildBatch(kWorkloadSeed, kBatches);
    ASSERT_TRUE(b.ok());
    torn.assign(b->begin(), b->begin() + std::min<size_t>(b->size(), 70));
  }
  const std::vector<Case> cases = {
      {"noise", noise}, {"short", short_noise}, {"zeros", std::string(4096, '\0')}, {"torn", torn}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_NO_FATAL_FAILURE(Build("garbage-" + c.name));
    const SegmentFile& active = segments_.back();
    ASSERT_NO_FATAL_FAILURE(WriteAt(active.path, active.size, c.bytes));
    std::unique_ptr<LogManager> m = Reopen();
    ASSERT_NE(m, nullptr);
    ExpectNote(fmt::format("truncated segment {} from {} to {} bytes", OffsetFileStem(active.base),
                           active.size + int64_t(c.bytes.size()), active.size));
    EXPECT_EQ(m->load_report().truncated_bytes, int64_t(c.bytes.size()));
    CheckAfterDamage(std::move(m), kBatches);
  }
}

}  // namespace
}  // namespace runnel::storaged::fault
