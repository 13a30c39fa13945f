// StorageService over a real LogManager, through a real stub on a Unix socket.
#include "storaged/storage_service.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <thread>

#include "common/grpc/unix_server.h"
#include "common/protocol/uuid.h"
#include "common/record/batch.h"
#include "tests/unit/storaged/log/file_faults.h"
#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

namespace fs = std::filesystem;
using protocol::ErrorCode;
using protocol::ToWire;

constexpr auto kDeadline = std::chrono::seconds(10);

int Code(ErrorCode c) { return ToWire(c); }

// `count` records with keys "k<i>" and values of `value_size` bytes, timestamps ts, ts+1, ...
std::string Batch(int count, int64_t ts = 1000, size_t value_size = 10) {
  record::BatchBuilder b({});
  std::vector<std::string> keys;
  std::string value(value_size, 'v');
  for (int i = 0; i < count; ++i) keys.push_back("k" + std::to_string(i));
  for (int i = 0; i < count; ++i) {
    b.Add(ts + i,
          record::ByteSpan(reinterpret_cast<const uint8_t*>(keys[i].data()), keys[i].size()),
          record::ByteSpan(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
  }
  StatusOr<std::vector<uint8_t>> bytes = b.Build();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : std::string();
}

std::string ReadFileRange(const std::string& path, int64_t position, int32_t length) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return "";
  std::string out(length, '\0');
  ssize_t n = ::pread(fd, out.data(), length, position);
  ::close(fd);
  out.resize(n < 0 ? 0 : n);
  return out;
}

class StorageServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_.emplace("ss");
    auto dirs = LogDirs::Open({root_->path() + "/logs"}, 3);
    ASSERT_TRUE(dirs.ok()) << dirs.status();
    dirs_ = std::make_unique<LogDirs>(std::move(*dirs));
    LogManagerOptions options;
    options.dirs = {dirs_->dirs()[0].path};
    options.cleaner_enable = false;
    auto logs = LogManager::Open(options);
    ASSERT_TRUE(logs.ok()) << logs.status();
    logs_ = std::move(*logs);
    service_ = std::make_unique<StorageServiceImpl>(*dirs_, *logs_);
    socket_ = root_->path() + "/s.sock";
    auto server = grpcutil::StartUnixServer(socket_, {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = storage::StorageService::NewStub(grpcutil::UnixChannel(socket_));
    topic_id_ = protocol::Uuid::Random().ToString();
  }

  void TearDown() override {
    if (service_) service_->Shutdown();
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_->Wait();
    }
    server_.reset();
    service_.reset();
    if (logs_) {
      EXPECT_TRUE(logs_->Shutdown().ok());
    }
    logs_.reset();
    dirs_.reset();
    root_.reset();
  }

  std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + kDeadline);
    return ctx;
  }

  storage::PartitionsResponse Create(const std::string& topic, int32_t partition,
                                     const std::string& topic_id,
                                     std::map<std::string, std::string> configs = {}) {
    storage::PartitionsRequest req;
    storage::PartitionSpec* spec = req.add_partitions();
    spec->set_topic(topic);
    spec->set_partition(partition);
    spec->set_topic_id(topic_id);
    for (const auto& [k, v] : configs) (*spec->mutable_configs())[k] = v;
    storage::PartitionsResponse resp;
    grpc::Status st = stub_->CreatePartitions(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.partitions_size(), 1);
    return resp;
  }

  int CreateCode(const std::string& topic, int32_t partition, const std::string& topic_id,
                 std::map<std::string, std::string> configs = {}) {
    storage::PartitionsResponse r = Create(topic, partition, topic_id, std::move(configs));
    return r.partitions_size() == 1 ? r.partitions(0).error_code() : -999;
  }

  storage::AppendPartitionResult Append(const std::string& topic, int32_t partition,
                                        const std::string& records, int32_t epoch = 0) {
    storage::AppendRequest req;
    storage::AppendPartition* p = req.add_partitions();
    p->set_topic(topic);
    p->set_partition(partition);
    p->set_records(records);
    p->set_leader_epoch(epoch);
    storage::AppendResponse resp;
    grpc::Status st = stub_->Append(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.partitions_size(), 1);
    return resp.partitions_size() == 1 ? resp.partitions(0) : storage::AppendPartitionResult();
  }

  // One DescribeProducers call for `partitions`; its answer, one result per partition.
  std::vector<storage::DescribeProducersPartitionResult> DescribeProducers(
      const std::vector<std::pair<std::string, int32_t>>& partitions) {
    storage::DescribeProducersRequest req;
    for (const auto& [topic, partition] : partitions) {
      storage::DescribeProducersPartition* p = req.add_partitions();
      p->set_topic(topic);
      p->set_partition(partition);
    }
    storage::DescribeProducersResponse resp;
    grpc::Status st = stub_->DescribeProducers(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.partitions_size(), req.partitions_size());
    return {resp.partitions().begin(), resp.partitions().end()};
  }

  storage::ReadPartitionResult Read(const std::string& topic, int32_t partition, int64_t offset,
                                    bool want_bytes, int32_t max_bytes = 1 << 20,
                                    std::optional<int64_t> max_offset = std::nullopt) {
    storage::ReadRequest req;
    req.set_want_bytes(want_bytes);
    storage::ReadPartition* p = req.add_partitions();
    p->set_topic(topic);
    p->set_partition(partition);
    p->set_offset(offset);
    p->set_max_bytes(max_bytes);
    p->set_min_one_batch(true);
    if (max_offset) p->set_max_offset(*max_offset);
    storage::ReadResponse resp;
    grpc::Status st = stub_->Read(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.partitions_size(), 1);
    return resp.partitions_size() == 1 ? resp.partitions(0) : storage::ReadPartitionResult();
  }

  storage::ListOffsetsPartitionResult ListOffset(const std::string& topic, int32_t partition,
                                                 int64_t timestamp) {
    storage::ListOffsetsRequest req;
    storage::ListOffsetsPartition* p = req.add_partitions();
    p->set_topic(topic);
    p->set_partition(partition);
    p->set_timestamp(timestamp);
    storage::ListOffsetsResponse resp;
    grpc::Status st = stub_->ListOffsets(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.partitions_size(), 1);
    return resp.partitions_size() == 1 ? resp.partitions(0) : storage::ListOffsetsPartitionResult();
  }

  storage::DeleteRecordsPartitionResult DeleteRecords(const std::string& topic, int32_t partition,
                                                      int64_t offset) {
    storage::DeleteRecordsRequest req;
    storage::DeleteRecordsPartition* p = req.add_partitions();
    p->set_topic(topic);
    p->set_partition(partition);
    p->set_offset(offset);
    storage::DeleteRecordsResponse resp;
    grpc::Status st = stub_->DeleteRecords(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.partitions_size(), 1);
    return resp.partitions_size() == 1 ? resp.partitions(0)
                                       : storage::DeleteRecordsPartitionResult();
  }

  storage::PartitionResult Partitions(bool remove, const std::string& topic, int32_t partition,
                                      const std::string& topic_id,
                                      std::map<std::string, std::string> configs = {}) {
    storage::PartitionsRequest req;
    storage::PartitionSpec* spec = req.add_partitions();
    spec->set_topic(topic);
    spec->set_partition(partition);
    spec->set_topic_id(topic_id);
    for (const auto& [k, v] : configs) (*spec->mutable_configs())[k] = v;
    storage::PartitionsResponse resp;
    grpc::Status st = remove ? stub_->DeletePartitions(Ctx().get(), req, &resp)
                             : stub_->UpdatePartitionConfigs(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(resp.partitions_size(), 1);
    return resp.partitions_size() == 1 ? resp.partitions(0) : storage::PartitionResult();
  }

  std::vector<storage::PartitionState> States(std::vector<std::string> topics = {}) {
    storage::GetPartitionStatesRequest req;
    for (const std::string& t : topics) req.add_topics(t);
    storage::GetPartitionStatesResponse resp;
    grpc::Status st = stub_->GetPartitionStates(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return {resp.partitions().begin(), resp.partitions().end()};
  }

  std::optional<runnel::testing::TempDir> root_;
  std::string socket_;
  std::string topic_id_;
  std::unique_ptr<LogDirs> dirs_;
  std::unique_ptr<LogManager> logs_;
  std::unique_ptr<StorageServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<storage::StorageService::Stub> stub_;
};

TEST(KafkaErrorOfTest, OneMappingPinned) {
  EXPECT_EQ(KafkaErrorOf(absl::OkStatus()), ErrorCode::kNone);
  EXPECT_EQ(KafkaErrorOf(absl::NotFoundError("x")), ErrorCode::kUnknownTopicOrPartition);
  EXPECT_EQ(KafkaErrorOf(absl::OutOfRangeError("x")), ErrorCode::kOffsetOutOfRange);
  EXPECT_EQ(KafkaErrorOf(absl::InvalidArgumentError("x")), ErrorCode::kInvalidRequest);
  EXPECT_EQ(KafkaErrorOf(absl::FailedPreconditionError("x")), ErrorCode::kInconsistentTopicId);
  EXPECT_EQ(KafkaErrorOf(absl::InternalError("EIO")), ErrorCode::kKafkaStorageError);
  EXPECT_EQ(KafkaErrorOf(absl::ResourceExhaustedError("ENOSPC")), ErrorCode::kKafkaStorageError);
  EXPECT_EQ(KafkaErrorOf(absl::DataLossError("crc")), ErrorCode::kKafkaStorageError);
}

// A log's state after an append (or any change) that leaves it holding [start, end).
LogState At(int64_t start, int64_t end) {
  LogState s;
  s.log_start_offset = start;
  s.log_end_offset = end;
  s.high_watermark = end;
  return s;
}

TEST(PartitionWatcherTest, CoalescesPerPartitionAndDeliversInBatches) {
  PartitionWatcher w({});
  bool closed = false;
  // A slow reader: many changes to few partitions cost one entry each.
  for (int i = 0; i < 10000; ++i) w.Mark({"t", i % 3}, At(0, i));
  EXPECT_EQ(w.pending(), 3u);
  std::vector<TopicPartition> got = w.Take(std::chrono::milliseconds(0), 100, &closed);
  EXPECT_FALSE(closed);
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(w.pending(), 0u);
  // Many partitions: delivered at most `max` at a time, nothing lost.
  for (int i = 0; i < 250; ++i) w.Mark({"t", i}, At(0, 1));
  std::set<TopicPartition> seen;
  for (int round = 0; round < 10 && seen.size() < 250; ++round) {
    got = w.Take(std::chrono::milliseconds(0), 100, &closed);
    EXPECT_LE(got.size(), 100u);
    seen.insert(got.begin(), got.end());
  }
  EXPECT_EQ(seen.size(), 250u);
  EXPECT_TRUE(w.Take(std::chrono::milliseconds(10), 100, &closed).empty()) << "timeout";
  w.Close();
  EXPECT_TRUE(w.Take(std::chrono::seconds(5), 100, &closed).empty());
  EXPECT_TRUE(closed);
}

TEST(PartitionWatcherTest, FiltersTopicsAndWakesTheReader) {
  PartitionWatcher w({"a"});
  w.Mark({"b", 0}, At(0, 1));
  EXPECT_EQ(w.pending(), 0u);
  std::thread marker([&] {
    // A sleep: the reader is then waiting in Take (nothing tells when it is), so the Mark
    // has to wake it.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    w.Mark({"a", 1}, At(0, 1));
  });
  bool closed = false;
  auto start = std::chrono::steady_clock::now();
  std::vector<TopicPartition> got = w.Take(std::chrono::seconds(10), 10, &closed);
  marker.join();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], (TopicPartition{"a", 1}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(StorageServiceTest, DescribeLogDirs) {
  storage::DescribeLogDirsResponse resp;
  ASSERT_TRUE(stub_->DescribeLogDirs(Ctx().get(), {}, &resp).ok());
  EXPECT_EQ(resp.node_id(), 3);
  ASSERT_EQ(resp.dirs_size(), 1);
  EXPECT_EQ(resp.dirs(0).path(), dirs_->dirs()[0].path);
  EXPECT_GT(resp.dirs(0).total_bytes(), 0);
  EXPECT_EQ(resp.dirs(0).error(), "");
}

TEST_F(StorageServiceTest, CreatePartitionsAndTheirErrors) {
  EXPECT_EQ(CreateCode("orders", 0, topic_id_), 0);
  EXPECT_TRUE(fs::exists(dirs_->dirs()[0].path + "/orders-0/partition.metadata"));
  EXPECT_EQ(CreateCode("orders", 0, topic_id_), 0) << "creating again is a no-op";
  EXPECT_EQ(CreateCode("orders", 0, protocol::Uuid::Random().ToString()),
            Code(ErrorCode::kInconsistentTopicId));
  EXPECT_EQ(CreateCode("bad/name", 0, topic_id_), Code(ErrorCode::kInvalidTopicException));
  EXPECT_EQ(CreateCode("orders", -1, topic_id_), Code(ErrorCode::kInvalidPartitions));
  EXPECT_EQ(CreateCode("orders", 1, "not-an-id"), Code(ErrorCode::kInvalidRequest));
  EXPECT_EQ(CreateCode("orders", 1, ""), Code(ErrorCode::kInvalidRequest));
  storage::PartitionsResponse bad = Create("orders", 2, topic_id_, {{"retention.ms", "soon"}});
  ASSERT_EQ(bad.partitions_size(), 1);
  EXPECT_EQ(bad.partitions(0).error_code(), Code(ErrorCode::kInvalidConfig));
  EXPECT_NE(bad.partitions(0).error_message().find("retention.ms"), std::string::npos);
  EXPECT_EQ(logs_->GetLog({"orders", 2}), nullptr);

  // Many partitions in one call: each answered in order.
  storage::PartitionsRequest req;
  for (int p = 0; p < 3; ++p) {
    storage::PartitionSpec* s = req.add_partitions();
    s->set_topic("many");
    s->set_partition(p);
    s->set_topic_id(topic_id_);
  }
  req.mutable_partitions(1)->set_topic_id("x");
  storage::PartitionsResponse resp;
  ASSERT_TRUE(stub_->CreatePartitions(Ctx().get(), req, &resp).ok());
  ASSERT_EQ(resp.partitions_size(), 3);
  EXPECT_EQ(resp.partitions(0).error_code(), 0);
  EXPECT_EQ(resp.partitions(1).error_code(), Code(ErrorCode::kInvalidRequest));
  EXPECT_EQ(resp.partitions(1).partition(), 1);
  EXPECT_EQ(resp.partitions(2).error_code(), 0);
}

TEST(PartitionWatcherTest, OnlyAKnownLogsEndMovingOnIsRoutine) {
  PartitionWatcher w({});
  bool closed = false;
  auto news_then_take = [&](const TopicPartition& tp, const LogState& state) {
    w.Mark(tp, state);
    const bool news = w.news();
    w.Take(std::chrono::milliseconds(0), 100, &closed);
    return news;
  };
  EXPECT_TRUE(news_then_take({"t", 0}, At(0, 0))) << "a log not seen before";
  EXPECT_FALSE(news_then_take({"t", 0}, At(0, 5))) << "appends";
  EXPECT_FALSE(news_then_take({"t", 0}, At(0, 5))) << "a flush: nothing moved";
  EXPECT_TRUE(news_then_take({"t", 0}, At(3, 5))) << "the start moved (retention, DeleteRecords)";
  EXPECT_TRUE(news_then_take({"t", 0}, At(3, 4))) << "the end moved back (a truncation)";
  EXPECT_TRUE(news_then_take({"t", 0}, At(-1, -1))) << "deleted";
  EXPECT_TRUE(news_then_take({"t", 0}, At(0, 0))) << "created again";
  EXPECT_FALSE(news_then_take({"t", 0}, At(0, 1)));
  // News stays pending with routine changes until taken, and Take ends it.
  w.Mark({"t", 0}, At(0, 2));
  w.Mark({"u", 0}, At(0, 0));
  w.Mark({"t", 0}, At(0, 3));
  EXPECT_TRUE(w.news());
  EXPECT_EQ(w.Take(std::chrono::milliseconds(0), 1, &closed).size(), 1u);
  EXPECT_TRUE(w.news()) << "not all taken yet";
  EXPECT_EQ(w.Take(std::chrono::milliseconds(0), 1, &closed).size(), 1u);
  EXPECT_FALSE(w.news());
}

TEST(PartitionWatcherTest, HoldWaitsForItsRoutineTimeUnlessNewsComes) {
  using Clock = PartitionWatcher::Clock;
  PartitionWatcher w({});
  bool closed = false;
  w.Mark({"t", 0}, At(0, 0));
  w.Take(std::chrono::milliseconds(0), 100, &closed);
  // Routine changes collect until the routine time.
  std::thread marker([&] {
    // A sleep, here and below: the change comes while Hold waits.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    w.Mark({"t", 0}, At(0, 1));
  });
  auto start = Clock::now();
  EXPECT_TRUE(w.Hold(start, start + std::chrono::milliseconds(100)));
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(95));
  marker.join();
  EXPECT_EQ(w.pending(), 1u);
  // News ends the wait at its own time, long before the routine time.
  std::thread news([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    w.Mark({"u", 0}, At(0, 0));
  });
  start = Clock::now();
  EXPECT_TRUE(w.Hold(start + std::chrono::milliseconds(20), start + std::chrono::seconds(30)));
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(19));
  EXPECT_LT(waited, std::chrono::seconds(10));
  news.join();
  EXPECT_EQ(w.pending(), 2u);
  // Close ends it at once, with nothing said.
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    w.Close();
  });
  start = Clock::now();
  EXPECT_FALSE(w.Hold(start + std::chrono::seconds(30), start + std::chrono::seconds(30)));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  closer.join();
}

