// Which role daemons a node runs, in which order, and how each is executed.
#pragma once

#include <string>
#include <vector>

#include "common/util/status.h"

namespace runnel::supervisor {

// One role process the supervisor runs.
struct RoleSpec {
  std::string name;               // "controllerd", "storaged", "brokerd"
  std::string binary;             // absolute path of runnel-<name>
  std::vector<std::string> args;  // arguments after argv[0]
  std::vector<std::string> env;   // "KEY=value" set on top of the supervisor's environment
  std::string socket_path;        // its gRPC Unix socket, probed for grpc.health.v1 SERVING

  // "runnel-<name>", the name operators see in ps and in messages.
  std::string DisplayName() const { return "runnel-" + name; }
};

// Role daemons for the `process.roles` values, in start order (controllerd, storaged,
// brokerd): controller -> controllerd (a voter); broker -> storaged, brokerd, and
// controllerd when the node is not a controller (an observer of the quorum's log, which
// brokerd follows). Unknown values are rejected by the config declaration before this is
// called and are ignored here.
std::vector<std::string> RoleNamesFor(const std::vector<std::string>& process_roles);

// Directory of the role binaries: $RUNNEL_BIN_DIR when set and not empty, else the
// directory of the running executable.
StatusOr<std::string> RoleBinDir();

// The specs of `role_names`, each run as `<bin_dir>/runnel-<name> --config <config_path>`
// with RUNNEL_SUPERVISED=1 in its environment (the supervisor already printed the config
// warnings) and its socket in `run_dir`. A binary that is missing or not executable is an
// error naming it.
StatusOr<std::vector<RoleSpec>> BuildRoleSpecs(const std::vector<std::string>& role_names,
                                               const std::string& bin_dir,
                                               const std::string& config_path,
                                               const std::string& run_dir);

// `path` made absolute against the current directory (without resolving symlinks).
StatusOr<std::string> AbsolutePath(const std::string& path);

}  // namespace runnel::supervisor
