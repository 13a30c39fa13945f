#include "common/metrics/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include "common/config/listeners.h"
#include "common/log/log.h"

namespace runnel::metrics {
namespace {

const log::ModuleLogger kLog("http");

}  // namespace

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listener,
                                                        HttpHandlers handlers) {
  StatusOr<config::HttpListener> address = config::ParseHttpListener(listener);
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("runnel.http.listener={}: {}", listener, address.status().message()));
  }
  std::unique_ptr<HttpServer> http(new HttpServer());
  http->handlers_ = std::move(handlers);
  http->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *http->server_;
  server.new_task_queue = [] { return new httplib::ThreadPool(kThreads); };
  server.set_read_timeout(5);
  server.set_write_timeout(5);
  HttpServer* self = http.get();
  server.Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(self->handlers_.metrics(), "text/plain; version=0.0.4; charset=utf-8");
    } catch (const std::exception& e) {
      kLog()->error("/metrics failed: {}", e.what());
      res.status = 500;
      res.set_content(e.what(), "text/plain");
    }
  });
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get("/readyz", [self](const httplib::Request&, httplib::Response& res) {
    std::string why;
    bool ready = false;
    try {
      ready = self->handlers_.ready(&why);
    } catch (const std::exception& e) {
      why = e.what();
    }
    res.status = ready ? 200 : 503;
    res.set_content(ready ? "ready\n" : why + "\n", "text/plain");
  });
  std::string host = address->host.empty() ? "0.0.0.0" : address->host;
  if (!server.bind_to_port(host, address->port)) {
    return absl::UnavailableError(fmt::format(
        "runnel.http.listener={}: cannot listen on {}:{} (in use, or not an address of this host)",
        listener, host, address->port));
  }
  http->port_ = address->port;
  http->thread_ = std::thread([self] { self->server_->listen_after_bind(); });
  kLog()->info("serving /metrics, /healthz, /readyz on {}", listener);
  return http;
}

HttpServer::~HttpServer() {
  // stop() only closes a socket that listen_after_bind already polls: wait for it (bounded),
  // or a server stopped right after Start would leave the thread listening.
  for (int i = 0; i < 200 && server_ && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace runnel::metrics
