#include "controllerd/raft_log_store.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "common/util/crc32c.h"
#include "proto/runnel/metadata.pb.h"
#include "tests/unit/controllerd/test_util.h"
#include "tests/util/temp_dir.h"

namespace runnel::controllerd {
namespace {

using raft::Entry;
using raft::HardState;
using raft::SnapshotId;
using runnel::testing::TempDir;
using testing::FaultyFileSystem;
using testing::ReadAll;
using testing::WriteAll;

std::string Data(int64_t offset, int64_t term) {
  return fmt::format("entry {} of term {}", offset, term);
}

// Entries [from, to) in `term`; offset 3 has empty data (a leader's no-op).
std::vector<Entry> Make(int64_t from, int64_t to, int64_t term) {
  std::vector<Entry> out;
  for (int64_t o = from; o < to; ++o) {
    out.push_back(Entry{o, term, o == 3 ? std::string() : Data(o, term)});
  }
  return out;
}

std::vector<Entry> Concat(std::vector<Entry> a, const std::vector<Entry>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::unique_ptr<RaftLogStore> OpenOk(FileSystem& fs, const std::string& dir) {
  auto store = RaftLogStore::Open(fs, dir);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

// As the Raft core does, the term is stored before entries of it.
void AppendOk(RaftLogStore& store, const std::vector<Entry>& entries) {
  int64_t term = entries.empty() ? 0 : entries.back().term;
  if (term > store.hard_state().term) {
    ASSERT_TRUE(store.SetHardState({term, raft::kNoNode}).ok());
  }
  Status st = store.Append(entries);
  ASSERT_TRUE(st.ok()) << st;
}

std::vector<Entry> ReadLog(const RaftLogStore& store) {
  auto entries = store.Read(store.start_offset(), store.end_offset(), SIZE_MAX);
  EXPECT_TRUE(entries.ok()) << entries.status();
  return entries.ok() ? *entries : std::vector<Entry>{};
}

// The entries of `all` in [from, to).
std::vector<Entry> Slice(const std::vector<Entry>& all, int64_t from, int64_t to) {
  std::vector<Entry> out;
  for (const Entry& e : all) {
    if (e.offset >= from && e.offset < to) out.push_back(e);
  }
  return out;
}

std::string PDir(const std::string& dir) { return dir + "/__cluster_metadata-0"; }
std::string SegmentPath(const std::string& dir, int64_t base) {
  return PDir(dir) + "/" + logformat::SegmentFileName(base);
}
std::string SnapshotPath(const std::string& dir, SnapshotId id) {
  return PDir(dir) + "/" + logformat::SnapshotFileName(id);
}
std::string QuorumStatePath(const std::string& dir) {
  return PDir(dir) + "/" + std::string(RaftLogStore::kQuorumStateFileName);
}
bool Exists(const std::string& path) { return std::filesystem::exists(path); }

std::vector<std::string> Segments(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(PDir(dir))) {
    std::string name = e.path().filename().string();
    if (logformat::ParseSegmentFileName(name)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool Contains(const Status& st, std::string_view what) {
  return std::string(st.message()).find(what) != std::string::npos;
}

// Lets mutating calls through until a budget of them is spent; from then on every one fails
// without touching the disk, as if the process died there.
class CrashingFileSystem final : public testing::InjectingFileSystem {
 public:
  void CrashAfter(int ops) { budget_ = ops; }
  bool crashed() const { return crashed_; }

 protected:
  Status Inject(Op, const std::string& what) override {
    if (budget_ < 0) return absl::OkStatus();
    if (budget_ == 0) {
      crashed_ = true;
      return absl::InternalError("injected crash before " + what);
    }
    --budget_;
    return absl::OkStatus();
  }

 private:
  int budget_ = -1;  // -1: no crash
  bool crashed_ = false;
};

TEST(RaftLogStoreTest, EmptyStore) {
  TempDir tmp{"raftlog"};
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(store->start_offset(), 0);
  EXPECT_EQ(store->end_offset(), 0);
  EXPECT_EQ(store->snapshot_id(), (SnapshotId{0, 0}));
  EXPECT_EQ(store->hard_state(), (HardState{0, raft::kNoNode}));
  EXPECT_EQ(*store->TermAt(-1), 0);
  EXPECT_EQ(store->TermAt(0).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(store->ReadSnapshot().status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->Read(0, 0, 100).ok());
  EXPECT_EQ(store->Read(0, 1, 100).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(store->Sync().ok());
  EXPECT_TRUE(Exists(SegmentPath(tmp.path(), 0)));
  EXPECT_TRUE(Exists(QuorumStatePath(tmp.path())));
}

TEST(RaftLogStoreTest, AppendSyncReadAndTermAtAcrossSegments) {
  TempDir tmp{"raftlog"};
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  std::vector<Entry> all = Concat(Make(0, 5, 1), Make(5, 8, 2));
  AppendOk(*store, Make(0, 5, 1));
  ASSERT_TRUE(store->Sync().ok());
  AppendOk(*store, Make(5, 8, 2));
  // A snapshot short of the log end; the new segment starts at the log end.
  ASSERT_TRUE(store->SaveSnapshot({6, 2}, "image at 6").ok());
  EXPECT_TRUE(Exists(SegmentPath(tmp.path(), 8)));
  AppendOk(*store, Make(8, 10, 3));
  all = Concat(all, Make(8, 10, 3));
  ASSERT_TRUE(store->Sync().ok());

  EXPECT_EQ(store->start_offset(), 0);
  EXPECT_EQ(store->end_offset(), 10);
  EXPECT_EQ(ReadLog(*store), all);
  for (const Entry& e : all) EXPECT_EQ(*store->TermAt(e.offset), e.term) << e.offset;
  EXPECT_EQ(store->TermAt(10).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*store->TermAt(-1), 0);

  // max_bytes: always one entry, then as many as fit; reads cross segments.
  auto one = store->Read(4, 9, 0);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, Slice(all, 4, 5));
  size_t two = all[6].data.size() + all[7].data.size();
  auto fit = store->Read(6, 10, two);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(*fit, Slice(all, 6, 8));
  auto fit_plus = store->Read(6, 10, two + all[8].data.size());
  ASSERT_TRUE(fit_plus.ok());
  EXPECT_EQ(*fit_plus, Slice(all, 6, 9));
  auto bounded = store->Read(2, 9, SIZE_MAX);
  ASSERT_TRUE(bounded.ok());
  EXPECT_EQ(*bounded, Slice(all, 2, 9));
  auto empty = store->Read(5, 5, 10);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(store->Read(0, 11, 10).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(store->Read(5, 4, 10).status().code(), absl::StatusCode::kOutOfRange);

  // Bad appends are refused without breaking the store.
  EXPECT_EQ(store->Append(Make(11, 12, 3)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Append(Make(10, 11, 2)).code(), absl::StatusCode::kInvalidArgument)
      << "a term may not go back";
  std::vector<Entry> gap = {Entry{10, 3, "a"}, Entry{12, 3, "b"}};
  EXPECT_EQ(store->Append(gap).code(), absl::StatusCode::kInvalidArgument);
  std::vector<Entry> ahead = {Entry{10, 4, "term not stored yet"}};
  EXPECT_EQ(store->Append(ahead).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store->end_offset(), 10);
  AppendOk(*store, Make(10, 11, 3));
  EXPECT_EQ(store->end_offset(), 11);
}

TEST(RaftLogStoreTest, ReopenKeepsSyncedEntriesAndSnapshot) {
  TempDir tmp{"raftlog"};
  std::vector<Entry> all = Concat(Make(0, 5, 1), Make(5, 9, 4));
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, Make(0, 5, 1));
    ASSERT_TRUE(store->SaveSnapshot({4, 1}, "four").ok());
    AppendOk(*store, Make(5, 9, 4));
    ASSERT_TRUE(store->Sync().ok());
    EXPECT_GT(store->bytes_since_snapshot(), 0u);
  }
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_TRUE(store->recovery().truncation_reason.empty());
  EXPECT_EQ(store->start_offset(), 0);
  EXPECT_EQ(store->end_offset(), 9);
  EXPECT_EQ(ReadLog(*store), all);
  EXPECT_EQ(store->snapshot_id(), (SnapshotId{4, 1}));
  EXPECT_EQ(*store->ReadSnapshot(), "four");
  EXPECT_EQ(store->hard_state(), (HardState{4, raft::kNoNode}));
  EXPECT_GT(store->bytes_since_snapshot(), 0u);
}

TEST(RaftLogStoreTest, TornTailIsCutAtEveryByteOfTheLastEntry) {
  TempDir tmp{"raftlog"};
  uint64_t last_start = 0;
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, Make(0, 2, 1));
    ASSERT_TRUE(store->Sync().ok());
    last_start = std::filesystem::file_size(SegmentPath(tmp.path(), 0));
    AppendOk(*store, Make(2, 3, 1));
    ASSERT_TRUE(store->Sync().ok());
  }
  const std::string path = SegmentPath(tmp.path(), 0);
  const std::string full = ReadAll(path);
  ASSERT_GT(full.size(), last_start);
  for (uint64_t cut = last_start + 1; cut < full.size(); ++cut) {
    WriteAll(path, full.substr(0, cut));
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->end_offset(), 2) << "cut at " << cut;
    EXPECT_EQ(store->recovery().truncated_bytes, cut - last_start) << "cut at " << cut;
    EXPECT_FALSE(store->recovery().truncation_reason.empty());
    EXPECT_EQ(std::filesystem::file_size(path), last_start);
    EXPECT_EQ(ReadLog(*store), Make(0, 2, 1));
  }
  // The log goes on after a repair.
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, Make(2, 4, 2));
    ASSERT_TRUE(store->Sync().ok());
  }
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(ReadLog(*store), Concat(Make(0, 2, 1), Make(2, 4, 2)));
}

TEST(RaftLogStoreTest, CorruptFrameAndDecreasingTermCutTheLog) {
  TempDir tmp{"raftlog"};
  uint64_t second = 0;
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, Make(0, 1, 2));
    ASSERT_TRUE(store->Sync().ok());
    second = std::filesystem::file_size(SegmentPath(tmp.path(), 0));
    AppendOk(*store, Make(1, 3, 2));
    ASSERT_TRUE(store->Sync().ok());
  }
  std::string path = SegmentPath(tmp.path(), 0);
  std::string data = ReadAll(path);
  std::string flipped = data;
  flipped[second + logformat::kHeaderSize + 1] ^= 0x20;
  WriteAll(path, flipped);
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(store->end_offset(), 1);
    EXPECT_NE(store->recovery().truncation_reason.find("crc mismatch"), std::string::npos)
        << store->recovery().truncation_reason;
  }
  // A well-formed frame whose term goes back.
  WriteAll(path, data.substr(0, second) + logformat::EncodeFrame(1, 1, "older term"));
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(store->end_offset(), 1);
  EXPECT_NE(store->recovery().truncation_reason.find("term 1 after term 2"), std::string::npos)
      << store->recovery().truncation_reason;
}