TEST_F(StorageServiceTest, AppendAssignsOffsetsAndReportsErrors) {
  ASSERT_EQ(CreateCode("t", 0, topic_id_), 0);
  storage::AppendPartitionResult r = Append("t", 0, Batch(3));
  EXPECT_EQ(r.error_code(), 0) << r.error_message();
  EXPECT_EQ(r.base_offset(), 0);
  EXPECT_EQ(r.last_offset(), 2);
  EXPECT_EQ(r.log_start_offset(), 0);
  EXPECT_EQ(r.log_append_time(), -1);
  EXPECT_EQ(r.high_watermark(), 3);
  EXPECT_EQ(r.topic_id(), topic_id_);
  // Two batches in one append.
  r = Append("t", 0, Batch(2) + Batch(4));
  EXPECT_EQ(r.error_code(), 0) << r.error_message();
  EXPECT_EQ(r.base_offset(), 3);
  EXPECT_EQ(r.last_offset(), 8);
  EXPECT_EQ(r.high_watermark(), 9);

  EXPECT_EQ(Append("nope", 0, Batch(1)).error_code(), Code(ErrorCode::kUnknownTopicOrPartition));

  std::string corrupt = Batch(2);
  corrupt[corrupt.size() - 1] ^= 0x5a;  // inside the CRC's span
  r = Append("t", 0, Batch(1) + corrupt);
  EXPECT_EQ(r.error_code(), Code(ErrorCode::kCorruptMessage));
  EXPECT_EQ(r.batch_index(), 1);
  EXPECT_EQ(r.base_offset(), -1);
  EXPECT_EQ(r.high_watermark(), -1);
  EXPECT_NE(r.error_message(), "");

  // Nothing of the failed append was kept.
  EXPECT_EQ(Append("t", 0, Batch(1)).base_offset(), 9);
}

