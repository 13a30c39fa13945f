#include "brokerd/net/kafka_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <random>
#include <thread>

#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace runnel::brokerd {
namespace {

using namespace std::chrono_literals;
using runnel::testing::WaitUntil;

void AppendInt32(std::vector<uint8_t>* out, int32_t v) {
  for (int shift : {24, 16, 8, 0}) out->push_back(static_cast<uint8_t>(v >> shift));
}

// A response that is just the correlation id.
Response CorrelationResponse(int32_t corr) {
  Response r;  // starts with the reserved size prefix
  AppendInt32(&r.bytes, corr);
  return r;
}

// Answers each request with what `make` gives for its correlation id (by default the id
// alone), holding every batch of `batch` requests and answering them in reverse order, so
// the server has to restore request order.
class ReversingDispatcher : public RequestDispatcher {
 public:
  using Make = std::function<Response(int32_t correlation_id)>;
  ReversingDispatcher(size_t batch, Make make) : batch_(batch), make_(std::move(make)) {}
  void Dispatch(std::unique_ptr<RequestContext> request, Respond respond) override {
    ++dispatched;
    frames.emplace_back(request->bytes().begin(), request->bytes().end());
    placed.push_back(request->placed);
    int32_t corr = request->header.correlation_id;
    held_.emplace_back(make_ ? make_(corr) : CorrelationResponse(corr), std::move(respond));
    if (held_.size() < batch_) return;
    for (auto it = held_.rbegin(); it != held_.rend(); ++it) it->second(std::move(it->first));
    held_.clear();
  }

  std::atomic<int> dispatched{0};
  // Every frame dispatched (loop thread; read by the test after the answer arrived).
  std::vector<std::vector<uint8_t>> frames;
  std::vector<std::shared_ptr<PlacedFrame>> placed;  // where each was read, if placed

