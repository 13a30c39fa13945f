#include "supervisor/args.h"

#include <fmt/format.h>

#include <optional>

namespace runnel::supervisor {
namespace {

// Returns the value of `--name VALUE` or `--name=VALUE` at args[*i], advancing *i past it.
// std::nullopt when args[*i] is not this option.
StatusOr<std::optional<std::string>> OptionValue(const std::vector<std::string>& args, size_t* i,
                                                 const std::string& name) {
  const std::string& a = args[*i];
  if (a == name) {
    if (*i + 1 >= args.size()) {
      return absl::InvalidArgumentError(fmt::format("{} needs a value", name));
    }
    *i += 1;
    return std::optional<std::string>(args[*i]);
  }
  if (a.size() > name.size() && a.compare(0, name.size(), name) == 0 && a[name.size()] == '=') {
    return std::optional<std::string>(a.substr(name.size() + 1));
  }
  return std::optional<std::string>();
}

}  // namespace

StatusOr<Args> ParseArgs(const std::vector<std::string>& args) {
  Args out;
  std::optional<Command> subcommand;
  bool config_docs = false;
  bool help = false;
  size_t i = 0;
  if (!args.empty() && (args[0] == "run" || args[0] == "status")) {
    subcommand = args[0] == "run" ? Command::kRun : Command::kStatus;
    i = 1;
  }
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help = true;
      continue;
    }
    if (a == "--config-docs") {
      config_docs = true;
      continue;
    }
    RUNNEL_ASSIGN_OR_RETURN(std::optional<std::string> config, OptionValue(args, &i, "--config"));
    if (config) {
      if (config->empty()) return absl::InvalidArgumentError("--config needs a file name");
      out.config_path = *config;
      continue;
    }
    RUNNEL_ASSIGN_OR_RETURN(std::optional<std::string> run_dir, OptionValue(args, &i, "--run-dir"));
    if (run_dir) {
      if (run_dir->empty()) return absl::InvalidArgumentError("--run-dir needs a directory");
      out.run_dir = *run_dir;
      continue;
    }
    return absl::InvalidArgumentError(fmt::format("unknown argument '{}'", a));
  }

  if (help) {
    out.command = Command::kHelp;
    return out;
  }
  if (config_docs) {
    if (subcommand || !out.config_path.empty() || !out.run_dir.empty()) {
      return absl::InvalidArgumentError("--config-docs takes no other argument");
    }
    out.command = Command::kConfigDocs;
    return out;
  }
  out.command = subcommand.value_or(Command::kRun);
  if (out.command == Command::kRun) {
    if (!out.run_dir.empty()) {
      return absl::InvalidArgumentError("--run-dir is for `runnel status`; run takes --config");
    }
    if (out.config_path.empty()) return absl::InvalidArgumentError("--config FILE is required");
  } else if (!out.config_path.empty() && !out.run_dir.empty()) {
    return absl::InvalidArgumentError("status takes --config FILE or --run-dir DIR, not both");
  }
  return out;
}

std::string Usage() {
  return "Usage:\n"
         "  runnel --config FILE          run this node's roles (also: runnel run --config FILE)\n"
         "  runnel status [--config FILE | --run-dir DIR]\n"
         "                                show the state of a running node's roles\n"
         "  runnel --config-docs          print the table of configuration keys (markdown)\n"
         "  runnel --help                 this text\n"
         "\n"
         "Roles come from process.roles: controller runs runnel-controllerd, broker runs\n"
         "runnel-storaged and runnel-brokerd. The role binaries are looked up next to the\n"
         "runnel executable, or in $RUNNEL_BIN_DIR when set.\n"
         "\n"
         "Exit codes: 0 stopped by SIGTERM/SIGINT, 1 a role failed to start (or status found\n"
         "no supervisor), 2 bad command line or configuration.\n";
}

}  // namespace runnel::supervisor
