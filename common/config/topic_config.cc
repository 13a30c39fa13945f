#include "common/config/topic_config.h"

#include <fmt/format.h>

#include <algorithm>

namespace runnel::config {
namespace {

constexpr int64_t kLongMax = INT64_MAX;

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
      {"compression.type", KeyType::kString, "producer", 0, 0,
       "Compression of stored batches: uncompressed, zstd, lz4, snappy, gzip, or producer "
       "(keep the producer's).",
       false, ValidateCompressionType},
      {"delete.retention.ms", KeyType::kLong, "86400000", 0, kLongMax,
       "How long delete tombstones are kept in a compacted topic."},
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
      {"max.message.bytes", KeyType::kInt, "1048588", 0, INT32_MAX,
       "Largest record batch size allowed."},
      {"message.downconversion.enable", KeyType::kBool, "true", 0, 0,
       "Whether old-format consumers get down-converted batches."},
      {"message.timestamp.after.max.ms", KeyType::kLong, "9223372036854775807", 0, kLongMax,
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
      {"remote.storage.enable", KeyType::kBool, "false", 0, 0, "Tiered storage for this topic."},
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
    if (std::string why = CheckValue(*def, value); !why.empty()) {
      return absl::InvalidArgumentError(
          fmt::format("Invalid value {} for configuration {}: {}", value, key, why));
    }
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
