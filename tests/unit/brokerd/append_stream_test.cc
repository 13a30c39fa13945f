// AppendStream, brokerd's end of storaged's append socket: against storaged's real
// AppendSocketServer (answers, order, the batcher using it), and against a scripted server
// on a plain Unix socket (a connection that breaks, an answer that never comes or does not
// fit, reconnecting).
#include "brokerd/storage/append_stream.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include "brokerd/storage/append_batcher.h"
#include "common/protocol/uuid.h"
#include "common/util/frames.h"
#include "storaged/append_socket.h"
#include "tests/unit/brokerd/real_storage_fixture.h"
#include "tests/util/wait.h"

namespace runnel::brokerd {
namespace {

using namespace std::chrono_literals;
using runnel::testing::WaitUntil;

class AppendStreamTest : public RealStorageTest {
 protected:
  void TearDown() override {
    OnLoop([&] {
      for (auto& s : streams_) s->Close();
    });
    storage_->Stop();
    StopLoop();
    if (append_server_) append_server_->Stop();
    StopStorage();
  }

  // A stream to `path`, started on the loop, closed by TearDown and destroyed after the
  // loop's last run.
  AppendStream* StartStream(const std::string& path) {
    streams_.push_back(std::make_unique<AppendStream>(loop_, path));
    AppendStream* stream = streams_.back().get();
    OnLoop([&] { stream->Start(); });
    return stream;
  }

  // Waits (bounded) until the stream's connected() is `want`.
  void WaitConnected(AppendStream& stream, bool want) {
    for (int i = 0; i < 500; ++i) {
      bool connected = false;
      OnLoop([&] { connected = stream.connected(); });
      if (connected == want) return;
      std::this_thread::sleep_for(10ms);
    }
    FAIL() << "the stream's connected() did not become " << want;
  }

  // One request of one append of one record to partition 0 of "t".
  static storage::AppendRequest OneAppend() {
    storage::AppendRequest req;
    auto* p = req.add_partitions();
    p->set_topic("t");
    p->set_partition(0);
    p->set_records(Batch(1, "v"));
    return req;
  }

  struct Answer {
    grpc::Status status;
    storage::AppendResponse response;
  };

  // Sends `req` with `timeout` and waits (bounded) for its answer.
  Answer AppendAndWait(AppendStream& stream, std::chrono::milliseconds timeout,
                       storage::AppendRequest req = OneAppend()) {
    std::promise<Answer> answer;
    bool inside = true;
    OnLoop([&] {
      stream.Append(std::move(req), timeout,
                    [&](const grpc::Status& s, storage::AppendResponse& r) {
                      EXPECT_FALSE(inside) << "done ran inside Append";
                      answer.set_value(Answer{s, r});
                    });
      inside = false;
    });
    auto f = answer.get_future();
    EXPECT_EQ(f.wait_for(10s), std::future_status::ready);
    return f.valid() && f.wait_for(0s) == std::future_status::ready ? f.get() : Answer{};
  }

  // Serves storaged's real AppendSocketServer on root_/a.sock as append_server_.
  void StartServer() {
    auto server = storaged::AppendSocketServer::Start(root_ + "/a.sock", *service_);
    ASSERT_TRUE(server.ok()) << server.status();
    append_server_ = std::move(*server);
  }

  std::unique_ptr<storaged::AppendSocketServer> append_server_;
  std::vector<std::unique_ptr<AppendStream>> streams_;
};

// A scripted server: listens on `path`, and for each connection it accepts runs `serve(fd)`
// on its thread (which closes fd after), up to `connections` of them.
class ScriptedServer {
 public:
  ScriptedServer(const std::string& path, int connections, std::function<void(int)> serve)
      : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    thread_ = std::thread([this, connections, serve] {
      for (int i = 0; i < connections; ++i) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        accepted_++;
        {
          std::lock_guard lock(mu_);
          if (stopping_) ::shutdown(c, SHUT_RDWR);
          conn_ = c;
        }
        serve(c);
        std::lock_guard lock(mu_);
        conn_ = -1;
        ::close(c);
      }
    });
  }
  ~ScriptedServer() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      if (conn_ >= 0) ::shutdown(conn_, SHUT_RDWR);  // ends a blocked read in `serve`
    }
    ::shutdown(fd_, SHUT_RDWR);  // ends a blocked accept
    thread_.join();
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  int accepted() const { return accepted_.load(); }

 private:
  std::string path_;
  int fd_;
  std::mutex mu_;
  int conn_ = -1;  // the connection being served, guarded by mu_
  bool stopping_ = false;
  std::thread thread_;
  std::atomic<int> accepted_{0};
};

// Reads one frame from `fd` (blocking); false at EOF or on a bad frame.
bool ReadRequest(int fd, storage::AppendStreamRequest* out) {
  FrameReader reader;
  char buf[4096];
  while (true) {
    std::string_view payload;
    FrameReader::Next next = reader.Pop(&payload);
    if (next == FrameReader::Next::kFrame)
      return out->ParseFromArray(payload.data(), payload.size());
    if (next == FrameReader::Next::kTooLarge) return false;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    reader.Feed(buf, static_cast<size_t>(n));
  }
}