TEST_F(StorageServiceTest, AFullDiskIsARetriableStorageErrorAndAFailedFsyncTakesTheLogOffline) {
  ASSERT_EQ(CreateCode("t", 0, topic_id_), 0);
  ASSERT_EQ(CreateCode("t", 1, topic_id_, {{"flush.messages", "1"}}), 0);
  ASSERT_EQ(Append("t", 0, Batch(3)).error_code(), 0);
  ASSERT_EQ(Append("t", 1, Batch(3)).error_code(), 0);
  {
    testing::FaultInjector faults;
    faults.Fail(FileOp::kWrite, "/t-0/", ENOSPC);
    storage::AppendPartitionResult full = Append("t", 0, Batch(2));
    EXPECT_EQ(full.error_code(), Code(ErrorCode::kKafkaStorageError));
    EXPECT_NE(full.error_message().find("No space left on device"), std::string::npos)
        << full.error_message();
    faults.Clear();
    EXPECT_EQ(Append("t", 0, Batch(2)).base_offset(), 3) << "room again: the append goes on";

    faults.Fail(FileOp::kSync, "/t-1/", EIO);
    EXPECT_EQ(Append("t", 1, Batch(2)).error_code(), Code(ErrorCode::kKafkaStorageError));
  }
  logs_->TakeFailedLogsOffline();
  // The offline partition answers the storage error on its data path; the other serves.
  EXPECT_EQ(Append("t", 1, Batch(2)).error_code(), Code(ErrorCode::kKafkaStorageError));
  EXPECT_EQ(Read("t", 1, 0, true).error_code(), Code(ErrorCode::kKafkaStorageError));
  EXPECT_EQ(ListOffset("t", 1, -1).error_code(), Code(ErrorCode::kKafkaStorageError));
  EXPECT_EQ(DescribeProducers({{"t", 1}})[0].error_code(), Code(ErrorCode::kKafkaStorageError));
  EXPECT_EQ(CreateCode("t", 1, topic_id_), Code(ErrorCode::kKafkaStorageError));
  EXPECT_EQ(Partitions(/*remove=*/false, "t", 1, topic_id_).error_code(),
            Code(ErrorCode::kUnknownTopicOrPartition));
  EXPECT_EQ(Append("t", 0, Batch(1)).base_offset(), 5);
}

