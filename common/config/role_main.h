// The start of every role daemon's main(): `runnel-<role> --config FILE`.
#pragma once

#include <optional>
#include <string_view>

#include "common/config/config.h"

namespace runnel::config {

// Parses `--config FILE`, loads and validates the node configuration (unknown keys are
// warnings) and sets up logging for `role`. On failure it prints why to stderr, sets
// *exit_code (2: usage or config error) and returns nullopt.
std::optional<Config> LoadRoleConfig(int argc, char** argv, std::string_view role, int* exit_code);

}  // namespace runnel::config
