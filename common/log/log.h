// Named loggers over spdlog. Each module asks for its own ("brokerd.kafka",
// "storaged.log", "controllerd.raft"); every logger shares the sinks set up by Init.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
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

// A module's logger, declared once at namespace scope in the module's .cc and fetched from Get
// on first use:
//   const log::ModuleLogger kLog("brokerd.net");
//   ...
//   kLog()->info("listening on {}", port);
// The constructor only keeps the name (a string literal), so a ModuleLogger is constant-
// initialised and safe to use from any other static initialiser. The first call fetches the
// logger, once even when threads race, and keeps it; a logger fetched before Init still gets
// Init's sinks and level (Init updates every logger).
class ModuleLogger {
 public:
  explicit constexpr ModuleLogger(const char* name) : name_(name) {}
  ModuleLogger(const ModuleLogger&) = delete;
  ModuleLogger& operator=(const ModuleLogger&) = delete;

  const std::shared_ptr<spdlog::logger>& operator()() const {
    std::call_once(once_, [this] { logger_ = Get(name_); });
    return logger_;
  }

 private:
  const char* const name_;
  mutable std::once_flag once_;
  mutable std::shared_ptr<spdlog::logger> logger_;
};

}  // namespace runnel::log
