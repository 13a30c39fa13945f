#include "supervisor/roles.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/grpc/unix_server.h"

namespace runnel::supervisor {

std::vector<std::string> RoleNamesFor(const std::vector<std::string>& process_roles) {
  auto has = [&](const char* role) {
    return std::find(process_roles.begin(), process_roles.end(), role) != process_roles.end();
  };
  std::vector<std::string> names;
  // On a broker-only node controllerd is the metadata log's observer that brokerd follows.
  if (has("controller") || has("broker")) names.push_back("controllerd");
  if (has("broker")) {
    names.push_back("storaged");
    names.push_back("brokerd");
  }
  return names;
}

StatusOr<std::string> RoleBinDir() {
  if (const char* env = std::getenv("RUNNEL_BIN_DIR"); env != nullptr && env[0] != '\0') {
    return AbsolutePath(env);
  }
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return absl::InternalError(
        fmt::format("cannot find the runnel executable (/proc/self/exe): {}; set RUNNEL_BIN_DIR",
                    ec.message()));
  }
  return exe.parent_path().string();
}

StatusOr<std::vector<RoleSpec>> BuildRoleSpecs(const std::vector<std::string>& role_names,
                                               const std::string& bin_dir,
                                               const std::string& config_path,
                                               const std::string& run_dir) {
  std::vector<RoleSpec> specs;
  for (const std::string& name : role_names) {
    RoleSpec spec;
    spec.name = name;
    spec.binary = fmt::format("{}/runnel-{}", bin_dir, name);
    spec.args = {"--config", config_path};
    spec.env = {"RUNNEL_SUPERVISED=1"};
    spec.socket_path = grpcutil::SocketPath(run_dir, name);
    struct stat st;
    if (::stat(spec.binary.c_str(), &st) != 0) {
      return absl::NotFoundError(
          fmt::format("role binary {} not found: {} (roles are looked up next to runnel or in "
                      "$RUNNEL_BIN_DIR)",
                      spec.binary, std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode) || ::access(spec.binary.c_str(), X_OK) != 0) {
      return absl::PermissionDeniedError(
          fmt::format("role binary {} is not an executable file", spec.binary));
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

StatusOr<std::string> AbsolutePath(const std::string& path) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        fmt::format("cannot make {} an absolute path: {}", path, ec.message()));
  }
  return abs.lexically_normal().string();
}

}  // namespace runnel::supervisor
