// A broker stopped by SIGTERM while work waits on its loop: a WaitForMetadata waiter (a
// CreateTopics whose topic never shows), a parked long-poll Fetch, and an append in flight on
// the append socket. The broker runs in-process, as brokerd's main runs it, against a real
// StorageService, a fake controller (whose created topics never reach the metadata) and an
// append socket that reads and never answers.
//
// Each must end with the stop rather than at its timeout (30 s), and once the Broker is gone
// every libuv handle it opened is freed (LiveUvHandles); ASan and LSan (on in tests) catch
// what was waiting being freed twice or leaked.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "brokerd/broker.h"
#include "brokerd/net/uv_handle.h"
#include "common/grpc/unix_server.h"
#include "common/protocol/header.h"
#include "common/protocol/messages.h"
#include "proto/runnel/controller.grpc.pb.h"
#include "tests/unit/brokerd/real_storage_fixture.h"
#include "tests/util/wait.h"

namespace runnel::brokerd {
namespace {

namespace ctl = runnel::controller;
using namespace std::chrono_literals;

constexpr int32_t kNodeId = 1;
constexpr int32_t kWaitMs = 30000;  // every wait's timeout: far beyond a stop's few seconds

// A controller that registers the broker, hands it one image (topic "t", one partition led
// here) and accepts CreateTopics without ever publishing the topics.
class FakeController final : public ctl::ControllerService::Service {
 public:
  grpc::Status RegisterBroker(grpc::ServerContext*, const ctl::RegisterBrokerRequest* req,
                              ctl::RegisterBrokerResponse* resp) override {
    std::lock_guard lock(mu_);
    registration_ = *req;
    resp->set_broker_epoch(1);
    resp->set_cluster_id("stop-test");
    return grpc::Status::OK;
  }

  grpc::Status BrokerHeartbeat(grpc::ServerContext*, const ctl::BrokerHeartbeatRequest*,
                               ctl::BrokerHeartbeatResponse* resp) override {
    resp->set_metadata_offset(-1);
    return grpc::Status::OK;
  }

  grpc::Status WatchMetadata(grpc::ServerContext* ctx, const ctl::WatchRequest*,
                             grpc::ServerWriter<ctl::MetadataUpdate>* writer) override {
    if (!writer->Write(Image())) return grpc::Status(grpc::StatusCode::CANCELLED, "gone");
    // No update ever follows; hold the stream until the broker or the test ends it.
    for (int i = 0; i < 6000 && !ctx->IsCancelled() && !stopping_.load(); ++i) {
      std::this_thread::sleep_for(10ms);
    }
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the fake controller is stopping");
  }

  grpc::Status CreateTopics(grpc::ServerContext*, const ctl::CreateTopicsRequest* req,
                            ctl::CreateTopicsResponse* resp) override {
    for (const auto& t : req->topics()) {
      auto* r = resp->add_topics();
      r->set_name(t.name());
      r->set_topic_id(std::string(15, '\0') + '\x09');
      r->set_num_partitions(t.num_partitions());
      r->set_replication_factor(t.replication_factor());
    }
    resp->set_metadata_offset(1);  // never published: the broker waits for it
    ++create_topics_calls_;
    return grpc::Status::OK;
  }

  void Stop() { stopping_ = true; }
  int create_topics_calls() const { return create_topics_calls_.load(); }

 private:
  ctl::MetadataUpdate Image() {
    const std::string topic_id = std::string(15, '\0') + '\x07';
    ctl::MetadataUpdate u;
    u.set_offset(0);
    u.set_is_snapshot(true);
    u.add_records()->mutable_cluster_id()->set_cluster_id("stop-test");
    auto* b = u.add_records()->mutable_register_broker();
    b->set_broker_id(kNodeId);
    b->set_broker_epoch(1);
    {
      std::lock_guard lock(mu_);
      *b->mutable_endpoints() = registration_.endpoints();
    }
    auto* t = u.add_records()->mutable_topic();
    t->set_name("t");
    t->set_topic_id(topic_id);
    auto* p = u.add_records()->mutable_partition();
    p->set_topic_id(topic_id);
    p->set_partition_id(0);
    p->add_replicas(kNodeId);
    p->add_isr(kNodeId);
    p->set_leader(kNodeId);
    return u;
  }

