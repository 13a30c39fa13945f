#include "controllerd/local_metadata_log.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/unit/controllerd/test_util.h"

namespace runnel::controllerd {
namespace {

using testing::FaultyFileSystem;
using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;

metadata::MetadataRecordBatch Batch(int i) {
  metadata::MetadataRecordBatch b;
  auto* f = b.add_records()->mutable_feature_level();
  f->set_name("test.feature." + std::to_string(i));
  f->set_feature_level(i);
  return b;
}

std::vector<LogEntry> ReadEverything(MetadataLog& log, int64_t from) {
  std::vector<LogEntry> out;
  Status st = log.Read(from, [&](const LogEntry& e) {
    out.push_back(e);
    return absl::OkStatus();
  });
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

std::unique_ptr<LocalMetadataLog> OpenOk(FileSystem& fs, const std::string& dir) {
  auto log = LocalMetadataLog::Open(fs, dir);
  EXPECT_TRUE(log.ok()) << log.status();
  return log.ok() ? std::move(*log) : nullptr;
}

std::string SegmentPath(const std::string& dir, int64_t base) {
  return dir + "/__cluster_metadata-0/" + logformat::SegmentFileName(base);
}
std::string SnapshotPath(const std::string& dir, SnapshotId id) {
  return dir + "/__cluster_metadata-0/" + logformat::SnapshotFileName(id);
}

TEST(LocalMetadataLogTest, AppendThenReplayAfterReopen) {
  TempDir tmp;
  {
    auto log = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(log->StartOffset(), 0);
    EXPECT_EQ(log->EndOffset(), 0);
    for (int i = 0; i < 5; ++i) {
      auto off = log->Append(i < 3 ? 1 : 2, Batch(i));
      ASSERT_TRUE(off.ok()) << off.status();
      EXPECT_EQ(*off, i);
    }
    EXPECT_EQ(log->Append(1, Batch(9)).status().code(), absl::StatusCode::kFailedPrecondition)
        << "a term may not go backwards";
  }
  auto log = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(log->EndOffset(), 5);
  EXPECT_EQ(log->LastTerm(), 2);
  EXPECT_TRUE(log->recovery().truncation_reason.empty());
  auto entries = ReadEverything(*log, 0);
  ASSERT_EQ(entries.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(entries[i].offset, i);
    EXPECT_EQ(entries[i].term, i < 3 ? 1 : 2);
    EXPECT_EQ(entries[i].batch.SerializeAsString(), Batch(i).SerializeAsString());
  }
  EXPECT_EQ(ReadEverything(*log, 3).size(), 2u);
  EXPECT_EQ(ReadEverything(*log, 5).size(), 0u);
  EXPECT_GT(log->BytesSinceSnapshot(), 0u);
  auto snap = log->LatestSnapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_FALSE(snap->has_value());
}

TEST(LocalMetadataLogTest, TornTailIsTruncatedAtEveryByteOfTheLastEntry) {
  TempDir tmp;
  uint64_t last_start = 0;
  {
    auto log = OpenOk(PosixFileSystem(), tmp.path());
    ASSERT_TRUE(log->Append(1, Batch(0)).ok());
    ASSERT_TRUE(log->Append(1, Batch(1)).ok());
    last_start = std::filesystem::file_size(SegmentPath(tmp.path(), 0));
    ASSERT_TRUE(log->Append(1, Batch(2)).ok());
  }
  const std::string path = SegmentPath(tmp.path(), 0);
  const std::string full = ReadAll(path);
  ASSERT_GT(full.size(), last_start);
  for (uint64_t cut = last_start + 1; cut < full.size(); ++cut) {
    WriteAll(path, full.substr(0, cut));
    auto log = OpenOk(PosixFileSystem(), tmp.path());
    ASSERT_NE(log, nullptr);
    EXPECT_EQ(log->EndOffset(), 2) << "cut at " << cut;
    EXPECT_EQ(log->recovery().truncated_bytes, cut - last_start) << "cut at " << cut;
    EXPECT_FALSE(log->recovery().truncation_reason.empty());
    EXPECT_EQ(std::filesystem::file_size(path), last_start);
    EXPECT_EQ(ReadEverything(*log, 0).size(), 2u);
  }
  // Cut exactly at the entry boundary: nothing torn, just two entries.
  WriteAll(path, full.substr(0, last_start));
  {
    auto log = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(log->EndOffset(), 2);
    EXPECT_TRUE(log->recovery().truncation_reason.empty());
    // The log goes on after a repair, and the new entry survives a reopen.
    auto off = log->Append(1, Batch(7));
    ASSERT_TRUE(off.ok());
    EXPECT_EQ(*off, 2);
  }
  auto log = OpenOk(PosixFileSystem(), tmp.path());
  auto entries = ReadEverything(*log, 0);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[2].batch.SerializeAsString(), Batch(7).SerializeAsString());
}

TEST(LocalMetadataLogTest, CorruptCrcCutsTheLogThere) {
  TempDir tmp;
  uint64_t second_start = 0, third_start = 0;
  {
    auto log = OpenOk(PosixFileSystem(), tmp.path());
    ASSERT_TRUE(log->Append(1, Batch(0)).ok());
    second_start = std::filesystem::file_size(SegmentPath(tmp.path(), 0));
    ASSERT_TRUE(log->Append(1, Batch(1)).ok());
    third_start = std::filesystem::file_size(SegmentPath(tmp.path(), 0));
    ASSERT_TRUE(log->Append(1, Batch(2)).ok());
  }
  std::string data = ReadAll(SegmentPath(tmp.path(), 0));
  data[second_start + logformat::kHeaderSize + 2] ^= 0x40;  // inside entry 1's payload
  WriteAll(SegmentPath(tmp.path(), 0), data);
  auto log = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(log->EndOffset(), 1);
  EXPECT_NE(log->recovery().truncation_reason.find("crc mismatch"), std::string::npos)
      << log->recovery().truncation_reason;
  EXPECT_EQ(log->recovery().truncated_bytes, data.size() - second_start);
  (void)third_start;
}

TEST(LocalMetadataLogTest, BadOffsetSequenceCutsTheLog) {
  TempDir tmp;
  {
    auto log = OpenOk(PosixFileSystem(), tmp.path());
    ASSERT_TRUE(log->Append(1, Batch(0)).ok());
  }
  // A well-formed frame with the wrong offset (as if from another log).
  std::string path = SegmentPath(tmp.path(), 0);
  std::string data = ReadAll(path);
  std::string payload = Batch(1).SerializeAsString();
  WriteAll(path, data + logformat::EncodeFrame(5, 1, payload));
  auto log = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(log->EndOffset(), 1);
  EXPECT_NE(log->recovery().truncation_reason.find("offset 5 where 1 was expected"),
            std::string::npos);
}

TEST(LocalMetadataLogTest, SnapshotsRollSegmentsAndDropWhatNoSnapshotNeeds) {
  TempDir tmp;
  auto log = OpenOk(PosixFileSystem(), tmp.path());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(log->Append(1, Batch(i)).ok());
  metadata::MetadataRecordBatch image = Batch(100);
  ASSERT_TRUE(log->WriteSnapshot({3, 1}, image).ok());
  EXPECT_EQ(log->BytesSinceSnapshot(), 0u);
  EXPECT_TRUE(std::filesystem::exists(SnapshotPath(tmp.path(), {3, 1})));
  EXPECT_TRUE(std::filesystem::exists(SegmentPath(tmp.path(), 3)));
  // The first snapshot keeps the log from 0 as its fallback.
  EXPECT_EQ(log->StartOffset(), 0);
  EXPECT_FALSE(log->WriteSnapshot({2, 1}, image).ok()) << "must be at the log end";

  for (int i = 3; i < 5; ++i) ASSERT_TRUE(log->Append(2, Batch(i)).ok());
  ASSERT_TRUE(log->WriteSnapshot({5, 2}, Batch(101)).ok());
  EXPECT_EQ(log->StartOffset(), 3);
  EXPECT_FALSE(std::filesystem::exists(SegmentPath(tmp.path(), 0)));
  EXPECT_TRUE(std::filesystem::exists(SnapshotPath(tmp.path(), {3, 1})));

  for (int i = 5; i < 7; ++i) ASSERT_TRUE(log->Append(2, Batch(i)).ok());
  ASSERT_TRUE(log->WriteSnapshot({7, 2}, Batch(102)).ok());
  EXPECT_EQ(log->StartOffset(), 5);
  EXPECT_FALSE(std::filesystem::exists(SnapshotPath(tmp.path(), {3, 1})));
  EXPECT_FALSE(std::filesystem::exists(SegmentPath(tmp.path(), 3)));
  EXPECT_EQ(log->Read(4, [](const LogEntry&) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(log->Append(3, Batch(7)).ok());
  log.reset();

  auto reopened = OpenOk(PosixFileSystem(), tmp.path());
  auto snap = reopened->LatestSnapshot();
  ASSERT_TRUE(snap.ok() && snap->has_value());
  EXPECT_EQ((*snap)->id, (SnapshotId{7, 2}));
  EXPECT_EQ((*snap)->image.SerializeAsString(), Batch(102).SerializeAsString());
  EXPECT_EQ(reopened->StartOffset(), 5);
  EXPECT_EQ(reopened->EndOffset(), 8);
  EXPECT_EQ(reopened->LastTerm(), 3);
  auto after = ReadEverything(*reopened, 7);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].offset, 7);
}

TEST(LocalMetadataLogTest, CorruptSnapshotIsSkippedForTheOlderOne) {
  TempDir tmp;
  {
    auto log = OpenOk(PosixFileSystem(), tmp.path());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(log->Append(1, Batch(i)).ok());
    ASSERT_TRUE(log->WriteSnapshot({3, 1}, Batch(100)).ok());
    for (int i = 3; i < 5; ++i) ASSERT_TRUE(log->Append(1, Batch(i)).ok());
    ASSERT_TRUE(log->WriteSnapshot({5, 1}, Batch(101)).ok());
    ASSERT_TRUE(log->Append(1, Batch(5)).ok());
  }
  std::string newest = SnapshotPath(tmp.path(), {5, 1});
  std::string data = ReadAll(newest);
  data[data.size() - 1] ^= 0x01;
  WriteAll(newest, data);

  auto log = OpenOk(PosixFileSystem(), tmp.path());
  ASSERT_EQ(log->recovery().skipped_snapshots.size(), 1u);
  EXPECT_EQ(log->recovery().skipped_snapshots[0], logformat::SnapshotFileName({5, 1}));
  auto snap = log->LatestSnapshot();
  ASSERT_TRUE(snap.ok() && snap->has_value());
  EXPECT_EQ((*snap)->id, (SnapshotId{3, 1}));
  auto entries = ReadEverything(*log, 3);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries.front().offset, 3);
  EXPECT_EQ(entries.back().offset, 5);
}

TEST(LocalMetadataLogTest, RefusesToStartWhenTheLogCannotBeRebuilt) {
  TempDir tmp;
  {
    auto log = OpenOk(PosixFileSystem(), tmp.path());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(log->Append(1, Batch(i)).ok());
    ASSERT_TRUE(log->WriteSnapshot({3, 1}, Batch(100)).ok());
    ASSERT_TRUE(log->Append(1, Batch(3)).ok());
    ASSERT_TRUE(log->WriteSnapshot({4, 1}, Batch(101)).ok());
  }
  // The second snapshot dropped segment 0 (offsets [0, 3)): the snapshots cover it.
  EXPECT_FALSE(std::filesystem::exists(SegmentPath(tmp.path(), 0)));
  ASSERT_TRUE(LocalMetadataLog::Open(PosixFileSystem(), tmp.path()).ok());
  // Without the snapshots nothing can rebuild offsets [0, 3).
  std::filesystem::remove(SnapshotPath(tmp.path(), {3, 1}));
  std::filesystem::remove(SnapshotPath(tmp.path(), {4, 1}));
  auto log = LocalMetadataLog::Open(PosixFileSystem(), tmp.path());
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(log.status().message()).find("no intact snapshot"), std::string::npos)
      << log.status();
}

