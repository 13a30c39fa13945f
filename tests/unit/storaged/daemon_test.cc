// runnel-storaged as a process: serves, stops cleanly on SIGTERM (clean-shutdown marker),
// recovers after kill -9, and keeps every appended batch across both.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "common/grpc/unix_server.h"
#include "common/protocol/uuid.h"
#include "common/record/batch.h"
#include "proto/runnel/storage.grpc.pb.h"
#include "tests/util/temp_dir.h"

extern char** environ;

namespace runnel::storaged {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class Daemon {
 public:
  // Starts the binary with its stderr appended to `log_path`.
  Daemon(const std::string& config, const std::string& log_path) {
    std::string bin = RUNNEL_STORAGED_BIN;
    std::vector<char*> argv = {bin.data(), const_cast<char*>("--config"),
                               const_cast<char*>(config.c_str()), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
    EXPECT_EQ(posix_spawn(&pid_, bin.c_str(), &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Daemon() { Kill(); }

  void Kill() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  // Sends SIGTERM and returns the exit code (-1 if it did not exit within 20 s).
  int Stop() {
    ::kill(pid_, SIGTERM);
    return Wait();
  }
  int Wait() {
    for (int i = 0; i < 200; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
};

bool WaitServing(const std::string& socket) {
  for (int i = 0; i < 200; ++i) {
    if (grpcutil::CheckServing(socket, std::chrono::milliseconds(500)).ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// Timestamped now: a batch older than segment.ms (7 days) would roll a segment per append.
std::string Batch(int count, const std::string& value) {
  record::BatchBuilder b({});
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  for (int i = 0; i < count; ++i) {
    b.Add(now + i, std::nullopt,
          record::ByteSpan(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
  }
  StatusOr<std::vector<uint8_t>> bytes = b.Build();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : std::string();
}

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string& root = root_.emplace("sd").path();
    logs_dir_ = root + "/logs";
    config_ = root + "/node.properties";
    log_path_ = root + "/storaged.stderr";
    std::ofstream(config_) << "node.id=4\nlog.dirs=" << logs_dir_ << "\nrunnel.run.dir=" << root
                           << "/run\nrunnel.log.level=info\n";
    socket_ = grpcutil::SocketPath(root + "/run", "storaged");
    topic_id_ = protocol::Uuid::Random().ToString();
  }
  void TearDown() override { root_.reset(); }

  std::unique_ptr<storage::StorageService::Stub> Stub() {
    return storage::StorageService::NewStub(grpcutil::UnixChannel(socket_));
  }

  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ctx;
  }

  void CreateAndAppend(int batches) {
    auto stub = Stub();
    storage::PartitionsRequest create;
    storage::PartitionSpec* spec = create.add_partitions();
    spec->set_topic("durable");
    spec->set_partition(0);
    spec->set_topic_id(topic_id_);
    storage::PartitionsResponse created;
    ASSERT_TRUE(stub->CreatePartitions(Ctx().get(), create, &created).ok());
    ASSERT_EQ(created.partitions(0).error_code(), 0) << created.partitions(0).error_message();
    for (int i = 0; i < batches; ++i) {
      storage::AppendRequest req;
      storage::AppendPartition* p = req.add_partitions();
      p->set_topic("durable");
      p->set_partition(0);
      p->set_records(Batch(3, "value-" + std::to_string(i)));
      storage::AppendResponse resp;
      ASSERT_TRUE(stub->Append(Ctx().get(), req, &resp).ok());
      ASSERT_EQ(resp.partitions(0).error_code(), 0) << resp.partitions(0).error_message();
      ASSERT_EQ(resp.partitions(0).base_offset(), 3 * i);
    }
  }

  // Every byte of the partition, from offset 0.
  storage::ReadPartitionResult ReadAllRecords() {
    auto stub = Stub();
    storage::ReadRequest req;
    req.set_want_bytes(true);
    storage::ReadPartition* p = req.add_partitions();
    p->set_topic("durable");
    p->set_partition(0);
    p->set_offset(0);
    p->set_max_bytes(1 << 20);
    p->set_min_one_batch(true);
    storage::ReadResponse resp;
    grpc::Status st = stub->Read(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.partitions_size() == 1 ? resp.partitions(0) : storage::ReadPartitionResult();
  }

  std::optional<runnel::testing::TempDir> root_;
  std::string logs_dir_, config_, log_path_, socket_, topic_id_;
};

TEST_F(DaemonTest, SigtermShutsDownCleanlyAndDataSurvivesARestart) {
  std::string before;
  {
    Daemon d(config_, log_path_);
    ASSERT_TRUE(WaitServing(socket_)) << ReadAll(log_path_);
    CreateAndAppend(5);
    storage::ReadPartitionResult r = ReadAllRecords();
    ASSERT_EQ(r.error_code(), 0);
    ASSERT_EQ(r.log_end_offset(), 15);
    before = r.records();
    // An open watch stream must not hold up the shutdown.
    grpc::ClientContext watch_ctx;
    auto stub = Stub();
    auto reader = stub->WatchPartitions(&watch_ctx, {});
    storage::PartitionChange change;
    ASSERT_TRUE(reader->Read(&change));
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(d.Stop(), 0) << ReadAll(log_path_);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    EXPECT_FALSE(reader->Read(&change));
  }
  EXPECT_TRUE(fs::exists(logs_dir_ + "/.kafka_cleanshutdown")) << ReadAll(log_path_);
  EXPECT_FALSE(fs::exists(socket_)) << "socket removed at exit";
  {
    Daemon d(config_, log_path_);
    ASSERT_TRUE(WaitServing(socket_)) << ReadAll(log_path_);
    storage::ReadPartitionResult r = ReadAllRecords();
    EXPECT_EQ(r.error_code(), 0);
    EXPECT_EQ(r.log_end_offset(), 15);
    EXPECT_EQ(r.records(), before);
    EXPECT_FALSE(fs::exists(logs_dir_ + "/.kafka_cleanshutdown")) << "removed while running";
    EXPECT_EQ(d.Stop(), 0);
  }
  std::string log = ReadAll(log_path_);
  EXPECT_NE(log.find("loaded 1 partition(s): 1 segment(s), 0 recovered"), std::string::npos) << log;
}

TEST_F(DaemonTest, KillNineThenRecoveryTruncatesATornTailAndKeepsTheData) {
  std::string before;
  {
    Daemon d(config_, log_path_);
    ASSERT_TRUE(WaitServing(socket_)) << ReadAll(log_path_);
    CreateAndAppend(4);
    before = ReadAllRecords().records();
    ASSERT_FALSE(before.empty());
    d.Kill();
  }
  EXPECT_FALSE(fs::exists(logs_dir_ + "/.kafka_cleanshutdown"));
  // A torn write: half a batch header after the last whole batch.
  std::string segment = logs_dir_ + "/durable-0/00000000000000000000.log";
  ASSERT_TRUE(fs::exists(segment));
  ASSERT_EQ(fs::file_size(segment), before.size());
  std::ofstream(segment, std::ios::binary | std::ios::app) << std::string(30, '\x7f');
  {
    Daemon d(config_, log_path_);
    ASSERT_TRUE(WaitServing(socket_)) << ReadAll(log_path_);
    storage::ReadPartitionResult r = ReadAllRecords();
    EXPECT_EQ(r.error_code(), 0);
    EXPECT_EQ(r.log_end_offset(), 12);
    EXPECT_EQ(r.records(), before) << "every acknowledged batch, byte for byte";
    EXPECT_EQ(fs::file_size(segment), before.size()) << "the torn tail is cut";
    // Appends go on after the recovered end.
    auto stub = Stub();
    storage::AppendRequest req;
    storage::AppendPartition* p = req.add_partitions();
    p->set_topic("durable");
    p->set_partition(0);
    p->set_records(Batch(1, "after"));
    storage::AppendResponse resp;
    ASSERT_TRUE(stub->Append(Ctx().get(), req, &resp).ok());
    EXPECT_EQ(resp.partitions(0).base_offset(), 12);
    EXPECT_EQ(d.Stop(), 0);
  }
  std::string log = ReadAll(log_path_);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      log, m,
      std::regex(R"(loaded 1 partition\(s\): \d+ segment\(s\), (\d+) recovered, (\d+) byte)")))
      << log;
  EXPECT_GE(std::stoi(m[1]), 1) << log;
  EXPECT_EQ(std::stoi(m[2]), 30) << log;
  EXPECT_NE(log.find("recovery: "), std::string::npos) << "what was cut is logged\n" << log;
}

TEST_F(DaemonTest, BadLogConfigStopsStartupWithTheKey) {
  std::ofstream(config_, std::ios::app) << "log.segment.bytes=10\n";
  Daemon d(config_, log_path_);
  EXPECT_EQ(d.Wait(), 2);
  EXPECT_NE(ReadAll(log_path_).find("log.segment.bytes=10"), std::string::npos)
      << ReadAll(log_path_);
}

}  // namespace
}  // namespace runnel::storaged