  std::mutex mu_;
  ctl::RegisterBrokerRequest registration_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> create_topics_calls_{0};
};

// storaged's append socket as a black hole: accepts, reads everything, answers nothing.
class SilentAppendSocket {
 public:
  void Start(const std::string& path) {
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(listen_fd_, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    ASSERT_LT(path.size(), sizeof(addr.sun_path));
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    ASSERT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(::listen(listen_fd_, 4), 0);
    thread_ = std::thread([this] { Serve(); });
  }

  void Stop() {
    stopping_ = true;
    if (thread_.joinable()) thread_.join();
    for (int fd : fds_) ::close(fd);
    fds_.clear();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
  }

  int accepted() const { return accepted_.load(); }
  size_t bytes_read() const { return bytes_read_.load(); }

 private:
  void Serve() {
    while (!stopping_.load()) {
      std::vector<pollfd> polled{{listen_fd_, POLLIN, 0}};
      for (int fd : fds_) polled.push_back({fd, POLLIN, 0});
      if (::poll(polled.data(), polled.size(), 20) <= 0) continue;
      if ((polled[0].revents & POLLIN) != 0) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          fds_.push_back(fd);
          ++accepted_;
        }
      }
      for (size_t i = 1; i < polled.size(); ++i) {
        if (polled[i].revents == 0) continue;
        char buf[64 << 10];
        ssize_t n = ::read(polled[i].fd, buf, sizeof(buf));
        if (n > 0) bytes_read_ += static_cast<size_t>(n);
      }
    }
  }

  int listen_fd_ = -1;
  std::vector<int> fds_;  // Serve's thread only, until Stop joined it
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::atomic<size_t> bytes_read_{0};
};

// As brokerd's main: a SIGTERM before Run() installs its handlers only sets the flag Start()
// watches.
std::atomic<bool> g_stop{false};
extern "C" void OnStopSignal(int) { g_stop.store(true); }

// Polls `done` every 10 ms for up to 20 s.
bool WaitFor(const std::function<bool()>& done) {
  return runnel::testing::WaitUntil(done, 20s, 10ms);
}

class BrokerStopTest : public RealStorageTest {
 protected:
  void SetUp() override {
    base_handles_ = LiveUvHandles();
    g_stop = false;
    std::signal(SIGPIPE, SIG_IGN);
    struct sigaction action {};
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, nullptr);

    StartStorage("stop", "storaged.sock");
    if (HasFatalFailure()) return;
    auto server =
        grpcutil::StartUnixServer(grpcutil::SocketPath(root_, "controllerd"), {&controller_});
    ASSERT_TRUE(server.ok()) << server.status();
    controller_server_ = std::move(*server);
    append_socket_.Start(grpcutil::SocketPath(root_, "storaged-append"));
    if (HasFatalFailure()) return;
    auto config = config::Config::FromMap({{"node.id", std::to_string(kNodeId)},
                                           {"listeners", "PLAINTEXT://127.0.0.1:0"},
                                           {"runnel.run.dir", root_}});
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = std::make_unique<config::Config>(std::move(*config));
    broker_ = std::make_unique<Broker>(*config_);
    Status st = broker_->Start(g_stop);
    ASSERT_TRUE(st.ok()) << st;
    port_ = broker_->bound_ports().at("PLAINTEXT");
    run_ = std::async(std::launch::async, [this] { return broker_->Run(); });
  }

  void TearDown() override {
    if (run_.valid()) StopBroker();
    if (broker_) {
      broker_.reset();
      EXPECT_EQ(LiveUvHandles(), base_handles_) << "libuv handles of the broker not freed";
    }
    controller_.Stop();
    if (controller_server_) {
      controller_server_->Shutdown(std::chrono::system_clock::now() + 1s);
      controller_server_->Wait();
    }
    append_socket_.Stop();
    RealStorageTest::TearDown();
  }

