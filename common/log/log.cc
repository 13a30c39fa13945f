#include "common/log/log.h"

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <vector>

#include "common/config/config.h"
#include "common/util/mutex.h"

namespace runnel::log {
namespace {

struct State {
  Mutex mu;
  std::vector<spdlog::sink_ptr> sinks ABSL_GUARDED_BY(mu);
  spdlog::level::level_enum level ABSL_GUARDED_BY(mu) = spdlog::level::info;
};

State& GetState() {
  static State* state = new State();
  return *state;
}

}  // namespace

void Init(const Options& options) {
  State& s = GetState();
  MutexLock lock(&s.mu);
  s.sinks.clear();
  auto err = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  std::string pattern = "%Y-%m-%dT%H:%M:%S.%e %^%L%$ " + options.role + " %n: %v";
  err->set_pattern(pattern);
  s.sinks.push_back(err);
  if (!options.file_dir.empty()) {
    try {
      auto file = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
          options.file_dir + "/" + options.role + ".log", options.file_max_bytes,
          options.file_count);
      file->set_pattern(pattern);
      s.sinks.push_back(file);
      // Files are buffered; a line reaches the file within a second (warnings at once).
      spdlog::flush_every(std::chrono::seconds(1));
    } catch (const spdlog::spdlog_ex& e) {
      fprintf(stderr, "cannot open log file in %s: %s\n", options.file_dir.c_str(), e.what());
    }
  }
  s.level = spdlog::level::from_str(options.level);
  // Copies, so that the lambda reads no guarded member (it runs here, under the lock).
  const std::vector<spdlog::sink_ptr> sinks = s.sinks;
  const spdlog::level::level_enum level = s.level;
  spdlog::apply_all([&](const std::shared_ptr<spdlog::logger>& l) {
    l->sinks() = sinks;
    l->set_level(level);
  });
}

void InitFromConfig(std::string_view role, const config::Config& config) {
  Options o;
  o.role = std::string(role);
  o.level = config.GetString("runnel.log.level");
  o.file_dir = config.GetString("runnel.log.dir");
  o.file_max_bytes = static_cast<size_t>(config.GetLong("runnel.log.file.max.bytes"));
  o.file_count = static_cast<size_t>(config.GetInt("runnel.log.file.count"));
  Init(o);
}

std::shared_ptr<spdlog::logger> Get(const std::string& name) {
  State& s = GetState();
  MutexLock lock(&s.mu);
  if (auto existing = spdlog::get(name)) return existing;
  if (s.sinks.empty()) {
    auto err = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    err->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %n: %v");
    s.sinks.push_back(err);
  }
  auto logger = std::make_shared<spdlog::logger>(name, s.sinks.begin(), s.sinks.end());
  logger->set_level(s.level);
  logger->flush_on(spdlog::level::warn);
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace runnel::log