TEST_F(StorageServiceTest, AppendHonoursLogAppendTime) {
  ASSERT_EQ(CreateCode("lat", 0, topic_id_, {{"message.timestamp.type", "LogAppendTime"}}), 0);
  storage::AppendPartitionResult r = Append("lat", 0, Batch(1, /*ts=*/5));
  ASSERT_EQ(r.error_code(), 0) << r.error_message();
  EXPECT_GT(r.log_append_time(), 1600000000000);
  storage::ReadPartitionResult read = Read("lat", 0, 0, true);
  auto view = record::BatchView::Parse(record::ByteSpan(
      reinterpret_cast<const uint8_t*>(read.records().data()), read.records().size()));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->timestamp_type(), record::TimestampType::kLogAppendTime);
  EXPECT_EQ(view->max_timestamp(), r.log_append_time());
  EXPECT_TRUE(view->CrcValid());
}

TEST_F(StorageServiceTest, ReadReturnsRangesAndBytes) {
  ASSERT_EQ(CreateCode("t", 0, topic_id_), 0);
  std::string first = Batch(3), second = Batch(2);
  ASSERT_EQ(Append("t", 0, first, 7).error_code(), 0);
  ASSERT_EQ(Append("t", 0, second, 7).error_code(), 0);

  storage::ReadPartitionResult r = Read("t", 0, 0, false);
  EXPECT_EQ(r.error_code(), 0);
  EXPECT_EQ(r.log_start_offset(), 0);
  EXPECT_EQ(r.log_end_offset(), 5);
  EXPECT_EQ(r.last_stable_offset(), r.high_watermark());
  EXPECT_TRUE(r.records().empty()) << "bytes only when asked";
  ASSERT_GE(r.ranges_size(), 1);
  std::string from_files;
  for (const storage::FileRange& range : r.ranges()) {
    from_files += ReadFileRange(range.path(), range.position(), range.length());
  }
  ASSERT_EQ(from_files.size(), first.size() + second.size());

  storage::ReadPartitionResult with_bytes = Read("t", 0, 0, true);
  EXPECT_EQ(with_bytes.error_code(), 0);
  EXPECT_EQ(with_bytes.records(), from_files);
  // The stored batches are the appended ones with their offsets and leader epoch set.
  auto view = record::BatchView::Parse(record::ByteSpan(
      reinterpret_cast<const uint8_t*>(with_bytes.records().data()) + first.size(), second.size()));
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->base_offset(), 3);
  EXPECT_EQ(view->partition_leader_epoch(), 7);
  EXPECT_TRUE(view->CrcValid());
  EXPECT_EQ(with_bytes.records().substr(first.size() + 17), second.substr(17))
      << "bytes after the header fields storaged edits are the producer's";

  // From an offset inside the second batch: the whole second batch.
  storage::ReadPartitionResult mid = Read("t", 0, 4, true);
  EXPECT_EQ(mid.records().size(), second.size());
  // max_offset bounds what is returned.
  storage::ReadPartitionResult bounded = Read("t", 0, 0, true, 1 << 20, 3);
  EXPECT_EQ(bounded.records().size(), first.size());
  // Errors.
  EXPECT_EQ(Read("t", 0, 99, false).error_code(), Code(ErrorCode::kOffsetOutOfRange));
  EXPECT_EQ(Read("t", 9, 0, false).error_code(), Code(ErrorCode::kUnknownTopicOrPartition));
}

