// AlterConfigs (key 33), v0-v2: the given configs replace a resource's explicit ones. The
// controller validates and writes them (Controller::AlterConfigs); the broker only answers
// the broker resources naming another node itself, as Kafka's broker does. Shared with
// IncrementalAlterConfigs (incremental_alter_configs.cc).
#include "brokerd/handlers/alter_configs.h"

#include <charconv>

#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"

namespace runnel::brokerd {
namespace {

using protocol::AlterConfigsRequest;
using protocol::AlterConfigsResponse;
using protocol::ErrorCode;
namespace ctl = runnel::controller;

constexpr int32_t kBrokerResource = 4;
// AlterConfigs has no timeout of its own: the controller call and the wait for the cache
// each get this long.
constexpr std::chrono::milliseconds kTimeout{30000};

// Kafka's broker-side check of a broker resource name ("" = the cluster default): a node
// changes only its own per-broker configs.
std::optional<protocol::KafkaError> CheckBrokerResource(const ctl::AlterConfigsResource& r,
                                                        int32_t node_id) {
  const std::string& name = r.resource_name();
  if (r.resource_type() != kBrokerResource || name.empty()) return std::nullopt;
  int32_t id = -1;
  auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), id);
  if (ec != std::errc() || ptr != name.data() + name.size()) {
    return protocol::KafkaError{ErrorCode::kInvalidRequest,
                                fmt::format("Node id must be an integer, but it is: {}", name)};
  }
  if (id != node_id) {
    return protocol::KafkaError{
        ErrorCode::kInvalidRequest,
        fmt::format("Unexpected broker id, expected {}, but received {}", node_id, name)};
  }
  return std::nullopt;
}

}  // namespace

void AlterConfigsThroughController(BrokerContext& broker, ctl::AlterConfigsRequest call,
                                   std::function<void(std::vector<protocol::KafkaError>)> done) {
  const size_t n = static_cast<size_t>(call.resources_size());
  auto outcomes = std::make_shared<std::vector<protocol::KafkaError>>(n);
  // Which request entry each resource sent to the controller answers.
  auto sent_index = std::make_shared<std::vector<size_t>>();
  ctl::AlterConfigsRequest to_send;
  to_send.set_incremental(call.incremental());
  to_send.set_validate_only(call.validate_only());
  for (size_t i = 0; i < n; ++i) {
    if (auto refused = CheckBrokerResource(call.resources(static_cast<int>(i)), broker.node_id)) {
      (*outcomes)[i] = std::move(*refused);
      continue;
    }
    sent_index->push_back(i);
    *to_send.add_resources() = std::move(*call.mutable_resources(static_cast<int>(i)));
  }
  if (sent_index->empty()) return done(std::move(*outcomes));

  broker.controller.AlterConfigs(
      to_send, kTimeout,
      [&broker, outcomes, sent_index, done = std::move(done)](
          const grpc::Status& status, const ctl::AlterConfigsResponse& result) {
        int64_t offset = -1;
        if (!status.ok() || static_cast<size_t>(result.results_size()) != sent_index->size()) {
          KafkaLog()->warn(
              "AlterConfigs: controller call failed: {}",
              status.ok() ? std::string("wrong number of results") : status.error_message());
          for (size_t i : *sent_index) {
            (*outcomes)[i] = {
                status.ok() ? ErrorCode::kUnknownServerError : ControllerCallError(status),
                status.error_message()};
          }
        } else {
          offset = result.metadata_offset();
          for (size_t k = 0; k < sent_index->size(); ++k) {
            const ctl::AlterConfigsResult& r = result.results(static_cast<int>(k));
            (*outcomes)[(*sent_index)[k]] = {protocol::ErrorFromWire(r.error_code()),
                                             r.error_message()};
          }
        }
        // Answer once the change is in this broker's cache, so a DescribeConfigs that
        // follows shows it.
        WaitForMetadata(
            broker, [&broker, offset] { return broker.metadata.offset() >= offset; },
            kTimeout.count(), [outcomes, done] { done(std::move(*outcomes)); });
      });
}

void HandleAlterConfigs(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                        Respond respond) {
  ForwardAlterConfigs<AlterConfigsRequest, AlterConfigsResponse>(broker, std::move(ctx),
                                                                 std::move(respond));
}

}  // namespace runnel::brokerd
