#include "storaged/log/index.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "storaged/log/file_cache.h"
#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kBase = 1000;

class IndexTest : public ::testing::Test {
 protected:
  void SetUp() override { root_.emplace("idx"); }
  void TearDown() override { root_.reset(); }

  std::string Path(const std::string& name) const { return root_->path() + "/" + name; }

  static std::vector<uint8_t> ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  static void Put32(std::vector<uint8_t>* out, int32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out->push_back(uint8_t(uint32_t(v) >> shift));
  }
  static void Put64(std::vector<uint8_t>* out, int64_t v) {
    for (int shift = 56; shift >= 0; shift -= 8) out->push_back(uint8_t(uint64_t(v) >> shift));
  }
  // Raw .index content for (relative offset, position) pairs, then `zero_slots` empty slots.
  static std::vector<uint8_t> OffsetFile(const std::vector<std::pair<int32_t, int32_t>>& entries,
                                         int zero_slots = 0) {
    std::vector<uint8_t> out;
    for (auto [rel, pos] : entries) {
      Put32(&out, rel);
      Put32(&out, pos);
    }
    out.resize(out.size() + size_t(zero_slots) * OffsetIndex::kEntrySize, 0);
    return out;
  }
  static std::vector<uint8_t> TimeFile(const std::vector<std::pair<int64_t, int32_t>>& entries,
                                       int zero_slots = 0) {
    std::vector<uint8_t> out;
    for (auto [ts, rel] : entries) {
      Put64(&out, ts);
      Put32(&out, rel);
    }
    out.resize(out.size() + size_t(zero_slots) * TimeIndex::kEntrySize, 0);
    return out;
  }

  std::unique_ptr<OffsetIndex> OpenOffsets(const std::string& name, int32_t max_bytes,
                                           bool writable) {
    auto index = OffsetIndex::Open(Path(name), kBase, max_bytes, writable, &files_);
    EXPECT_TRUE(index.ok()) << index.status();
    return index.ok() ? std::move(*index) : nullptr;
  }
  std::unique_ptr<TimeIndex> OpenTimes(const std::string& name, int32_t max_bytes, bool writable) {
    auto index = TimeIndex::Open(Path(name), kBase, max_bytes, writable, &files_);
    EXPECT_TRUE(index.ok()) << index.status();
    return index.ok() ? std::move(*index) : nullptr;
  }

  std::optional<runnel::testing::TempDir> root_;
  FileCache files_{64};
};

void ExpectOffsetPosition(const OffsetPosition& got, int64_t offset, int32_t position) {
  EXPECT_EQ(got.offset, offset);
  EXPECT_EQ(got.position, position);
}

void ExpectTimestampOffset(const TimestampOffset& got, int64_t timestamp, int64_t offset) {
  EXPECT_EQ(got.timestamp, timestamp);
  EXPECT_EQ(got.offset, offset);
}

// ---------------------------------------------------------------- OffsetIndex

TEST_F(IndexTest, OffsetIndexTakesWholeEntriesWithoutPreallocating) {
  auto index = OpenOffsets("a.index", 100, /*writable=*/true);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(fs::file_size(Path("a.index")), 0u);
  EXPECT_TRUE(index->InMemory());
  EXPECT_EQ(index->max_entries(), 12);
  EXPECT_EQ(index->entries(), 0);
  EXPECT_FALSE(index->IsFull());
  EXPECT_EQ(index->SizeInBytes(), 0);
  ExpectOffsetPosition(index->LastEntry(), kBase, 0);
  EXPECT_TRUE(index->SanityCheck().ok());
}

TEST_F(IndexTest, OffsetIndexWritesKafkaFormat) {
  auto index = OpenOffsets("a.index", 64, true);
  ASSERT_NE(index, nullptr);
  ASSERT_TRUE(index->Append(kBase + 5, 4096).ok());
  ASSERT_TRUE(index->Append(kBase + 0x01020304, 0x0A0B0C0D).ok());
  ASSERT_TRUE(index->Flush().ok());
  ASSERT_TRUE(index->TrimToValidSize().ok());
  EXPECT_EQ(ReadBytes(Path("a.index")),
            (std::vector<uint8_t>{0, 0, 0, 5, 0, 0, 0x10, 0, 1, 2, 3, 4, 0x0A, 0x0B, 0x0C, 0x0D}));
}