TEST(RaftLogStoreTest, TruncateInsideASegmentThenAppendThenReopen) {
  TempDir tmp{"raftlog"};
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, Make(0, 6, 1));
    ASSERT_TRUE(store->Sync().ok());
    uint64_t before = std::filesystem::file_size(SegmentPath(tmp.path(), 0));
    ASSERT_TRUE(store->TruncateFrom(3).ok());
    EXPECT_EQ(store->end_offset(), 3);
    EXPECT_LT(std::filesystem::file_size(SegmentPath(tmp.path(), 0)), before);
    EXPECT_EQ(store->TermAt(3).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(ReadLog(*store), Make(0, 3, 1));
    EXPECT_TRUE(store->TruncateFrom(7).ok()) << "past the end: nothing to do";
    AppendOk(*store, Make(3, 5, 2));
    ASSERT_TRUE(store->Sync().ok());
    EXPECT_EQ(ReadLog(*store), Concat(Make(0, 3, 1), Make(3, 5, 2)));
  }
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_TRUE(store->recovery().truncation_reason.empty());
  EXPECT_EQ(ReadLog(*store), Concat(Make(0, 3, 1), Make(3, 5, 2)));
  EXPECT_EQ(*store->TermAt(4), 2);
}

TEST(RaftLogStoreTest, TruncateAcrossSegmentsThenAppendThenReopen) {
  TempDir tmp{"raftlog"};
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, Make(0, 5, 1));
    ASSERT_TRUE(store->SaveSnapshot({2, 1}, "two").ok());  // rolls a segment at 5
    AppendOk(*store, Make(5, 7, 2));
    ASSERT_TRUE(store->SaveSnapshot({3, 1}, "three").ok());  // and one at 7
    AppendOk(*store, Make(7, 9, 2));
    ASSERT_TRUE(store->Sync().ok());
    EXPECT_EQ(Segments(tmp.path()).size(), 3u);

    EXPECT_EQ(store->TruncateFrom(2).code(), absl::StatusCode::kInvalidArgument)
        << "below the snapshot";
    EXPECT_EQ(store->end_offset(), 9);
    ASSERT_TRUE(store->TruncateFrom(4).ok());
    EXPECT_FALSE(Exists(SegmentPath(tmp.path(), 5)));
    EXPECT_FALSE(Exists(SegmentPath(tmp.path(), 7)));
    EXPECT_EQ(store->end_offset(), 4);
    AppendOk(*store, Make(4, 6, 3));
    ASSERT_TRUE(store->Sync().ok());
  }
  std::vector<Entry> want = Concat(Make(0, 4, 1), Make(4, 6, 3));
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_TRUE(store->recovery().truncation_reason.empty());
    EXPECT_EQ(ReadLog(*store), want);
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{3, 1}));
    // Cut exactly at a segment's first entry: the segment stays, empty, and takes appends.
    AppendOk(*store, Make(6, 8, 3));
    ASSERT_TRUE(store->SaveSnapshot({6, 3}, "six").ok());  // rolls a segment at 8
    AppendOk(*store, Make(8, 10, 4));
    ASSERT_TRUE(store->TruncateFrom(8).ok());
    EXPECT_TRUE(Exists(SegmentPath(tmp.path(), 8)));
    EXPECT_EQ(std::filesystem::file_size(SegmentPath(tmp.path(), 8)), 0u);
    AppendOk(*store, Make(8, 9, 5));
    ASSERT_TRUE(store->Sync().ok());
  }
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(ReadLog(*store),
            Slice(Concat(Concat(want, Make(6, 8, 3)), Make(8, 9, 5)), store->start_offset(), 9));
  EXPECT_EQ(store->end_offset(), 9);
  EXPECT_EQ(*store->TermAt(8), 5);
}

