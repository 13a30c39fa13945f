#include "brokerd/storage/append_stream.h"

#include <fmt/format.h>

#include <vector>

#include "common/log/log.h"
#include "common/util/frames.h"

namespace runnel::brokerd {
namespace {

const log::ModuleLogger kLog("brokerd.append");

constexpr uint64_t kTickMs = 100;
constexpr size_t kReadBytes = 64 << 10;

}  // namespace

// One connection attempt and, once it succeeds, the connection. Once dropped it is owned by
// its pipe's close callback, which libuv runs after the callbacks of every request still
// pending on the pipe (they reach the connection through the pipe's `data`).
struct AppendStream::Connection {
  UvHandle<uv_pipe_t> pipe;  // its `data` is this
  uv_connect_t connect;
  AppendStream* owner;  // nullptr once the stream let go of it
  bool connected = false;
  FrameReader reader;
  std::vector<char> read_buf = std::vector<char>(kReadBytes);
};

namespace {

struct WriteRequest {
  uv_write_t req;
  std::string bytes;
};

}  // namespace

AppendStream::AppendStream(EventLoop& loop, std::string socket_path)
    : loop_(loop), socket_path_(std::move(socket_path)) {}

AppendStream::~AppendStream() { Close(); }

bool AppendStream::connected() const { return conn_ != nullptr && conn_->connected; }

void AppendStream::Start() {
  if (started_ || closed_) return;
  started_ = true;
  timer_.Init(loop_.raw());
  Connect();
}

void AppendStream::Connect() {
  auto conn = std::make_unique<Connection>();
  conn->owner = this;
  conn->pipe.Init([this](uv_pipe_t* h) { return uv_pipe_init(loop_.raw(), h, 0); });
  conn->pipe.get()->data = conn.get();
  conn->connect.data = conn.get();
  uv_pipe_t* pipe = conn->pipe.get();
  uv_connect_t* connect = &conn->connect;
  conn_ = std::move(conn);
  uv_pipe_connect(connect, pipe, socket_path_.c_str(), [](uv_connect_t* req, int status) {
    auto* c = static_cast<Connection*>(req->data);
    if (c->owner != nullptr) c->owner->OnConnected(c, status);
  });
}

void AppendStream::OnConnected(Connection* conn, int status) {
  if (status < 0) {
    kLog()->debug("cannot reach storaged's append socket {}: {}; retrying", socket_path_,
                  uv_strerror(status));
    Drop();
    UpdateTimer();
    return;
  }
  int rc = uv_read_start(
      reinterpret_cast<uv_stream_t*>(conn->pipe.get()),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* c = static_cast<Connection*>(h->data);
        *buf = uv_buf_init(c->read_buf.data(), static_cast<unsigned>(c->read_buf.size()));
      },
      [](uv_stream_t* s, ssize_t nread, const uv_buf_t* buf) {
        auto* c = static_cast<Connection*>(s->data);
        if (c->owner != nullptr) c->owner->OnRead(c, nread, buf);
      });
  if (rc < 0) {
    kLog()->warn("append socket: cannot read: {}", uv_strerror(rc));
    Drop();
    UpdateTimer();
    return;
  }
  conn->connected = true;
  backoff_ = kMinBackoff;
  kLog()->info("appends go to storaged through {}", socket_path_);
  UpdateTimer();
}

