#include "brokerd/net/kafka_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/log/log.h"
#include "common/protocol/wire.h"
#include "common/util/big_endian.h"

namespace runnel::brokerd {
namespace {

const log::ModuleLogger kLog("brokerd.net");

std::string PeerAddress(int fd, std::string* ip_out) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
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

// Byte ranges one sendmsg carries at most (Linux allows 1024).
constexpr size_t kMaxIov = 256;
// Reads per readable event, so one busy client cannot hold the loop (as libuv does).
constexpr int kMaxReadsPerWakeup = 32;

}  // namespace

// One client connection. Owned by the server's map (shared_ptr) until it closes, then by its
// poll handle's close callback, which takes it out of the map; responders hold weak_ptrs so
// a late answer to a closed connection is dropped. Owns the socket fd (closed in the
// destructor, after the poll handle).
class KafkaServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(KafkaServer* server, uint64_t id, std::string listener, int fd)
      : server_(server), id_(id), listener_(std::move(listener)), fd_(fd) {}
  ~Connection() {
    poll_.Close();
    if (fd_ >= 0) ::close(fd_);
  }

  uint64_t id() const { return id_; }
  const std::string& ip() const { return ip_; }

  // Sets the connection up without reading yet; false when the socket cannot be polled
  // (the connection is then dropped, and its destructor closes the socket).
  bool Init(uv_loop_t* loop) {
    peer_ = PeerAddress(fd_, &ip_);
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int rc = poll_.Init([&](uv_poll_t* h) { return uv_poll_init(loop, h, fd_); });
    if (rc != 0) {
      kLog()->warn("connection from {}: cannot poll its socket: {}", peer_, uv_strerror(rc));
      return false;
    }
    poll_.get()->data = this;
    return true;
  }

  void Start() { StartReading(); }

  // Starts closing; the server forgets the connection in the close callback. Queued
  // responses not yet written are dropped.
  void Close() {
    if (closing_ || !poll_) return;
    closing_ = true;
    poll_.Close([self = shared_from_this()] {
      if (self->server_ != nullptr) self->server_->Forget(self->id_, self->ip_);
    });
  }

  // The server is going: a close finishing later must not call back into it.
  void Detach() { server_ = nullptr; }

 private:
  struct Slot {
    uint64_t seq;
    bool done = false;
    Response response;
    int16_t api_key = -1;  // for the request metrics
    std::chrono::steady_clock::time_point received{};
  };

  // A response queued for writing, with how much of it is written. Its parts, in order:
  // bytes[0, inserts[0].at), inserts[0].slice, bytes[inserts[0].at, inserts[1].at), ...,
  // bytes[inserts.back().at, bytes.size()).
  struct Outgoing {
    std::vector<uint8_t> bytes;                 // size prefix filled in
    std::vector<protocol::FileInsert> inserts;  // sorted by `at`, none empty
    size_t byte_pos = 0;                        // bytes before this are written
    size_t next_insert = 0;                     // inserts before this are written
    int64_t file_done = 0;                      // bytes of inserts[next_insert] written

    // The next part to write is inserts[next_insert].
    bool AtFile() const {
      return next_insert < inserts.size() && inserts[next_insert].at == byte_pos;
    }
    // End of the bytes part being written.
    size_t BytesEnd() const {
      return next_insert < inserts.size() ? inserts[next_insert].at : bytes.size();
    }
    bool Done() const { return next_insert == inserts.size() && byte_pos == bytes.size(); }
  };

  enum class WriteResult { kProgress, kBlocked, kClosed };

  static void OnPoll(uv_poll_t* handle, int status, int events) {
    auto* conn = static_cast<Connection*>(handle->data);
    if (conn->closing_) return;
    if (status < 0) {
      kLog()->debug("connection {} from {}: {}", conn->id_, conn->peer_, uv_strerror(status));
      conn->Close();
      return;
    }
    if ((events & UV_WRITABLE) != 0) {
      conn->waiting_writable_ = false;
      conn->Flush();
      conn->MaybeResumeReading();
    }
    if ((events & UV_READABLE) != 0 && conn->reading_ && !conn->closing_) conn->OnReadable();
    conn->UpdatePoll();
  }