TEST_F(IndexTest, OffsetIndexLookups) {
  auto index = OpenOffsets("a.index", 1024, true);
  ASSERT_NE(index, nullptr);
  // Entries at offsets base+10, +20, +30 at positions 100, 200, 300.
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(index->Append(kBase + 10 * i, 100 * i).ok());
  ExpectOffsetPosition(index->Lookup(kBase - 1), kBase, 0);               // below the base
  ExpectOffsetPosition(index->Lookup(kBase + 9), kBase, 0);               // before the first entry
  ExpectOffsetPosition(index->Lookup(kBase + 10), kBase + 10, 100);       // exact
  ExpectOffsetPosition(index->Lookup(kBase + 25), kBase + 20, 200);       // between
  ExpectOffsetPosition(index->Lookup(kBase + 30), kBase + 30, 300);       // exact last
  ExpectOffsetPosition(index->Lookup(kBase + 1000000), kBase + 30, 300);  // after the last
  ExpectOffsetPosition(index->EntryAt(1), kBase + 20, 200);
  ExpectOffsetPosition(index->LastEntry(), kBase + 30, 300);
}

TEST_F(IndexTest, OffsetIndexLookupsAcrossWarmAndColdSections) {
  // 5000 entries: the last 1024 are the warm section, the rest are searched separately.
  constexpr int kEntries = 5000;
  auto index = OpenOffsets("a.index", kEntries * OffsetIndex::kEntrySize, true);
  ASSERT_NE(index, nullptr);
  for (int i = 0; i < kEntries; ++i) ASSERT_TRUE(index->Append(kBase + 2 * i + 1, 10 * i + 5).ok());
  EXPECT_TRUE(index->IsFull());
  ExpectOffsetPosition(index->Lookup(kBase), kBase, 0);
  for (int i = 0; i < kEntries; i += 7) {
    ExpectOffsetPosition(index->Lookup(kBase + 2 * i + 1), kBase + 2 * i + 1, 10 * i + 5);
    ExpectOffsetPosition(index->Lookup(kBase + 2 * i + 2), kBase + 2 * i + 1, 10 * i + 5);
  }
  int boundary = kEntries - 1 - 8192 / OffsetIndex::kEntrySize;
  for (int i = boundary - 2; i <= boundary + 2; ++i) {
    ExpectOffsetPosition(index->Lookup(kBase + 2 * i + 1), kBase + 2 * i + 1, 10 * i + 5);
    ExpectOffsetPosition(index->Lookup(kBase + 2 * i), kBase + 2 * i - 1, 10 * i - 5);
  }
}

