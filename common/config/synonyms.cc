#include "common/config/synonyms.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <utility>

namespace runnel::config {
namespace {

constexpr int64_t kMinute = int64_t{60} * 1000;
constexpr int64_t kHour = 60 * kMinute;

std::vector<TopicSynonyms> Declare() {
  // Kafka's ServerTopicConfigSynonyms, restricted to the node keys Runnel declares (keys.cc).
  // Kafka lists log.flush.scheduler.interval.ms as the fallback of flush.ms; in Runnel that key
  // is only how often the flusher looks (its Kafka default would disable flush.ms), so it is
  // not a synonym here.
  std::vector<TopicSynonyms> table = {
      {"cleanup.policy", {{"log.cleanup.policy"}}},
      {"delete.retention.ms", {{"log.cleaner.delete.retention.ms"}}},
      {"file.delete.delay.ms", {{"log.segment.delete.delay.ms"}}},
      {"flush.messages", {{"log.flush.interval.messages"}}},
      {"flush.ms", {{"log.flush.interval.ms"}}},
      {"index.interval.bytes", {{"log.index.interval.bytes"}}},
      {"max.compaction.lag.ms", {{"log.cleaner.max.compaction.lag.ms"}}},
      {"max.message.bytes", {{"message.max.bytes"}}},
      {"message.timestamp.after.max.ms", {{"log.message.timestamp.after.max.ms"}}},
      {"message.timestamp.before.max.ms", {{"log.message.timestamp.before.max.ms"}}},
      {"message.timestamp.type", {{"log.message.timestamp.type"}}},
      {"min.cleanable.dirty.ratio", {{"log.cleaner.min.cleanable.ratio"}}},
      {"min.compaction.lag.ms", {{"log.cleaner.min.compaction.lag.ms"}}},
      {"min.insync.replicas", {{"min.insync.replicas"}}},
      {"preallocate", {{"log.preallocate"}}},
      {"retention.bytes", {{"log.retention.bytes"}}},
      {"retention.ms",
       {{"log.retention.ms"}, {"log.retention.minutes", kMinute}, {"log.retention.hours", kHour}}},
      {"segment.bytes", {{"log.segment.bytes"}}},
      {"segment.index.bytes", {{"log.index.size.max.bytes"}}},
      {"segment.ms", {{"log.roll.ms"}, {"log.roll.hours", kHour}}},
  };
  std::sort(table.begin(), table.end(), [](const TopicSynonyms& a, const TopicSynonyms& b) {
    return a.topic_key < b.topic_key;
  });
  return table;
}

const TopicSynonyms* FindByNodeKey(std::string_view node_key) {
  for (const TopicSynonyms& t : AllTopicSynonyms()) {
    for (const NodeSynonym& s : t.node_keys) {
      if (s.name == node_key) return &t;
    }
  }
  return nullptr;
}

}  // namespace

const std::vector<TopicSynonyms>& AllTopicSynonyms() {
  static const std::vector<TopicSynonyms> kTable = Declare();
  return kTable;
}

std::span<const NodeSynonym> NodeSynonymsOf(std::string_view topic_key) {
  for (const TopicSynonyms& t : AllTopicSynonyms()) {
    if (t.topic_key == topic_key) return t.node_keys;
  }
  return {};
}

std::vector<std::string_view> NodeKeyGroup(std::string_view node_key) {
  std::vector<std::string_view> out;
  if (const TopicSynonyms* t = FindByNodeKey(node_key)) {
    for (const NodeSynonym& s : t->node_keys) out.push_back(s.name);
  } else {
    out.push_back(node_key);
  }
  return out;
}

bool KafkaDefaultIsNull(std::string_view node_key) {
  // Runnel gives these the default Kafka computes from their coarser forms.
  return node_key == "log.retention.ms" || node_key == "log.retention.minutes" ||
         node_key == "log.roll.ms" || node_key == "log.flush.interval.ms";
}

std::string_view UndeclaredBrokerSynonym(std::string_view topic_key) {
  // Kafka 4.4's ServerTopicConfigSynonyms entries whose broker key Runnel does not declare.
  static constexpr std::pair<std::string_view, std::string_view> kTable[] = {
      {"compression.gzip.level", "compression.gzip.level"},
      {"compression.lz4.level", "compression.lz4.level"},
      {"compression.type", "compression.type"},
      {"compression.zstd.level", "compression.zstd.level"},
      {"local.retention.bytes", "log.local.retention.bytes"},
      {"local.retention.ms", "log.local.retention.ms"},
      {"max.decompressed.message.bytes", "max.decompressed.message.bytes"},
      {"remote.copy.lag.bytes", "log.remote.copy.lag.bytes"},
      {"remote.copy.lag.ms", "log.remote.copy.lag.ms"},
      {"unclean.leader.election.enable", "unclean.leader.election.enable"},
  };
  for (const auto& [topic, broker] : kTable) {
    if (topic == topic_key) return broker;
  }
  return "";
}

bool IsDynamicNodeKey(std::string_view name) { return FindByNodeKey(name) != nullptr; }

std::string ToTopicUnit(const NodeSynonym& synonym, const std::string& value) {
  if (synonym.unit == 1) return value;
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  // Values are validated before they are stored; an unparsable one is passed on as it is.
  if (ec != std::errc() || ptr != value.data() + value.size()) return value;
  if (n < 0) return "-1";
  // Node durations in minutes or hours are int32, so the product fits in 64 bits.
  return fmt::format("{}", n * synonym.unit);
}

int8_t KafkaConfigType(const KeyDef& def) {
  switch (def.type) {
    case KeyType::kBool:
      return 1;
    case KeyType::kInt:
      return 3;
    case KeyType::kLong:
      return 5;
    case KeyType::kList:
      return 7;
    case KeyType::kString:
      // Ratios are declared as strings (KeyType has no double) but are Kafka DOUBLEs.
      return def.validate == &ValidateRatio ? 6 : 2;
    case KeyType::kPath:
      return 2;
  }
  return 0;
}

bool IsSensitiveKey(std::string_view name) {
  return name.find("password") != std::string_view::npos ||
         name.find("secret") != std::string_view::npos || name.ends_with("jaas.config") ||
         name.ends_with(".key");
}

}  // namespace runnel::config