  // Polls for what the connection waits for now: requests while reading, writability while
  // a response is blocked on a full socket buffer.
  void UpdatePoll() {
    if (closing_) return;
    int events = (reading_ ? UV_READABLE : 0) | (waiting_writable_ ? UV_WRITABLE : 0);
    if (events == polled_events_) return;
    polled_events_ = events;
    int rc = events == 0 ? uv_poll_stop(poll_.get()) : uv_poll_start(poll_.get(), events, &OnPoll);
    if (rc != 0) {
      kLog()->warn("connection {} from {}: cannot poll its socket: {}; closing it", id_, peer_,
                   uv_strerror(rc));
      Close();
    }
  }

  void StartReading() {
    if (reading_ || closing_ || close_requested_) return;
    reading_ = true;
    UpdatePoll();
  }

  void StopReading() {
    if (!reading_) return;
    reading_ = false;
    UpdatePoll();
  }

  // Requests the connection holds: unanswered, or answered and not yet fully written.
  size_t InFlight() const { return slots_.size() + out_.size(); }

  void MaybeResumeReading() {
    if (InFlight() <= server_->limits_.max_in_flight_per_connection / 2) StartReading();
  }

  void OnReadable() {
    // Responses that handlers give while these frames are parsed go out in one write.
    parsing_ = true;
    for (int i = 0; i < kMaxReadsPerWakeup && reading_ && !closing_ && !close_requested_; ++i) {
      // The rest of a large frame is read straight into its own buffer.
      uint8_t* target = read_buf_;
      size_t want = sizeof(read_buf_);
      if (const size_t big = BigFrameSize(); big > 0) {
        target = BigFrameData() + big_frame_filled_;
        want = big - big_frame_filled_;
      }
      ssize_t n = ::read(fd_, target, want);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        if (n < 0) {
          kLog()->debug("connection {} from {}: {}", id_, peer_, std::strerror(errno));
        }
        parsing_ = false;
        Close();
        return;
      }
      if (target != read_buf_) {
        big_frame_filled_ += static_cast<size_t>(n);
        if (big_frame_filled_ == BigFrameSize()) {
          auto request = std::make_unique<RequestContext>();
          request->frame = std::move(big_frame_);
          request->placed = std::move(big_placed_);
          big_frame_.clear();
          big_placed_.reset();
          big_frame_filled_ = 0;
          HandleFrame(std::move(request));
        }
      } else if (in_.empty()) {
        // Frames are parsed where they were read; only a partial one at the end is kept.
        const size_t used = ParseFrames(std::span<const uint8_t>(read_buf_, size_t(n)));
        if (!closing_) in_.assign(read_buf_ + used, read_buf_ + n);
      } else {
        in_.insert(in_.end(), read_buf_, read_buf_ + n);
        const size_t used = ParseFrames(in_);
        if (!closing_) in_.erase(in_.begin(), in_.begin() + static_cast<ptrdiff_t>(used));
      }
      if (static_cast<size_t>(n) < want) break;  // drained the socket
    }
    parsing_ = false;
    Flush();
    // Requests answered while parsing were still queued when they completed, so reading
    // may have stopped at the in-flight limit with nothing left to wait for: resume here,
    // since no writable event will come for a socket that never blocked.
    MaybeResumeReading();
  }

  // Takes the whole frames at the start of `data` (bytes read and not yet taken); returns
  // how many bytes it took. A large frame's start is copied into the frame's own buffer and
  // counted as taken (OnReadable reads the rest straight into it).
  size_t ParseFrames(std::span<const uint8_t> data) {
    size_t pos = 0;
    while (!closing_ && !close_requested_ && data.size() - pos >= 4) {
      int32_t size = static_cast<int32_t>(LoadBigEndian32(data.data() + pos));
      if (size < 0 || size > server_->limits_.max_request_bytes) {
        kLog()->warn(
            "connection {} from {}: request size {} is outside 0..{} "
            "(socket.request.max.bytes); closing it",
            id_, peer_, size, server_->limits_.max_request_bytes);
        Close();
        return pos;
      }
      const size_t have = data.size() - pos - 4;
      const uint8_t* frame = data.data() + pos + 4;
      if (have < static_cast<size_t>(size)) {
        // A frame larger than the read buffer gets its own buffer now, so the rest of it is
        // read into place instead of being copied through in_ (a produce request of a few
        // MiB would otherwise be copied twice more). The placer may give the buffer, once
        // the api key is known.
        if (static_cast<size_t>(size) > sizeof(read_buf_)) {
          if (have >= 2) big_placed_ = Place(frame, static_cast<size_t>(size));
          if (!big_placed_) big_frame_.resize(static_cast<size_t>(size));
          big_frame_filled_ = have;
          std::memcpy(BigFrameData(), frame, have);
          pos = data.size();
        }
        break;
      }
      // A whole frame: copied once, into the placer's buffer (a produce request's records
      // then reach storaged with no further copy) or into the request's own.
      auto request = std::make_unique<RequestContext>();
      if (size >= 2) request->placed = Place(frame, static_cast<size_t>(size));
      if (request->placed) {
        std::memcpy(request->placed->data(), frame, static_cast<size_t>(size));
      } else {
        request->frame.assign(frame, frame + size);
      }
      pos += 4 + static_cast<size_t>(size);
      HandleFrame(std::move(request));
    }
    return pos;
  }

  // The placer's buffer for a frame of `size` bytes starting at `frame` (its api key is the
  // first two bytes), or null.
  std::shared_ptr<PlacedFrame> Place(const uint8_t* frame, size_t size) {
    if (!server_->placer_) return nullptr;
    std::shared_ptr<PlacedFrame> placed =
        server_->placer_(static_cast<int16_t>(LoadBigEndian16(frame)), size);
    if (placed && placed->size() != size) placed.reset();
    return placed;
  }

  // The large frame being read, if any (size 0 when none).
  uint8_t* BigFrameData() { return big_placed_ ? big_placed_->data() : big_frame_.data(); }
  size_t BigFrameSize() const { return big_placed_ ? big_placed_->size() : big_frame_.size(); }

  // `request` holds the frame (in frame or placed) and nothing else yet.
  void HandleFrame(std::unique_ptr<RequestContext> request) {
    std::span<const uint8_t> frame = request->bytes();
    protocol::Reader reader(frame);
    // The header's own version depends on the API and version it starts with.
    Status st = frame.size() < 4
                    ? absl::InvalidArgumentError("frame shorter than an api key and version")
                    : request->header.Decode(
                          reader, protocol::RequestHeaderVersion(
                                      static_cast<int16_t>(LoadBigEndian16(frame.data())),
                                      static_cast<int16_t>(LoadBigEndian16(frame.data() + 2))));
    if (!st.ok()) {
      kLog()->warn("connection {} from {}: malformed request header ({}); closing it", id_, peer_,
                   std::string(st.message()));
      Close();
      return;
    }
    request->body_offset = frame.size() - reader.remaining();
    request->listener = listener_;
    request->peer = peer_;
    request->connection_id = id_;

    uint64_t seq = next_seq_++;
    slots_.push_back(
        Slot{seq, false, Response(), request->header.api_key, std::chrono::steady_clock::now()});
    if (InFlight() >= server_->limits_.max_in_flight_per_connection) StopReading();
    std::weak_ptr<Connection> weak = shared_from_this();
    server_->dispatcher_.Dispatch(std::move(request), [weak, seq](Response response) {
      if (auto conn = weak.lock()) conn->Complete(seq, std::move(response));
    });
  }

  void Complete(uint64_t seq, Response response) {
    if (closing_ || close_requested_) return;
    for (Slot& slot : slots_) {
      if (slot.seq == seq) {
        if (server_ != nullptr) {
          server_->request_metrics_.Record(
              slot.api_key, std::chrono::steady_clock::now() - slot.received, response.error);
        }
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
          if (!Queue(std::move(r))) return;
          break;
        case Response::Kind::kNoResponse:
          break;
        case Response::Kind::kClose:
          // What was answered before goes out first; later requests get no answer.
          close_requested_ = true;
          slots_.clear();
          StopReading();
          Flush();  // closes once the queue is written
          return;
      }
    }
    if (!parsing_) Flush();
    MaybeResumeReading();
  }

  // Checks the response, fills in its size prefix and queues it for the next Flush.
  bool Queue(Response r) {
    const char* problem = nullptr;
    int64_t size = static_cast<int64_t>(r.bytes.size()) - static_cast<int64_t>(kSizePrefixBytes);
    size_t prev_at = kSizePrefixBytes;
    if (size < 0) problem = "a response without its size prefix";
    for (const protocol::FileInsert& ins : r.inserts) {
      if (problem != nullptr) break;
      const protocol::FileSlice& s = ins.slice;
      if (ins.at < prev_at || ins.at > r.bytes.size()) {
        problem = "file inserts out of order or outside the response";
      } else if (s.file == nullptr || s.position < 0 || s.length < 0) {
        problem = "a file insert without a file or with a negative position or length";
      } else {
        size += s.length;
        prev_at = ins.at;
      }
    }
    if (problem == nullptr && size > INT32_MAX) problem = "a response above 2 GiB";
    if (problem != nullptr) {
      kLog()->error("connection {}: {}; closing", id_, problem);
      Close();
      return false;
    }
    uint32_t prefix = static_cast<uint32_t>(size);
    StoreBigEndian32(r.bytes.data(), prefix);
    Outgoing& o = out_.emplace_back();
    o.bytes = std::move(r.bytes);
    o.inserts = std::move(r.inserts);
    std::erase_if(o.inserts, [](const protocol::FileInsert& i) { return i.slice.length == 0; });
    return true;
  }

  // Writes what is queued until done or the socket buffer is full (then waits for
  // writability). Closes the connection when a close was asked for and all is written.
  void Flush() {
    if (closing_ || waiting_writable_) return;
    while (!out_.empty()) {
      WriteResult r = out_.front().AtFile() ? SendFileSlice() : SendBytes();
      if (r == WriteResult::kClosed) return;
      if (r == WriteResult::kBlocked) {
        waiting_writable_ = true;
        break;
      }
    }
    if (out_.empty() && close_requested_) {
      Close();
      return;
    }
    UpdatePoll();
  }

  // One sendmsg of every bytes part from the head of the queue up to the next file slice:
  // all the plain responses ready at once, or the bytes before a Fetch response's records.
  WriteResult SendBytes() {
    iovec iov[kMaxIov];
    size_t count = 0;
    size_t total = 0;
    bool more = false;  // a file slice (or more bytes) follows what this call carries
    for (const Outgoing& o : out_) {
      size_t pos = o.byte_pos;
      size_t ins = o.next_insert;
      for (;;) {
        if (ins < o.inserts.size() && o.inserts[ins].at == pos) {
          more = true;
          break;
        }
        size_t end = ins < o.inserts.size() ? o.inserts[ins].at : o.bytes.size();
        if (count == kMaxIov) {
          more = true;
          break;
        }
        iov[count].iov_base = const_cast<uint8_t*>(o.bytes.data() + pos);
        iov[count].iov_len = end - pos;
        ++count;
        total += end - pos;
        if (ins == o.inserts.size()) break;  // this response's last part
        pos = end;                           // at the next file slice
      }
      if (more) break;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    // MSG_MORE: the bytes before a file slice leave with its first packet, not on their own.
    int flags = MSG_NOSIGNAL | (more ? MSG_MORE : 0);
    ssize_t n;
    do {
      n = ::sendmsg(fd_, &msg, flags);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return WriteResult::kBlocked;
      kLog()->debug("connection {} from {}: write: {}", id_, peer_, std::strerror(errno));
      Close();
      return WriteResult::kClosed;
    }
    ConsumeBytes(static_cast<size_t>(n));
    // A short write means the socket buffer is full.
    return static_cast<size_t>(n) < total ? WriteResult::kBlocked : WriteResult::kProgress;
  }

  // Marks `n` bytes from the head of the queue written (bytes parts only: SendBytes never
  // reaches past a file slice).
  void ConsumeBytes(size_t n) {
    while (n > 0 && !out_.empty()) {
      Outgoing& o = out_.front();
      size_t take = std::min(n, o.BytesEnd() - o.byte_pos);
      if (take == 0) break;  // at a file slice; cannot happen, see above
      o.byte_pos += take;
      n -= take;
      if (o.Done()) out_.pop_front();
    }
  }

  WriteResult SendFileSlice() {
    Outgoing& o = out_.front();
    const protocol::FileSlice& slice = o.inserts[o.next_insert].slice;
    off_t pos = static_cast<off_t>(slice.position + o.file_done);
    size_t want = static_cast<size_t>(slice.length - o.file_done);
    ssize_t n;
    do {
      n = ::sendfile(fd_, slice.file->fd(), &pos, want);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return WriteResult::kBlocked;
      kLog()->warn("connection {} from {}: sendfile of {} bytes at {}: {}; closing it", id_, peer_,
                   want, pos, std::strerror(errno));
      Close();
      return WriteResult::kClosed;
    }
    if (n == 0) {
      // The file ends before the slice does (truncated under us). The frame's size is
      // already promised and cannot be padded: closing makes the client retry.
      kLog()->warn(
          "connection {} from {}: a record file has no byte {}, {} bytes short of the slice the "
          "response promised (truncated?); closing it",
          id_, peer_, pos, want);
      Close();
      return WriteResult::kClosed;
    }
    o.file_done += n;
    if (o.file_done < slice.length) return WriteResult::kBlocked;  // socket buffer full
    o.file_done = 0;
    ++o.next_insert;
    if (o.Done()) out_.pop_front();
    return WriteResult::kProgress;
  }

  KafkaServer* server_;
  uint64_t id_;
  std::string listener_;
  std::string peer_;
  std::string ip_;
  int fd_;
  UvHandle<uv_poll_t> poll_;  // its `data` is this
  int polled_events_ = 0;
  bool reading_ = false;
  bool waiting_writable_ = false;
  bool closing_ = false;
  bool close_requested_ = false;  // a kClose answer: close once the queue is written
  bool parsing_ = false;
  std::deque<Outgoing> out_;  // responses to write, in order; the front may be partly written
  uint8_t read_buf_[64 * 1024];
  std::vector<uint8_t> in_;
  // A frame larger than read_buf_ whose size is known, being read into place: into
  // big_placed_ when the server's placer gave one, else into big_frame_.
  FrameBytes big_frame_;  // resize() leaves it unzeroed: the socket's bytes go over it
  std::shared_ptr<PlacedFrame> big_placed_;
  size_t big_frame_filled_ = 0;
  std::deque<Slot> slots_;
  uint64_t next_seq_ = 0;
};