TEST_F(StorageServiceTest, ReadSpendsATotalBudgetInOrder) {
  ASSERT_EQ(CreateCode("a", 0, topic_id_), 0);
  ASSERT_EQ(CreateCode("a", 1, topic_id_), 0);
  std::string batch = Batch(5, 1000, 200);
  ASSERT_EQ(Append("a", 0, batch).error_code(), 0);
  ASSERT_EQ(Append("a", 1, batch).error_code(), 0);
  storage::ReadRequest req;
  req.set_want_bytes(true);
  req.set_max_total_bytes(10);  // smaller than one batch
  for (int p = 0; p < 2; ++p) {
    storage::ReadPartition* rp = req.add_partitions();
    rp->set_topic("a");
    rp->set_partition(p);
    rp->set_offset(0);
    rp->set_max_bytes(1 << 20);
    rp->set_min_one_batch(true);
  }
  storage::ReadResponse resp;
  ASSERT_TRUE(stub_->Read(Ctx().get(), req, &resp).ok());
  ASSERT_EQ(resp.partitions_size(), 2);
  EXPECT_EQ(resp.partitions(0).records().size(), batch.size()) << "the first one progresses";
  EXPECT_EQ(resp.partitions(1).records().size(), 0u) << "the budget is spent";
  EXPECT_EQ(resp.partitions(1).error_code(), 0);
  EXPECT_EQ(resp.partitions(1).log_end_offset(), 5);

  req.set_max_total_bytes(-1);
  grpc::Status st = stub_->Read(Ctx().get(), req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "a bad call shape";
}

TEST_F(StorageServiceTest, ListOffsets) {
  ASSERT_EQ(CreateCode("t", 0, topic_id_), 0);
  ASSERT_EQ(Append("t", 0, Batch(2, 1000), 4).error_code(), 0);  // offsets 0-1, ts 1000-1001
  ASSERT_EQ(Append("t", 0, Batch(2, 5000), 4).error_code(), 0);  // offsets 2-3, ts 5000-5001
  EXPECT_EQ(ListOffset("t", 0, kEarliestTimestamp).offset(), 0);
  EXPECT_EQ(ListOffset("t", 0, kLatestTimestamp).offset(), 4);
  storage::ListOffsetsPartitionResult max = ListOffset("t", 0, kMaxTimestamp);
  EXPECT_EQ(max.timestamp(), 5001);
  EXPECT_EQ(max.offset(), 3);
  storage::ListOffsetsPartitionResult by_time = ListOffset("t", 0, 3000);
  EXPECT_EQ(by_time.error_code(), 0);
  EXPECT_EQ(by_time.offset(), 2);
  EXPECT_EQ(by_time.leader_epoch(), 4);
  for (int64_t tiered : {kLatestTieredTimestamp, kEarliestPendingUploadTimestamp}) {
    storage::ListOffsetsPartitionResult none = ListOffset("t", 0, tiered);
    EXPECT_EQ(none.error_code(), 0) << tiered;
    EXPECT_EQ(none.offset(), -1) << tiered;
    EXPECT_EQ(none.timestamp(), -1) << tiered;
    EXPECT_EQ(none.leader_epoch(), -1) << tiered;
  }
  EXPECT_EQ(ListOffset("t", 0, -7).error_code(), Code(ErrorCode::kInvalidRequest));
  EXPECT_EQ(ListOffset("x", 0, kLatestTimestamp).error_code(),
            Code(ErrorCode::kUnknownTopicOrPartition));
}

TEST_F(StorageServiceTest, DeleteRecordsMovesTheLogStart) {
  ASSERT_EQ(CreateCode("t", 0, topic_id_), 0);
  ASSERT_EQ(Append("t", 0, Batch(3)).error_code(), 0);
  ASSERT_EQ(Append("t", 0, Batch(3)).error_code(), 0);
  storage::DeleteRecordsPartitionResult r = DeleteRecords("t", 0, 3);
  EXPECT_EQ(r.error_code(), 0) << r.error_message();
  EXPECT_EQ(r.low_watermark(), 3);
  EXPECT_EQ(Read("t", 0, 0, false).error_code(), Code(ErrorCode::kOffsetOutOfRange));
  EXPECT_EQ(Read("t", 0, 3, false).log_start_offset(), 3);
  EXPECT_EQ(ListOffset("t", 0, kEarliestTimestamp).offset(), 3);
  EXPECT_EQ(DeleteRecords("t", 0, 100).error_code(), Code(ErrorCode::kOffsetOutOfRange));
  EXPECT_EQ(DeleteRecords("t", 0, 100).low_watermark(), -1);
  EXPECT_EQ(DeleteRecords("u", 0, 1).error_code(), Code(ErrorCode::kUnknownTopicOrPartition));
}

TEST_F(StorageServiceTest, OffsetsForLeaderEpoch) {
  ASSERT_EQ(CreateCode("t", 0, topic_id_), 0);
  ASSERT_EQ(CreateCode("t", 1, topic_id_), 0);
  ASSERT_EQ(Append("t", 0, Batch(3), 2).error_code(), 0);  // epoch 2: offsets 0-2
  ASSERT_EQ(Append("t", 0, Batch(4), 7).error_code(), 0);  // epoch 7: offsets 3-6
  storage::OffsetsForLeaderEpochRequest req;
  auto add = [&req](const std::string& topic, int32_t partition, int32_t epoch) {
    storage::OffsetsForLeaderEpochPartition* p = req.add_partitions();
    p->set_topic(topic);
    p->set_partition(partition);
    p->set_leader_epoch(epoch);
  };
  add("t", 0, 7);  // the latest: the log end
  add("t", 0, 5);  // between: epoch 2 ends where 7 starts
  add("t", 0, 9);  // above the latest: undefined
  add("t", 1, 0);  // an empty log knows no epoch
  add("x", 0, 1);  // no such partition
  storage::OffsetsForLeaderEpochResponse resp;
  grpc::Status st = stub_->OffsetsForLeaderEpoch(Ctx().get(), req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.partitions_size(), 5);
  struct Want {
    int error;
    int32_t epoch;
    int64_t end;
  };
  const Want want[] = {
      {0, 7, 7},
      {0, 2, 3},
      {0, -1, -1},
      {0, -1, -1},
      {Code(ErrorCode::kUnknownTopicOrPartition), -1, -1},
  };
  for (int i = 0; i < 5; ++i) {
    const storage::OffsetsForLeaderEpochPartitionResult& r = resp.partitions(i);
    EXPECT_EQ(r.topic(), req.partitions(i).topic()) << i;
    EXPECT_EQ(r.partition(), req.partitions(i).partition()) << i;
    EXPECT_EQ(r.error_code(), want[i].error) << i;
    EXPECT_EQ(r.leader_epoch(), want[i].epoch) << i;
    EXPECT_EQ(r.end_offset(), want[i].end) << i;
  }
}

TEST_F(StorageServiceTest, DescribeProducersListsEachPartitionsProducersInOneCall) {
  ASSERT_EQ(CreateCode("t", 0, topic_id_), 0);
  ASSERT_EQ(CreateCode("t", 1, topic_id_), 0);
  ASSERT_EQ(Append("t", 0, Batch(2)).error_code(), 0);  // no producer id: not listed
  // Producer 42, epoch 3: sequences 0-2 at offsets 2-4, then a transaction of producer 43
  // from offset 5.
  auto producer_batch = [](int64_t pid, int16_t epoch, int32_t seq, int count, bool txn) {
    record::BatchBuilder::Options o;
    o.producer_id = pid;
    o.producer_epoch = epoch;
    o.base_sequence = seq;
    o.transactional = txn;
    record::BatchBuilder b(o);
    const std::string v = "v";
    for (int i = 0; i < count; ++i) {
      b.Add(2000 + i, std::nullopt,
            record::ByteSpan(reinterpret_cast<const uint8_t*>(v.data()), v.size()));
    }
    StatusOr<std::vector<uint8_t>> bytes = b.Build();
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : std::string();
  };
  ASSERT_EQ(Append("t", 0, producer_batch(42, 3, 0, 3, false)).error_code(), 0);
  ASSERT_EQ(Append("t", 0, producer_batch(43, 0, 0, 2, true)).error_code(), 0);

  std::vector<storage::DescribeProducersPartitionResult> r =
      DescribeProducers({{"t", 0}, {"x", 0}, {"t", 1}});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].topic(), "t");
  EXPECT_EQ(r[0].error_code(), 0);
  ASSERT_EQ(r[0].producers_size(), 2);
  const storage::ProducerDescription& idem = r[0].producers(0);
  EXPECT_EQ(idem.producer_id(), 42);
  EXPECT_EQ(idem.producer_epoch(), 3);
  EXPECT_EQ(idem.last_sequence(), 2);
  EXPECT_EQ(idem.last_timestamp(), 2002);
  EXPECT_EQ(idem.coordinator_epoch(), -1);
  EXPECT_EQ(idem.current_txn_start_offset(), -1);
  const storage::ProducerDescription& txn = r[0].producers(1);
  EXPECT_EQ(txn.producer_id(), 43);
  EXPECT_EQ(txn.producer_epoch(), 0);
  EXPECT_EQ(txn.last_sequence(), 1);
  EXPECT_EQ(txn.current_txn_start_offset(), 5);
  EXPECT_EQ(r[1].topic(), "x");
  EXPECT_EQ(r[1].error_code(), Code(ErrorCode::kUnknownTopicOrPartition));
  EXPECT_EQ(r[1].producers_size(), 0);
  EXPECT_EQ(r[2].partition(), 1);
  EXPECT_EQ(r[2].error_code(), 0);
  EXPECT_EQ(r[2].producers_size(), 0);
}

