// runnel-brokerd: the Kafka wire protocol.
#include <csignal>
#include <string>

#include "brokerd/broker.h"
#include "common/config/role_main.h"
#include "common/log/log.h"

int main(int argc, char** argv) {
  using namespace runnel;
  std::signal(SIGPIPE, SIG_IGN);
  int exit_code = 0;
  std::optional<config::Config> config = config::LoadRoleConfig(argc, argv, "brokerd", &exit_code);
  if (!config) return exit_code;
  brokerd::Broker broker(*config);
  Status st = broker.Start();
  if (!st.ok()) {
    log::Get("brokerd")->error("{}", std::string(st.message()));
    return 1;
  }
  return broker.Run();
}