 private:
  size_t batch_;
  Make make_;
  std::vector<std::pair<Response, Respond>> held_;
};

class KafkaServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerLimits limits, size_t batch = 1, ReversingDispatcher::Make make = {},
                   FramePlacer placer = nullptr) {
    // As brokerd's main does: sendfile to a client that went away must not kill the test.
    std::signal(SIGPIPE, SIG_IGN);
    dispatcher_ = std::make_unique<ReversingDispatcher>(batch, std::move(make));
    server_ = std::make_unique<KafkaServer>(loop_, *dispatcher_, limits, std::move(placer));
    ASSERT_TRUE(server_->Listen({{"PLAINTEXT", "127.0.0.1", 0}}).ok());
    port_ = server_->bound_ports().at("PLAINTEXT");
    thread_ = std::thread([this] { loop_.Run(); });
  }

  void TearDown() override {
    if (thread_.joinable()) {
      loop_.Stop([this] { server_->Close(); });
      thread_.join();
    }
    file_.reset();
    dir_.reset();
  }

  // A small receive buffer (set before connect, so the window stays small) makes the
  // server's socket buffer fill, so its writes block (EAGAIN) until the client reads.
  int Connect(int receive_buffer = 0) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (receive_buffer > 0) {
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    }
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
    return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
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

  // The server's end of the client connection `fd`: the socket in this process whose peer is
  // fd's local address; -1 until the server has accepted it. Lets the test look at what the
  // server did with the connection (read what was sent, filled its send buffer) instead of
  // sleeping for it. Only for a wait, while the server keeps the connection open.
  static int ServerEndOf(int fd) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return -1;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      const std::string name = entry.path().filename().string();
      int other = -1;
      if (std::from_chars(name.data(), name.data() + name.size(), other).ec != std::errc() ||
          other == fd) {
        continue;
      }
      sockaddr_in peer{};
      socklen_t peer_len = sizeof(peer);
      if (getpeername(other, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
      if (peer_len == sizeof(peer) && peer.sin_family == AF_INET &&
          peer.sin_port == local.sin_port && peer.sin_addr.s_addr == local.sin_addr.s_addr) {
        return other;
      }
    }
    return -1;
  }

  // Waits (bounded) until the server has accepted `fd` and read everything sent on it so far
  // (its end's receive queue is empty), so what is sent next reaches it in a later read.
  static bool WaitServerReadAll(int fd) {
    return WaitUntil(
        [fd] {
          const int server = ServerEndOf(fd);
          int queued = 0;
          return server >= 0 && ioctl(server, FIONREAD, &queued) == 0 && queued == 0;
        },
        5s, 1ms);
  }

  // Waits (bounded) until the server's writes on `fd` would block: its end is not writable,
  // its send buffer full. With the client not reading, it stays so: the server's sendfile
  // met EAGAIN and waits for writability.
  static bool WaitServerBlocked(int fd) {
    return WaitUntil(
        [fd] {
          const int server = ServerEndOf(fd);
          if (server < 0) return false;
          pollfd p{server, POLLOUT, 0};
          return poll(&p, 1, 0) == 0;  // no event: not writable
        },
        5s, 1ms);
  }

  // Creates the segment-like file the file responses send from: `size` random bytes.
  void MakeFile(size_t size) {
    dir_.emplace("kafka-server");
    path_ = dir_->path() + "/00000000000000000000.log";
    std::mt19937 rng(7);
    content_.resize(size);
    for (uint8_t& b : content_) b = static_cast<uint8_t>(rng());
    int fd = open(path_.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, content_.data(), content_.size()), static_cast<ssize_t>(content_.size()));
    close(fd);
    int rfd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(rfd, 0);
    file_ = std::make_shared<const protocol::FileHandle>(rfd);
  }

  // A response of the correlation id, then each slice of the file, a few bytes before every
  // other one (so some slices are back to back), then a trailer.
  Response FileResponse(int32_t corr, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
    Response r = CorrelationResponse(corr);
    for (size_t i = 0; i < ranges.size(); ++i) {
      if (i % 2 == 0) r.bytes.insert(r.bytes.end(), {'s', static_cast<uint8_t>(i), '>'});
      r.inserts.push_back(
          protocol::FileInsert{r.bytes.size(), {file_, ranges[i].first, ranges[i].second}});
    }
    r.bytes.insert(r.bytes.end(), {'e', 'n', 'd'});
    return r;
  }

  // The frame a client must receive for `r`: size prefix, then bytes with the file contents
  // in place (taken from content_, not from the file).
  std::vector<uint8_t> ExpectedFrame(const Response& r) const {
    std::vector<uint8_t> out;
    size_t prev = 0;
    for (const protocol::FileInsert& ins : r.inserts) {
      out.insert(out.end(), r.bytes.begin() + static_cast<ptrdiff_t>(prev),
                 r.bytes.begin() + static_cast<ptrdiff_t>(ins.at));
      // Past the end of the file (a test of truncation): zeros, never compared.
      size_t start = out.size();
      out.resize(start + static_cast<size_t>(ins.slice.length));
      size_t position = static_cast<size_t>(ins.slice.position);
      if (position < content_.size()) {
        size_t n = std::min(static_cast<size_t>(ins.slice.length), content_.size() - position);
        std::memcpy(out.data() + start, content_.data() + position, n);
      }
      prev = ins.at;
    }
    out.insert(out.end(), r.bytes.begin() + static_cast<ptrdiff_t>(prev), r.bytes.end());
    uint32_t size = static_cast<uint32_t>(out.size() - kSizePrefixBytes);
    for (size_t i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(size >> (24 - 8 * i));
    return out;
  }

  // Reads up to `n` bytes (fewer on close or timeout), `chunk` at a time, pausing `pause_us`
  // between reads to play a slow client (a sleep: the slowness is the point, nothing is
  // waited for).
  static std::vector<uint8_t> ReadBytes(int fd, size_t n, size_t chunk = 1 << 20,
                                        useconds_t pause_us = 0) {
    std::vector<uint8_t> out(n);
    size_t got = 0;
    while (got < n) {
      ssize_t r = read(fd, out.data() + got, std::min(chunk, n - got));
      if (r <= 0) break;
      got += static_cast<size_t>(r);
      if (pause_us > 0) usleep(pause_us);
    }
    out.resize(got);
    return out;
  }

  static void SendFrames(int fd, int32_t first, int32_t count) {
    std::vector<uint8_t> all;
    for (int32_t corr = first; corr < first + count; ++corr) {
      auto f = Frame(corr);
      all.insert(all.end(), f.begin(), f.end());
    }
    ASSERT_TRUE(Send(fd, all));
  }

  std::optional<runnel::testing::TempDir> dir_;
  std::string path_;
  std::vector<uint8_t> content_;
  std::shared_ptr<const protocol::FileHandle> file_;

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

// More requests than the in-flight limit arriving in one read, all answered at once while
// they are parsed: reading must resume once they are written, or the connection hangs.
TEST_F(KafkaServerTest, ManyRequestsInOneReadAnsweredAtOnceKeepTheConnectionReading) {
  ServerLimits limits;
  limits.max_in_flight_per_connection = 8;
  StartServer(limits, /*batch=*/1);
  int fd = Connect();
  SendFrames(fd, 1, 40);
  for (int32_t corr = 1; corr <= 40; ++corr) ASSERT_EQ(ReadCorrelation(fd), corr);
  // The connection still reads: a later request is answered.
  SendFrames(fd, 41, 1);
  EXPECT_EQ(ReadCorrelation(fd), 41);
  close(fd);
}

TEST_F(KafkaServerTest, FrameSplitAcrossWritesIsReassembled) {
  StartServer(ServerLimits{});
  int fd = Connect();
  auto f = Frame(7);
  for (uint8_t b : f) {
    Send(fd, {b});
    // The server reads each byte on its own.
    ASSERT_TRUE(WaitServerReadAll(fd)) << "the server did not read the byte sent";
  }
  EXPECT_EQ(ReadCorrelation(fd), 7);
  close(fd);
}

// A frame much larger than the server's read buffer, arriving in pieces and followed in the
// same write by a small one, reaches the dispatcher whole and byte for byte.
TEST_F(KafkaServerTest, LargeFrameReadInPiecesArrivesIntact) {
  StartServer(ServerLimits{});
  int fd = Connect();
  std::vector<uint8_t> big = Frame(9);
  for (size_t i = 0; i < (300u << 10); ++i) big.push_back(static_cast<uint8_t>(i * 31 + 7));
  const uint32_t size = static_cast<uint32_t>(big.size() - 4);
  for (int k = 0; k < 4; ++k) big[k] = static_cast<uint8_t>(size >> (24 - 8 * k));
  std::vector<uint8_t> stream = big;
  std::vector<uint8_t> small = Frame(10);
  stream.insert(stream.end(), small.begin(), small.end());
  for (size_t pos = 0; pos < stream.size(); pos += 10000) {
    size_t end = std::min(stream.size(), pos + 10000);
    ASSERT_TRUE(Send(fd, std::vector<uint8_t>(stream.begin() + pos, stream.begin() + end)));
    // Now and then the server catches up, so the frames arrive over several reads.
    if (pos % 100000 == 0) {
      ASSERT_TRUE(WaitServerReadAll(fd)) << "the server did not read what was sent";
    }
  }
  EXPECT_EQ(ReadCorrelation(fd), 9);
  EXPECT_EQ(ReadCorrelation(fd), 10);
  ASSERT_EQ(dispatcher_->frames.size(), 2u);
  EXPECT_TRUE(dispatcher_->frames[0] == std::vector<uint8_t>(big.begin() + 4, big.end()));
  EXPECT_TRUE(dispatcher_->frames[1] == std::vector<uint8_t>(small.begin() + 4, small.end()));
  close(fd);
}

// A frame of memory the test owns, as the placer gives.
class TestPlacedFrame : public PlacedFrame {
 public:
  explicit TestPlacedFrame(size_t size) : bytes_(size) {}
  uint8_t* data() override { return bytes_.data(); }
  size_t size() const override { return bytes_.size(); }

 private:
  std::vector<uint8_t> bytes_;
};

// The placer is asked about each large frame with its api key and size; a frame it places
// is read into its memory, and one it declines (or gives the wrong size for) into the
// server's own.
TEST_F(KafkaServerTest, LargeFramesAreReadWhereThePlacerSays) {
  std::vector<std::pair<int16_t, size_t>> asked;  // loop thread, read after the answers
  std::shared_ptr<PlacedFrame> given;
  int calls = 0;
  StartServer(ServerLimits{}, 1, {}, [&](int16_t api_key, size_t size) {
    asked.emplace_back(api_key, size);
    ++calls;
    if (calls == 1) return given = std::make_shared<TestPlacedFrame>(size);
    if (calls == 2) return std::shared_ptr<PlacedFrame>();
    return std::shared_ptr<PlacedFrame>(std::make_shared<TestPlacedFrame>(size - 1));
  });
  int fd = Connect();
  std::vector<std::vector<uint8_t>> bigs;
  for (int32_t corr : {21, 22, 23}) {
    std::vector<uint8_t> big = Frame(corr);
    for (size_t i = 0; i < (200u << 10); ++i) big.push_back(static_cast<uint8_t>(i * 13 + corr));
    const uint32_t size = static_cast<uint32_t>(big.size() - 4);
    for (int k = 0; k < 4; ++k) big[k] = static_cast<uint8_t>(size >> (24 - 8 * k));
    ASSERT_TRUE(Send(fd, big));
    EXPECT_EQ(ReadCorrelation(fd), corr);
    bigs.push_back(std::move(big));
  }
  ASSERT_EQ(asked.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(asked[i].first, 3);  // Metadata's api key
    EXPECT_EQ(asked[i].second, bigs[i].size() - 4);
    EXPECT_TRUE(dispatcher_->frames[i] == std::vector<uint8_t>(bigs[i].begin() + 4, bigs[i].end()))
        << i;
  }
  EXPECT_EQ(dispatcher_->placed[0], given);
  EXPECT_FALSE(dispatcher_->placed[1]);
  EXPECT_FALSE(dispatcher_->placed[2]);  // the wrong size is not used
  close(fd);
}

// Whole frames within one read are copied once, into the placer's buffer when it gives one:
// several in one write, and one split across writes, each arrive byte for byte.
TEST_F(KafkaServerTest, SmallFramesAreCopiedOnceWhereThePlacerSays) {
  int calls = 0;
  StartServer(ServerLimits{}, 1, {}, [&](int16_t, size_t size) {
    return ++calls % 2 == 1 ? std::shared_ptr<PlacedFrame>(std::make_shared<TestPlacedFrame>(size))
                            : std::shared_ptr<PlacedFrame>();
  });
  int fd = Connect();
  std::vector<std::vector<uint8_t>> sent;
  std::vector<uint8_t> all;
  for (int32_t corr = 31; corr <= 34; ++corr) {
    std::vector<uint8_t> f = Frame(corr);
    for (size_t i = 0; i < 100u * static_cast<size_t>(corr); ++i) {
      f.push_back(static_cast<uint8_t>(i * 7 + corr));
    }
    const uint32_t size = static_cast<uint32_t>(f.size() - 4);
    for (int k = 0; k < 4; ++k) f[k] = static_cast<uint8_t>(size >> (24 - 8 * k));
    all.insert(all.end(), f.begin(), f.end());
    sent.push_back(std::move(f));
  }
  // The first three in one write, the fourth split in two after them.
  const size_t split = all.size() - sent[3].size() / 2;
  ASSERT_TRUE(Send(fd, std::vector<uint8_t>(all.begin(), all.begin() + split)));
  ASSERT_TRUE(WaitServerReadAll(fd));
  ASSERT_TRUE(Send(fd, std::vector<uint8_t>(all.begin() + split, all.end())));
  for (int32_t corr = 31; corr <= 34; ++corr) EXPECT_EQ(ReadCorrelation(fd), corr);
  ASSERT_EQ(dispatcher_->frames.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(dispatcher_->frames[i] == std::vector<uint8_t>(sent[i].begin() + 4, sent[i].end()))
        << i;
    EXPECT_EQ(dispatcher_->placed[i] != nullptr, i % 2 == 0) << i;
  }
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
  // A slot frees up once a connection goes (once the server has seen the close: until then
  // a new connection is still refused).
  EXPECT_TRUE(WaitUntil(
      [&] {
        int d = Connect();
        Send(d, Frame(3));
        const bool served = ReadCorrelation(d) == 3;
        close(d);
        return served;
      },
      5s, 20ms))
      << "no connection was served after one of the two closed";
  close(b);
}

constexpr size_t kMiB = 1 << 20;

TEST_F(KafkaServerTest, FileSlicesAreSentInPlaceToASlowReader) {
  MakeFile(8 * kMiB + 4096);
  auto make = [this](int32_t corr) {
    return FileResponse(corr, {{0, 100}, {100, 8 * kMiB}, {5, 1}, {8 * kMiB + 4000, 96}});
  };
  StartServer(ServerLimits{}, 1, make);
  int fd = Connect(/*receive_buffer=*/64 << 10);
  ASSERT_TRUE(Send(fd, Frame(3)));
  // Not reading yet: the 8 MiB cannot fit in the socket buffers, so the server's sendfile
  // meets EAGAIN and has to wait for writability.
  ASSERT_TRUE(WaitServerBlocked(fd)) << "the server's socket never filled";
  std::vector<uint8_t> want = ExpectedFrame(make(3));
  std::vector<uint8_t> got = ReadBytes(fd, want.size(), 64 << 10, 100);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
  // Nothing after the frame; the connection still serves requests.
  ASSERT_TRUE(Send(fd, Frame(4)));
  want = ExpectedFrame(make(4));
  got = ReadBytes(fd, want.size());
  EXPECT_TRUE(got == want);
  close(fd);
}

TEST_F(KafkaServerTest, PlainFileAndNoResponsesPipelinedInRequestOrder) {
  MakeFile(2 * kMiB);
  // Every third a file response (large enough to block the socket), every seventh no
  // response at all (acks=0), the rest plain; answered five at a time in reverse order.
  auto make = [this](int32_t corr) -> Response {
    if (corr % 7 == 0) return Response::None();
    if (corr % 3 == 0) {
      int64_t start = corr * 1000;
      return FileResponse(corr, {{start, 300000}, {start + 300000, 1000}, {0, 1}});
    }
    return CorrelationResponse(corr);
  };
  StartServer(ServerLimits{}, /*batch=*/5, make);
  int fd = Connect(/*receive_buffer=*/64 << 10);
  SendFrames(fd, 1, 40);
  std::vector<uint8_t> want;
  for (int32_t corr = 1; corr <= 40; ++corr) {
    if (corr % 7 == 0) continue;
    std::vector<uint8_t> f = ExpectedFrame(make(corr));
    want.insert(want.end(), f.begin(), f.end());
  }
  std::vector<uint8_t> got = ReadBytes(fd, want.size(), 256 << 10, 1000);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
  close(fd);
}

TEST_F(KafkaServerTest, AFileEndingBeforeItsSliceClosesTheConnection) {
  MakeFile(4096);
  auto make = [this](int32_t corr) {
    if (corr == 1) return CorrelationResponse(corr);
    return FileResponse(corr, {{0, 10}, {4000, 1000}});  // 904 bytes past the end
  };
  StartServer(ServerLimits{}, 1, make);
  int fd = Connect();
  SendFrames(fd, 1, 2);
  EXPECT_EQ(ReadCorrelation(fd), 1);  // the response before it is whole
  std::vector<uint8_t> partial = ExpectedFrame(make(2));
  std::vector<uint8_t> got = ReadBytes(fd, partial.size());
  // Everything up to the end of the file, then the close: never a frame of the wrong size.
  size_t sent = partial.size() - 904 - 3;
  ASSERT_EQ(got.size(), sent);
  partial.resize(sent);
  EXPECT_TRUE(got == partial);
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

TEST_F(KafkaServerTest, AFileTruncatedWhileSendingClosesTheConnection) {
  MakeFile(8 * kMiB);
  StartServer(ServerLimits{}, 1, [this](int32_t corr) {
    return FileResponse(corr, {{0, 8 * kMiB}});
  });
  int fd = Connect(/*receive_buffer=*/64 << 10);
  ASSERT_TRUE(Send(fd, Frame(1)));
  // The server is then blocked part way into the slice.
  ASSERT_TRUE(WaitServerBlocked(fd)) << "the server's socket never filled";
  ASSERT_EQ(truncate(path_.c_str(), 1024), 0);
  std::vector<uint8_t> got = ReadBytes(fd, 8 * kMiB + 64, 1 << 20);
  EXPECT_LT(got.size(), 8 * kMiB);
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

TEST_F(KafkaServerTest, ACloseAnswerComesAfterTheResponsesBeforeIt) {
  MakeFile(4 * kMiB);
  auto make = [this](int32_t corr) {
    return corr == 2 ? Response::Close() : FileResponse(corr, {{0, 4 * kMiB}});
  };
  StartServer(ServerLimits{}, /*batch=*/3, make);
  int fd = Connect(/*receive_buffer=*/64 << 10);
  SendFrames(fd, 1, 3);
  // All three answered (at the third dispatch, in reverse order): the close is held.
  ASSERT_TRUE(WaitUntil([&] { return dispatcher_->dispatched.load() == 3; }, 5s))
      << "the three requests were not dispatched";
  std::vector<uint8_t> want = ExpectedFrame(make(1));
  std::vector<uint8_t> got = ReadBytes(fd, want.size() + 1);  // + 1: nothing may follow
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
  close(fd);
}

TEST_F(KafkaServerTest, UnwrittenResponsesCountAgainstTheInFlightLimit) {
  MakeFile(4 * kMiB);
  ServerLimits limits;
  limits.max_in_flight_per_connection = 4;
  auto make = [this](int32_t corr) { return FileResponse(corr, {{0, 4 * kMiB}}); };
  StartServer(limits, 1, make);
  int fd = Connect(/*receive_buffer=*/64 << 10);
  // One request at a time, so each is read on its own while the client reads nothing. A
  // sleep (pacing, not a wait): each answer must have gone as far into the socket as it can
  // before the next request is read, or the server counts a response as unwritten that the
  // bound below counts as in the socket buffers. Sending each next request as soon as the
  // last was dispatched let a seventh through.
  for (int32_t corr = 1; corr <= 20; ++corr) {
    ASSERT_TRUE(Send(fd, Frame(corr)));
    usleep(10 * 1000);
  }
  // A sleep: the check is that no more are dispatched however long the client reads nothing.
  usleep(100 * 1000);
  // At most four queued plus what the socket buffers hold (under 4 MiB: one response).
  EXPECT_LE(dispatcher_->dispatched.load(), 6);
  for (int32_t corr = 1; corr <= 20; ++corr) {
    std::vector<uint8_t> want = ExpectedFrame(make(corr));
    std::vector<uint8_t> got = ReadBytes(fd, want.size());
    ASSERT_EQ(got.size(), want.size()) << corr;
    ASSERT_TRUE(got == want) << corr;
  }
  EXPECT_EQ(dispatcher_->dispatched.load(), 20);
  close(fd);
}

TEST_F(KafkaServerTest, InsertsOutOfOrderCloseTheConnection) {
  MakeFile(4096);
  StartServer(ServerLimits{}, 1, [this](int32_t corr) {
    Response r = FileResponse(corr, {{0, 10}, {10, 10}, {20, 10}});
    std::swap(r.inserts[0], r.inserts[2]);
    return r;
  });
  int fd = Connect();
  ASSERT_TRUE(Send(fd, Frame(1)));
  EXPECT_TRUE(ClosedByPeer(fd));
  close(fd);
}

}  // namespace
}  // namespace runnel::brokerd