TEST_F(IndexTest, OffsetIndexAppendRules) {
  auto index = OpenOffsets("a.index", 3 * OffsetIndex::kEntrySize, true);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->Append(kBase - 1, 0).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(index->Append(kBase + (int64_t{1} << 31), 0).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(index->Append(kBase, -1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(index->Append(kBase, 0).ok());  // the first batch at position 0 is fine
  ASSERT_TRUE(index->Append(kBase + 10, 100).ok());
  EXPECT_EQ(index->Append(kBase + 10, 200).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index->Append(kBase + 5, 200).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index->Append(kBase + 20, 100).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index->Append(kBase + 20, 50).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index->entries(), 2);
  ASSERT_TRUE(index->Append(kBase + int64_t{INT32_MAX}, INT32_MAX).ok());
  EXPECT_TRUE(index->IsFull());
  Status full = index->Append(kBase + int64_t{INT32_MAX} + 1, 0);
  EXPECT_EQ(full.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(full.message().find("full"), absl::string_view::npos) << full;
  EXPECT_EQ(index->entries(), 3);
  EXPECT_TRUE(index->SanityCheck().ok());
}

TEST_F(IndexTest, OffsetIndexTruncate) {
  auto index = OpenOffsets("a.index", 1024, true);
  ASSERT_NE(index, nullptr);
  for (int i = 1; i <= 5; ++i) ASSERT_TRUE(index->Append(kBase + 10 * i, 100 * i).ok());
  ASSERT_TRUE(index->Flush().ok());                   // the file holds all five
  ASSERT_TRUE(index->TruncateTo(kBase + 1000).ok());  // past the last: nothing goes
  EXPECT_EQ(index->entries(), 5);
  ASSERT_TRUE(index->TruncateTo(kBase + 35).ok());  // between entries: +40 and +50 go
  EXPECT_EQ(index->entries(), 3);
  ExpectOffsetPosition(index->LastEntry(), kBase + 30, 300);
  ASSERT_TRUE(index->TruncateTo(kBase + 30).ok());  // exact: the entry itself goes
  EXPECT_EQ(index->entries(), 2);
  ExpectOffsetPosition(index->Lookup(kBase + 100), kBase + 20, 200);
  // The freed slots take new entries, and the dropped ones left no trace in the file.
  ASSERT_TRUE(index->Append(kBase + 25, 250).ok());
  EXPECT_TRUE(index->SanityCheck().ok());
  ASSERT_TRUE(index->Flush().ok());
  EXPECT_EQ(fs::file_size(Path("a.index")), 24u);
  index.reset();
  auto reopened = OpenOffsets("a.index", 1024, true);
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(reopened->entries(), 3);
  ExpectOffsetPosition(reopened->LastEntry(), kBase + 25, 250);
  ASSERT_TRUE(reopened->TruncateTo(kBase).ok());  // before the first: everything goes
  EXPECT_EQ(reopened->entries(), 0);
  ExpectOffsetPosition(reopened->Lookup(kBase + 100), kBase, 0);
}

TEST_F(IndexTest, OffsetIndexTrimAndReopen) {
  {
    auto index = OpenOffsets("a.index", 1024, true);
    ASSERT_NE(index, nullptr);
    for (int i = 1; i <= 4; ++i) ASSERT_TRUE(index->Append(kBase + i, 64 * i).ok());
    ASSERT_TRUE(index->TrimToValidSize().ok());
    EXPECT_EQ(fs::file_size(Path("a.index")), 32u);
    EXPECT_EQ(index->max_entries(), 4);
    EXPECT_TRUE(index->IsFull());
    EXPECT_FALSE(index->InMemory());
    ExpectOffsetPosition(index->Lookup(kBase + 3), kBase + 3, 192);  // still readable, from disk
  }
  {
    auto index = OpenOffsets("a.index", 1024, /*writable=*/false);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(fs::file_size(Path("a.index")), 32u);  // a read-only open leaves the size
    EXPECT_FALSE(index->InMemory());
    EXPECT_EQ(index->entries(), 4);
    EXPECT_TRUE(index->SanityCheck().ok());
    ExpectOffsetPosition(index->Lookup(kBase + 2), kBase + 2, 128);
  }
  {
    auto index = OpenOffsets("a.index", 1024, /*writable=*/true);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(fs::file_size(Path("a.index")), 32u);  // room for appends is in memory only
    EXPECT_TRUE(index->InMemory());
    EXPECT_EQ(index->entries(), 4);
    EXPECT_EQ(index->max_entries(), 128);
    ASSERT_TRUE(index->Append(kBase + 5, 320).ok());
    EXPECT_TRUE(index->SanityCheck().ok());
    ASSERT_TRUE(index->TrimToValidSize().ok());
    EXPECT_EQ(fs::file_size(Path("a.index")), 40u);
  }
}

TEST_F(IndexTest, OffsetIndexReopenOfUntrimmedFile) {
  // Preallocated and never trimmed, as Kafka (and Runnel before it stopped mapping indexes)
  // leaves an active segment's index after a crash.
  WriteBytes(Path("a.index"), OffsetFile({{10, 100}, {20, 200}, {30, 300}}, 125));
  EXPECT_EQ(fs::file_size(Path("a.index")), 1024u);
  for (bool writable : {false, true}) {
    auto index = OpenOffsets("a.index", 1024, writable);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(index->entries(), 3) << writable;
    EXPECT_EQ(index->max_entries(), 128);
    EXPECT_TRUE(index->SanityCheck().ok()) << index->SanityCheck();
    ExpectOffsetPosition(index->LastEntry(), kBase + 30, 300);
    ExpectOffsetPosition(index->Lookup(kBase + 1000), kBase + 30, 300);
  }
  // A first entry of zeros (offset base at position 0) is real when entries follow it.
  WriteBytes(Path("b.index"), OffsetFile({{0, 0}, {7, 512}}, 30));
  auto index = OpenOffsets("b.index", 256, true);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->entries(), 2);
  EXPECT_TRUE(index->SanityCheck().ok());
}

TEST_F(IndexTest, OffsetIndexReopenOfEmptyPreallocatedFile) {
  WriteBytes(Path("a.index"), OffsetFile({}, 128));
  auto index = OpenOffsets("a.index", 1024, true);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->entries(), 0);
  EXPECT_TRUE(index->SanityCheck().ok());
  ASSERT_TRUE(index->Append(kBase, 0).ok());
  // A trimmed file holding one zero entry keeps it.
  WriteBytes(Path("b.index"), OffsetFile({{0, 0}}));
  auto one = OpenOffsets("b.index", 1024, false);
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->entries(), 1);
}

TEST_F(IndexTest, OffsetIndexCorruptFilesAreDetected) {
  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    std::string message;
  };
  std::vector<uint8_t> misaligned = OffsetFile({{1, 10}, {2, 20}});
  misaligned.push_back(0);
  std::vector<uint8_t> misaligned_zeros = OffsetFile({}, 4);
  misaligned_zeros.resize(misaligned_zeros.size() + 3, 0);
  const std::vector<Case> cases = {
      {"misaligned", misaligned, "not a multiple of the entry size 8"},
      {"misaligned_zeros", misaligned_zeros, "not a multiple"},
      {"offset_order", OffsetFile({{1, 10}, {5, 20}, {3, 30}}), "out of order: entry 2"},
      {"repeated_offset", OffsetFile({{1, 10}, {1, 20}}), "out of order: entry 1"},
      {"position_order", OffsetFile({{1, 10}, {2, 20}, {3, 15}}), "out of order: entry 2"},
      {"garbage_after_zeros", OffsetFile({{1, 10}, {2, 20}, {0, 0}, {9, 90}}, 3),
       "non-zero data in slot 3"},
      {"below_base", OffsetFile({{-3, 10}, {2, 20}}), "below the base offset"},
      {"negative_position", OffsetFile({{1, -10}, {2, 20}}), "negative position"},
      {"untrimmed_out_of_order", OffsetFile({{1, 10}, {2, 20}, {2, 30}}, 10), "out of order"},
  };
  for (const Case& c : cases) {
    WriteBytes(Path(c.name), c.bytes);
    for (bool writable : {false, true}) {
      auto index = OpenOffsets(c.name, 1024, writable);
      ASSERT_NE(index, nullptr) << c.name;
      Status s = index->SanityCheck();
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.name;
      EXPECT_NE(s.message().find(c.message), absl::string_view::npos) << c.name << ": " << s;
      EXPECT_NE(s.message().find(Path(c.name)), absl::string_view::npos) << s;
    }
  }
}

