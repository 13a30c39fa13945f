// runnel-controllerd: the cluster metadata controller. Usage: runnel-controllerd --config FILE
#include <string>

#include "common/config/role_main.h"
#include "common/log/log.h"
#include "controllerd/application.h"

int main(int argc, char** argv) {
  // Before any thread exists, so every thread inherits the mask and Run() can sigwait.
  runnel::controllerd::BlockShutdownSignals();
  int exit_code = 0;
  std::optional<runnel::config::Config> config =
      runnel::config::LoadRoleConfig(argc, argv, "controllerd", &exit_code);
  if (!config) return exit_code;

  auto app = runnel::controllerd::Application::Start(*config);
  if (!app.ok()) {
    runnel::log::Get("controllerd")
        ->critical("cannot start: {}", std::string(app.status().message()));
    return 1;
  }
  return (*app)->Run();
}