TEST(RaftLogStoreTest, SnapshotsRollSegmentsAndKeepThePreviousOneWithItsLog) {
  TempDir tmp{"raftlog"};
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  AppendOk(*store, Make(0, 3, 1));
  ASSERT_TRUE(store->SaveSnapshot({3, 1}, "s3").ok());
  EXPECT_EQ(store->bytes_since_snapshot(), 0u);
  EXPECT_TRUE(Exists(SnapshotPath(tmp.path(), {3, 1})));
  EXPECT_TRUE(Exists(SegmentPath(tmp.path(), 3)));
  EXPECT_EQ(store->start_offset(), 0) << "the first snapshot keeps the log from its start";
  EXPECT_EQ(store->snapshot_id(), (SnapshotId{3, 1}));
  EXPECT_EQ(*store->TermAt(2), 1);

  // Not newer, past the log end, wrong epoch: refused, and the store goes on.
  EXPECT_EQ(store->SaveSnapshot({3, 1}, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->SaveSnapshot({4, 1}, "x").code(), absl::StatusCode::kInvalidArgument);
  AppendOk(*store, Make(3, 5, 2));
  EXPECT_EQ(store->SaveSnapshot({5, 1}, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_GT(store->bytes_since_snapshot(), 0u);

  ASSERT_TRUE(store->SaveSnapshot({5, 2}, "s5").ok());
  EXPECT_EQ(store->start_offset(), 3);
  EXPECT_FALSE(Exists(SegmentPath(tmp.path(), 0)));
  EXPECT_TRUE(Exists(SnapshotPath(tmp.path(), {3, 1})));
  EXPECT_EQ(store->TermAt(1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(store->Read(2, 5, 100).status().code(), absl::StatusCode::kOutOfRange);

  AppendOk(*store, Make(5, 7, 2));
  ASSERT_TRUE(store->SaveSnapshot({7, 2}, "s7").ok());
  EXPECT_EQ(store->start_offset(), 5);
  EXPECT_FALSE(Exists(SnapshotPath(tmp.path(), {3, 1})));
  EXPECT_FALSE(Exists(SegmentPath(tmp.path(), 3)));
  EXPECT_TRUE(Exists(SnapshotPath(tmp.path(), {5, 2})));
  AppendOk(*store, Make(7, 8, 3));
  ASSERT_TRUE(store->Sync().ok());
  EXPECT_EQ(*store->ReadSnapshot(), "s7");
  store.reset();

  auto reopened = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(reopened->snapshot_id(), (SnapshotId{7, 2}));
  EXPECT_EQ(*reopened->ReadSnapshot(), "s7");
  EXPECT_EQ(reopened->start_offset(), 5);
  EXPECT_EQ(reopened->end_offset(), 8);
  EXPECT_EQ(ReadLog(*reopened), Concat(Make(5, 7, 2), Make(7, 8, 3)));
}

TEST(RaftLogStoreTest, CorruptNewestSnapshotFallsBackToThePreviousAndItsLog) {
  TempDir tmp{"raftlog"};
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, Make(0, 3, 1));
    ASSERT_TRUE(store->SaveSnapshot({3, 1}, "s3").ok());
    AppendOk(*store, Make(3, 5, 1));
    ASSERT_TRUE(store->SaveSnapshot({5, 1}, "s5").ok());
    AppendOk(*store, Make(5, 6, 1));
    ASSERT_TRUE(store->Sync().ok());
  }
  std::string newest = SnapshotPath(tmp.path(), {5, 1});
  std::string data = ReadAll(newest);
  data[data.size() - 1] ^= 0x01;
  WriteAll(newest, data);

  auto store = OpenOk(PosixFileSystem(), tmp.path());
  ASSERT_EQ(store->recovery().skipped_snapshots.size(), 1u);
  EXPECT_EQ(store->recovery().skipped_snapshots[0], logformat::SnapshotFileName({5, 1}));
  EXPECT_EQ(store->snapshot_id(), (SnapshotId{3, 1}));
  EXPECT_EQ(*store->ReadSnapshot(), "s3");
  EXPECT_EQ(store->start_offset(), 3);
  EXPECT_EQ(ReadLog(*store), Slice(Make(0, 6, 1), 3, 6));
}

TEST(RaftLogStoreTest, InstallSnapshotKeepsTheLogThatMatchesIt) {
  TempDir tmp{"raftlog"};
  std::vector<Entry> all = Concat(Make(0, 5, 1), Make(5, 10, 2));
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, all);
    // Entry 5 has term 2: the entries after it are the leader's too.
    ASSERT_TRUE(store->InstallSnapshot({6, 2}, "leader image").ok());
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{6, 2}));
    EXPECT_EQ(store->end_offset(), 10);
    EXPECT_EQ(ReadLog(*store), Slice(all, store->start_offset(), 10));
    EXPECT_EQ(store->TruncateFrom(5).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(store->InstallSnapshot({6, 2}, "leader image").ok()) << "a repeat is a no-op";
    EXPECT_EQ(store->InstallSnapshot({4, 1}, "old").code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(store->Sync().ok());
  }
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_TRUE(store->recovery().truncation_reason.empty());
  EXPECT_EQ(store->snapshot_id(), (SnapshotId{6, 2}));
  EXPECT_EQ(*store->ReadSnapshot(), "leader image");
  EXPECT_EQ(ReadLog(*store), Slice(all, store->start_offset(), 10));
  EXPECT_EQ(store->end_offset(), 10);
}

TEST(RaftLogStoreTest, InstallSnapshotDiscardsAConflictingLog) {
  TempDir tmp{"raftlog"};
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, Concat(Make(0, 5, 1), Make(5, 10, 2)));
    ASSERT_TRUE(store->SaveSnapshot({3, 1}, "s3").ok());
    // Entry 5 has term 2, the leader's has term 3: nothing of this log is kept.
    EXPECT_EQ(store->InstallSnapshot({6, 3}, "leader image").code(),
              absl::StatusCode::kFailedPrecondition)
        << "the term is stored first";
    ASSERT_TRUE(store->SetHardState({3, 1}).ok());
    ASSERT_TRUE(store->InstallSnapshot({6, 3}, "leader image").ok());
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{6, 3}));
    EXPECT_EQ(store->start_offset(), 6);
    EXPECT_EQ(store->end_offset(), 6);
    EXPECT_EQ(*store->TermAt(5), 3);
    EXPECT_EQ(store->TermAt(6).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_EQ(Segments(tmp.path()), std::vector<std::string>{logformat::SegmentFileName(6)});
    EXPECT_FALSE(Exists(SnapshotPath(tmp.path(), {3, 1})));
    EXPECT_EQ(store->bytes_since_snapshot(), 0u);
    AppendOk(*store, Make(6, 8, 3));
    ASSERT_TRUE(store->Sync().ok());
  }
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_TRUE(store->recovery().truncation_reason.empty());
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{6, 3}));
    EXPECT_EQ(*store->ReadSnapshot(), "leader image");
    EXPECT_EQ(store->start_offset(), 6);
    EXPECT_EQ(ReadLog(*store), Make(6, 8, 3));
    // A snapshot past the log end: the log continues at its end.
    ASSERT_TRUE(store->SetHardState({4, raft::kNoNode}).ok());
    ASSERT_TRUE(store->InstallSnapshot({20, 4}, "far").ok());
    EXPECT_EQ(store->start_offset(), 20);
    EXPECT_EQ(store->end_offset(), 20);
    EXPECT_EQ(*store->TermAt(19), 4);
  }
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(store->snapshot_id(), (SnapshotId{20, 4}));
  EXPECT_EQ(store->start_offset(), 20);
  EXPECT_EQ(store->end_offset(), 20);
  AppendOk(*store, Make(20, 21, 4));
}

