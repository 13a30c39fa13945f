#include "brokerd/net/kafka_server.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <cstring>

#include "common/log/log.h"
#include "common/protocol/wire.h"

namespace runnel::brokerd {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static auto logger = log::Get("brokerd.net");
  return logger;
}

std::string PeerAddress(uv_tcp_t* tcp, std::string* ip_out) {
  sockaddr_storage addr{};
  int len = sizeof(addr);
  if (uv_tcp_getpeername(tcp, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    *ip_out = "?";
    return "?";
  }
  char ip[INET6_ADDRSTRLEN] = {0};
  int port = 0;
  if (addr.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    uv_ip4_name(a, ip, sizeof(ip));
    port = ntohs(a->sin_port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    uv_ip6_name(a, ip, sizeof(ip));
    port = ntohs(a->sin6_port);
  }
  *ip_out = ip;
  return fmt::format("{}:{}", ip, port);
}

uint32_t ReadBigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

// One client connection. Owned by the server's map (shared_ptr) until its handle's close
// callback; responders hold weak_ptrs so a late answer to a closed connection is dropped.
class KafkaServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(KafkaServer* server, uint64_t id, std::string listener)
      : server_(server), id_(id), listener_(std::move(listener)) {
    tcp_.data = this;
  }

  uv_tcp_t* tcp() { return &tcp_; }
  uint64_t id() const { return id_; }
  const std::string& ip() const { return ip_; }

  void Start() {
    peer_ = PeerAddress(&tcp_, &ip_);
    uv_tcp_nodelay(&tcp_, 1);
    StartReading();
  }

  // Starts closing; the server forgets the connection in the close callback.
  void Close() {
    if (closing_) return;
    closing_ = true;
    self_ = shared_from_this();
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp_));
    uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), [](uv_handle_t* h) {
      auto* conn = static_cast<Connection*>(h->data);
      std::shared_ptr<Connection> keep = std::move(conn->self_);
      conn->server_->Forget(conn->id_, conn->ip_);
    });
  }

 private:
  struct Slot {
    uint64_t seq;
    bool done = false;
    Response response;
  };
  // One uv_write of every response that was ready at once; freed in its callback.
  struct WriteReq {
    uv_write_t req;
    std::vector<std::vector<uint8_t>> responses;
    std::weak_ptr<Connection> conn;
  };

  void StartReading() {
    if (reading_ || closing_) return;
    reading_ = true;
    uv_read_start(
        reinterpret_cast<uv_stream_t*>(&tcp_),
        [](uv_handle_t* h, size_t, uv_buf_t* buf) {
          auto* conn = static_cast<Connection*>(h->data);
          buf->base = reinterpret_cast<char*>(conn->read_buf_);
          buf->len = sizeof(conn->read_buf_);
        },
        [](uv_stream_t* s, ssize_t n, const uv_buf_t*) {
          static_cast<Connection*>(s->data)->OnRead(n);
        });
  }

  void StopReading() {
    if (!reading_) return;
    reading_ = false;
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp_));
  }

  void OnRead(ssize_t n) {
    if (n == 0) return;
    if (n < 0) {
      if (n != UV_EOF) Log()->debug("connection {} from {}: {}", id_, peer_, uv_strerror(n));
      Close();
      return;
    }
    in_.insert(in_.end(), read_buf_, read_buf_ + n);
    // Responses that handlers give while these frames are parsed go out in one write.
    parsing_ = true;
    ParseFrames();
    parsing_ = false;
    FlushWrites();
  }

  void ParseFrames() {
    size_t pos = 0;
    while (!closing_ && in_.size() - pos >= 4) {
      int32_t size = static_cast<int32_t>(ReadBigEndian32(in_.data() + pos));
      if (size < 0 || size > server_->limits_.max_request_bytes) {
        Log()->warn(
            "connection {} from {}: request size {} is outside 0..{} "
            "(socket.request.max.bytes); closing it",
            id_, peer_, size, server_->limits_.max_request_bytes);
        Close();
        return;
      }
      if (in_.size() - pos - 4 < static_cast<size_t>(size)) break;
      std::vector<uint8_t> frame(in_.begin() + static_cast<ptrdiff_t>(pos + 4),
                                 in_.begin() + static_cast<ptrdiff_t>(pos + 4 + size));
      pos += 4 + static_cast<size_t>(size);
      HandleFrame(std::move(frame));
    }
    in_.erase(in_.begin(), in_.begin() + static_cast<ptrdiff_t>(pos));
  }

  void HandleFrame(std::vector<uint8_t> frame) {
    auto request = std::make_unique<RequestContext>();
    protocol::Reader reader(frame);
    // The header's own version depends on the API and version it starts with.
    Status st =
        frame.size() < 4
            ? absl::InvalidArgumentError("frame shorter than an api key and version")
            : request->header.Decode(reader, protocol::RequestHeaderVersion(
                                                 static_cast<int16_t>((frame[0] << 8) | frame[1]),
                                                 static_cast<int16_t>((frame[2] << 8) | frame[3])));
    if (!st.ok()) {
      Log()->warn("connection {} from {}: malformed request header ({}); closing it", id_, peer_,
                  std::string(st.message()));
      Close();
      return;
    }
    request->body_offset = frame.size() - reader.remaining();
    request->frame = std::move(frame);
    request->listener = listener_;
    request->peer = peer_;
    request->connection_id = id_;

    uint64_t seq = next_seq_++;
    slots_.push_back(Slot{seq, false, Response()});
    if (slots_.size() >= server_->limits_.max_in_flight_per_connection) StopReading();
    std::weak_ptr<Connection> weak = shared_from_this();
    server_->dispatcher_.Dispatch(std::move(request), [weak, seq](Response response) {
      if (auto conn = weak.lock()) conn->Complete(seq, std::move(response));
    });
  }

  void Complete(uint64_t seq, Response response) {
    if (closing_) return;
    for (Slot& slot : slots_) {
      if (slot.seq == seq) {
        slot.done = true;
        slot.response = std::move(response);
        break;
      }
    }
    // Answer strictly in request order.
    while (!slots_.empty() && slots_.front().done && !closing_) {
      Response r = std::move(slots_.front().response);
      slots_.pop_front();
      switch (r.kind) {
        case Response::Kind::kSend:
          if (!QueueWrite(std::move(r.bytes))) return;
          break;
        case Response::Kind::kNoResponse:
          break;
        case Response::Kind::kClose:
          FlushWrites();
          Close();
          return;
      }
    }
    if (!parsing_) FlushWrites();
    if (slots_.size() < server_->limits_.max_in_flight_per_connection / 2) StartReading();
  }

  // Fills in the size prefix and queues the response for the next FlushWrites.
  bool QueueWrite(std::vector<uint8_t> payload) {
    if (payload.size() < kSizePrefixBytes) {
      Log()->error("connection {}: a response without its size prefix; closing", id_);
      Close();
      return false;
    }
    uint32_t size = static_cast<uint32_t>(payload.size() - kSizePrefixBytes);
    payload[0] = static_cast<uint8_t>(size >> 24);
    payload[1] = static_cast<uint8_t>(size >> 16);
    payload[2] = static_cast<uint8_t>(size >> 8);
    payload[3] = static_cast<uint8_t>(size);
    out_.push_back(std::move(payload));
    return true;
  }

  void FlushWrites() {
    if (out_.empty() || closing_) return;
    auto* w = new WriteReq();
    w->responses = std::move(out_);
    out_.clear();
    w->conn = weak_from_this();
    w->req.data = w;
    std::vector<uv_buf_t> bufs;
    bufs.reserve(w->responses.size());
    for (auto& r : w->responses) {
      bufs.push_back(
          uv_buf_init(reinterpret_cast<char*>(r.data()), static_cast<unsigned>(r.size())));
    }
    int rc = uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&tcp_), bufs.data(),
                      static_cast<unsigned>(bufs.size()), [](uv_write_t* req, int status) {
                        auto* w = static_cast<WriteReq*>(req->data);
                        if (status < 0 && status != UV_ECANCELED) {
                          if (auto conn = w->conn.lock()) conn->Close();
                        }
                        delete w;
                      });
    if (rc != 0) {
      delete w;
      Close();
    }
  }

  KafkaServer* server_;
  uint64_t id_;
  std::string listener_;
  std::string peer_;
  std::string ip_;
  uv_tcp_t tcp_;
  std::shared_ptr<Connection> self_;  // keeps this alive until the close callback
  bool reading_ = false;
  bool closing_ = false;
  bool parsing_ = false;
  std::vector<std::vector<uint8_t>> out_;  // responses ready to write, in order
  uint8_t read_buf_[64 * 1024];
  std::vector<uint8_t> in_;
  std::deque<Slot> slots_;
  uint64_t next_seq_ = 0;
};

