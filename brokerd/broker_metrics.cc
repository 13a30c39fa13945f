#include "brokerd/broker_metrics.h"

#include "common/protocol/api_keys.h"

namespace runnel::brokerd {
namespace {

metrics::CounterFamily& TopicCounter(const char* name, const char* help) {
  return metrics::ProcessRegistry().AddCounter(name, help, {"topic"});
}

metrics::CounterFamily& BytesIn() {
  return TopicCounter("runnel_broker_topic_bytes_in_total",
                      "Bytes of record batches produced to the topic (appended).");
}
metrics::CounterFamily& RecordsIn() {
  return TopicCounter("runnel_broker_topic_records_in_total",
                      "Records (offsets) produced to the topic (appended).");
}
metrics::CounterFamily& BytesOut() {
  return TopicCounter("runnel_broker_topic_bytes_out_total",
                      "Record bytes sent to consumers and followers fetching the topic.");
}

}  // namespace

TopicMetrics::TopicMetrics(std::string topic)
    : bytes_in(BytesIn().Acquire({topic})),
      records_in(RecordsIn().Acquire({topic})),
      bytes_out(BytesOut().Acquire({topic})),
      topic_(std::move(topic)) {}

TopicMetrics::~TopicMetrics() {
  BytesIn().Release({topic_});
  RecordsIn().Release({topic_});
  BytesOut().Release({topic_});
}

RequestMetrics::RequestMetrics()
    : errors_(metrics::ProcessRegistry().AddCounter(
          "runnel_broker_request_errors_total",
          "Requests answered with an error, by API and the answer's first error code.",
          {"api", "error"})) {
  metrics::Registry& r = metrics::ProcessRegistry();
  metrics::CounterFamily& requests =
      r.AddCounter("runnel_broker_requests_total", "Kafka requests answered, by API.", {"api"});
  metrics::HistogramFamily& latency =
      r.AddHistogram("runnel_broker_request_latency_seconds",
                     "Time from a request's frame read to its response queued, by API.", {"api"});
  auto make = [&](std::string name) {
    Api api;
    api.requests = requests.WithLabels({name});
    api.latency = latency.WithLabels({name});
    api.name = std::move(name);
    return api;
  };
  for (const protocol::ApiSchemaInfo& schema : protocol::AllApiSchemas()) {
    if (schema.key < 0) continue;
    if (by_key_.size() <= static_cast<size_t>(schema.key)) by_key_.resize(schema.key + 1);
    by_key_[schema.key] = make(std::string(schema.name));
  }
  unknown_ = make("unknown");
}

const RequestMetrics::Api& RequestMetrics::ForKey(int16_t api_key) const {
  if (api_key < 0 || static_cast<size_t>(api_key) >= by_key_.size() ||
      by_key_[api_key].requests == nullptr) {
    return unknown_;
  }
  return by_key_[api_key];
}

void RequestMetrics::Record(int16_t api_key, std::chrono::steady_clock::duration latency,
                            protocol::ErrorCode error) {
  const Api& api = ForKey(api_key);
  api.requests->Inc();
  api.latency->Observe(std::chrono::duration<double>(latency).count());
  if (error != protocol::ErrorCode::kNone) {
    errors_.WithLabels({api.name, std::string(protocol::ErrorName(error))})->Inc();
  }
}

ConnectionMetrics::ConnectionMetrics()
    : open(metrics::ProcessRegistry()
               .AddGauge("runnel_broker_connections", "Open Kafka client connections.")
               .WithLabels({})),
      accepted(metrics::ProcessRegistry()
                   .AddCounter("runnel_broker_connections_accepted_total",
                               "Kafka client connections accepted.")
                   .WithLabels({})),
      refused(metrics::ProcessRegistry()
                  .AddCounter("runnel_broker_connections_refused_total",
                              "Connections closed at once for max.connections(.per.ip).")
                  .WithLabels({})) {}

}  // namespace runnel::brokerd
