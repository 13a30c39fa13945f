// brokerd's end of storaged's append socket (storaged/append_socket.h): Appends as frames on
// one Unix stream connection, answered in order, with every callback on the loop.
//
// A unary gRPC Append wakes a gRPC poller thread and a completion thread in brokerd on top of
// the loop; here storaged's answer wakes the loop itself, which reads the socket. When the
// connection is not up (storaged not started yet, restarting, or one without the socket),
// AppendBatcher sends its calls through gRPC instead, so this is a faster road, never the
// only one.
//
// A broken connection fails every call not yet answered with UNAVAILABLE; a call not
// answered within its timeout fails with DEADLINE_EXCEEDED and closes the connection (the
// answers behind it are in doubt as well). Both are what a failed gRPC Append gives, and the
// caller treats them alike: the appends may or may not have been written. The stream then
// connects again after a backoff (100 ms, doubling to 1 s).
//
// Everything runs on the loop thread.
#pragma once

#include <grpcpp/grpcpp.h>
#include <uv.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "brokerd/net/event_loop.h"
#include "brokerd/net/uv_handle.h"
#include "proto/runnel/storage.pb.h"

namespace runnel::brokerd {

class AppendStream {
 public:
  using Done = std::function<void(const grpc::Status&, storage::AppendResponse&)>;

  AppendStream(EventLoop& loop, std::string socket_path);
  ~AppendStream();
  AppendStream(const AppendStream&) = delete;
  AppendStream& operator=(const AppendStream&) = delete;

  // Starts connecting.
  void Start();
  // Whether Append may be called: connected and not closed.
  bool connected() const;
  // Sends one request, meant for while connected() (otherwise it fails with UNAVAILABLE).
  // `done` runs later, never inside this call, with storaged's answer or a failure as above.
  void Append(storage::AppendRequest req, std::chrono::milliseconds timeout, Done done);
  // Closes the connection and the timer for good. The calls in flight are dropped without
  // running their `done`, as a stopping loop drops a gRPC completion. Call it before the
  // loop's last run, while the owner is closing its handles (the destructor does too).
  void Close();

  size_t in_flight() const { return calls_.size(); }

  static constexpr std::chrono::milliseconds kMinBackoff{100};
  static constexpr std::chrono::milliseconds kMaxBackoff{1000};

 private:
  struct Connection;
  struct Call {
    uint64_t id;
    std::chrono::steady_clock::time_point deadline;
    Done done;
  };

  void Connect();
  void OnConnected(Connection* conn, int status);
  void OnRead(Connection* conn, ssize_t nread, const uv_buf_t* buf);
  void OnTick();
  // Drops the connection and fails every call in flight with `why`.
  void Broken(const grpc::Status& why);
  // The same from the timer's next run (at once), for failures met inside Append.
  void BreakSoon(grpc::Status why);
  // Lets go of conn_ (closed asynchronously) without touching the calls.
  void Drop();
  // The timer runs while there is something to watch: calls in flight, or a connection to
  // make.
  void UpdateTimer();

  EventLoop& loop_;
  const std::string socket_path_;
  // Connecting or connected. A dropped one is owned by its pipe's close callback.
  std::unique_ptr<Connection> conn_;
  std::deque<Call> calls_;  // sent, in order, not yet answered
  uint64_t next_id_ = 1;
  UvTimer timer_;
  bool started_ = false;
  bool closed_ = false;
  bool timer_running_ = false;
  std::optional<grpc::Status> break_soon_;
  std::chrono::milliseconds backoff_ = kMinBackoff;
  std::chrono::steady_clock::time_point reconnect_at_{};
};

}  // namespace runnel::brokerd
