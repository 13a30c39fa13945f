// The `runnel` program: command dispatch and the node's main loop.
#pragma once

#include <string>

namespace runnel::supervisor {

// Entry point of `runnel`; returns the process exit code (see Usage()).
int Main(int argc, char** argv);

// Runs the roles of the node configured in `config_path` until SIGTERM/SIGINT (0) or a
// failed startup (1); 2 for a bad configuration.
int RunNode(const std::string& config_path);

}  // namespace runnel::supervisor
