#include "common/config/topic_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <optional>

namespace runnel::config {
namespace {

constexpr int64_t kLongMax = INT64_MAX;

// Kafka's answer when a topic asks for tiered storage and the broker has it off (Runnel has
// no tiered storage, so always).
constexpr std::string_view kTieredStorageDisabled =
    "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with "
    "remote log storage.";

std::string_view TrimSpaces(std::string_view v) {
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
  return v;
}

// A whole number as Kafka's ConfigDef parses one (surrounding spaces and a leading '+' are
// allowed), within the type's range.
std::optional<int64_t> ParseKafkaInteger(std::string_view v, KeyType type) {
  v = TrimSpaces(v);
  if (v.size() > 1 && v.front() == '+' && v[1] != '-') v.remove_prefix(1);
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || ptr != v.data() + v.size()) return std::nullopt;
  if (type == KeyType::kInt && (n < INT32_MIN || n > INT32_MAX)) return std::nullopt;
  return n;
}

std::optional<bool> ParseKafkaBool(std::string_view v) {
  v = TrimSpaces(v);
  auto is = [&](std::string_view word) {
    return v.size() == word.size() &&
           std::equal(v.begin(), v.end(), word.begin(), [](char a, char b) {
             return std::tolower(static_cast<unsigned char>(a)) == b;
           });
  };
  if (is("true")) return true;
  if (is("false")) return false;
  return std::nullopt;
}

// Why `value` is not a valid value of topic config `def`, in Kafka's words ("" when valid).
// Unlike CheckValue (node keys), this is what a client reads in a CreateTopics or
// AlterConfigs answer, so it says what Kafka's ConfigDef says.
std::string TopicValueError(const KeyDef& def, std::string_view value) {
  switch (def.type) {
    case KeyType::kInt:
    case KeyType::kLong: {
      std::optional<int64_t> n = ParseKafkaInteger(value, def.type);
      if (!n)
        return def.type == KeyType::kInt ? "Not a number of type INT" : "Not a number of type LONG";
      if (*n < def.min) return fmt::format("Value must be at least {}", def.min);
      if (*n > def.max) return fmt::format("Value must be no more than {}", def.max);
      break;
    }
    case KeyType::kBool:
      if (!ParseKafkaBool(value)) return "Expected value to be either true or false";
      break;
    case KeyType::kPath:
    case KeyType::kString:
    case KeyType::kList:
      break;
  }
  if (def.validate == &ValidateRatio) {
    // A Kafka DOUBLE in [0, 1].
    std::string text(TrimSpaces(value));
    char* end = nullptr;
    double d = text.empty() ? 0 : std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size()) return "Not a number of type DOUBLE";
    if (d < 0) return "Value must be at least 0";
    if (d > 1) return "Value must be no more than 1";
    return "";
  }
  if (def.validate != nullptr) return def.validate(value);
  return "";
}

// gzip's levels: 1 to 9, or -1 for zlib's default.
std::string ValidateGzipLevel(std::string_view v) {
  std::optional<int64_t> n = ParseKafkaInteger(v, KeyType::kInt);
  if (n && (*n == -1 || (*n >= 1 && *n <= 9))) return "";
  return "Value must be between 1 and 9 or equal to -1";
}

std::string ValidateCompressionType(std::string_view v) {
  return OneOf(v, {"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"});
}