// The discard case of InstallSnapshot, cut short after the snapshot was written (by hand
// here): Open must not trust a log that disagrees with the snapshot.
TEST(RaftLogStoreTest, CrashBetweenSnapshotWriteAndSegmentRemoval) {
  auto prepare = [](const std::string& dir) {
    auto store = OpenOk(PosixFileSystem(), dir);
    AppendOk(*store, Make(0, 5, 1));
    ASSERT_TRUE(store->SaveSnapshot({2, 1}, "s2").ok());  // segments 0 and 5
    AppendOk(*store, Make(5, 10, 2));
    ASSERT_TRUE(store->Sync().ok());
    ASSERT_TRUE(store->SetHardState({3, raft::kNoNode}).ok());  // the leader's term
  };
  auto write_snapshot = [](const std::string& dir, SnapshotId id) {
    WriteAll(SnapshotPath(dir, id), logformat::EncodeFrame(id.end_offset, id.epoch, "leader"));
  };
  {
    SCOPED_TRACE("entry 6 has term 2, the snapshot says 3");
    TempDir tmp{"raftlog"};
    prepare(tmp.path());
    write_snapshot(tmp.path(), {7, 3});
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{7, 3}));
    EXPECT_EQ(store->start_offset(), 7);
    EXPECT_EQ(store->end_offset(), 7);
    EXPECT_NE(store->recovery().truncation_reason.find("entry 6 has term 2"), std::string::npos)
        << store->recovery().truncation_reason;
    EXPECT_EQ(store->recovery().removed_files.size(), 2u);
    EXPECT_GT(store->recovery().truncated_bytes, 0u);
    EXPECT_EQ(Segments(tmp.path()), std::vector<std::string>{logformat::SegmentFileName(7)});
    AppendOk(*store, Make(7, 8, 3));
    ASSERT_TRUE(store->Sync().ok());
    store.reset();
    auto again = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(ReadLog(*again), Make(7, 8, 3));
    EXPECT_EQ(*again->ReadSnapshot(), "leader");
  }
  {
    SCOPED_TRACE("part of the log already removed (newest segment first)");
    TempDir tmp{"raftlog"};
    prepare(tmp.path());
    write_snapshot(tmp.path(), {7, 3});
    std::filesystem::remove(SegmentPath(tmp.path(), 5));
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(store->start_offset(), 7);
    EXPECT_EQ(store->end_offset(), 7);
    EXPECT_NE(store->recovery().truncation_reason.find("before snapshot"), std::string::npos)
        << store->recovery().truncation_reason;
  }
  {
    SCOPED_TRACE("the snapshot matches the log: it is kept");
    TempDir tmp{"raftlog"};
    prepare(tmp.path());
    write_snapshot(tmp.path(), {7, 2});
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_TRUE(store->recovery().truncation_reason.empty());
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{7, 2}));
    EXPECT_EQ(store->end_offset(), 10);
    EXPECT_EQ(ReadLog(*store),
              Slice(Concat(Make(0, 5, 1), Make(5, 10, 2)), store->start_offset(), 10));
  }
  {
    SCOPED_TRACE("the snapshot ends past the log");
    TempDir tmp{"raftlog"};
    prepare(tmp.path());
    write_snapshot(tmp.path(), {12, 3});
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{12, 3}));
    EXPECT_EQ(store->start_offset(), 12);
    EXPECT_EQ(store->end_offset(), 12);
  }
}

