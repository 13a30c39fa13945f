// runnel.metrics.Metrics (proto/runnel/metrics.proto): a role's metrics on its Unix socket,
// for the supervisor; and RoleHttp, the HTTP port of a role run alone.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/config/config.h"
#include "common/metrics/http_server.h"
#include "common/metrics/metrics.h"
#include "proto/runnel/metrics.grpc.pb.h"

namespace runnel::metrics {

// Answers Scrape with ProcessRegistry()'s families, each sample labelled role="<role>".
// Construct it at the role's start: it registers the process_* metrics.
class MetricsService final : public runnel::metrics::Metrics::Service {
 public:
  explicit MetricsService(std::string role);
  grpc::Status Scrape(grpc::ServerContext* context, const ScrapeRequest* request,
                      ScrapeResponse* response) override;

  // The families this process serves, labelled with the role.
  std::vector<FamilyText> Collect() const;

 private:
  const std::string role_;
};

// Asks the role listening on `socket_path` for its metrics.
StatusOr<std::vector<FamilyText>> ScrapeRole(const std::string& socket_path,
                                             std::chrono::milliseconds deadline);

// A role run alone (not under the supervisor, RUNNEL_SUPERVISED unset) with
// runnel.http.listener set serves its own /metrics, /healthz and /readyz (ready when its
// own socket answers SERVING). $RUNNEL_HTTP_LISTENER, when set, replaces the key's value:
// roles run as separate systemd units share one node file but need a port each (empty: no
// port). Returns nullptr when it should not serve; an error when the address is bad or
// cannot be bound.
StatusOr<std::unique_ptr<HttpServer>> MaybeServeRoleHttp(const config::Config& config,
                                                         const MetricsService* service,
                                                         const std::string& socket_path);

}  // namespace runnel::metrics
