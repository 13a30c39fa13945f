// Records held as file slices: the Writer's insert sink and its pread fallback must give the
// very bytes that the same records held in memory give.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <random>
#include <string>

#include "common/protocol/messages/fetch.h"
#include "common/protocol/wire.h"
#include "tests/util/temp_dir.h"

namespace runnel::protocol {
namespace {

class FileRecordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.emplace("file-records");
    std::mt19937 rng(42);
    content_.resize(4096);
    for (uint8_t& b : content_) b = static_cast<uint8_t>(rng());
    std::string path = dir_->path() + "/00000000000000000000.log";
    int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, content_.data(), content_.size()), static_cast<ssize_t>(content_.size()));
    close(fd);
    int rfd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(rfd, 0);
    file_ = std::make_shared<const FileHandle>(rfd);
  }

  void TearDown() override {
    file_.reset();
    dir_.reset();
  }

  FileSlice Slice(int64_t position, int64_t length) const {
    return FileSlice{file_, position, length};
  }
  Bytes Content(int64_t position, int64_t length) const {
    return Bytes(content_.begin() + position, content_.begin() + position + length);
  }

  // The buffer with each insert's file bytes put in at its offset (read here, independently
  // of the Writer).
  static Bytes Expand(const Bytes& bytes, const std::vector<FileInsert>& inserts) {
    Bytes out;
    size_t prev = 0;
    for (const FileInsert& ins : inserts) {
      EXPECT_GE(ins.at, prev);
      EXPECT_LE(ins.at, bytes.size());
      out.insert(out.end(), bytes.begin() + static_cast<ptrdiff_t>(prev),
                 bytes.begin() + static_cast<ptrdiff_t>(ins.at));
      size_t start = out.size();
      out.resize(start + static_cast<size_t>(ins.slice.length));
      EXPECT_EQ(pread(ins.slice.file->fd(), out.data() + start,
                      static_cast<size_t>(ins.slice.length), ins.slice.position),
                ins.slice.length);
      prev = ins.at;
    }
    out.insert(out.end(), bytes.begin() + static_cast<ptrdiff_t>(prev), bytes.end());
    return out;
  }

  // A response with: two slices back to back, one slice, plain bytes, null and empty records,
  // in two topics; with `as_files` false every record set is the same bytes in memory.
  FetchResponse MakeResponse(bool as_files) const {
    auto records = [&](std::vector<FileSlice> slices) {
      Records r;
      if (as_files) {
        r.files = std::move(slices);
      } else {
        Bytes data;
        for (const FileSlice& s : slices) {
          Bytes part = Content(s.position, s.length);
          data.insert(data.end(), part.begin(), part.end());
        }
        r.data = std::move(data);
      }
      return r;
    };
    FetchResponse resp;
    resp.session_id = 7;
    auto& t1 = resp.responses.emplace_back();
    t1.topic = "events";
    t1.topic_id.bytes[15] = 1;
    auto& p0 = t1.partitions.emplace_back();
    p0.partition_index = 0;
    p0.high_watermark = 100;
    p0.records = records({Slice(0, 1000), Slice(1000, 24)});
    auto& p1 = t1.partitions.emplace_back();
    p1.partition_index = 1;
    p1.high_watermark = 5;
    p1.records.data = Bytes{1, 2, 3};  // bytes in memory beside file slices
    auto& p2 = t1.partitions.emplace_back();
    p2.partition_index = 2;
    p2.records = records({Slice(2048, 2048)});  // up to the end of the file
    auto& t2 = resp.responses.emplace_back();
    t2.topic = "logs";
    t2.topic_id.bytes[15] = 2;
    auto& q0 = t2.partitions.emplace_back();
    q0.partition_index = 0;  // null records
    auto& q1 = t2.partitions.emplace_back();
    q1.partition_index = 1;
    q1.records.data = Bytes{};  // empty records
    auto& q2 = t2.partitions.emplace_back();
    q2.partition_index = 2;
    q2.records = records({Slice(7, 1)});  // last: nothing follows it before v12
    return resp;
  }

  std::optional<runnel::testing::TempDir> dir_;
  Bytes content_;
  std::shared_ptr<const FileHandle> file_;
};

TEST_F(FileRecordsTest, InsertsExpandToThePlainEncodingAtEveryVersion) {
  const FetchResponse plain = MakeResponse(/*as_files=*/false);
  const FetchResponse files = MakeResponse(/*as_files=*/true);
  for (int16_t v = FetchResponse::kMinVersion; v <= FetchResponse::kMaxVersion; ++v) {
    SCOPED_TRACE("version " + std::to_string(v));
    Bytes want = {9, 9, 9, 9};  // a reserved size prefix, as brokerd encodes responses
    Writer pw(want);
    plain.Encode(pw, v);
    ASSERT_TRUE(pw.status().ok());

    Bytes got = {9, 9, 9, 9};
    std::vector<FileInsert> inserts;
    Writer fw(got, &inserts);
    files.Encode(fw, v);
    ASSERT_TRUE(fw.status().ok()) << fw.status().message();
    // Three slices, none of their bytes in the buffer.
    ASSERT_EQ(inserts.size(), 4u);
    EXPECT_EQ(got.size() + 1000 + 24 + 2048 + 1, want.size());
    EXPECT_EQ(inserts[1].at, inserts[0].at);  // back to back: same offset
    EXPECT_EQ(inserts[0].slice, Slice(0, 1000));
    EXPECT_EQ(inserts[3].slice, Slice(7, 1));
    EXPECT_EQ(Expand(got, inserts), want);
    // Size() counts the file bytes, as they are on the wire.
    EXPECT_EQ(files.Size(v) + 4, want.size());

    // Decoding the expanded bytes gives the plain records back.
    Reader r(std::span<const uint8_t>(want).subspan(4));
    FetchResponse decoded;
    ASSERT_TRUE(decoded.Decode(r, v).ok());
    EXPECT_TRUE(r.empty());
    EXPECT_EQ(decoded.responses[0].partitions[0].records.data, Content(0, 1024));
    EXPECT_EQ(decoded.responses[0].partitions[2].records.data, Content(2048, 2048));
  }
}

