// storaged's append socket: a brokerd on the same host sends its produce appends as frames
// on a Unix stream socket (proto/runnel/storage.proto, "The append stream") instead of as
// gRPC calls.
//
// A gRPC Append costs a round of thread hand-offs on each side (brokerd's loop, gRPC's
// poller, storaged's server thread, gRPC's completion thread, brokerd's loop again) besides
// HTTP/2 framing. Here the brokerd's loop writes a frame, this connection's thread wakes,
// appends, and writes the answer, which wakes the brokerd's loop: two hand-offs per round
// trip, and one for all the requests that arrived in one read.
//
// One thread accepts; each connection has a thread of its own that applies its requests one
// after the other, in arrival order, through StorageServiceImpl::AppendOwned (the same work
// as the gRPC Append), and writes the answers of the requests that arrived in one read back
// in one write.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "common/util/mutex.h"
#include "common/util/status.h"
#include "storaged/storage_service.h"

namespace runnel::storaged {

class AppendSocketServer {
 public:
  // Most connections served at once; one more is closed as soon as it is accepted.
  static constexpr size_t kMaxConnections = 64;

  // Listens on `path` (a stale socket file there is replaced) and serves `service`, which
  // must outlive Stop().
  static StatusOr<std::unique_ptr<AppendSocketServer>> Start(const std::string& path,
                                                             StorageServiceImpl& service);
  ~AppendSocketServer();
  AppendSocketServer(const AppendSocketServer&) = delete;
  AppendSocketServer& operator=(const AppendSocketServer&) = delete;

  // Closes the listener and every connection (a request being applied is finished first,
  // its answer may be lost) and waits for every thread; removes the socket file. Idempotent.
  void Stop();

  const std::string& path() const { return path_; }
  // Requests answered so far, over every connection.
  uint64_t requests_answered() const { return answered_.load(); }
  // Connections accepted and still served (a test waits on it rather than sleep). Thread-safe.
  size_t connection_count() const;

 private:
  struct Connection {
    int fd;  // -1 once its thread has closed it (guarded by mu_)
    std::thread thread;
    bool done = false;  // guarded by mu_
  };

  AppendSocketServer(std::string path, StorageServiceImpl& service, int listen_fd, int wake_read,
                     int wake_write);
  void AcceptLoop();
  void Serve(Connection* conn);

  const std::string path_;
  StorageServiceImpl& service_;
  int listen_fd_;
  int wake_read_;  // the accept thread polls it beside the listener; Stop writes wake_write_
  int wake_write_;
  std::thread accept_thread_;
  mutable Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Connection> connections_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> answered_{0};
};

}  // namespace runnel::storaged