TEST(LocalMetadataLogTest, GapBetweenSegmentsIsAnError) {
  TempDir tmp;
  {
    auto log = OpenOk(PosixFileSystem(), tmp.path());
    ASSERT_TRUE(log->Append(1, Batch(0)).ok());
  }
  WriteAll(SegmentPath(tmp.path(), 10), logformat::EncodeFrame(10, 1, ""));
  auto log = LocalMetadataLog::Open(PosixFileSystem(), tmp.path());
  ASSERT_FALSE(log.ok());
  EXPECT_NE(std::string(log.status().message()).find("missing offsets [1, 10)"), std::string::npos)
      << log.status();
}

TEST(LocalMetadataLogTest, UnfinishedTempFilesAreRemoved) {
  TempDir tmp;
  { OpenOk(PosixFileSystem(), tmp.path()); }
  std::string tmpfile =
      tmp.path() + "/__cluster_metadata-0/" + logformat::SnapshotFileName({9, 1}) + ".tmp";
  WriteAll(tmpfile, "half a snapshot");
  auto log = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_FALSE(std::filesystem::exists(tmpfile));
  ASSERT_EQ(log->recovery().removed_files.size(), 1u);
}

TEST(LocalMetadataLogTest, FailedWriteStopsAppendsUntilReopen) {
  TempDir tmp;
  FaultyFileSystem fs;
  {
    auto log = OpenOk(fs, tmp.path());
    ASSERT_TRUE(log->Append(1, Batch(0)).ok());
    fs.fail_append = true;
    auto failed = log->Append(1, Batch(1));
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
    fs.fail_append = false;
    EXPECT_FALSE(log->Append(1, Batch(2)).ok()) << "a failure is sticky";
    EXPECT_EQ(log->EndOffset(), 1);
  }
  // The half-written entry is a torn tail the next open cuts.
  auto log = OpenOk(fs, tmp.path());
  EXPECT_EQ(log->EndOffset(), 1);
  EXPECT_GT(log->recovery().truncated_bytes, 0u);
  EXPECT_TRUE(log->Append(1, Batch(1)).ok());
}

TEST(LocalMetadataLogTest, FailedSyncIsNotAcknowledged) {
  TempDir tmp;
  FaultyFileSystem fs;
  auto log = OpenOk(fs, tmp.path());
  fs.fail_sync = true;
  EXPECT_FALSE(log->Append(1, Batch(0)).ok());
  EXPECT_EQ(log->EndOffset(), 0);
}

TEST(LocalMetadataLogTest, FailedSnapshotWriteLeavesTheLogUsable) {
  TempDir tmp;
  FaultyFileSystem fs;
  auto log = OpenOk(fs, tmp.path());
  ASSERT_TRUE(log->Append(1, Batch(0)).ok());
  fs.fail_write_file = true;
  EXPECT_FALSE(log->WriteSnapshot({1, 1}, Batch(100)).ok());
  fs.fail_write_file = false;
  EXPECT_TRUE(log->Append(1, Batch(1)).ok());
  EXPECT_TRUE(log->WriteSnapshot({2, 1}, Batch(101)).ok());
}

}  // namespace
}  // namespace runnel::controllerd