void WriteResponse(int fd, const storage::AppendStreamResponse& resp) {
  std::string frame;
  AppendFrame(resp.SerializeAsString(), &frame);
  ASSERT_EQ(::write(fd, frame.data(), frame.size()), static_cast<ssize_t>(frame.size()));
}

// Through storaged's real server: many appends queued at once to few partitions, with a small
// byte bound per call so they need many calls, get consecutive offsets per partition in the
// order queued, and every call went over the socket.
TEST_F(AppendStreamTest, TheBatcherAppendsThroughTheSocketInOrder) {
  CreateTopic(3);
  StartServer();
  auto stream = StartStream(root_ + "/a.sock");
  WaitConnected(*stream, true);
  AppendBatcher batcher(loop_, *storage_, view_, /*max_calls_in_flight=*/4,
                        /*max_bytes_per_call=*/300, AppendBatcher::kDefaultSharedBytes, stream);
  ExpectOrderedAppends(batcher);
  // 60 appends of about 100 bytes, at most 300 bytes a call: at least 20 calls, all answered
  // by the socket (none by gRPC).
  EXPECT_GE(append_server_->requests_answered(), 20u);
  OnLoop([&] { EXPECT_EQ(stream->in_flight(), 0u); });
}

// storaged's answer carries its per-partition errors and a failed call's status.
TEST_F(AppendStreamTest, AnswersCarryPartitionErrorsAndCallStatus) {
  CreateTopic(1);
  StartServer();
  auto stream = StartStream(root_ + "/a.sock");
  WaitConnected(*stream, true);

  Answer ok = AppendAndWait(*stream, 10s);
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  ASSERT_EQ(ok.response.partitions_size(), 1);
  EXPECT_EQ(ok.response.partitions(0).error_code(), 0);
  EXPECT_EQ(ok.response.partitions(0).base_offset(), 0);

  // An unknown partition is its error code in an OK answer.
  storage::AppendRequest to_unknown = OneAppend();
  to_unknown.mutable_partitions(0)->set_partition(7);
  Answer u = AppendAndWait(*stream, 10s, std::move(to_unknown));
  ASSERT_TRUE(u.status.ok());
  ASSERT_EQ(u.response.partitions_size(), 1);
  EXPECT_EQ(u.response.partitions(0).error_code(),
            static_cast<int>(protocol::ErrorCode::kUnknownTopicOrPartition));

  // Shared bytes storaged cannot map fail the whole call with FAILED_PRECONDITION.
  storage::AppendRequest unmappable = OneAppend();
  auto* shared = unmappable.mutable_partitions(0)->mutable_shared();
  shared->set_pid(::getpid());
  shared->set_fd(987654);
  shared->set_inode(1);
  shared->set_length(10);
  unmappable.mutable_partitions(0)->clear_records();
  EXPECT_EQ(AppendAndWait(*stream, 10s, std::move(unmappable)).status.error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  // The connection is still up and answers the next call.
  EXPECT_TRUE(AppendAndWait(*stream, 10s).status.ok());
}

// A connection that breaks with a call in flight fails it with UNAVAILABLE; the stream then
// connects again by itself.
TEST_F(AppendStreamTest, ABrokenConnectionFailsItsCallsAndReconnects) {
  const std::string path = root_ + "/scripted.sock";
  std::atomic<int> requests{0};
  ScriptedServer server(path, 2, [&](int fd) {
    storage::AppendStreamRequest req;
    if (ReadRequest(fd, &req)) requests++;  // then closes without answering
  });
  auto stream = StartStream(path);
  WaitConnected(*stream, true);
  Answer a = AppendAndWait(*stream, 10s);
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::UNAVAILABLE) << a.status.error_message();
  EXPECT_EQ(requests.load(), 1);
  WaitConnected(*stream, true);
  EXPECT_TRUE(WaitUntil([&] { return server.accepted() >= 2; }, 5s, 10ms))
      << "the server did not accept the second connection";
  EXPECT_EQ(server.accepted(), 2);
}

// An answer that never comes fails its call with DEADLINE_EXCEEDED near its timeout, and the
// connection is closed (the server sees EOF).
TEST_F(AppendStreamTest, AnUnansweredCallTimesOutAndClosesTheConnection) {
  const std::string path = root_ + "/scripted.sock";
  std::promise<bool> saw_eof;
  ScriptedServer server(path, 1, [&](int fd) {
    storage::AppendStreamRequest req;
    bool got = ReadRequest(fd, &req);
    char byte;
    saw_eof.set_value(got && ::read(fd, &byte, 1) == 0);
  });
  auto stream = StartStream(path);
  WaitConnected(*stream, true);
  auto start = std::chrono::steady_clock::now();
  Answer a = AppendAndWait(*stream, 300ms);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 3s);
  auto eof = saw_eof.get_future();
  ASSERT_EQ(eof.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(eof.get());
}