// What a fresh Open sees after the process died before the k-th mutating call of `op`, for
// every k: the state before or the state after, never an error or a mix.
void CrashAtEveryStep(const std::function<void(const std::string&)>& prepare,
                      const std::function<Status(RaftLogStore&)>& op,
                      const std::function<void(RaftLogStore&, bool)>& check_old_or_new) {
  bool completed = false;
  for (int k = 0; k < 100 && !completed; ++k) {
    SCOPED_TRACE(fmt::format("crash before mutating call {}", k));
    TempDir tmp{"raftlog"};
    prepare(tmp.path());
    CrashingFileSystem fs;
    {
      auto store = OpenOk(fs, tmp.path());
      ASSERT_NE(store, nullptr);
      fs.CrashAfter(k);
      Status st = op(*store);
      completed = !fs.crashed();
      EXPECT_EQ(st.ok(), completed) << st;
    }
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    ASSERT_NE(store, nullptr);
    check_old_or_new(*store, completed);
  }
  EXPECT_TRUE(completed);
}

std::vector<Entry> TwoTerms() { return Concat(Make(0, 5, 1), Make(5, 10, 2)); }

void PrepareTwoTerms(const std::string& dir) {
  auto store = OpenOk(PosixFileSystem(), dir);
  AppendOk(*store, Make(0, 5, 1));
  ASSERT_TRUE(store->SaveSnapshot({3, 1}, "s3").ok());  // segments 0 and 5
  AppendOk(*store, Make(5, 10, 2));
  ASSERT_TRUE(store->Sync().ok());
  ASSERT_TRUE(store->SetHardState({3, raft::kNoNode}).ok());
}

TEST(RaftLogStoreTest, CrashAtEveryStepOfInstallSnapshotThatDiscards) {
  CrashAtEveryStep(
      [](const std::string& dir) {
        // Segments 0, 5 and 10: one starts after the new snapshot's last entry.
        PrepareTwoTerms(dir);
        auto store = OpenOk(PosixFileSystem(), dir);
        ASSERT_TRUE(store->SaveSnapshot({5, 1}, "s5").ok());
        AppendOk(*store, Make(10, 12, 2));
        ASSERT_TRUE(store->Sync().ok());
      },
      [](RaftLogStore& s) {
        return s.InstallSnapshot({7, 3}, "new");
      },
      [](RaftLogStore& s, bool completed) {
        if (s.snapshot_id() == SnapshotId{5, 1}) {
          EXPECT_FALSE(completed);
          EXPECT_EQ(*s.ReadSnapshot(), "s5");
          EXPECT_EQ(s.end_offset(), 12);
          EXPECT_EQ(ReadLog(s), Slice(Concat(TwoTerms(), Make(10, 12, 2)), s.start_offset(), 12));
        } else {
          EXPECT_EQ(s.snapshot_id(), (SnapshotId{7, 3}));
          EXPECT_EQ(*s.ReadSnapshot(), "new");
          EXPECT_EQ(s.start_offset(), 7);
          EXPECT_EQ(s.end_offset(), 7);
        }
      });
}

TEST(RaftLogStoreTest, CrashAtEveryStepOfInstallSnapshotThatKeeps) {
  CrashAtEveryStep(
      PrepareTwoTerms,
      [](RaftLogStore& s) {
        return s.InstallSnapshot({7, 2}, "new");
      },
      [](RaftLogStore& s, bool completed) {
        EXPECT_EQ(s.end_offset(), 10);
        EXPECT_EQ(ReadLog(s), Slice(TwoTerms(), s.start_offset(), 10));
        if (s.snapshot_id() == SnapshotId{3, 1}) {
          EXPECT_FALSE(completed);
        } else {
          EXPECT_EQ(s.snapshot_id(), (SnapshotId{7, 2}));
          EXPECT_EQ(*s.ReadSnapshot(), "new");
        }
      });
}

TEST(RaftLogStoreTest, CrashAtEveryStepOfSaveSnapshot) {
  CrashAtEveryStep(
      [](const std::string& dir) {
        PrepareTwoTerms(dir);
        auto store = OpenOk(PosixFileSystem(), dir);
        ASSERT_TRUE(store->SaveSnapshot({5, 1}, "s5").ok());  // segment 10
      },
      [](RaftLogStore& s) {
        return s.SaveSnapshot({9, 2}, "s9");
      },
      [](RaftLogStore& s, bool completed) {
        EXPECT_EQ(s.end_offset(), 10);
        EXPECT_EQ(ReadLog(s), Slice(TwoTerms(), s.start_offset(), 10));
        EXPECT_LE(s.start_offset(), 5);
        if (s.snapshot_id() == SnapshotId{5, 1}) {
          EXPECT_FALSE(completed);
        } else {
          EXPECT_EQ(s.snapshot_id(), (SnapshotId{9, 2}));
          EXPECT_EQ(*s.ReadSnapshot(), "s9");
        }
      });
}

