// The node's HTTP port (runnel.http.listener): Prometheus /metrics, /healthz and /readyz,
// through Debian's cpp-httplib.
//
// Threads: one thread accepts and hands each connection to a pool of kThreads threads,
// which run the handlers below. Handlers must be thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/util/status.h"

namespace httplib {
class Server;
}

namespace runnel::metrics {

struct HttpHandlers {
  // The text exposition format of every metric to serve.
  std::function<std::string()> metrics;
  // Readiness: true when ready; `why` names what is not (the 503 body).
  std::function<bool(std::string* why)> ready;
};

class HttpServer {
 public:
  static constexpr int kThreads = 2;

  // Binds `listener` (a valid runnel.http.listener value) and starts serving:
  //   GET /metrics  200, text/plain; version=0.0.4
  //   GET /healthz  200 "ok" while the process runs
  //   GET /readyz   200 "ready" or 503 with what is not ready
  // An address that cannot be bound is an error naming it.
  static StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listener,
                                                     HttpHandlers handlers);
  ~HttpServer();  // stops accepting, waits for the handlers running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

 private:
  HttpServer() = default;

  HttpHandlers handlers_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace runnel::metrics