TEST_F(StorageServiceTest, UpdateConfigsTakeEffect) {
  ASSERT_EQ(CreateCode("t", 0, topic_id_), 0);
  std::string big = Batch(1, 1000, 500);
  ASSERT_EQ(Append("t", 0, big).error_code(), 0);
  EXPECT_EQ(Partitions(false, "t", 0, topic_id_, {{"max.message.bytes", "100"}}).error_code(), 0);
  EXPECT_EQ(Append("t", 0, big).error_code(), Code(ErrorCode::kMessageTooLarge));
  EXPECT_EQ(Partitions(false, "t", 0, "", {}).error_code(), 0) << "back to the defaults";
  EXPECT_EQ(Append("t", 0, big).error_code(), 0);

  storage::PartitionResult bad = Partitions(false, "t", 0, topic_id_, {{"segment.bytes", "1"}});
  EXPECT_EQ(bad.error_code(), Code(ErrorCode::kInvalidConfig));
  EXPECT_NE(bad.error_message().find("segment.bytes"), std::string::npos);
  EXPECT_EQ(Partitions(false, "t", 1, topic_id_).error_code(),
            Code(ErrorCode::kUnknownTopicOrPartition));
  EXPECT_EQ(Partitions(false, "t", 0, protocol::Uuid::Random().ToString()).error_code(),
            Code(ErrorCode::kInconsistentTopicId));
}