TEST(RaftLogStoreTest, CrashAtEveryStepOfTruncateAcrossSegments) {
  CrashAtEveryStep(
      [](const std::string& dir) {
        PrepareTwoTerms(dir);
        auto store = OpenOk(PosixFileSystem(), dir);
        ASSERT_TRUE(store->SaveSnapshot({4, 1}, "s4").ok());  // segment 10
        AppendOk(*store, Make(10, 12, 2));
        ASSERT_TRUE(store->Sync().ok());
      },
      [](RaftLogStore& s) { return s.TruncateFrom(4); },
      [](RaftLogStore& s, bool completed) {
        std::vector<Entry> all = Concat(TwoTerms(), Make(10, 12, 2));
        int64_t end = s.end_offset();
        if (completed) {
          EXPECT_EQ(end, 4);
        }
        // A prefix of the old log (whole segments go newest first), never shorter than the cut.
        EXPECT_TRUE(end == 4 || end == 5 || end == 10 || end == 12) << end;
        EXPECT_EQ(ReadLog(s), Slice(all, s.start_offset(), end));
      });
}

TEST(RaftLogStoreTest, QuorumStateRoundTrip) {
  TempDir tmp{"raftlog"};
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    ASSERT_TRUE(store->SetHardState({5, 2}).ok());
    EXPECT_EQ(store->hard_state(), (HardState{5, 2}));
  }
  EXPECT_EQ(std::filesystem::file_size(QuorumStatePath(tmp.path())), 20u);
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(store->hard_state(), (HardState{5, 2}));
    // Guards against unsafe changes; they do not break the store.
    EXPECT_EQ(store->SetHardState({5, 3}).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store->SetHardState({5, raft::kNoNode}).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store->SetHardState({4, raft::kNoNode}).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(store->SetHardState({5, 2}).ok());
    ASSERT_TRUE(store->SetHardState({6, raft::kNoNode}).ok());
  }
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(store->hard_state(), (HardState{6, raft::kNoNode}));
    ASSERT_TRUE(store->SetHardState({6, 1}).ok());
  }
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(store->hard_state(), (HardState{6, 1}));
}

TEST(RaftLogStoreTest, CorruptQuorumStateIsAnError) {
  TempDir tmp{"raftlog"};
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    ASSERT_TRUE(store->SetHardState({7, 3}).ok());
  }
  const std::string path = QuorumStatePath(tmp.path());
  const std::string good = ReadAll(path);
  std::string version2 = good;
  version2[7] = 2;
  uint32_t crc = crc32c::Value(version2.data() + 4, version2.size() - 4);
  for (int i = 0; i < 4; ++i) version2[i] = static_cast<char>(crc >> (24 - 8 * i));
  std::string flipped = good;
  flipped[12] ^= 0x01;
  struct Case {
    std::string name, data, why;
  } cases[] = {
      {"bit flip", flipped, "crc mismatch"},
      {"cut short", good.substr(0, 19), "19 byte(s)"},
      {"empty", "", "0 byte(s)"},
      {"unknown version", version2, "unknown version 2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    WriteAll(path, c.data);
    auto store = RaftLogStore::Open(PosixFileSystem(), tmp.path());
    ASSERT_FALSE(store.ok());
    EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(Contains(store.status(), path)) << store.status();
    EXPECT_TRUE(Contains(store.status(), c.why)) << store.status();
  }
  WriteAll(path, good);
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_EQ(store->hard_state(), (HardState{7, 3}));
}

TEST(RaftLogStoreTest, MissingQuorumStateFallsBackToTheLog) {
  TempDir tmp{"raftlog"};
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    ASSERT_TRUE(store->SetHardState({4, 1}).ok());
    AppendOk(*store, Make(0, 3, 4));
    ASSERT_TRUE(store->Sync().ok());
  }
  std::filesystem::remove(QuorumStatePath(tmp.path()));
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(store->hard_state(), (HardState{4, raft::kNoNode}));
    EXPECT_TRUE(Exists(QuorumStatePath(tmp.path()))) << "written at once";
    ASSERT_TRUE(store->SetHardState({9, 2}).ok());
    ASSERT_TRUE(store->InstallSnapshot({30, 8}, "far").ok());
  }
  std::filesystem::remove(QuorumStatePath(tmp.path()));
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_EQ(store->hard_state(), (HardState{8, raft::kNoNode})) << "the snapshot's epoch";
  }
  // A quorum-state behind the log is stale: refuse rather than go back in terms.
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, Make(30, 31, 8));
    ASSERT_TRUE(store->Sync().ok());
  }
  WriteAll(QuorumStatePath(tmp.path()), [] {
    TempDir other{"raftlog"};
    auto store = OpenOk(PosixFileSystem(), other.path());
    EXPECT_TRUE(store->SetHardState({3, 1}).ok());
    return ReadAll(QuorumStatePath(other.path()));
  }());
  auto store = RaftLogStore::Open(PosixFileSystem(), tmp.path());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(store.status(), "older than the log's last term 8")) << store.status();
}

metadata::MetadataRecordBatch Batch(int i) {
  metadata::MetadataRecordBatch b;
  auto* f = b.add_records()->mutable_feature_level();
  f->set_name("test.feature." + std::to_string(i));
  f->set_feature_level(i);
  return b;
}

// What the single voter (before the quorum) left on disk, in log_format.h's layout: segment
// files of frames, snapshot files of one frame each, no quorum-state.
void WriteSegment(const std::string& dir, int64_t base, const std::vector<Entry>& entries) {
  std::filesystem::create_directories(PDir(dir));
  std::string bytes;
  for (const Entry& e : entries) bytes += logformat::EncodeFrame(e.offset, e.term, e.data);
  WriteAll(SegmentPath(dir, base), bytes);
}
void WriteSnapshotFile(const std::string& dir, SnapshotId id, const std::string& data) {
  std::filesystem::create_directories(PDir(dir));
  WriteAll(SnapshotPath(dir, id), logformat::EncodeFrame(id.end_offset, id.epoch, data));
}

