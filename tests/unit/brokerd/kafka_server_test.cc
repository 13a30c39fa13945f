#include "brokerd/net/kafka_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>

namespace runnel::brokerd {
namespace {

// Answers each request with its correlation id, holding every batch of `batch` requests
// and answering them in reverse order, so the server has to restore request order.
class ReversingDispatcher : public RequestDispatcher {
 public:
  explicit ReversingDispatcher(size_t batch) : batch_(batch) {}
  void Dispatch(std::unique_ptr<RequestContext> request, Respond respond) override {
    Response r;  // starts with the reserved size prefix
    int32_t corr = request->header.correlation_id;
    for (int shift : {24, 16, 8, 0}) r.bytes.push_back(static_cast<uint8_t>(corr >> shift));
    held_.emplace_back(std::move(r), std::move(respond));
    if (held_.size() < batch_) return;
    for (auto it = held_.rbegin(); it != held_.rend(); ++it) it->second(std::move(it->first));
    held_.clear();
  }

 private:
  size_t batch_;
  std::vector<std::pair<Response, Respond>> held_;
};

class KafkaServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerLimits limits, size_t batch = 1) {
    dispatcher_ = std::make_unique<ReversingDispatcher>(batch);
    server_ = std::make_unique<KafkaServer>(loop_, *dispatcher_, limits);
    ASSERT_TRUE(server_->Listen({{"PLAINTEXT", "127.0.0.1", 0}}).ok());
    port_ = server_->bound_ports().at("PLAINTEXT");
    thread_ = std::thread([this] { loop_.Run(); });
  }

  void TearDown() override {
    if (thread_.joinable()) {
      loop_.Stop([this] { server_->Close(); });
      thread_.join();
    }
  }

  int Connect() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    return fd;
  }

  static std::vector<uint8_t> Frame(int32_t corr) {
    // Metadata v1 header, client id "t", then a null topic array.
    std::vector<uint8_t> body = {0, 3, 0, 1};
    for (int shift : {24, 16, 8, 0}) body.push_back(static_cast<uint8_t>(corr >> shift));
    body.insert(body.end(), {0, 1, 't', 0xff, 0xff, 0xff, 0xff});
    std::vector<uint8_t> frame = {0, 0, 0, static_cast<uint8_t>(body.size())};
    frame.insert(frame.end(), body.begin(), body.end());
    return frame;
  }

  // MSG_NOSIGNAL: writing to a connection the server closed must not kill the test.
  static bool Send(int fd, const std::vector<uint8_t>& bytes) {
    return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  }

  // Reads one response frame and returns the correlation id in it, -1 on close/timeout.
  static int32_t ReadCorrelation(int fd) {
    uint8_t buf[8];
    size_t got = 0;
    while (got < sizeof(buf)) {
      ssize_t n = read(fd, buf + got, sizeof(buf) - got);
      if (n <= 0) return -1;
      got += static_cast<size_t>(n);
    }
    EXPECT_EQ(buf[3], 4);  // size prefix: 4 bytes of body
    return static_cast<int32_t>((uint32_t{buf[4]} << 24) | (uint32_t{buf[5]} << 16) |
                                (uint32_t{buf[6]} << 8) | buf[7]);
  }

  static bool ClosedByPeer(int fd) {
    uint8_t b;
    return read(fd, &b, 1) <= 0;
  }

  EventLoop loop_;
  std::unique_ptr<ReversingDispatcher> dispatcher_;
  std::unique_ptr<KafkaServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(KafkaServerTest, PipelinedResponsesComeInRequestOrder) {
  StartServer(ServerLimits{}, /*batch=*/5);
  int fd = Connect();
  std::vector<uint8_t> all;
  for (int32_t corr = 10; corr < 20; ++corr) {
    auto f = Frame(corr);
    all.insert(all.end(), f.begin(), f.end());
  }
  Send(fd, all);
  for (int32_t corr = 10; corr < 20; ++corr) EXPECT_EQ(ReadCorrelation(fd), corr);
  close(fd);
}

TEST_F(KafkaServerTest, FrameSplitAcrossWritesIsReassembled) {
  StartServer(ServerLimits{});
  int fd = Connect();
  auto f = Frame(7);
  for (uint8_t b : f) {
    Send(fd, {b});
    usleep(1000);
  }
  EXPECT_EQ(ReadCorrelation(fd), 7);
  close(fd);
}

TEST_F(KafkaServerTest, OversizedFrameClosesOnlyThatConnection) {
  ServerLimits limits;
  limits.max_request_bytes = 1024;
  StartServer(limits);
  int good = Connect();
  int bad = Connect();
  Send(bad, {0, 0, 0x08, 0x00, 1, 2, 3});  // 2048 > 1024
  EXPECT_TRUE(ClosedByPeer(bad));
  Send(good, Frame(1));
  EXPECT_EQ(ReadCorrelation(good), 1);
  close(bad);
  close(good);
}

TEST_F(KafkaServerTest, NegativeSizeClosesTheConnection) {
  StartServer(ServerLimits{});
  int fd = Connect();
  Send(fd, {0x80, 0, 0, 0});
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

TEST_F(KafkaServerTest, MalformedHeaderClosesTheConnection) {
  StartServer(ServerLimits{});
  int fd = Connect();
  Send(fd, {0, 0, 0, 3, 0, 3, 0});  // 3 bytes cannot hold a request header
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

TEST_F(KafkaServerTest, PerIpConnectionLimit) {
  ServerLimits limits;
  limits.max_connections_per_ip = 2;
  StartServer(limits);
  int a = Connect();
  int b = Connect();
  Send(a, Frame(1));
  EXPECT_EQ(ReadCorrelation(a), 1);
  Send(b, Frame(2));
  EXPECT_EQ(ReadCorrelation(b), 2);
  int c = Connect();
  EXPECT_TRUE(ClosedByPeer(c));
  close(c);
  close(a);
  // A slot frees up once a connection goes.
  bool accepted = false;
  for (int attempt = 0; attempt < 50 && !accepted; ++attempt) {
    int d = Connect();
    Send(d, Frame(3));
    accepted = ReadCorrelation(d) == 3;
    close(d);
    if (!accepted) usleep(20000);
  }
  EXPECT_TRUE(accepted);
  close(b);
}

}  // namespace
}  // namespace runnel::brokerd
