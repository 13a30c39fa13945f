// The settings one partition log runs with: Kafka's topic configs, each defaulting to the
// node's `log.*` key (log.segment.bytes -> segment.bytes, ...) when the topic does not set
// it, as a Kafka broker does.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/config/config.h"
#include "common/record/batch.h"
#include "common/util/status.h"

namespace runnel::storaged {

struct LogConfig {
  int32_t segment_bytes = 1073741824;      // segment.bytes
  int64_t segment_ms = 604800000;          // segment.ms
  int32_t segment_index_bytes = 10485760;  // segment.index.bytes
  int32_t index_interval_bytes = 4096;     // index.interval.bytes
  int64_t retention_ms = 604800000;        // retention.ms (-1 = unlimited)
  int64_t retention_bytes = -1;            // retention.bytes (-1 = unlimited)
  bool cleanup_delete = true;              // cleanup.policy contains delete
  bool cleanup_compact = false;            // cleanup.policy contains compact
  int64_t flush_messages = INT64_MAX;      // flush.messages
  int64_t flush_ms = INT64_MAX;            // flush.ms
  int32_t max_message_bytes = 1048588;     // max.message.bytes
  record::TimestampType timestamp_type =
      record::TimestampType::kCreateTime;       // message.timestamp.type
  int64_t timestamp_before_max_ms = INT64_MAX;  // message.timestamp.before.max.ms
  int64_t timestamp_after_max_ms = 3600000;     // message.timestamp.after.max.ms
  int64_t delete_retention_ms = 86400000;       // delete.retention.ms
  int64_t min_compaction_lag_ms = 0;            // min.compaction.lag.ms
  int64_t max_compaction_lag_ms = INT64_MAX;    // max.compaction.lag.ms
  double min_cleanable_dirty_ratio = 0.5;       // min.cleanable.dirty.ratio
  int64_t file_delete_delay_ms = 60000;         // file.delete.delay.ms
  bool preallocate = false;                     // preallocate

  // Whether an append must be on disk before it is answered: flush.messages=1 or flush.ms=0.
  bool SyncEveryAppend() const { return flush_messages <= 1 || flush_ms == 0; }

  // The node's defaults: every field from its `log.*` / `message.max.bytes` key.
  static LogConfig FromNode(const config::Config& node);
  // `defaults` overridden by a topic's explicit configs (Kafka topic config names). Fails
  // with InvalidArgument naming the key for an unknown name or bad value.
  static StatusOr<LogConfig> WithOverrides(const LogConfig& defaults,
                                           const std::map<std::string, std::string>& topic);
};

}  // namespace runnel::storaged
