// runnel-brokerd: the Kafka wire protocol.
#include <atomic>
#include <csignal>
#include <string>

#include "brokerd/broker.h"
#include "common/config/role_main.h"
#include "common/log/log.h"

namespace {

// Set by SIGTERM/SIGINT until the loop's own handlers take over in Run(): start-up may
// wait long for a controller quorum, and a stop then must not wait for it.
std::atomic<bool> g_stop{false};

extern "C" void OnStopSignal(int) { g_stop.store(true); }

}  // namespace

int main(int argc, char** argv) {
  using namespace runnel;
  std::signal(SIGPIPE, SIG_IGN);
  int exit_code = 0;
  std::optional<config::Config> config = config::LoadRoleConfig(argc, argv, "brokerd", &exit_code);
  if (!config) return exit_code;
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  brokerd::Broker broker(*config);
  Status st = broker.Start(g_stop);
  if (!st.ok()) {
    log::Get("brokerd")->error("{}", std::string(st.message()));
    return 1;
  }
  return broker.Run();
}
