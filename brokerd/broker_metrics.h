// brokerd's metrics on the hot paths: per Kafka API (requests, errors, latency) and per topic
// (bytes and records in, bytes out). Every series is resolved once, when the API table or the
// topic is set up; a request then pays relaxed atomic adds and, for an error, one lookup.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/metrics/metrics.h"
#include "common/protocol/error_code.h"

namespace runnel::brokerd {

// The series of one topic, created with the topic in the metadata cache and removed with
// the last holder (a fetch in flight may hold a deleted topic's for a moment).
class TopicMetrics {
 public:
  explicit TopicMetrics(std::string topic);
  ~TopicMetrics();
  TopicMetrics(const TopicMetrics&) = delete;
  TopicMetrics& operator=(const TopicMetrics&) = delete;

  metrics::Counter* const bytes_in;    // produced batches, as appended
  metrics::Counter* const records_in;  // offsets assigned to them
  metrics::Counter* const bytes_out;   // fetched record bytes sent to consumers

 private:
  const std::string topic_;
};

// Requests by Kafka API. Loop thread or any: only atomics, and the errors family's lock.
class RequestMetrics {
 public:
  RequestMetrics();
  void Record(int16_t api_key, std::chrono::steady_clock::duration latency,
              protocol::ErrorCode error);

 private:
  struct Api {
    std::string name;
    metrics::Counter* requests = nullptr;
    metrics::Histogram* latency = nullptr;
  };
  const Api& ForKey(int16_t api_key) const;

  std::vector<Api> by_key_;  // indexed by API key; keys without a schema share `unknown_`
  Api unknown_;
  metrics::CounterFamily& errors_;
};

// The connections gauge and counter of the Kafka listeners.
struct ConnectionMetrics {
  ConnectionMetrics();
  metrics::Gauge* const open;
  metrics::Counter* const accepted;
  metrics::Counter* const refused;
};

}  // namespace runnel::brokerd
