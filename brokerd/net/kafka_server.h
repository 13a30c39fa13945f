// The Kafka listeners: TCP accept, length-prefixed frames, per-connection pipelining.
//
// Each connection reads frames of [int32 size][request], checks the size against
// socket.request.max.bytes before buffering the frame, decodes the request header and
// hands the request to the dispatcher. Many requests may be in flight on a connection;
// their responses are written in request order, every response ready at once in one
// sendmsg, and the file ranges a response carries (Fetch records) with sendfile from the
// segment file straight to the socket. A malformed frame or header closes that connection
// only, with one log line. Everything here runs on the loop thread.
//
// I/O: listeners are libuv uv_tcp_t handles, but a connection's socket is driven by a
// uv_poll_t with our own read/sendmsg/sendfile. libuv's stream handle owns its fd's epoll
// registration and has no sendfile, so waiting for writability between sendfile calls
// is not possible beside it; the connection therefore takes its own descriptor of each
// accepted socket (F_DUPFD_CLOEXEC) and the uv_tcp_t that accepted it is closed at once,
// leaving the connection the socket's only owner.
//
// sendfile(2) cannot be told MSG_NOSIGNAL: the process must ignore SIGPIPE (brokerd's
// main does), or a client that goes away mid-response kills it.
#pragma once

#include <uv.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "brokerd/broker_metrics.h"
#include "brokerd/net/event_loop.h"
#include "brokerd/net/request.h"
#include "brokerd/net/uv_handle.h"
#include "common/config/listeners.h"
#include "common/util/status.h"

namespace runnel::brokerd {

struct ServerLimits {
  int32_t max_request_bytes = 100 << 20;  // socket.request.max.bytes
  int32_t max_connections = INT32_MAX;
  int32_t max_connections_per_ip = INT32_MAX;
  // Reading pauses when this many requests are unanswered or answered but not yet written
  // (so a client that does not read its responses cannot make the broker buffer without
  // bound), and resumes at half of it.
  size_t max_in_flight_per_connection = 64;
};

class KafkaServer {
 public:
  // `placer`, when given, may say where a frame larger than the read buffer is read to.
  KafkaServer(EventLoop& loop, RequestDispatcher& dispatcher, ServerLimits limits,
              FramePlacer placer = nullptr);
  // Closes what is still open; connections still closing finish without calling back here.
  ~KafkaServer();
  KafkaServer(const KafkaServer&) = delete;
  KafkaServer& operator=(const KafkaServer&) = delete;

  // Binds and listens on every listener. Port 0 picks a free port (see bound_ports()).
  Status Listen(const std::vector<config::Listener>& listeners);
  // Closes the listeners and every connection (the connections leave connection_count() as
  // their close callbacks run). Loop thread only.
  void Close();

  // listener name -> port actually bound.
  const std::map<std::string, int>& bound_ports() const { return bound_ports_; }
  size_t connection_count() const { return connections_.size(); }

 private:
  class Connection;
  struct Listener {
    UvHandle<uv_tcp_t> handle;  // its `data` is this Listener
    KafkaServer* server;
    std::string name;
  };

  static void OnNewConnection(uv_stream_t* server, int status);
  void Accept(Listener* listener);
  void Forget(uint64_t id, const std::string& ip);

  EventLoop& loop_;
  RequestDispatcher& dispatcher_;
  ServerLimits limits_;
  FramePlacer placer_;
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::map<std::string, int> bound_ports_;
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> connections_;
  std::unordered_map<std::string, int> per_ip_;
  uint64_t next_connection_id_ = 1;
  bool closed_ = false;
  RequestMetrics request_metrics_;
  ConnectionMetrics connection_metrics_;
};

}  // namespace runnel::brokerd