KafkaServer::KafkaServer(EventLoop& loop, RequestDispatcher& dispatcher, ServerLimits limits,
                         FramePlacer placer)
    : loop_(loop), dispatcher_(dispatcher), limits_(limits), placer_(std::move(placer)) {}

KafkaServer::~KafkaServer() {
  Close();
  for (auto& [id, c] : connections_) c->Detach();
}

Status KafkaServer::Listen(const std::vector<config::Listener>& listeners) {
  for (const config::Listener& l : listeners) {
    // A listener that fails is closed by its handle's destructor on the way out.
    auto listener = std::make_unique<Listener>();
    listener->server = this;
    listener->name = l.name;
    std::string host = l.host.empty() ? "0.0.0.0" : l.host;
    int rc = listener->handle.Init([this](uv_tcp_t* h) { return uv_tcp_init(loop_.raw(), h); });
    if (rc != 0) {
      return absl::UnavailableError(
          fmt::format("listeners: cannot listen on {}:{}: {}", host, l.port, uv_strerror(rc)));
    }
    uv_tcp_t* tcp = listener->handle.get();
    tcp->data = listener.get();
    sockaddr_storage addr{};
    if (uv_ip4_addr(host.c_str(), l.port, reinterpret_cast<sockaddr_in*>(&addr)) != 0 &&
        uv_ip6_addr(host.c_str(), l.port, reinterpret_cast<sockaddr_in6*>(&addr)) != 0) {
      return absl::InvalidArgumentError(
          fmt::format("listeners: '{}' is not an IP address to listen on", host));
    }
    rc = uv_tcp_bind(tcp, reinterpret_cast<sockaddr*>(&addr), 0);
    if (rc == 0) {
      rc = uv_listen(reinterpret_cast<uv_stream_t*>(tcp), 1024, &KafkaServer::OnNewConnection);
    }
    if (rc != 0) {
      return absl::UnavailableError(
          fmt::format("listeners: cannot listen on {}:{}: {}", host, l.port, uv_strerror(rc)));
    }
    sockaddr_storage bound{};
    int len = sizeof(bound);
    uv_tcp_getsockname(tcp, reinterpret_cast<sockaddr*>(&bound), &len);
    int port = bound.ss_family == AF_INET
                   ? ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port)
                   : ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
    bound_ports_[l.name] = port;
    kLog()->info("listening for Kafka clients on {} {}:{}", l.name, host, port);
    listeners_.push_back(std::move(listener));
  }
  return absl::OkStatus();
}