// An answer whose id is not the oldest call's is a broken stream: INTERNAL, and closed.
TEST_F(AppendStreamTest, AnAnswerThatDoesNotFitFailsTheCall) {
  const std::string path = root_ + "/scripted.sock";
  ScriptedServer server(path, 1, [&](int fd) {
    storage::AppendStreamRequest req;
    if (!ReadRequest(fd, &req)) return;
    storage::AppendStreamResponse resp;
    resp.set_id(req.id() + 1);
    WriteResponse(fd, resp);
    char byte;
    while (::read(fd, &byte, 1) > 0) {
    }
  });
  auto stream = StartStream(path);
  WaitConnected(*stream, true);
  Answer a = AppendAndWait(*stream, 10s);
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::INTERNAL);
}

// Without a connection, Append fails with UNAVAILABLE, later and not inside the call.
TEST_F(AppendStreamTest, AppendWithoutAConnectionFailsLater) {
  auto stream = StartStream(root_ + "/nobody.sock");
  WaitConnected(*stream, false);
  Answer a = AppendAndWait(*stream, 10s);
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

// storaged's side, driven by a plain client socket.
class AppendSocketServerTest : public AppendStreamTest {
 protected:
  int Connect() {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", append_server_->path().c_str());
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{10, 0};  // a read that would hang fails the test instead
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  }
  static std::string Frame(const std::string& payload) {
    std::string out;
    AppendFrame(payload, &out);
    return out;
  }
  static std::string RequestFrame(uint64_t id) {
    storage::AppendStreamRequest req;
    req.set_id(id);
    *req.mutable_request() = OneAppend();
    return Frame(req.SerializeAsString());
  }
  // Reads until EOF (true) or an error or timeout (false); what was read goes to *bytes.
  static bool ReadToEof(int fd, std::string* bytes) {
    char buf[4096];
    while (true) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n == 0) return true;
      if (n < 0) return false;
      bytes->append(buf, static_cast<size_t>(n));
    }
  }
};

// Requests written together are applied in order and answered in order, with their ids.
TEST_F(AppendSocketServerTest, RequestsAreAnsweredInOrderWithTheirIds) {
  CreateTopic(1);
  StartServer();
  struct stat st {};
  ASSERT_EQ(::stat(append_server_->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  int fd = Connect();
  std::string both = RequestFrame(41) + RequestFrame(42);
  ASSERT_EQ(::write(fd, both.data(), both.size()), static_cast<ssize_t>(both.size()));
  ::shutdown(fd, SHUT_WR);
  std::string bytes;
  ASSERT_TRUE(ReadToEof(fd, &bytes));
  ::close(fd);
  FrameReader reader;
  reader.Feed(bytes.data(), bytes.size());
  for (uint64_t id : {41, 42}) {
    std::string_view payload;
    ASSERT_EQ(reader.Pop(&payload), FrameReader::Next::kFrame);
    storage::AppendStreamResponse resp;
    ASSERT_TRUE(resp.ParseFromArray(payload.data(), static_cast<int>(payload.size())));
    EXPECT_EQ(resp.id(), id);
    EXPECT_EQ(resp.status_code(), 0);
    ASSERT_EQ(resp.response().partitions_size(), 1);
    EXPECT_EQ(resp.response().partitions(0).base_offset(), static_cast<int64_t>(id - 41));
  }
  EXPECT_EQ(reader.buffered(), 0u);
}

// A frame that is not a request, or whose length is over the bound, closes the connection
// with no answer, and the server goes on serving others.
TEST_F(AppendSocketServerTest, ABadFrameClosesOnlyItsConnection) {
  CreateTopic(1);
  StartServer();
  const std::string too_long("\xff\xff\xff\xff", 4);
  for (const std::string& bad : {Frame("\xff\xff\xff garbage"), too_long}) {
    int fd = Connect();
    ASSERT_EQ(::write(fd, bad.data(), bad.size()), static_cast<ssize_t>(bad.size()));
    std::string bytes;
    EXPECT_TRUE(ReadToEof(fd, &bytes));
    EXPECT_TRUE(bytes.empty());
    ::close(fd);
  }
  int fd = Connect();
  std::string one = RequestFrame(1);
  ASSERT_EQ(::write(fd, one.data(), one.size()), static_cast<ssize_t>(one.size()));
  ::shutdown(fd, SHUT_WR);
  std::string bytes;
  ASSERT_TRUE(ReadToEof(fd, &bytes));
  ::close(fd);
  EXPECT_GT(bytes.size(), 4u);
  EXPECT_EQ(append_server_->requests_answered(), 1u);
}

// Stop ends connections that are open and idle, and removes the socket file.
TEST_F(AppendSocketServerTest, StopEndsOpenConnections) {
  StartServer();
  int fd = Connect();
  ASSERT_TRUE(WaitUntil([&] { return append_server_->connection_count() == 1; }, 5s))
      << "the server did not take the connection";
  auto start = std::chrono::steady_clock::now();
  append_server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  std::string bytes;
  EXPECT_TRUE(ReadToEof(fd, &bytes));
  ::close(fd);
  EXPECT_FALSE(std::filesystem::exists(root_ + "/a.sock"));
}

}  // namespace
}  // namespace runnel::brokerd