TEST_F(IndexTest, OffsetIndexZeroMaxSize) {
  for (int32_t max_bytes : {0, 7, -8}) {
    std::string name = "zero" + std::to_string(max_bytes) + ".index";
    auto index = OpenOffsets(name, max_bytes, true);
    ASSERT_NE(index, nullptr);
    EXPECT_EQ(fs::file_size(Path(name)), 0u);
    EXPECT_EQ(index->max_entries(), 0);
    EXPECT_TRUE(index->IsFull());
    EXPECT_EQ(index->Append(kBase, 0).code(), absl::StatusCode::kFailedPrecondition);
    ExpectOffsetPosition(index->Lookup(kBase + 5), kBase, 0);
    ExpectOffsetPosition(index->LastEntry(), kBase, 0);
    ASSERT_TRUE(index->TruncateTo(kBase).ok());
    EXPECT_TRUE(index->SanityCheck().ok());
    EXPECT_TRUE(index->Flush().ok());
    EXPECT_TRUE(index->TrimToValidSize().ok());
    // And it can grow later.
    ASSERT_TRUE(index->Resize(16).ok());
    EXPECT_EQ(index->max_entries(), 2);
    EXPECT_TRUE(index->Append(kBase + 1, 1).ok());
  }
}

TEST_F(IndexTest, OffsetIndexResizeKeepsEntries) {
  auto index = OpenOffsets("a.index", 1024, true);
  ASSERT_NE(index, nullptr);
  for (int i = 1; i <= 6; ++i) ASSERT_TRUE(index->Append(kBase + i, 10 * i).ok());
  ASSERT_TRUE(index->TrimToValidSize().ok());
  ASSERT_TRUE(index->Resize(8 * 10 + 3).ok());
  EXPECT_TRUE(index->InMemory());
  EXPECT_EQ(index->max_entries(), 10);
  ASSERT_TRUE(index->Append(kBase + 7, 70).ok());
  ASSERT_TRUE(index->Resize(16).ok());  // smaller than the entries: they all stay
  EXPECT_EQ(index->entries(), 7);
  ExpectOffsetPosition(index->Lookup(kBase + 4), kBase + 4, 40);
  EXPECT_TRUE(index->IsFull());
  EXPECT_EQ(fs::file_size(Path("a.index")), 48u);  // the seventh is not written yet
  ASSERT_TRUE(index->TrimToValidSize().ok());
  EXPECT_EQ(fs::file_size(Path("a.index")), 56u);
}