void KafkaServer::OnNewConnection(uv_stream_t* stream, int status) {
  auto* listener = static_cast<Listener*>(stream->data);
  if (status < 0) {
    kLog()->warn("accept on {} failed: {}", listener->name, uv_strerror(status));
    return;
  }
  listener->server->Accept(listener);
}

void KafkaServer::Accept(Listener* listener) {
  // libuv accepts into a uv_tcp_t; the connection takes its own descriptor of the socket
  // and the uv_tcp_t closes libuv's, so the connection is the socket's one owner (see the
  // header for why connections are not uv_tcp_t).
  UvHandle<uv_tcp_t> accepted;
  int fd = -1;
  int rc = accepted.Init([this](uv_tcp_t* h) { return uv_tcp_init(loop_.raw(), h); });
  if (rc == 0) {
    rc = uv_accept(reinterpret_cast<uv_stream_t*>(listener->handle.get()),
                   reinterpret_cast<uv_stream_t*>(accepted.get()));
  }
  if (rc == 0) {
    uv_os_fd_t raw = -1;
    rc = uv_fileno(accepted.handle(), &raw);
    if (rc == 0) {
      fd = fcntl(raw, F_DUPFD_CLOEXEC, 0);
      if (fd < 0) rc = uv_translate_sys_error(errno);
    }
  }
  accepted.Close();
  if (fd < 0) {
    kLog()->warn("accept on {} failed: {}", listener->name, uv_strerror(rc));
    return;
  }
  auto conn = std::make_shared<Connection>(this, next_connection_id_++, listener->name, fd);
  if (!conn->Init(loop_.raw())) return;  // its destructor closes the socket
  connections_[conn->id()] = conn;
  connection_metrics_.accepted->Inc();
  connection_metrics_.open->Set(static_cast<int64_t>(connections_.size()));
  int& from_ip = per_ip_[conn->ip()];
  ++from_ip;
  if (closed_ || static_cast<int64_t>(connections_.size()) > limits_.max_connections ||
      from_ip > limits_.max_connections_per_ip) {
    kLog()->warn(
        "refusing connection from {}: {} connection limit reached", conn->ip(),
        from_ip > limits_.max_connections_per_ip ? "max.connections.per.ip" : "max.connections");
    connection_metrics_.refused->Inc();
    conn->Close();
    return;
  }
  conn->Start();
}

void KafkaServer::Forget(uint64_t id, const std::string& ip) {
  connections_.erase(id);
  connection_metrics_.open->Set(static_cast<int64_t>(connections_.size()));
  auto it = per_ip_.find(ip);
  if (it != per_ip_.end() && --it->second <= 0) per_ip_.erase(it);
}

void KafkaServer::Close() {
  closed_ = true;
  for (auto& l : listeners_) l->handle.Close();
  std::vector<std::shared_ptr<Connection>> all;
  for (auto& [id, c] : connections_) all.push_back(c);
  for (auto& c : all) c->Close();
}

}  // namespace runnel::brokerd