// "" , "*", or a list of partition:broker pairs (Kafka's ThrottledReplicaListValidator).
std::string ValidateThrottledReplicas(std::string_view v) {
  std::vector<std::string> items = SplitList(v);
  if (items.size() == 1 && items[0] == "*") return "";
  for (const std::string& item : items) {
    size_t colon = item.find(':');
    auto is_number = [](std::string_view s) {
      return !s.empty() &&
             std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (colon == std::string::npos || !is_number(std::string_view(item).substr(0, colon)) ||
        !is_number(std::string_view(item).substr(colon + 1))) {
      return "must be the literal '*' or a list of replicas in the following format: "
             "[partitionId]:[brokerId],[partitionId]:[brokerId],...";
    }
  }
  return "";
}

std::vector<KeyDef> Declare() {
  std::vector<KeyDef> keys = {
      {"cleanup.policy", KeyType::kList, "delete", 0, 0,
       "delete (by retention), compact (keep the last value per key) or both.", false,
       ValidateCleanupPolicy},
      {"compression.gzip.level", KeyType::kInt, "-1", INT32_MIN, INT32_MAX,
       "gzip level of batches the broker compresses when compression.type is gzip: 1 to 9, "
       "or -1 for zlib's default.",
       false, ValidateGzipLevel},
      {"compression.lz4.level", KeyType::kInt, "9", 1, 17,
       "lz4 level of batches the broker compresses when compression.type is lz4."},
      {"compression.zstd.level", KeyType::kInt, "3", -131072, 22,
       "zstd level of batches the broker compresses when compression.type is zstd."},
      {"compression.type", KeyType::kString, "producer", 0, 0,
       "Compression of stored batches: uncompressed, zstd, lz4, snappy, gzip, or producer "
       "(keep the producer's).",
       false, ValidateCompressionType},
      {"delete.retention.ms", KeyType::kLong, "86400000", 0, kLongMax,
       "How long delete tombstones are kept in a compacted topic."},
      {"errors.deadletterqueue.group.enable", KeyType::kBool, "false", 0, 0,
       "Whether share groups may use this topic as their dead-letter queue."},
      {"file.delete.delay.ms", KeyType::kLong, "60000", 0, kLongMax,
       "Time to wait before deleting a file from the filesystem."},
      {"flush.messages", KeyType::kLong, "9223372036854775807", 1, kLongMax,
       "Messages written after which the log is fsync'ed."},
      {"flush.ms", KeyType::kLong, "9223372036854775807", 0, kLongMax,
       "Time after which the log is fsync'ed."},
      {"follower.replication.throttled.replicas", KeyType::kList, "", 0, 0,
       "Replicas whose log replication is throttled on the follower side.", false,
       ValidateThrottledReplicas},
      {"index.interval.bytes", KeyType::kInt, "4096", 0, INT32_MAX,
       "Bytes between entries of the offset index."},
      {"leader.replication.throttled.replicas", KeyType::kList, "", 0, 0,
       "Replicas whose log replication is throttled on the leader side.", false,
       ValidateThrottledReplicas},
      {"local.retention.bytes", KeyType::kLong, "-2", -2, kLongMax,
       "Local bytes kept when tiered storage is on; -2 = retention.bytes."},
      {"local.retention.ms", KeyType::kLong, "-2", -2, kLongMax,
       "Local time kept when tiered storage is on; -2 = retention.ms."},
      {"max.compaction.lag.ms", KeyType::kLong, "9223372036854775807", 1, kLongMax,
       "Longest time a message stays ineligible for compaction."},
      {"max.decompressed.message.bytes", KeyType::kInt, "2147483639", 1, INT32_MAX,
       "Largest size a record batch may have once decompressed."},
      {"max.message.bytes", KeyType::kInt, "1048588", 0, INT32_MAX,
       "Largest record batch size allowed."},
      {"message.timestamp.after.max.ms", KeyType::kLong, "3600000", 0, kLongMax,
       "How far in the future a CreateTime timestamp may be."},
      {"message.timestamp.before.max.ms", KeyType::kLong, "9223372036854775807", 0, kLongMax,
       "How far in the past a CreateTime timestamp may be."},
      {"message.timestamp.type", KeyType::kString, "CreateTime", 0, 0,
       "CreateTime (the producer's timestamp) or LogAppendTime (the broker's).", false,
       ValidateTimestampType},
      {"min.cleanable.dirty.ratio", KeyType::kString, "0.5", 0, 0,
       "Dirty fraction of the log above which compaction runs (a double in [0, 1]).", false,
       ValidateRatio},
      {"min.compaction.lag.ms", KeyType::kLong, "0", 0, kLongMax,
       "Shortest time a message stays uncompacted."},
      {"min.insync.replicas", KeyType::kInt, "1", 1, INT32_MAX,
       "Fewest in-sync replicas for an acks=all produce to succeed."},
      {"preallocate", KeyType::kBool, "false", 0, 0, "Preallocate the file of a new segment."},
      {"remote.copy.lag.bytes", KeyType::kLong, "-1", -1, kLongMax,
       "Bytes a segment may wait before tiered storage copies it; -1 = no limit."},
      {"remote.copy.lag.ms", KeyType::kLong, "0", -1, kLongMax,
       "Time a rolled segment may wait before tiered storage copies it; -1 = no limit."},
      {"remote.log.copy.disable", KeyType::kBool, "false", 0, 0,
       "Stop copying segments to tiered storage (remote reads go on)."},
      {"remote.log.delete.on.disable", KeyType::kBool, "false", 0, 0,
       "Delete the topic's tiered data when tiered storage is turned off for it."},
      {"remote.storage.enable", KeyType::kBool, "false", 0, 0,
       "Tiered storage for this topic; Runnel has none, so true is refused."},
      {"retention.bytes", KeyType::kLong, "-1", INT64_MIN, kLongMax,
       "Largest size of a partition before old segments are deleted; -1 = no limit."},
      {"retention.ms", KeyType::kLong, "604800000", -1, kLongMax,
       "Longest time a segment is kept; -1 = no limit."},
      {"segment.bytes", KeyType::kInt, "1073741824", 14, INT32_MAX, "Size of a log segment file."},
      {"segment.index.bytes", KeyType::kInt, "10485760", 4, INT32_MAX,
       "Size of the offset index of a segment."},
      {"segment.jitter.ms", KeyType::kLong, "0", 0, kLongMax,
       "Largest random jitter subtracted from segment.ms."},
      {"segment.ms", KeyType::kLong, "604800000", 1, kLongMax,
       "Time after which a segment is rolled even if not full."},
      {"unclean.leader.election.enable", KeyType::kBool, "false", 0, 0,
       "Whether an out-of-sync replica may become leader (losing data)."},
  };
  for (KeyDef& k : keys) k.needs_restart = false;
  std::sort(keys.begin(), keys.end(),
            [](const KeyDef& a, const KeyDef& b) { return a.name < b.name; });
  return keys;
}

}  // namespace