TEST_F(IndexTest, ResetRenameAndDelete) {
  auto index = OpenOffsets("a.index", 1024, true);
  ASSERT_NE(index, nullptr);
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(index->Append(kBase + i, 10 * i).ok());
  index->Reset();
  EXPECT_EQ(index->entries(), 0);
  EXPECT_TRUE(index->SanityCheck().ok());
  ExpectOffsetPosition(index->Lookup(kBase + 3), kBase, 0);
  ASSERT_TRUE(index->Append(kBase + 2, 5).ok());

  ASSERT_TRUE(index->RenameTo(Path("a.index.deleted")).ok());
  EXPECT_EQ(index->path(), Path("a.index.deleted"));
  EXPECT_FALSE(fs::exists(Path("a.index")));
  ASSERT_TRUE(index->Append(kBase + 3, 6).ok());  // appends go on after the rename
  ASSERT_TRUE(index->TrimToValidSize().ok());     // and are written under the new name
  EXPECT_EQ(fs::file_size(Path("a.index.deleted")), 16u);

  EXPECT_FALSE(index->RenameTo(Path("missing-dir/x")).ok());
  ASSERT_TRUE(index->Delete().ok());
  EXPECT_FALSE(fs::exists(Path("a.index.deleted")));
  EXPECT_EQ(index->entries(), 0);
  EXPECT_TRUE(index->Delete().ok());  // deleting twice is harmless
}

// ---------------------------------------------------------------- TimeIndex

TEST_F(IndexTest, TimeIndexWritesKafkaFormat) {
  auto index = OpenTimes("a.timeindex", 100, true);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(fs::file_size(Path("a.timeindex")), 0u);
  EXPECT_EQ(index->max_entries(), 8);
  ASSERT_TRUE(index->MaybeAppend(0x0102030405060708, kBase + 9).ok());
  ASSERT_TRUE(index->TrimToValidSize().ok());
  EXPECT_EQ(ReadBytes(Path("a.timeindex")),
            (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 9}));
}

TEST_F(IndexTest, TimeIndexLookups) {
  auto index = OpenTimes("a.timeindex", 1200, true);
  ASSERT_NE(index, nullptr);
  ExpectTimestampOffset(index->Lookup(5000), -1, kBase);
  ExpectTimestampOffset(index->LastEntry(), -1, kBase);
  ASSERT_TRUE(index->MaybeAppend(1000, kBase + 1).ok());
  ASSERT_TRUE(index->MaybeAppend(2000, kBase + 5).ok());
  ASSERT_TRUE(index->MaybeAppend(3000, kBase + 9).ok());
  ExpectTimestampOffset(index->Lookup(999), -1, kBase);              // before the first
  ExpectTimestampOffset(index->Lookup(1000), 1000, kBase + 1);       // exact
  ExpectTimestampOffset(index->Lookup(2500), 2000, kBase + 5);       // between
  ExpectTimestampOffset(index->Lookup(3000), 3000, kBase + 9);       // exact last
  ExpectTimestampOffset(index->Lookup(INT64_MAX), 3000, kBase + 9);  // after the last
  ExpectTimestampOffset(index->EntryAt(1), 2000, kBase + 5);
  ExpectTimestampOffset(index->LastEntry(), 3000, kBase + 9);
}

