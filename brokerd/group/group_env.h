// What a group's state machine (classic_group.h, consumer_group.h) needs from the shard that
// holds it: the clock, timers and durable writes to the shard's __consumer_offsets
// partition. The coordinator implements it on the broker's loop; unit tests implement it
// with a virtual clock and an in-memory log, so rebalances run deterministically.
//
// Everything here runs on one thread (the broker's loop); callbacks never run re-entrantly
// from inside the call that scheduled them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "brokerd/group/records.h"
#include "common/config/config.h"
#include "common/protocol/error_code.h"

namespace runnel::brokerd::group {

using ::runnel::protocol::ErrorCode;

// The group settings of the node config (common/config/keys.cc has each key's meaning).
struct GroupConfig {
  // Classic protocol.
  int32_t min_session_timeout_ms = 6000;      // group.min.session.timeout.ms
  int32_t max_session_timeout_ms = 1800000;   // group.max.session.timeout.ms
  int32_t initial_rebalance_delay_ms = 3000;  // group.initial.rebalance.delay.ms
  int32_t max_size = INT32_MAX;               // group.max.size
  // KIP-848 consumer protocol.
  bool consumer_enabled = true;                   // group.coordinator.rebalance.protocols
  int32_t consumer_session_timeout_ms = 45000;    // group.consumer.session.timeout.ms
  int32_t consumer_heartbeat_interval_ms = 5000;  // group.consumer.heartbeat.interval.ms
  int32_t consumer_max_size = INT32_MAX;          // group.consumer.max.size
  std::vector<std::string> consumer_assignors = {"uniform", "range"};  // short names
  // Offsets.
  int64_t offsets_retention_ms = 7LL * 24 * 3600 * 1000;  // offsets.retention.minutes
  int64_t offsets_retention_check_interval_ms = 600000;   // offsets.retention.check.interval.ms
  int32_t offset_metadata_max_bytes = 4096;               // offset.metadata.max.bytes
  int32_t offsets_commit_timeout_ms = 5000;               // offsets.commit.timeout.ms
  int32_t offsets_compression_codec = 0;                  // offsets.topic.compression.codec

  static GroupConfig FromConfig(const config::Config& config);
};

class GroupEnv {
 public:
  virtual ~GroupEnv() = default;

  // Wall-clock milliseconds since the epoch (commit timestamps, state timestamps) and a
  // monotonic clock for timeouts; tests make both virtual.
  virtual int64_t NowMs() = 0;

  // Runs `fn` once after `delay_ms` unless cancelled. Ids are never reused; cancelling an id
  // that already ran or was cancelled does nothing.
  using TimerId = uint64_t;
  virtual TimerId StartTimer(int64_t delay_ms, std::function<void()> fn) = 0;
  virtual void CancelTimer(TimerId id) = 0;

  // Appends `records` to the shard's partition as one batch. `done` runs later (never inside
  // Write) with 0 once the records are durable as acks=all requires, or with the Kafka error
  // the caller should answer: NOT_COORDINATOR (the partition moved or is being unloaded) or
  // COORDINATOR_NOT_AVAILABLE (storage failed, or offsets.commit.timeout.ms passed).
  virtual void Write(std::vector<LogRecord> records, std::function<void(ErrorCode error)> done) = 0;

  virtual const GroupConfig& config() const = 0;
};

}  // namespace runnel::brokerd::group