const std::vector<KeyDef>& AllTopicKeys() {
  static const std::vector<KeyDef> kKeys = Declare();
  return kKeys;
}

const KeyDef* FindTopicKey(std::string_view name) {
  const auto& keys = AllTopicKeys();
  auto it = std::lower_bound(keys.begin(), keys.end(), name,
                             [](const KeyDef& k, std::string_view n) { return k.name < n; });
  return (it != keys.end() && it->name == name) ? &*it : nullptr;
}

Status ValidateTopicConfigs(const std::map<std::string, std::string>& configs) {
  for (const auto& [key, value] : configs) {
    const KeyDef* def = FindTopicKey(key);
    if (def == nullptr) {
      return absl::InvalidArgumentError(fmt::format("Unknown topic config name: {}", key));
    }
    if (def->validate == &ValidateCleanupPolicy && !SplitList(value).empty()) {
      // Kafka checks each item and names the bad one; a repeated item is allowed.
      for (const std::string& item : SplitList(value)) {
        if (item != "compact" && item != "delete") {
          return absl::InvalidArgumentError(
              fmt::format("Invalid value {} for configuration {}: String must be one of: "
                          "compact, delete",
                          item, key));
        }
      }
      continue;
    }
    if (std::string why = TopicValueError(*def, value); !why.empty()) {
      if (def->validate == &ValidateThrottledReplicas) {
        // Kafka shows the parsed list and names the key again in the reason.
        return absl::InvalidArgumentError(
            fmt::format("Invalid value [{}] for configuration {}: {} {}",
                        fmt::join(SplitList(value), ", "), key, key, why));
      }
      return absl::InvalidArgumentError(
          fmt::format("Invalid value {} for configuration {}: {}", value, key, why));
    }
  }
  if (auto it = configs.find("remote.storage.enable");
      it != configs.end() && ParseKafkaBool(it->second) == true) {
    return absl::InvalidArgumentError(std::string(kTieredStorageDisabled));
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> EffectiveTopicConfigs(
    const std::map<std::string, std::string>& explicit_configs) {
  std::map<std::string, std::string> out;
  for (const KeyDef& def : AllTopicKeys()) {
    auto it = explicit_configs.find(std::string(def.name));
    out.emplace(def.name,
                it != explicit_configs.end() ? it->second : std::string(def.default_value));
  }
  return out;
}

}  // namespace runnel::config
