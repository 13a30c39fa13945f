#include "common/grpc/unix_server.h"

#include <fmt/format.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

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

StatusOr<std::unique_ptr<grpc::Server>> StartUnixServer(
    const std::string& socket_path, const std::vector<grpc::Service*>& services) {
  if (socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(
        fmt::format("socket path {} is too long for a Unix socket", socket_path));
  }
  if (services.empty()) {
    return absl::InvalidArgumentError("a gRPC server needs at least one service besides health");
  }
  ::unlink(socket_path.c_str());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(UnixTarget(socket_path), grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(256 << 20);
  builder.SetMaxSendMessageSize(256 << 20);
  for (grpc::Service* s : services) builder.RegisterService(s);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    return absl::UnavailableError(fmt::format("cannot listen on unix:{}", socket_path));
  }
  if (::chmod(socket_path.c_str(), 0660) != 0) {
    return absl::PermissionDeniedError(fmt::format("chmod 0660 {} failed", socket_path));
  }
  return server;
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

Status CheckServing(const std::string& socket_path, std::chrono::milliseconds deadline) {
  auto stub = grpc::health::v1::Health::NewStub(UnixChannel(socket_path));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status st = stub->Check(&ctx, req, &resp);
  if (!st.ok()) return FromGrpc(st);
  if (resp.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return absl::UnavailableError("not serving yet");
  }
  return absl::OkStatus();
}

}  // namespace runnel::grpcutil