KafkaServer::KafkaServer(EventLoop& loop, RequestDispatcher& dispatcher, ServerLimits limits)
    : loop_(loop), dispatcher_(dispatcher), limits_(limits) {}

KafkaServer::~KafkaServer() = default;

Status KafkaServer::Listen(const std::vector<config::Listener>& listeners) {
  for (const config::Listener& l : listeners) {
    auto listener = std::make_unique<Listener>();
    listener->server = this;
    listener->name = l.name;
    uv_tcp_init(loop_.raw(), &listener->handle);
    listener->handle.data = listener.get();
    std::string host = l.host.empty() ? "0.0.0.0" : l.host;
    sockaddr_storage addr{};
    if (uv_ip4_addr(host.c_str(), l.port, reinterpret_cast<sockaddr_in*>(&addr)) != 0 &&
        uv_ip6_addr(host.c_str(), l.port, reinterpret_cast<sockaddr_in6*>(&addr)) != 0) {
      uv_close(reinterpret_cast<uv_handle_t*>(&listener->handle), nullptr);
      listeners_.push_back(std::move(listener));
      return absl::InvalidArgumentError(
          fmt::format("listeners: '{}' is not an IP address to listen on", host));
    }
    int rc = uv_tcp_bind(&listener->handle, reinterpret_cast<sockaddr*>(&addr), 0);
    if (rc == 0) {
      rc = uv_listen(reinterpret_cast<uv_stream_t*>(&listener->handle), 1024,
                     &KafkaServer::OnNewConnection);
    }
    if (rc != 0) {
      uv_close(reinterpret_cast<uv_handle_t*>(&listener->handle), nullptr);
      listeners_.push_back(std::move(listener));
      return absl::UnavailableError(
          fmt::format("listeners: cannot listen on {}:{}: {}", host, l.port, uv_strerror(rc)));
    }
    sockaddr_storage bound{};
    int len = sizeof(bound);
    uv_tcp_getsockname(&listener->handle, reinterpret_cast<sockaddr*>(&bound), &len);
    int port = bound.ss_family == AF_INET
                   ? ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port)
                   : ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    bound_ports_[l.name] = port;
    Log()->info("listening for Kafka clients on {} {}:{}", l.name, host, port);
    listeners_.push_back(std::move(listener));
  }
  return absl::OkStatus();
}

