#include "storaged/log/log_config.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>

#include "common/config/topic_config.h"

namespace runnel::storaged {
namespace {

// Both were validated (by Config or ValidateTopicConfigs) before they get here, so a
// parse failure cannot happen; the fallbacks only keep the functions total.
int64_t ParseLong(const std::string& v, int64_t fallback) {
  int64_t out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return (ec == std::errc() && ptr == v.data() + v.size()) ? out : fallback;
}

double ParseDouble(const std::string& v, double fallback) {
  double out = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return (ec == std::errc() && ptr == v.data() + v.size()) ? out : fallback;
}

// Config's booleans are case-insensitive, as Java's Boolean.parseBoolean.
bool EqualsTrue(const std::string& v) {
  std::string lower = v;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return lower == "true";
}

void SetCleanupPolicy(const std::vector<std::string>& items, LogConfig* c) {
  c->cleanup_delete = false;
  c->cleanup_compact = false;
  for (const std::string& item : items) {
    if (item == "delete") c->cleanup_delete = true;
    if (item == "compact") c->cleanup_compact = true;
  }
}

record::TimestampType ParseTimestampType(const std::string& v) {
  return v == "LogAppendTime" ? record::TimestampType::kLogAppendTime
                              : record::TimestampType::kCreateTime;
}

// Kafka's precedence for a duration that has ms / minutes / hours forms: the finest one set
// explicitly wins; with none set, the ms key's default. A negative value of a coarser
// form means "no limit" and stays -1 rather than being multiplied.
int64_t Duration(const config::Config& node, std::string_view ms_key, std::string_view minutes_key,
                 std::string_view hours_key) {
  if (node.SourceOf(ms_key) != config::Source::kDefault) return node.GetLong(ms_key);
  auto scaled = [](int64_t v, int64_t unit) { return v < 0 ? -1 : v * unit; };
  if (!minutes_key.empty() && node.SourceOf(minutes_key) != config::Source::kDefault) {
    return scaled(node.GetInt(minutes_key), int64_t{60} * 1000);
  }
  if (node.SourceOf(hours_key) != config::Source::kDefault) {
    return scaled(node.GetInt(hours_key), int64_t{60} * 60 * 1000);
  }
  return node.GetLong(ms_key);
}

}  // namespace

LogConfig LogConfig::FromNode(const config::Config& node) {
  LogConfig c;
  c.segment_bytes = node.GetInt("log.segment.bytes");
  c.segment_ms = Duration(node, "log.roll.ms", "", "log.roll.hours");
  c.segment_index_bytes = node.GetInt("log.index.size.max.bytes");
  c.index_interval_bytes = node.GetInt("log.index.interval.bytes");
  c.retention_ms =
      Duration(node, "log.retention.ms", "log.retention.minutes", "log.retention.hours");
  c.retention_bytes = node.GetLong("log.retention.bytes");
  SetCleanupPolicy(node.GetList("log.cleanup.policy"), &c);
  c.flush_messages = node.GetLong("log.flush.interval.messages");
  c.flush_ms = node.GetLong("log.flush.interval.ms");
  c.max_message_bytes = node.GetInt("message.max.bytes");
  c.timestamp_type = ParseTimestampType(node.GetString("log.message.timestamp.type"));
  c.timestamp_before_max_ms = node.GetLong("log.message.timestamp.before.max.ms");
  c.timestamp_after_max_ms = node.GetLong("log.message.timestamp.after.max.ms");
  c.delete_retention_ms = node.GetLong("log.cleaner.delete.retention.ms");
  c.min_compaction_lag_ms = node.GetLong("log.cleaner.min.compaction.lag.ms");
  c.max_compaction_lag_ms = node.GetLong("log.cleaner.max.compaction.lag.ms");
  c.min_cleanable_dirty_ratio =
      ParseDouble(node.GetString("log.cleaner.min.cleanable.ratio"), c.min_cleanable_dirty_ratio);
  c.file_delete_delay_ms = node.GetLong("log.segment.delete.delay.ms");
  c.preallocate = node.GetBool("log.preallocate");
  return c;
}

StatusOr<LogConfig> LogConfig::WithOverrides(const LogConfig& defaults,
                                             const std::map<std::string, std::string>& topic) {
  // Names the key and the value on error (Kafka's wording), so a CreateTopics answer or a
  // log line says exactly what was wrong.
  RUNNEL_RETURN_IF_ERROR(config::ValidateTopicConfigs(topic));
  LogConfig c = defaults;
  for (const auto& entry : topic) {
    // References, not a structured binding: clang 14 cannot capture a binding in a lambda.
    const std::string& key = entry.first;
    const std::string& value = entry.second;
    auto as_long = [&](int64_t fallback) { return ParseLong(value, fallback); };
    auto as_int = [&](int32_t fallback) {
      return static_cast<int32_t>(ParseLong(value, fallback));
    };
    if (key == "segment.bytes") {
      c.segment_bytes = as_int(c.segment_bytes);
    } else if (key == "segment.ms") {
      c.segment_ms = as_long(c.segment_ms);
    } else if (key == "segment.index.bytes") {
      c.segment_index_bytes = as_int(c.segment_index_bytes);
    } else if (key == "index.interval.bytes") {
      c.index_interval_bytes = as_int(c.index_interval_bytes);
    } else if (key == "retention.ms") {
      c.retention_ms = as_long(c.retention_ms);
    } else if (key == "retention.bytes") {
      c.retention_bytes = as_long(c.retention_bytes);
    } else if (key == "cleanup.policy") {
      SetCleanupPolicy(config::SplitList(value), &c);
    } else if (key == "flush.messages") {
      c.flush_messages = as_long(c.flush_messages);
    } else if (key == "flush.ms") {
      c.flush_ms = as_long(c.flush_ms);
    } else if (key == "max.message.bytes") {
      c.max_message_bytes = as_int(c.max_message_bytes);
    } else if (key == "message.timestamp.type") {
      c.timestamp_type = ParseTimestampType(value);
    } else if (key == "message.timestamp.before.max.ms") {
      c.timestamp_before_max_ms = as_long(c.timestamp_before_max_ms);
    } else if (key == "message.timestamp.after.max.ms") {
      c.timestamp_after_max_ms = as_long(c.timestamp_after_max_ms);
    } else if (key == "delete.retention.ms") {
      c.delete_retention_ms = as_long(c.delete_retention_ms);
    } else if (key == "min.compaction.lag.ms") {
      c.min_compaction_lag_ms = as_long(c.min_compaction_lag_ms);
    } else if (key == "max.compaction.lag.ms") {
      c.max_compaction_lag_ms = as_long(c.max_compaction_lag_ms);
    } else if (key == "min.cleanable.dirty.ratio") {
      c.min_cleanable_dirty_ratio = ParseDouble(value, c.min_cleanable_dirty_ratio);
    } else if (key == "file.delete.delay.ms") {
      c.file_delete_delay_ms = as_long(c.file_delete_delay_ms);
    } else if (key == "preallocate") {
      c.preallocate = EqualsTrue(value);
    }
    // The other topic configs (compression.type, min.insync.replicas, replication
    // throttles, tiered storage, ...) are valid but belong to brokerd or replication.
  }
  return c;
}

}  // namespace runnel::storaged
