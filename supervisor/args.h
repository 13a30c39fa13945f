// Command line of `runnel`.
#pragma once

#include <string>
#include <vector>

#include "common/util/status.h"

namespace runnel::supervisor {

enum class Command {
  kRun,         // run the node's roles (`runnel --config F`, `runnel run --config F`)
  kStatus,      // ask a running supervisor for its roles' state
  kConfigDocs,  // print the table of configuration keys
  kHelp,
};

struct Args {
  Command command = Command::kHelp;
  std::string config_path;  // --config
  std::string run_dir;      // --run-dir (status only)
};

// Parses the arguments after argv[0]. A usage error names the offending argument.
StatusOr<Args> ParseArgs(const std::vector<std::string>& args);

// The text of `runnel --help`.
std::string Usage();

}  // namespace runnel::supervisor
