// Named loggers over spdlog. Each module asks for its own ("brokerd.kafka",
// "storaged.log", "controllerd.raft"); every logger shares the sinks set up by Init.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <string_view>

namespace runnel::config {
class Config;
}

namespace runnel::log {

struct Options {
  std::string role;  // prefixed to every line, e.g. "brokerd"
  std::string level = "info";
  std::string file_dir;  // when set, also a rotating file <file_dir>/<role>.log
  size_t file_max_bytes = 100 << 20;
  size_t file_count = 10;
};

// Sets up stderr (and optionally rotating-file) output for this process. Call once from main.
void Init(const Options& options);
// Init from the node configuration's runnel.log.* keys.
void InitFromConfig(std::string_view role, const config::Config& config);

// The logger named `name`, created on first use with the process's sinks.
std::shared_ptr<spdlog::logger> Get(const std::string& name);

}  // namespace runnel::log
