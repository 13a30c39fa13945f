// The declaration of every configuration key Runnel reads. Kafka's names wherever the
// concept is Kafka's; Runnel's own keys start with "runnel.".
#include <fmt/format.h>

#include <algorithm>

#include "common/config/config.h"
#include "common/config/listeners.h"

namespace runnel::config {
namespace {

std::string ValidateRoles(std::string_view v) {
  std::vector<std::string> roles = SplitList(v);
  if (roles.empty()) return "needs at least one of broker, controller";
  for (const std::string& r : roles) {
    if (r != "broker" && r != "controller") {
      return fmt::format("unknown role '{}' (known: broker, controller)", r);
    }
  }
  return "";
}

std::string ValidateListeners(std::string_view v) {
  auto parsed = ParseListeners(v);
  if (!parsed.ok())
    return std::string(parsed.status().message().data(), parsed.status().message().size());
  return "";
}

std::string ValidateRequiredListeners(std::string_view v) {
  if (SplitList(v).empty()) return "needs at least one listener";
  return ValidateListeners(v);
}

std::string ValidateNonEmptyList(std::string_view v) {
  return SplitList(v).empty() ? "must name at least one directory" : "";
}

std::string ValidateLogLevel(std::string_view v) {
  return OneOf(v, {"trace", "debug", "info", "warn", "error", "off"});
}

std::vector<KeyDef> Declare() {
  std::vector<KeyDef> keys = {
      {"node.id", KeyType::kInt, "1", 0, INT32_MAX,
       "The id of this node; clients see it as the broker id."},
      {"process.roles", KeyType::kList, "broker,controller", 0, 0,
       "Roles this node runs: broker (runnel-storaged + runnel-brokerd), controller "
       "(runnel-controllerd).",
       true, ValidateRoles},
      {"listeners", KeyType::kList, "PLAINTEXT://127.0.0.1:9092", 0, 0,
       "Kafka listeners, NAME://host:port, comma-separated.", true, ValidateRequiredListeners},
      {"advertised.listeners", KeyType::kList, "", 0, 0,
       "Addresses given to clients in Metadata; empty means `listeners`.", true, ValidateListeners},
      {"broker.rack", KeyType::kString, "", 0, 0, "Rack of this broker, shown in Metadata."},
      {"log.dirs", KeyType::kList, "./data/logs", 0, 0,
       "Directories holding partition logs, comma-separated.", true, ValidateNonEmptyList},
      {"metadata.log.dir", KeyType::kPath, "./data/metadata", 0, 0,
       "Directory of the cluster metadata log and its snapshots."},
      {"metadata.log.max.record.bytes.between.snapshots", KeyType::kLong, "20971520", 1, INT64_MAX,
       "Bytes of metadata records appended after which a new snapshot is written."},
      {"num.partitions", KeyType::kInt, "1", 1, INT32_MAX,
       "Default number of partitions of a topic created without a count."},
      {"default.replication.factor", KeyType::kInt, "1", 1, 32767,
       "Default replication factor of a topic created without one."},
      {"auto.create.topics.enable", KeyType::kBool, "true", 0, 0,
       "Create a topic when a client asks for metadata of an unknown one."},
      {"socket.request.max.bytes", KeyType::kInt, "104857600", 1, INT32_MAX,
       "Largest request frame accepted; a bigger size prefix closes the connection."},
      {"max.connections", KeyType::kInt, "2147483647", 1, INT32_MAX,
       "Most client connections the broker accepts at once."},
      {"max.connections.per.ip", KeyType::kInt, "2147483647", 1, INT32_MAX,
       "Most client connections accepted from one IP address."},
      {"runnel.run.dir", KeyType::kPath, "./data/run", 0, 0,
       "Directory of the roles' Unix sockets (mode 0660) and pid files."},
      {"runnel.log.level", KeyType::kString, "info", 0, 0,
       "Log level: trace, debug, info, warn, error or off.", false, ValidateLogLevel},
      {"runnel.log.dir", KeyType::kString, "", 0, 0,
       "When set, each role also logs to <dir>/<role>.log, rotated by size."},
      {"runnel.log.file.max.bytes", KeyType::kLong, "104857600", 1024, INT64_MAX,
       "Size at which a log file is rotated."},
      {"runnel.log.file.count", KeyType::kInt, "10", 1, 1000, "Rotated log files kept."},
      {"runnel.supervisor.restart.backoff.initial.ms", KeyType::kInt, "200", 1, 3600000,
       "First delay before restarting a role that died; doubles each time."},
      {"runnel.supervisor.restart.backoff.max.ms", KeyType::kInt, "30000", 1, 3600000,
       "Cap of the restart delay."},
      {"runnel.supervisor.stop.timeout.ms", KeyType::kInt, "10000", 1, 3600000,
       "Time a role has to exit after SIGTERM before it gets SIGKILL."},
      {"runnel.supervisor.ready.timeout.ms", KeyType::kInt, "30000", 1, 3600000,
       "Time a role has to report SERVING over grpc.health.v1 at start."},
  };
  std::sort(keys.begin(), keys.end(),
            [](const KeyDef& a, const KeyDef& b) { return a.name < b.name; });
  return keys;
}

}  // namespace

const std::vector<KeyDef>& AllKeys() {
  static const std::vector<KeyDef> keys = Declare();
  return keys;
}

}  // namespace runnel::config