TEST_F(StorageServiceTest, GetPartitionStatesAndDelete) {
  ASSERT_EQ(CreateCode("a", 0, topic_id_), 0);
  ASSERT_EQ(CreateCode("a", 1, topic_id_), 0);
  std::string other_id = protocol::Uuid::Random().ToString();
  ASSERT_EQ(CreateCode("b", 0, other_id), 0);
  std::string batch = Batch(4);
  ASSERT_EQ(Append("a", 1, batch).error_code(), 0);

  std::vector<storage::PartitionState> all = States();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[1].topic(), "a");
  EXPECT_EQ(all[1].partition(), 1);
  EXPECT_EQ(all[1].topic_id(), topic_id_);
  EXPECT_EQ(all[1].log_end_offset(), 4);
  EXPECT_EQ(all[1].log_start_offset(), 0);
  EXPECT_EQ(all[1].size_bytes(), static_cast<int64_t>(batch.size()));
  EXPECT_EQ(all[1].segments(), 1);
  EXPECT_TRUE(fs::is_directory(all[1].dir()));
  EXPECT_EQ(States({"b"}).size(), 1u);
  EXPECT_EQ(States({"zzz"}).size(), 0u);

  EXPECT_EQ(Partitions(true, "a", 1, other_id).error_code(), Code(ErrorCode::kInconsistentTopicId));
  std::string dir = all[1].dir();
  EXPECT_EQ(Partitions(true, "a", 1, topic_id_).error_code(), 0);
  EXPECT_FALSE(fs::exists(dir)) << "renamed for deletion at once";
  EXPECT_EQ(States({"a"}).size(), 1u);
  EXPECT_EQ(Partitions(true, "a", 1, "").error_code(), Code(ErrorCode::kUnknownTopicOrPartition));
  EXPECT_EQ(Append("a", 1, batch).error_code(), Code(ErrorCode::kUnknownTopicOrPartition));
  EXPECT_EQ(Partitions(true, "b", 0, "").error_code(), 0) << "no topic id: no check";
}

