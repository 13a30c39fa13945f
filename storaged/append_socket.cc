#include "storaged/append_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/log/log.h"
#include "common/util/frames.h"

namespace runnel::storaged {
namespace {

const log::ModuleLogger kLog("storaged.append");

// How much one read takes: a request names its bytes in shared memory, so frames are small
// and one read usually holds every request the brokerd sent since the last one.
constexpr size_t kReadBytes = 64 << 10;

bool WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<AppendSocketServer>> AppendSocketServer::Start(
    const std::string& path, StorageServiceImpl& service) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(fmt::format("append socket path {} is longer than {} bytes",
                                                  path, sizeof(addr.sun_path) - 1));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(fmt::format("socket: {}", std::strerror(errno)));
  ::unlink(path.c_str());  // a file left by a storaged that did not stop cleanly
  // Owner and group only, as the gRPC sockets beside it; set before it listens.
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::chmod(path.c_str(), 0660) != 0 || ::listen(fd, 16) != 0) {
    int err = errno;
    ::close(fd);
    return absl::FailedPreconditionError(
        fmt::format("cannot listen on {}: {}", path, std::strerror(err)));
  }
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(path.c_str());
    return absl::InternalError(fmt::format("pipe: {}", std::strerror(err)));
  }
  std::unique_ptr<AppendSocketServer> server(
      new AppendSocketServer(path, service, fd, wake[0], wake[1]));
  server->accept_thread_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

AppendSocketServer::AppendSocketServer(std::string path, StorageServiceImpl& service, int listen_fd,
                                       int wake_read, int wake_write)
    : path_(std::move(path)),
      service_(service),
      listen_fd_(listen_fd),
      wake_read_(wake_read),
      wake_write_(wake_write) {}

AppendSocketServer::~AppendSocketServer() { Stop(); }

void AppendSocketServer::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    // A read blocked on a connection returns 0 once the socket is shut down.
    for (Connection& c : connections_) {
      if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
    }
  }
  char byte = 0;
  while (::write(wake_write_, &byte, 1) < 0 && errno == EINTR) {
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  // The accept thread has ended, so the list no longer grows. Joined outside the lock, which
  // each connection's thread takes last; taking the list (nodes and all: the threads' pointers
  // stay valid) keeps every access to connections_ under it.
  std::list<Connection> connections;
  {
    MutexLock lock(&mu_);
    connections.swap(connections_);
  }
  for (Connection& c : connections) {
    if (c.thread.joinable()) c.thread.join();
  }
  ::close(listen_fd_);
  ::close(wake_read_);
  ::close(wake_write_);
  ::unlink(path_.c_str());
}

size_t AppendSocketServer::connection_count() const {
  MutexLock lock(&mu_);
  size_t served = 0;
  for (const Connection& c : connections_) served += c.done ? 0 : 1;
  return served;
}

void AppendSocketServer::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    int ready = ::poll(fds, 2, -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      kLog()->error("append socket: poll: {}; no more connections are accepted",
                    std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
        kLog()->warn("append socket: accept: {}", std::strerror(errno));
      }
      continue;
    }
    std::list<Connection> finished;
    MutexLock lock(&mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      auto next = std::next(it);
      if (it->done) finished.splice(finished.end(), connections_, it);
      it = next;
    }
    for (Connection& c : finished) c.thread.join();  // each has returned or is returning
    if (stopping_ || connections_.size() >= kMaxConnections) {
      if (!stopping_) {
        kLog()->warn("append socket: {} connections already; closing a new one", kMaxConnections);
      }
      ::close(fd);
      continue;
    }
    Connection& conn = connections_.emplace_back();
    conn.fd = fd;
    conn.thread = std::thread([this, c = &conn] { Serve(c); });
  }
}

void AppendSocketServer::Serve(Connection* conn) {
  int fd;
  {
    MutexLock lock(&mu_);
    fd = conn->fd;
  }
  FrameReader reader;
  std::vector<char> buf(kReadBytes);
  std::string out;
  storage::AppendStreamRequest request;
  storage::AppendStreamResponse response;
  std::string payload_bytes;
  bool open = true;
  while (open) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    reader.Feed(buf.data(), static_cast<size_t>(n));
    out.clear();
    while (true) {
      std::string_view payload;
      FrameReader::Next next = reader.Pop(&payload);
      if (next == FrameReader::Next::kNeedMore) break;
      if (next == FrameReader::Next::kTooLarge) {
        kLog()->warn("append socket: a frame is longer than {} bytes; closing the connection",
                     kMaxFrameBytes);
        open = false;
        break;
      }
      request.Clear();
      if (!request.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
        kLog()->warn(
            "append socket: a frame of {} bytes is not an AppendStreamRequest; closing "
            "the connection",
            payload.size());
        open = false;
        break;
      }
      response.Clear();
      response.set_id(request.id());
      grpc::Status status =
          service_.AppendOwned(request.mutable_request(), response.mutable_response());
      if (!status.ok()) {
        response.set_status_code(static_cast<int32_t>(status.error_code()));
        response.set_status_message(status.error_message());
        response.clear_response();
      }
      payload_bytes.clear();
      response.SerializeToString(&payload_bytes);
      AppendFrame(payload_bytes, &out);
      answered_.fetch_add(1);
    }
    // Answers to what was applied go out even when the connection then closes.
    if (!out.empty() && !WriteAll(fd, out)) break;
  }
  MutexLock lock(&mu_);
  ::close(fd);
  conn->fd = -1;
  conn->done = true;
}

}  // namespace runnel::storaged