TEST_F(IndexTest, TimeIndexAppendRules) {
  auto index = OpenTimes("a.timeindex", 4 * TimeIndex::kEntrySize, true);
  ASSERT_NE(index, nullptr);
  EXPECT_TRUE(index->MaybeAppend(-1, kBase).ok());  // not above the empty index's -1
  EXPECT_EQ(index->entries(), 0);
  EXPECT_EQ(index->MaybeAppend(10, kBase - 1).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(index->MaybeAppend(100, kBase + 10).ok());
  EXPECT_TRUE(index->MaybeAppend(100, kBase + 20).ok());  // not a new maximum: skipped
  EXPECT_TRUE(index->MaybeAppend(50, kBase + 20).ok());
  EXPECT_EQ(index->entries(), 1);
  EXPECT_EQ(index->MaybeAppend(200, kBase + 9).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(index->MaybeAppend(60, kBase + 9).ok());    // skipped, so its offset is no error
  ASSERT_TRUE(index->MaybeAppend(150, kBase + 10).ok());  // same offset, higher timestamp
  EXPECT_FALSE(index->IsAlmostFull());
  ASSERT_TRUE(index->MaybeAppend(200, kBase + 30).ok());
  EXPECT_TRUE(index->IsAlmostFull());  // one slot left, kept for the roll
  EXPECT_FALSE(index->IsFull());
  ASSERT_TRUE(index->MaybeAppend(300, kBase + 40).ok());
  EXPECT_TRUE(index->IsFull());
  EXPECT_TRUE(index->MaybeAppend(250, kBase + 50).ok());  // skipped, so fullness is no error
  EXPECT_EQ(index->MaybeAppend(400, kBase + 50).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index->entries(), 4);
  EXPECT_TRUE(index->SanityCheck().ok());
}

TEST_F(IndexTest, TimeIndexTruncate) {
  auto index = OpenTimes("a.timeindex", 1200, true);
  ASSERT_NE(index, nullptr);
  ASSERT_TRUE(index->MaybeAppend(100, kBase + 10).ok());
  ASSERT_TRUE(index->MaybeAppend(200, kBase + 20).ok());
  ASSERT_TRUE(index->MaybeAppend(300, kBase + 20).ok());  // two entries at offset +20
  ASSERT_TRUE(index->MaybeAppend(400, kBase + 30).ok());
  ASSERT_TRUE(index->TruncateTo(kBase + 31).ok());
  EXPECT_EQ(index->entries(), 4);
  ASSERT_TRUE(index->TruncateTo(kBase + 20).ok());  // both entries at +20 go
  EXPECT_EQ(index->entries(), 1);
  ExpectTimestampOffset(index->LastEntry(), 100, kBase + 10);
  ExpectTimestampOffset(index->Lookup(350), 100, kBase + 10);
  // After truncation a lower timestamp than before is a new maximum again.
  ASSERT_TRUE(index->MaybeAppend(150, kBase + 15).ok());
  EXPECT_TRUE(index->SanityCheck().ok());
  ASSERT_TRUE(index->TruncateTo(0).ok());
  EXPECT_EQ(index->entries(), 0);
  ExpectTimestampOffset(index->LastEntry(), -1, kBase);
}

TEST_F(IndexTest, TimeIndexTrimAndReopen) {
  {
    auto index = OpenTimes("a.timeindex", 1200, true);
    ASSERT_NE(index, nullptr);
    for (int i = 1; i <= 5; ++i) ASSERT_TRUE(index->MaybeAppend(1000 * i, kBase + i).ok());
    ASSERT_TRUE(index->TrimToValidSize().ok());
    EXPECT_EQ(fs::file_size(Path("a.timeindex")), 60u);
  }
  auto index = OpenTimes("a.timeindex", 1200, false);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->entries(), 5);
  EXPECT_TRUE(index->SanityCheck().ok());
  ExpectTimestampOffset(index->Lookup(3500), 3000, kBase + 3);
}

TEST_F(IndexTest, TimeIndexReopenOfUntrimmedFile) {
  WriteBytes(Path("a.timeindex"),
             TimeFile({{1000, 1}, {2000, 2}, {3000, 3}, {4000, 4}, {5000, 5}}, 95));
  auto index = OpenTimes("a.timeindex", 1200, true);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->entries(), 5);
  EXPECT_TRUE(index->SanityCheck().ok());
  ExpectTimestampOffset(index->LastEntry(), 5000, kBase + 5);
  ASSERT_TRUE(index->MaybeAppend(6000, kBase + 6).ok());

  // A preallocated file that was never written has no entries, not one at timestamp 0.
  WriteBytes(Path("b.timeindex"), TimeFile({}, 100));
  auto empty = OpenTimes("b.timeindex", 1200, true);
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->entries(), 0);
  ExpectTimestampOffset(empty->LastEntry(), -1, kBase);
}

TEST_F(IndexTest, TimeIndexCorruptFilesAreDetected) {
  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    std::string message;
  };
  std::vector<uint8_t> misaligned = TimeFile({{10, 1}});
  misaligned.resize(misaligned.size() + 8, 0);
  std::vector<uint8_t> garbage = TimeFile({{10, 1}}, 2);
  std::vector<uint8_t> stray = TimeFile({{7, 0}}, 1);
  garbage.insert(garbage.end(), stray.begin(), stray.end());
  const std::vector<Case> cases = {
      {"misaligned", misaligned, "not a multiple of the entry size 12"},
      {"timestamp_order", TimeFile({{10, 1}, {30, 2}, {20, 3}}), "out of order: entry 2"},
      {"offset_order", TimeFile({{10, 5}, {20, 4}}), "out of order: entry 1"},
      {"garbage_after_zeros", garbage, "non-zero data in slot 3"},
      {"below_base", TimeFile({{10, -1}, {20, 2}}), "below the base offset"},
      {"negative_timestamp", TimeFile({{-5, 1}, {20, 2}}), "negative timestamp"},
  };
  for (const Case& c : cases) {
    WriteBytes(Path(c.name), c.bytes);
    auto index = OpenTimes(c.name, 1200, true);
    ASSERT_NE(index, nullptr) << c.name;
    Status s = index->SanityCheck();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << c.name;
    EXPECT_NE(s.message().find(c.message), absl::string_view::npos) << c.name << ": " << s;
  }
}