  // SIGTERM, as the supervisor sends it; returns how long Run() took to return.
  std::chrono::milliseconds StopBroker() {
    const auto start = std::chrono::steady_clock::now();
    ::kill(::getpid(), SIGTERM);
    if (run_.wait_for(20s) != std::future_status::ready) {
      // The loop thread still uses the broker: nothing can be torn down safely.
      ADD_FAILURE() << "the broker did not stop within 20 s of SIGTERM";
      std::abort();
    }
    EXPECT_EQ(run_.get(), 0);
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start);
  }

  int Connect() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
  }

  template <typename Req>
  static void Send(int fd, const Req& req, int16_t version, int32_t correlation_id) {
    protocol::RequestHeader header;
    header.api_key = Req::kApiKey;
    header.api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = "stop-test";
    protocol::Bytes frame(4, 0);
    protocol::Writer w(frame);
    header.Encode(w, protocol::RequestHeaderVersion(Req::kApiKey, version));
    req.Encode(w, version);
    const uint32_t size = static_cast<uint32_t>(frame.size() - 4);
    for (int i = 0; i < 4; ++i) frame[i] = static_cast<uint8_t>(size >> (24 - 8 * i));
    ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(frame.size()));
  }

  // One response frame (without its size prefix); nullopt at EOF or after 10 s.
  static std::optional<protocol::Bytes> ReadFrame(int fd) {
    auto read_exactly = [fd](uint8_t* p, size_t n) {
      for (size_t got = 0; got < n;) {
        ssize_t r = ::read(fd, p + got, n - got);
        if (r <= 0) return false;
        got += static_cast<size_t>(r);
      }
      return true;
    };
    uint8_t prefix[4];
    if (!read_exactly(prefix, 4)) return std::nullopt;
    const uint32_t size = (uint32_t{prefix[0]} << 24) | (uint32_t{prefix[1]} << 16) |
                          (uint32_t{prefix[2]} << 8) | prefix[3];
    protocol::Bytes frame(size);
    if (!read_exactly(frame.data(), size)) return std::nullopt;
    return frame;
  }

  // Decodes a response frame; its correlation id, or -1 when it does not decode.
  template <typename Resp>
  static int32_t Decode(const protocol::Bytes& frame, int16_t version, Resp* out) {
    protocol::Reader r(frame);
    protocol::ResponseHeader header;
    if (!header.Decode(r, protocol::ResponseHeaderVersion(Resp::kApiKey, version)).ok() ||
        !out->Decode(r, version).ok()) {
      return -1;
    }
    return header.correlation_id;
  }

  // Whether anything (an answer, or the close) arrives on `fd` within `wait`.
  static bool Readable(int fd, std::chrono::milliseconds wait) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(wait.count())) > 0;
  }

  static protocol::FetchRequest Fetch(int32_t max_wait_ms) {
    protocol::FetchRequest req;
    req.max_wait_ms = max_wait_ms;
    req.min_bytes = 1;
    auto& topic = req.topics.emplace_back();
    topic.topic = "t";
    auto& partition = topic.partitions.emplace_back();
    partition.partition = 0;
    partition.fetch_offset = 0;
    partition.partition_max_bytes = 1 << 20;
    return req;
  }
  static constexpr int16_t kFetchVersion = 11;

  // Waits until the append socket is connected and partition t-0 is served here (storaged
  // holds its log), with `fd` a connection the broker has accepted; the broker is then idle.
  void WaitReady(int fd) {
    ASSERT_TRUE(WaitFor([this] { return append_socket_.accepted() > 0; }))
        << "the broker never connected to the append socket";
    for (int attempt = 0; attempt < 400; ++attempt) {
      Send(fd, Fetch(0), kFetchVersion, 1000 + attempt);
      std::optional<protocol::Bytes> frame = ReadFrame(fd);
      ASSERT_TRUE(frame) << "no answer to a Fetch";
      protocol::FetchResponse resp;
      ASSERT_EQ(Decode(*frame, kFetchVersion, &resp), 1000 + attempt);
      ASSERT_EQ(resp.responses.size(), 1u);
      ASSERT_EQ(resp.responses[0].partitions.size(), 1u);
      if (resp.responses[0].partitions[0].error_code == protocol::ErrorCode::kNone) return;
      std::this_thread::sleep_for(50ms);
    }
    FAIL() << "t-0 never became fetchable";
  }

  FakeController controller_;
  std::unique_ptr<grpc::Server> controller_server_;
  SilentAppendSocket append_socket_;
  std::unique_ptr<config::Config> config_;
  std::unique_ptr<Broker> broker_;
  std::future<int> run_;
  int port_ = 0;
  int64_t base_handles_ = 0;
};