void KafkaServer::OnNewConnection(uv_stream_t* stream, int status) {
  auto* listener = static_cast<Listener*>(stream->data);
  if (status < 0) {
    Log()->warn("accept on {} failed: {}", listener->name, uv_strerror(status));
    return;
  }
  listener->server->Accept(listener);
}

void KafkaServer::Accept(Listener* listener) {
  auto conn = std::make_shared<Connection>(this, next_connection_id_++, listener->name);
  uv_tcp_init(loop_.raw(), conn->tcp());
  if (uv_accept(reinterpret_cast<uv_stream_t*>(&listener->handle),
                reinterpret_cast<uv_stream_t*>(conn->tcp())) != 0) {
    conn->Close();
    return;
  }
  connections_[conn->id()] = conn;
  conn->Start();
  int& from_ip = per_ip_[conn->ip()];
  ++from_ip;
  if (closed_ || static_cast<int64_t>(connections_.size()) > limits_.max_connections ||
      from_ip > limits_.max_connections_per_ip) {
    Log()->warn(
        "refusing connection from {}: {} connection limit reached", conn->ip(),
        from_ip > limits_.max_connections_per_ip ? "max.connections.per.ip" : "max.connections");
    conn->Close();
  }
}

void KafkaServer::Forget(uint64_t id, const std::string& ip) {
  connections_.erase(id);
  auto it = per_ip_.find(ip);
  if (it != per_ip_.end() && --it->second <= 0) per_ip_.erase(it);
}

void KafkaServer::Close() {
  closed_ = true;
  for (auto& l : listeners_) {
    if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&l->handle))) {
      uv_close(reinterpret_cast<uv_handle_t*>(&l->handle), nullptr);
    }
  }
  std::vector<std::shared_ptr<Connection>> all;
  for (auto& [id, c] : connections_) all.push_back(c);
  for (auto& c : all) c->Close();
}

}  // namespace runnel::brokerd
