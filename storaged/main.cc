// runnel-storaged: owns the node's partition logs and serves StorageService.
// Usage: runnel-storaged --config FILE
#include <string>

#include "common/config/role_main.h"
#include "common/log/log.h"
#include "common/util/signals.h"
#include "storaged/application.h"
#ifdef RUNNEL_TEST_HOOKS
#include "storaged/fault_file.h"
#endif

int main(int argc, char** argv) {
  // Before any thread exists, so every thread inherits the mask and Run() can sigwait.
  runnel::BlockTerminationSignals();
  int exit_code = 0;
  std::optional<runnel::config::Config> config =
      runnel::config::LoadRoleConfig(argc, argv, "storaged", &exit_code);
  if (!config) return exit_code;
#ifdef RUNNEL_TEST_HOOKS
  runnel::storaged::FaultFile::InstallFromEnvironment();
#endif

  auto app = runnel::storaged::Application::Start(*config);
  if (!app.ok()) {
    runnel::log::Get("storaged")->critical("cannot start: {}", std::string(app.status().message()));
    return 1;
  }
  return (*app)->Run();
}
