#include "common/grpc/unix_server.h"

#include <fmt/format.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "proto/grpc/health/v1/health.grpc.pb.h"

namespace runnel::grpcutil {

std::string SocketPath(const std::string& run_dir, const std::string& role) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(run_dir, ec);
  if (ec) dir = run_dir;
  return (dir.lexically_normal() / (role + ".sock")).string();
}

std::string UnixTarget(const std::string& socket_path) {
  return fmt::format("unix:{}", socket_path);
}

StatusOr<std::unique_ptr<grpc::Server>> StartUnixServer(const std::string& socket_path,
                                                        const std::vector<grpc::Service*>& services,
                                                        bool serving, int max_threads) {
  if (socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(
        fmt::format("socket path {} is too long for a Unix socket", socket_path));
  }
  if (services.empty()) {
    return absl::InvalidArgumentError("a gRPC server needs at least one service besides health");
  }
  // Bound here first when the health must read NOT_SERVING before anyone can connect.
  const std::string bind_path = serving ? socket_path : socket_path + ".new";
  if (bind_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(
        fmt::format("socket path {} is too long for a Unix socket", bind_path));
  }
  ::unlink(socket_path.c_str());
  ::unlink(bind_path.c_str());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(UnixTarget(bind_path), grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  grpc::ResourceQuota quota("runnel:" + socket_path);
  quota.SetMaxThreads(max_threads);
  builder.SetResourceQuota(quota);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return absl::UnavailableError(fmt::format("cannot listen on unix:{}", socket_path));
  }
  if (::chmod(bind_path.c_str(), 0660) != 0) {
    return absl::PermissionDeniedError(fmt::format("chmod 0660 {} failed", bind_path));
  }
  if (!serving) {
    SetServing(*server, false);
    if (::rename(bind_path.c_str(), socket_path.c_str()) != 0) {
      return absl::UnavailableError(
          fmt::format("cannot rename {} to {}: {}", bind_path, socket_path, std::strerror(errno)));
    }
  }
  return server;
}

void ShutdownUnixServer(grpc::Server& server, const std::string& socket_path,
                        std::chrono::system_clock::time_point deadline) {
  server.Shutdown(deadline);
  ::unlink(socket_path.c_str());
}

void SetServing(grpc::Server& server, bool serving) {
  if (auto* health = server.GetHealthCheckService()) health->SetServingStatus(serving);
}

std::shared_ptr<grpc::Channel> UnixChannel(const std::string& socket_path) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  return grpc::CreateCustomChannel(UnixTarget(socket_path), grpc::InsecureChannelCredentials(),
                                   args);
}

StatusOr<bool> HealthCheck(const std::string& socket_path, std::chrono::milliseconds deadline) {
  auto stub = grpc::health::v1::Health::NewStub(UnixChannel(socket_path));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st = stub->Check(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st);
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

Status CheckServing(const std::string& socket_path, std::chrono::milliseconds deadline) {
  RUNNEL_ASSIGN_OR_RETURN(bool serving, HealthCheck(socket_path, deadline));
  if (!serving) return absl::UnavailableError("not serving yet");
  return absl::OkStatus();
}

}  // namespace runnel::grpcutil