TEST(RaftLogStoreTest, OpensASingleVoterDataDirUnchanged) {
  TempDir tmp{"raftlog"};
  std::vector<Entry> want;
  // Entries 0-3, a snapshot at 4 (which rolled the segment), entry 4 after it.
  for (int i = 0; i < 4; ++i) want.push_back(Entry{i, i < 2 ? 1 : 2, Batch(i).SerializeAsString()});
  WriteSegment(tmp.path(), 0, want);
  WriteSnapshotFile(tmp.path(), {4, 2}, Batch(100).SerializeAsString());
  want.push_back(Entry{4, 3, Batch(4).SerializeAsString()});
  WriteSegment(tmp.path(), 4, {want.back()});
  const std::string before = ReadAll(SegmentPath(tmp.path(), 0));
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "first open" : "reopen");
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_TRUE(store->recovery().truncation_reason.empty());
    EXPECT_TRUE(store->recovery().removed_files.empty());
    EXPECT_EQ(store->start_offset(), 0);
    EXPECT_EQ(store->end_offset(), 5);
    EXPECT_EQ(ReadLog(*store), want);
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{4, 2}));
    EXPECT_EQ(*store->ReadSnapshot(), Batch(100).SerializeAsString());
    EXPECT_EQ(store->hard_state(), (HardState{3, raft::kNoNode}));
  }
  EXPECT_EQ(ReadAll(SegmentPath(tmp.path(), 0)), before);

  // And back: what the store appends is the single voter's frames, after its own.
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, {Entry{5, 4, Batch(5).SerializeAsString()}, Entry{6, 4, ""}});
    ASSERT_TRUE(store->Sync().ok());
  }
  const std::string segment = ReadAll(SegmentPath(tmp.path(), 4));
  std::vector<std::pair<int64_t, int64_t>> frames;  // (offset, term)
  for (size_t pos = 0; pos < segment.size();) {
    logformat::Decoded d = logformat::DecodeFrame(std::string_view(segment).substr(pos));
    ASSERT_EQ(d.status, logformat::DecodeStatus::kOk) << d.why;
    frames.emplace_back(d.frame.offset, d.frame.term);
    pos += d.frame_size;
  }
  EXPECT_EQ(frames, (std::vector<std::pair<int64_t, int64_t>>{{4, 3}, {5, 4}, {6, 4}}));
}

// The single voter names a snapshot after its current term, which can be above the term of
// the snapshot's last entry. Such a snapshot is renamed to Raft's epoch once, before
// quorum-state exists, so later opens never mistake it for a conflicting log.
TEST(RaftLogStoreTest, RenamesASingleVoterSnapshotToItsLastEntrysTerm) {
  TempDir tmp{"raftlog"};
  std::vector<Entry> want;
  for (int i = 0; i < 3; ++i) want.push_back(Entry{i, 1, Batch(i).SerializeAsString()});
  for (int i = 3; i < 5; ++i) want.push_back(Entry{i, 3, Batch(i).SerializeAsString()});
  want.push_back(Entry{5, 4, Batch(5).SerializeAsString()});
  // Snapshot {3, 2} (taken in term 2) rolled a segment at 3, snapshot {5, 4} (after a restart
  // in term 4) one at 5, and retention then dropped segment 0, which only the older needed.
  WriteSnapshotFile(tmp.path(), {3, 2}, Batch(100).SerializeAsString());
  WriteSegment(tmp.path(), 3, Slice(want, 3, 5));
  WriteSnapshotFile(tmp.path(), {5, 4}, Batch(101).SerializeAsString());
  WriteSegment(tmp.path(), 5, Slice(want, 5, 6));
  ASSERT_FALSE(Exists(QuorumStatePath(tmp.path())));
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "first open" : "reopen");
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_TRUE(store->recovery().truncation_reason.empty());
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{5, 3}));
    EXPECT_EQ(*store->ReadSnapshot(), Batch(101).SerializeAsString());
    EXPECT_EQ(store->start_offset(), 3);
    EXPECT_EQ(ReadLog(*store), Slice(want, 3, 6));
    EXPECT_EQ(*store->TermAt(4), 3);
    EXPECT_EQ(store->hard_state(), (HardState{4, raft::kNoNode}));
  }
  EXPECT_TRUE(Exists(SnapshotPath(tmp.path(), {5, 3})));
  EXPECT_FALSE(Exists(SnapshotPath(tmp.path(), {5, 4})));
  // The fallback's last entry is gone (the log starts at 3), so its name stays; the log after
  // it still fits it when the newest turns out corrupt.
  EXPECT_TRUE(Exists(SnapshotPath(tmp.path(), {3, 2})));
  WriteAll(SnapshotPath(tmp.path(), {5, 3}), "garbage");
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_TRUE(store->recovery().truncation_reason.empty());
  EXPECT_EQ(store->snapshot_id(), (SnapshotId{3, 2}));
  EXPECT_EQ(ReadLog(*store), Slice(want, 3, 6));
}

// A single voter that died inside WriteSnapshot (before it rolled a segment) leaves both
// snapshots' last entries in the log: both are renamed.
TEST(RaftLogStoreTest, RenamesBothSingleVoterSnapshotsWhenTheLogHoldsTheirLastEntries) {
  TempDir tmp{"raftlog"};
  std::vector<Entry> want;
  for (int i = 0; i < 6; ++i) {
    want.push_back(Entry{i, i < 3 ? 1 : i < 5 ? 3 : 4, Batch(i).SerializeAsString()});
  }
  WriteSegment(tmp.path(), 0, want);
  WriteAll(SnapshotPath(tmp.path(), {3, 2}), logformat::EncodeFrame(3, 2, "image 3"));
  WriteAll(SnapshotPath(tmp.path(), {5, 4}), logformat::EncodeFrame(5, 4, "image 5"));
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    EXPECT_TRUE(store->recovery().truncation_reason.empty());
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{5, 3}));
    EXPECT_EQ(ReadLog(*store), want);
  }
  EXPECT_TRUE(Exists(SnapshotPath(tmp.path(), {3, 1})));
  EXPECT_FALSE(Exists(SnapshotPath(tmp.path(), {3, 2})));
  WriteAll(SnapshotPath(tmp.path(), {5, 3}), "garbage");
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_TRUE(store->recovery().truncation_reason.empty()) << store->recovery().truncation_reason;
  EXPECT_EQ(store->snapshot_id(), (SnapshotId{3, 1}));
  EXPECT_EQ(*store->ReadSnapshot(), "image 3");
  EXPECT_EQ(ReadLog(*store), want);
}

