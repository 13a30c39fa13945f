// runnel-storaged: owns the node's log directories and serves StorageService.
#include <cstdio>
#include <string>

#include "common/config/role_main.h"
#include "common/grpc/unix_server.h"
#include "common/log/log.h"
#include "common/util/signals.h"
#include "storaged/storage_service.h"

int main(int argc, char** argv) {
  using namespace runnel;
  BlockTerminationSignals();
  int exit_code = 0;
  std::optional<config::Config> config =
      config::LoadRoleConfig(argc, argv, "storaged", &exit_code);
  if (!config) return exit_code;
  auto logger = log::Get("storaged");
  StatusOr<storaged::LogDirs> dirs =
      storaged::LogDirs::Open(config->GetList("log.dirs"), config->GetInt("node.id"));
  if (!dirs.ok()) {
    logger->error("{}", std::string(dirs.status().message()));
    return 1;
  }
  storaged::StorageServiceImpl service(*dirs);
  std::string socket = grpcutil::SocketPath(config->GetString("runnel.run.dir"), "storaged");
  auto server = grpcutil::StartUnixServer(socket, {&service});
  if (!server.ok()) {
    logger->error("{}", std::string(server.status().message()));
    return 1;
  }
  grpcutil::SetServing(**server, true);
  logger->info("serving on {} with {} log dir(s)", socket, dirs->dirs().size());
  int sig = WaitForTerminationSignal();
  logger->info("signal {} received, shutting down", sig);
  grpcutil::SetServing(**server, false);
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return 0;
}