TEST_F(StorageServiceTest, WatchStreamsStatesThenChanges) {
  ASSERT_EQ(CreateCode("w", 0, topic_id_), 0);
  ASSERT_EQ(CreateCode("other", 0, topic_id_), 0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  storage::WatchPartitionsRequest req;
  req.add_topics("w");
  auto reader = stub_->WatchPartitions(&ctx, req);
  storage::PartitionChange change;
  ASSERT_TRUE(reader->Read(&change));
  ASSERT_EQ(change.partitions_size(), 1) << "the filter applies to the first message too";
  EXPECT_EQ(change.partitions(0).topic(), "w");
  EXPECT_EQ(change.partitions(0).log_end_offset(), 0);

  ASSERT_EQ(Append("other", 0, Batch(1)).error_code(), 0);  // filtered out
  ASSERT_EQ(Append("w", 0, Batch(2)).error_code(), 0);
  ASSERT_TRUE(reader->Read(&change));
  ASSERT_EQ(change.partitions_size(), 1);
  EXPECT_EQ(change.partitions(0).topic(), "w");
  EXPECT_EQ(change.partitions(0).log_end_offset(), 2);

  // Many appends while the reader is not reading: it catches up to the latest state, and
  // never gets more messages than changes.
  for (int i = 0; i < 50; ++i) ASSERT_EQ(Append("w", 0, Batch(1)).error_code(), 0);
  int messages = 0;
  int64_t end = 0;
  while (end < 52 && messages < 60 && reader->Read(&change)) {
    ++messages;
    for (const storage::PartitionState& s : change.partitions()) end = s.log_end_offset();
  }
  EXPECT_EQ(end, 52);
  EXPECT_LE(messages, 50);

  // A new partition of the topic, then its deletion. (Reads skip any message about
  // partition 0 alone, which a background flush may also report.)
  auto next_about_partition_1 = [&]() -> std::optional<storage::PartitionState> {
    for (int i = 0; i < 10 && reader->Read(&change); ++i) {
      for (const storage::PartitionState& s : change.partitions()) {
        if (s.partition() == 1) return s;
      }
    }
    return std::nullopt;
  };
  ASSERT_EQ(CreateCode("w", 1, topic_id_), 0);
  std::optional<storage::PartitionState> created = next_about_partition_1();
  ASSERT_TRUE(created.has_value());
  EXPECT_FALSE(created->deleted());
  EXPECT_EQ(created->topic_id(), topic_id_);
  ASSERT_EQ(Partitions(true, "w", 1, topic_id_).error_code(), 0);
  std::optional<storage::PartitionState> deleted = next_about_partition_1();
  ASSERT_TRUE(deleted.has_value());
  EXPECT_TRUE(deleted->deleted());

  // Shutdown ends the stream promptly.
  auto start = std::chrono::steady_clock::now();
  service_->Shutdown();
  EXPECT_FALSE(reader->Read(&change));
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));

  // And no new watch starts after it.
  grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + kDeadline);
  auto again = stub_->WatchPartitions(&ctx2, req);
  EXPECT_FALSE(again->Read(&change));
  EXPECT_EQ(again->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

// Appends a millisecond or two apart reach a watcher that reads at once in messages about
// kRoutineSpacing (50 ms) apart, each with the partition's latest state, not one message per
// append.
TEST_F(StorageServiceTest, WatchSpacesItsMessagesUnderSteadyAppends) {
  ASSERT_EQ(CreateCode("w", 0, topic_id_), 0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub_->WatchPartitions(&ctx, {});
  storage::PartitionChange change;
  ASSERT_TRUE(reader->Read(&change));
  constexpr int kAppends = 100;
  const auto start = std::chrono::steady_clock::now();
  std::thread appender([&] {
    for (int i = 0; i < kAppends; ++i) {
      EXPECT_EQ(Append("w", 0, Batch(1)).error_code(), 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // steady appends
    }
  });
  int messages = 0;
  int64_t end = 0;
  while (end < kAppends && messages < 2 * kAppends && reader->Read(&change)) {
    ++messages;
    for (const storage::PartitionState& s : change.partitions()) end = s.log_end_offset();
  }
  appender.join();
  EXPECT_EQ(end, kAppends);
  // The first append is news (the watch had not seen the log change yet); then one message
  // per 50 ms at most (45 leaves room for the clock's rounding).
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_LE(messages, 2 + elapsed / std::chrono::milliseconds(45))
      << "over " << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
      << " ms: not spaced";
  ctx.TryCancel();
}

TEST_F(StorageServiceTest, CancelledWatchEndsAndAppendsGoOn) {
  ASSERT_EQ(CreateCode("w", 0, topic_id_), 0);
  {
    grpc::ClientContext ctx;
    auto reader = stub_->WatchPartitions(&ctx, {});
    storage::PartitionChange change;
    ASSERT_TRUE(reader->Read(&change));
    ctx.TryCancel();
  }
  // The server side notices within its poll interval; appends keep working throughout.
  for (int i = 0; i < 20; ++i) ASSERT_EQ(Append("w", 0, Batch(1)).error_code(), 0);
  storage::PartitionChange change;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kDeadline);
  auto reader = stub_->WatchPartitions(&ctx, {});
  ASSERT_TRUE(reader->Read(&change));
  ASSERT_EQ(change.partitions_size(), 1);
  EXPECT_EQ(change.partitions(0).log_end_offset(), 20);
  ctx.TryCancel();
}

}  // namespace
}  // namespace runnel::storaged