void AppendStream::Append(storage::AppendRequest req, std::chrono::milliseconds timeout,
                          Done done) {
  storage::AppendStreamRequest message;
  const uint64_t id = next_id_++;
  message.set_id(id);
  *message.mutable_request() = std::move(req);
  calls_.push_back(Call{id, std::chrono::steady_clock::now() + timeout, std::move(done)});
  // A failure here is told from the timer, not from inside this call: the caller is in the
  // middle of its own bookkeeping.
  if (!connected()) {
    BreakSoon(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the append socket is not connected"));
    return;
  }
  auto* write = new WriteRequest();
  AppendFrame(message.SerializeAsString(), &write->bytes);
  uv_buf_t buf = uv_buf_init(write->bytes.data(), static_cast<unsigned>(write->bytes.size()));
  int rc = uv_write(
      &write->req, reinterpret_cast<uv_stream_t*>(conn_->pipe.get()), &buf, 1,
      [](uv_write_t* req, int status) {
        auto* w = reinterpret_cast<WriteRequest*>(req);
        auto* c = static_cast<Connection*>(req->handle->data);
        delete w;
        if (status < 0 && c->owner != nullptr && c->owner->conn_.get() == c) {
          c->owner->Broken(grpc::Status(
              grpc::StatusCode::UNAVAILABLE,
              fmt::format("writing to storaged's append socket: {}", uv_strerror(status))));
        }
      });
  if (rc < 0) {
    delete write;
    BreakSoon(
        grpc::Status(grpc::StatusCode::UNAVAILABLE,
                     fmt::format("writing to storaged's append socket: {}", uv_strerror(rc))));
    return;
  }
  UpdateTimer();
}

void AppendStream::BreakSoon(grpc::Status why) {
  if (!break_soon_) break_soon_ = std::move(why);
  if (!started_ || closed_) return;
  timer_running_ = true;
  timer_.Start(0, kTickMs, [this] { OnTick(); });
}

void AppendStream::OnRead(Connection* conn, ssize_t nread, const uv_buf_t* buf) {
  if (nread == 0) return;  // EAGAIN
  if (nread < 0) {
    Broken(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        nread == UV_EOF ? std::string("storaged closed the append socket")
                                        : fmt::format("reading storaged's append socket: {}",
                                                      uv_strerror(static_cast<int>(nread)))));
    return;
  }
  conn->reader.Feed(buf->base, static_cast<size_t>(nread));
  storage::AppendStreamResponse message;
  // A `done` may close the stream, or break it with a write: stop once conn is not ours.
  while (conn_.get() == conn) {
    std::string_view payload;
    FrameReader::Next next = conn->reader.Pop(&payload);
    if (next == FrameReader::Next::kNeedMore) break;
    message.Clear();
    if (next == FrameReader::Next::kTooLarge ||
        !message.ParseFromArray(payload.data(), static_cast<int>(payload.size())) ||
        calls_.empty() || message.id() != calls_.front().id) {
      Broken(grpc::Status(grpc::StatusCode::INTERNAL,
                          "storaged's append socket sent an answer that does not fit a call"));
      return;
    }
    Call call = std::move(calls_.front());
    calls_.pop_front();
    grpc::Status status = message.status_code() == 0
                              ? grpc::Status::OK
                              : grpc::Status(static_cast<grpc::StatusCode>(message.status_code()),
                                             message.status_message());
    call.done(status, *message.mutable_response());
  }
  UpdateTimer();
}

void AppendStream::OnTick() {
  if (break_soon_) {
    grpc::Status why = std::move(*break_soon_);
    break_soon_.reset();
    Broken(why);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  for (const Call& call : calls_) {
    if (call.deadline <= now) {
      kLog()->warn("storaged did not answer an append in time; closing the append socket");
      Broken(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "storaged did not answer the append in time"));
      return;
    }
  }
  if (conn_ == nullptr && !closed_ && now >= reconnect_at_) Connect();
  UpdateTimer();
}

void AppendStream::Broken(const grpc::Status& why) {
  if (connected()) {
    kLog()->warn("{}; appends go through gRPC until the append socket is back",
                 why.error_message());
  }
  Drop();
  auto calls = std::move(calls_);
  calls_.clear();
  UpdateTimer();
  storage::AppendResponse none;
  for (Call& call : calls) call.done(why, none);
}

void AppendStream::Drop() {
  if (conn_ == nullptr) return;
  conn_->owner = nullptr;
  Connection* conn = conn_.get();
  conn->pipe.Close([owned = std::move(conn_)] {});
  reconnect_at_ = std::chrono::steady_clock::now() + backoff_;
  backoff_ = std::min(backoff_ * 2, kMaxBackoff);
}

void AppendStream::UpdateTimer() {
  if (!started_ || closed_) return;
  const bool wanted = !calls_.empty() || conn_ == nullptr;
  if (wanted == timer_running_) return;
  timer_running_ = wanted;
  if (wanted) {
    timer_.Start(kTickMs, kTickMs, [this] { OnTick(); });
  } else {
    timer_.Stop();
  }
}

void AppendStream::Close() {
  if (closed_) return;
  closed_ = true;
  Drop();
  calls_.clear();
  break_soon_.reset();
  timer_.Close();
}

}  // namespace runnel::brokerd