// CreateTopics answered by the controller waits for the topic to show in the metadata, which
// it never does. At SIGTERM the waiter ends as at its timeout: the client gets its answer,
// then the connection closes; the waiter and its timer are freed once.
TEST_F(BrokerStopTest, AMetadataWaiterEndsWithTheStop) {
  const int fd = Connect();
  WaitReady(fd);
  if (HasFatalFailure()) return;
  const int64_t idle = LiveUvHandles();
  protocol::CreateTopicsRequest req;
  auto& topic = req.topics.emplace_back();
  topic.name = "u";
  topic.num_partitions = 1;
  topic.replication_factor = 1;
  req.timeout_ms = kWaitMs;
  Send(fd, req, 4, 7);
  // The controller answered; the waiter's timer is the one handle more.
  ASSERT_TRUE(WaitFor(
      [&] { return controller_.create_topics_calls() == 1 && LiveUvHandles() == idle + 1; }));
  EXPECT_FALSE(Readable(fd, 200ms)) << "answered before the topic showed";

  EXPECT_LT(StopBroker(), 10s) << "the stop waited for the waiter's timeout";
  std::optional<protocol::Bytes> frame = ReadFrame(fd);
  ASSERT_TRUE(frame) << "the waiting CreateTopics was not answered at the stop";
  protocol::CreateTopicsResponse resp;
  EXPECT_EQ(Decode(*frame, 4, &resp), 7);
  ASSERT_EQ(resp.topics.size(), 1u);
  EXPECT_EQ(resp.topics[0].name, "u");
  EXPECT_FALSE(ReadFrame(fd)) << "the connection stayed open";
  ::close(fd);
}

// A Fetch at the end of an empty partition with min_bytes 1 parks for max_wait_ms. At SIGTERM
// it is answered at once (no records), then the connection closes.
TEST_F(BrokerStopTest, AParkedFetchEndsWithTheStop) {
  const int fd = Connect();
  WaitReady(fd);
  if (HasFatalFailure()) return;
  const int64_t idle = LiveUvHandles();
  Send(fd, Fetch(kWaitMs), kFetchVersion, 8);
  // Parked: its max_wait_ms timer is the one handle more.
  ASSERT_TRUE(WaitFor([&] { return LiveUvHandles() == idle + 1; }));
  EXPECT_FALSE(Readable(fd, 200ms)) << "answered before any data or max_wait_ms";

  EXPECT_LT(StopBroker(), 10s) << "the stop waited for the fetch's max_wait_ms";
  std::optional<protocol::Bytes> frame = ReadFrame(fd);
  ASSERT_TRUE(frame) << "the parked Fetch was not answered at the stop";
  protocol::FetchResponse resp;
  EXPECT_EQ(Decode(*frame, kFetchVersion, &resp), 8);
  ASSERT_EQ(resp.responses.size(), 1u);
  ASSERT_EQ(resp.responses[0].partitions.size(), 1u);
  EXPECT_EQ(resp.responses[0].partitions[0].error_code, protocol::ErrorCode::kNone);
  EXPECT_EQ(resp.responses[0].partitions[0].records.SizeInBytes(), 0u);
  EXPECT_FALSE(ReadFrame(fd)) << "the connection stayed open";
  ::close(fd);
}

// A Produce whose append went out on the append socket and is never answered. At SIGTERM the
// call is dropped unanswered (as a stopping loop drops a gRPC completion) and the connection
// closes; the call and what it holds are freed once.
TEST_F(BrokerStopTest, AnAppendInFlightIsDroppedWithTheStop) {
  const int fd = Connect();
  WaitReady(fd);
  if (HasFatalFailure()) return;
  const size_t before = append_socket_.bytes_read();
  protocol::ProduceRequest req;
  req.acks = 1;
  req.timeout_ms = kWaitMs;
  auto& topic = req.topic_data.emplace_back();
  topic.name = "t";
  auto& partition = topic.partition_data.emplace_back();
  partition.index = 0;
  const std::string batch = Batch(3, "pending");
  partition.records.data = protocol::Bytes(batch.begin(), batch.end());
  Send(fd, req, 8, 9);
  ASSERT_TRUE(WaitFor([&] { return append_socket_.bytes_read() > before; }))
      << "the append never reached the append socket";
  EXPECT_FALSE(Readable(fd, 200ms)) << "answered without storaged";

  EXPECT_LT(StopBroker(), 10s) << "the stop waited for the append's timeout";
  EXPECT_FALSE(ReadFrame(fd)) << "an unanswered append got an answer, or the connection stayed";
  ::close(fd);
}

}  // namespace
}  // namespace runnel::brokerd