TEST_F(IndexTest, TimeIndexZeroMaxSize) {
  auto index = OpenTimes("zero.timeindex", 0, true);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->max_entries(), 0);
  EXPECT_TRUE(index->IsFull());
  EXPECT_TRUE(index->IsAlmostFull());
  EXPECT_EQ(index->MaybeAppend(100, kBase).code(), absl::StatusCode::kFailedPrecondition);
  ExpectTimestampOffset(index->Lookup(100), -1, kBase);
  EXPECT_TRUE(index->SanityCheck().ok());
}

// ---------------------------------------------------------------- on disk

TEST_F(IndexTest, OnDiskLookupsReadTheFileAcrossWarmAndColdSections) {
  constexpr int kEntries = 5000;
  auto offsets = OpenOffsets("a.index", kEntries * OffsetIndex::kEntrySize, true);
  auto times = OpenTimes("a.timeindex", kEntries * TimeIndex::kEntrySize, true);
  ASSERT_NE(offsets, nullptr);
  ASSERT_NE(times, nullptr);
  for (int i = 0; i < kEntries; ++i) {
    ASSERT_TRUE(offsets->Append(kBase + 2 * i + 1, 10 * i + 5).ok());
    ASSERT_TRUE(times->MaybeAppend(100 * (i + 1), kBase + 2 * i + 1).ok());
  }
  ASSERT_TRUE(offsets->TrimToValidSize().ok());
  ASSERT_TRUE(times->TrimToValidSize().ok());
  ASSERT_FALSE(offsets->InMemory());
  ASSERT_FALSE(times->InMemory());
  ExpectOffsetPosition(offsets->Lookup(kBase), kBase, 0);
  ExpectTimestampOffset(times->Lookup(99), -1, kBase);
  for (int i = 0; i < kEntries; i += 7) {
    ExpectOffsetPosition(offsets->Lookup(kBase + 2 * i + 2), kBase + 2 * i + 1, 10 * i + 5);
    ExpectTimestampOffset(times->Lookup(100 * (i + 1) + 50), 100 * (i + 1), kBase + 2 * i + 1);
  }
  int boundary = kEntries - 1 - 8192 / OffsetIndex::kEntrySize;
  for (int i = boundary - 2; i <= boundary + 2; ++i) {
    ExpectOffsetPosition(offsets->Lookup(kBase + 2 * i + 1), kBase + 2 * i + 1, 10 * i + 5);
    ExpectOffsetPosition(offsets->Lookup(kBase + 2 * i), kBase + 2 * i - 1, 10 * i - 5);
  }
  // The last entry within a position and below an offset (what a fetch uses to skip ahead).
  std::optional<OffsetPosition> within = offsets->LastWithin(10 * 100 + 5, kBase + 2 * 200);
  ASSERT_TRUE(within.has_value());
  ExpectOffsetPosition(*within, kBase + 201, 1005);
  within = offsets->LastWithin(10 * 4000, kBase + 2 * 50);
  ASSERT_TRUE(within.has_value());
  ExpectOffsetPosition(*within, kBase + 99, 495);
  EXPECT_FALSE(offsets->LastWithin(4, kBase + 100).has_value());
  ExpectOffsetPosition(offsets->EntryAt(kEntries - 1), kBase + 2 * kEntries - 1,
                       10 * (kEntries - 1) + 5);
  ExpectTimestampOffset(times->EntryAt(0), 100, kBase + 1);
}

TEST_F(IndexTest, OnDiskLookupsFollowRenamesAndFallBackToTheSegmentStart) {
  auto index = OpenOffsets("a.index", 1024, true);
  ASSERT_NE(index, nullptr);
  for (int i = 1; i <= 4; ++i) ASSERT_TRUE(index->Append(kBase + 10 * i, 100 * i).ok());
  ASSERT_TRUE(index->TrimToValidSize().ok());
  ASSERT_TRUE(index->RenameTo(Path("a.index.deleted")).ok());
  ExpectOffsetPosition(index->Lookup(kBase + 25), kBase + 20, 200);
  // Another file under the index's name (a cleaner's swap) is not read as this index.
  ASSERT_EQ(::rename(Path("a.index.deleted").c_str(), Path("moved").c_str()), 0);
  WriteBytes(Path("a.index.deleted"), OffsetFile({{1, 1}, {2, 2}, {3, 3}, {4, 4}}));
  files_.Forget(Path("a.index.deleted"));
  ExpectOffsetPosition(index->Lookup(kBase + 25), kBase, 0);
  EXPECT_EQ(index->LastWithin(1 << 20, kBase + 100), std::nullopt);
  // Nor is a missing file: every lookup answers the segment's start, a safe lower bound.
  ASSERT_EQ(::unlink(Path("a.index.deleted").c_str()), 0);
  files_.Forget(Path("a.index.deleted"));
  ExpectOffsetPosition(index->Lookup(kBase + 25), kBase, 0);
  ExpectOffsetPosition(index->LastEntry(), kBase + 40, 400);  // kept in memory
}

