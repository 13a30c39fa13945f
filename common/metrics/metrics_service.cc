#include "common/metrics/metrics_service.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "common/grpc/unix_server.h"

namespace runnel::metrics {
namespace {

constexpr std::chrono::milliseconds kReadyProbeDeadline{250};

Type TypeFromName(std::string_view name) {
  if (name == "counter") return Type::kCounter;
  if (name == "histogram") return Type::kHistogram;
  return Type::kGauge;
}

}  // namespace

MetricsService::MetricsService(std::string role) : role_(std::move(role)) {
  RegisterProcessMetrics(ProcessRegistry());
}

std::vector<FamilyText> MetricsService::Collect() const {
  return ProcessRegistry().Collect({{"role", role_}});
}

grpc::Status MetricsService::Scrape(grpc::ServerContext*, const ScrapeRequest*,
                                    ScrapeResponse* response) {
  for (FamilyText& f : Collect()) {
    MetricFamily* out = response->add_families();
    out->set_name(std::move(f.name));
    out->set_help(std::move(f.help));
    out->set_type(std::string(TypeName(f.type)));
    for (std::string& s : f.samples) out->add_samples(std::move(s));
  }
  return grpc::Status::OK;
}

StatusOr<std::vector<FamilyText>> ScrapeRole(const std::string& socket_path,
                                             std::chrono::milliseconds deadline) {
  auto stub = runnel::metrics::Metrics::NewStub(grpcutil::UnixChannel(socket_path));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  ScrapeResponse response;
  grpc::Status status = stub->Scrape(&context, ScrapeRequest(), &response);
  if (!status.ok()) return FromGrpc(status);
  std::vector<FamilyText> out;
  out.reserve(response.families_size());
  for (MetricFamily& f : *response.mutable_families()) {
    FamilyText& text = out.emplace_back();
    text.name = std::move(*f.mutable_name());
    text.help = std::move(*f.mutable_help());
    text.type = TypeFromName(f.type());
    text.samples.assign(std::make_move_iterator(f.mutable_samples()->begin()),
                        std::make_move_iterator(f.mutable_samples()->end()));
  }
  return out;
}

StatusOr<std::unique_ptr<HttpServer>> MaybeServeRoleHttp(const config::Config& config,
                                                         const MetricsService* service,
                                                         const std::string& socket_path) {
  const char* supervised = std::getenv("RUNNEL_SUPERVISED");
  if (supervised != nullptr && std::string_view(supervised) == "1") return nullptr;
  std::string listener = config.GetString("runnel.http.listener");
  // Roles run as separate units share one node file but need a port each.
  if (const char* own = std::getenv("RUNNEL_HTTP_LISTENER"); own != nullptr) listener = own;
  if (listener.empty()) return nullptr;
  HttpHandlers handlers;
  handlers.metrics = [service] { return WriteText(service->Collect()); };
  handlers.ready = [socket_path](std::string* why) {
    StatusOr<bool> serving = grpcutil::HealthCheck(socket_path, kReadyProbeDeadline);
    if (serving.ok() && *serving) return true;
    *why = serving.ok() ? "not ready: NOT_SERVING"
                        : fmt::format("not ready: {}", serving.status().message());
    return false;
  };
  return HttpServer::Start(listener, std::move(handlers));
}

}  // namespace runnel::metrics