TEST(RaftLogStoreTest, UnfinishedTempFilesAreRemoved) {
  TempDir tmp{"raftlog"};
  { OpenOk(PosixFileSystem(), tmp.path()); }
  std::string snap_tmp = SnapshotPath(tmp.path(), {9, 1}) + ".tmp";
  std::string qs_tmp = QuorumStatePath(tmp.path()) + ".tmp";
  WriteAll(snap_tmp, "half a snapshot");
  WriteAll(qs_tmp, "half");
  auto store = OpenOk(PosixFileSystem(), tmp.path());
  EXPECT_FALSE(Exists(snap_tmp));
  EXPECT_FALSE(Exists(qs_tmp));
  EXPECT_EQ(store->recovery().removed_files.size(), 2u);
}

TEST(RaftLogStoreTest, GapsNoSnapshotCoversAreErrors) {
  TempDir tmp{"raftlog"};
  {
    auto store = OpenOk(PosixFileSystem(), tmp.path());
    AppendOk(*store, Make(0, 1, 1));
    ASSERT_TRUE(store->Sync().ok());
  }
  WriteAll(SegmentPath(tmp.path(), 10), logformat::EncodeFrame(10, 1, ""));
  auto gap = RaftLogStore::Open(PosixFileSystem(), tmp.path());
  ASSERT_FALSE(gap.ok());
  EXPECT_TRUE(Contains(gap.status(), "missing offsets [1, 10)")) << gap.status();

  std::filesystem::remove(SegmentPath(tmp.path(), 0));
  auto uncovered = RaftLogStore::Open(PosixFileSystem(), tmp.path());
  ASSERT_FALSE(uncovered.ok());
  EXPECT_EQ(uncovered.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(uncovered.status(), "no intact snapshot")) << uncovered.status();
}

TEST(RaftLogStoreTest, FailedFsyncIsStickyAndNamesTheFile) {
  TempDir tmp{"raftlog"};
  FaultyFileSystem fs;
  {
    auto store = OpenOk(fs, tmp.path());
    AppendOk(*store, Make(0, 3, 1));
    fs.fail_sync = true;
    Status st = store->Sync();
    ASSERT_FALSE(st.ok());
    EXPECT_TRUE(Contains(st, SegmentPath(tmp.path(), 0))) << st;
    fs.fail_sync = false;
    EXPECT_FALSE(store->Sync().ok()) << "a failed fsync is never retried";
    EXPECT_FALSE(store->Append(Make(3, 4, 1)).ok());
    EXPECT_FALSE(store->TruncateFrom(1).ok());
    EXPECT_FALSE(store->SetHardState({2, 1}).ok());
    EXPECT_FALSE(store->SaveSnapshot({2, 1}, "x").ok());
    EXPECT_FALSE(store->InstallSnapshot({9, 2}, "x").ok());
    EXPECT_EQ(store->hard_state(), (HardState{1, raft::kNoNode}));
    EXPECT_EQ(store->end_offset(), 3);
    EXPECT_EQ(ReadLog(*store), Make(0, 3, 1)) << "reads still work";
  }
  auto store = OpenOk(fs, tmp.path());
  EXPECT_EQ(store->end_offset(), 3);
  AppendOk(*store, Make(3, 4, 1));
  EXPECT_TRUE(store->Sync().ok());
}

TEST(RaftLogStoreTest, FailedAppendIsStickyAndItsTornFrameIsCutAtOpen) {
  TempDir tmp{"raftlog"};
  FaultyFileSystem fs;
  {
    auto store = OpenOk(fs, tmp.path());
    AppendOk(*store, Make(0, 2, 1));
    ASSERT_TRUE(store->Sync().ok());
    fs.fail_append = true;
    Status st = store->Append(Make(2, 3, 1));
    ASSERT_FALSE(st.ok());
    EXPECT_TRUE(Contains(st, SegmentPath(tmp.path(), 0))) << st;
    fs.fail_append = false;
    EXPECT_FALSE(store->Append(Make(2, 3, 1)).ok());
    EXPECT_EQ(store->end_offset(), 2);
  }
  auto store = OpenOk(fs, tmp.path());
  EXPECT_EQ(store->end_offset(), 2);
  EXPECT_GT(store->recovery().truncated_bytes, 0u);
  AppendOk(*store, Make(2, 3, 1));
  EXPECT_TRUE(store->Sync().ok());
}

TEST(RaftLogStoreTest, FailedSnapshotOrQuorumStateWriteIsSticky) {
  TempDir tmp{"raftlog"};
  FaultyFileSystem fs;
  {
    auto store = OpenOk(fs, tmp.path());
    AppendOk(*store, Make(0, 2, 1));
    fs.fail_write_file = true;
    Status st = store->SaveSnapshot({2, 1}, "s2");
    ASSERT_FALSE(st.ok());
    EXPECT_TRUE(Contains(st, SnapshotPath(tmp.path(), {2, 1}))) << st;
    fs.fail_write_file = false;
    EXPECT_FALSE(store->Append(Make(2, 3, 1)).ok());
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{0, 0}));
  }
  {
    auto store = OpenOk(fs, tmp.path());
    EXPECT_EQ(store->snapshot_id(), (SnapshotId{0, 0}));
    EXPECT_EQ(store->end_offset(), 2);
    fs.fail_write_file = true;
    Status st = store->SetHardState({3, 1});
    ASSERT_FALSE(st.ok());
    EXPECT_TRUE(Contains(st, QuorumStatePath(tmp.path()))) << st;
    EXPECT_EQ(store->hard_state(), (HardState{1, raft::kNoNode}));
    fs.fail_write_file = false;
    EXPECT_FALSE(store->SetHardState({3, 1}).ok());
  }
  auto store = OpenOk(fs, tmp.path());
  EXPECT_EQ(store->hard_state(), (HardState{1, raft::kNoNode}));
}

}  // namespace
}  // namespace runnel::controllerd