TEST_F(FileRecordsTest, WithoutASinkTheSlicesAreReadIntoTheBuffer) {
  const FetchResponse plain = MakeResponse(/*as_files=*/false);
  const FetchResponse files = MakeResponse(/*as_files=*/true);
  const int16_t versions[] = {4, 12, FetchResponse::kMaxVersion};
  for (int16_t v : versions) {
    SCOPED_TRACE("version " + std::to_string(v));
    Bytes want;
    Writer pw(want);
    plain.Encode(pw, v);
    Bytes got;
    Writer fw(got);
    files.Encode(fw, v);
    EXPECT_TRUE(fw.status().ok()) << fw.status().message();
    EXPECT_EQ(got, want);
  }
}

TEST_F(FileRecordsTest, SetFileInsertsSwitchesToTheSink) {
  Records r;
  r.files = {Slice(10, 5)};
  Bytes out;
  Writer w(out);
  std::vector<FileInsert> inserts;
  w.set_file_inserts(&inserts);
  EXPECT_EQ(w.file_inserts(), &inserts);
  w.WriteRecords(r, /*compact=*/true, /*nullable=*/true);
  EXPECT_EQ(out, (Bytes{6}));  // compact length + 1, no bytes
  ASSERT_EQ(inserts.size(), 1u);
  EXPECT_EQ(inserts[0].at, 1u);
  w.set_file_inserts(nullptr);
  w.WriteRecords(r, /*compact=*/false, /*nullable=*/true);
  Bytes want = {6, 0, 0, 0, 5};
  Bytes part = Content(10, 5);
  want.insert(want.end(), part.begin(), part.end());
  EXPECT_EQ(out, want);
  EXPECT_EQ(inserts.size(), 1u);
}

TEST_F(FileRecordsTest, ASlicePastTheFileEndIsAnErrorWithoutASink) {
  Records r;
  r.files = {Slice(4000, 200)};  // the file has 4096 bytes
  Bytes out;
  Writer w(out);
  w.WriteRecords(r, /*compact=*/false, /*nullable=*/true);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss) << w.status().message();
  SizeCounter c;
  c.WriteRecords(r, false, true);
  EXPECT_EQ(out.size(), c.size());  // still the size Size() promised

  // A later failure does not replace the first.
  Records bad;
  bad.files = {FileSlice{nullptr, 0, 1}};
  w.WriteRecords(bad, false, true);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(FileRecordsTest, InvalidSlicesAreErrors) {
  for (const FileSlice& s :
       {FileSlice{nullptr, 0, 1}, FileSlice{file_, -1, 1}, FileSlice{file_, 0, -1}}) {
    Records r;
    r.files = {s};
    Bytes out;
    std::vector<FileInsert> inserts;
    Writer w(out, &inserts);
    w.WriteRecords(r, true, true);
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(inserts.empty());
  }
  Records big;
  big.files = {Slice(0, int64_t{1} << 30), Slice(0, int64_t{1} << 30)};  // 2 GiB
  Bytes out;
  std::vector<FileInsert> inserts;
  Writer w(out, &inserts);
  w.WriteRecords(big, false, true);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FileRecordsTest, EmptySlicesAddNoInserts) {
  Records r;
  r.files = {Slice(0, 0)};
  EXPECT_FALSE(r.IsNull());
  EXPECT_EQ(r.SizeInBytes(), 0u);
  Bytes out;
  std::vector<FileInsert> inserts;
  Writer w(out, &inserts);
  w.WriteRecords(r, /*compact=*/false, /*nullable=*/true);
  EXPECT_EQ(out, (Bytes{0, 0, 0, 0}));
  EXPECT_TRUE(inserts.empty());
}

TEST_F(FileRecordsTest, RecordsSizeNullAndEquality) {
  Records null_records;
  EXPECT_TRUE(null_records.IsNull());
  EXPECT_EQ(null_records.SizeInBytes(), 0u);

  Records bytes{Bytes(5)};
  EXPECT_FALSE(bytes.IsNull());
  EXPECT_EQ(bytes.SizeInBytes(), 5u);

  Records files;
  files.files = {Slice(0, 10), Slice(100, 32)};
  EXPECT_FALSE(files.IsNull());
  EXPECT_EQ(files.SizeInBytes(), 42u);
  files.data = Bytes(3);  // unused beside file slices
  EXPECT_EQ(files.SizeInBytes(), 42u);

  Records same;
  same.data = Bytes(3);
  same.files = {Slice(0, 10), Slice(100, 32)};
  EXPECT_EQ(files, same);
  same.files[1].length = 33;
  EXPECT_NE(files, same);
  // Another handle on the same file is another file object.
  Records other = files;
  other.files[0].file = std::make_shared<const FileHandle>(-1);
  EXPECT_NE(files, other);
}

TEST_F(FileRecordsTest, TheFileClosesWithItsLastUser) {
  int fd = open((dir_->path() + "/00000000000000000000.log").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto handle = std::make_shared<const FileHandle>(fd);
  Records r;
  r.files = {FileSlice{handle, 0, 1}};
  handle.reset();
  EXPECT_NE(fcntl(fd, F_GETFD), -1);  // the slice still holds it
  r.files.clear();
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

}  // namespace
}  // namespace runnel::protocol