TEST_F(IndexTest, ChangesBringAnOnDiskIndexIntoMemory) {
  {
    auto index = OpenOffsets("a.index", 1024, true);
    ASSERT_NE(index, nullptr);
    for (int i = 1; i <= 5; ++i) ASSERT_TRUE(index->Append(kBase + 10 * i, 100 * i).ok());
    ASSERT_TRUE(index->TrimToValidSize().ok());
  }
  auto index = OpenOffsets("a.index", 1024, /*writable=*/false);
  ASSERT_NE(index, nullptr);
  EXPECT_FALSE(index->InMemory());
  ASSERT_TRUE(index->TruncateTo(kBase + 30).ok());
  EXPECT_TRUE(index->InMemory());
  EXPECT_EQ(index->entries(), 2);
  ExpectOffsetPosition(index->Lookup(kBase + 45), kBase + 20, 200);
  EXPECT_EQ(fs::file_size(Path("a.index")), 40u);  // written back only when asked
  ASSERT_TRUE(index->TrimToValidSize().ok());
  EXPECT_EQ(fs::file_size(Path("a.index")), 16u);
  EXPECT_FALSE(index->InMemory());
  ASSERT_TRUE(index->Resize(1024).ok());
  ASSERT_TRUE(index->Append(kBase + 25, 250).ok());
  ASSERT_TRUE(index->Flush().ok());
  EXPECT_EQ(fs::file_size(Path("a.index")), 24u);
  EXPECT_TRUE(index->InMemory());
}

// The point of not mapping indexes: thousands of them cost no memory maps (the kernel's
// vm.max_map_count, 65,530 by default, once ended a node at about 32,000 partitions) and no
// more descriptors than the file cache holds.
TEST_F(IndexTest, ThousandsOfIndexesUseNoMemoryMapsAndBoundedDescriptors) {
  auto count_lines = [](const char* path) {
    std::ifstream in(path);
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  };
  auto count_fds = [] {
    int n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
    return n;
  };
  const int maps_before = count_lines("/proc/self/maps");
  const int fds_before = count_fds();
  constexpr int kIndexes = 2000;
  std::vector<std::unique_ptr<OffsetIndex>> active;
  std::vector<std::unique_ptr<TimeIndex>> rolled;
  for (int i = 0; i < kIndexes; ++i) {
    auto a = OpenOffsets(fmt::format("{}.index", i), 10 << 20, true);
    auto t = OpenTimes(fmt::format("{}.timeindex", i), 10 << 20, true);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(a->Append(kBase + 1, 4096).ok());
    ASSERT_TRUE(t->MaybeAppend(1000, kBase + 1).ok());
    ASSERT_TRUE(t->TrimToValidSize().ok());
    active.push_back(std::move(a));
    rolled.push_back(std::move(t));
  }
  for (int i = 0; i < kIndexes; i += 97) {
    ExpectOffsetPosition(active[size_t(i)]->Lookup(kBase + 5), kBase + 1, 4096);
    ExpectTimestampOffset(rolled[size_t(i)]->Lookup(2000), 1000, kBase + 1);
  }
  // Heap growth may add a handful of maps; two per index would add 4,000.
  EXPECT_LT(count_lines("/proc/self/maps") - maps_before, 100);
  EXPECT_LE(count_fds() - fds_before, int(files_.max_open()));
}

TEST_F(IndexTest, MissingFileIsCreatedEmptyWhenReadOnly) {
  auto index = OpenOffsets("new.index", 1024, /*writable=*/false);
  ASSERT_NE(index, nullptr);
  EXPECT_TRUE(fs::exists(Path("new.index")));
  EXPECT_EQ(fs::file_size(Path("new.index")), 0u);
  EXPECT_EQ(index->entries(), 0);
  EXPECT_TRUE(index->IsFull());
  EXPECT_FALSE(OffsetIndex::Open(Path("no-such-dir/x.index"), kBase, 1024, true, &files_).ok());
}

}  // namespace
}  // namespace runnel::storaged
