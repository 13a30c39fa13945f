// DescribeConfigs (key 32), v1-v4: topic and broker configs, answered from this broker's
// metadata cache and its config file (brokerd/controller/topic_configs.h has the rules).
#include <charconv>

#include "brokerd/controller/topic_configs.h"
#include "brokerd/handlers/handler.h"
#include "common/util/topic_name.h"

namespace runnel::brokerd {
namespace {

using protocol::DescribeConfigsRequest;
using protocol::DescribeConfigsResponse;
using protocol::ErrorCode;

// Kafka's ConfigResource.Type ids.
constexpr int8_t kTopicResource = 2;
constexpr int8_t kBrokerResource = 4;

std::string_view ResourceTypeName(int8_t type) {
  switch (type) {
    case kTopicResource:
      return "TOPIC";
    case kBrokerResource:
      return "BROKER";
    case 8:
      return "BROKER_LOGGER";
    case 16:
      return "CLIENT_METRICS";
    case 32:
      return "GROUP";
    default:
      return "UNKNOWN";
  }
}

DescribeConfigsResponse::DescribeConfigsResourceResult ToWire(const DescribedConfig& c,
                                                              bool synonyms, bool documentation) {
  DescribeConfigsResponse::DescribeConfigsResourceResult out;
  out.name = c.name;
  out.value = c.value;
  out.read_only = c.read_only;
  out.config_source = static_cast<int8_t>(c.source);
  out.is_sensitive = c.sensitive;
  if (synonyms) {
    for (const ConfigSynonym& s : c.synonyms) {
      DescribeConfigsResponse::DescribeConfigsSynonym syn;
      syn.name = s.name;
      syn.value = s.value;
      syn.source = static_cast<int8_t>(s.source);
      out.synonyms.push_back(std::move(syn));
    }
  }
  out.config_type = c.type;
  // Kafka's null unless asked for (v3+).
  if (documentation) {
    out.documentation = c.documentation;
  } else {
    out.documentation = std::nullopt;
  }
  return out;
}

}  // namespace

void HandleDescribeConfigs(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                           Respond respond) {
  DescribeConfigsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  const bool documentation = ctx->header.api_version >= 3 && req.include_documentation;
  const NodeConfigView node = NodeConfigView::Of(broker.config, broker.metadata, broker.node_id);

  DescribeConfigsResponse resp;
  for (const auto& res : req.resources) {
    DescribeConfigsResponse::DescribeConfigsResult out;
    out.resource_type = res.resource_type;
    out.resource_name = res.resource_name;
    out.error_message = "";  // Kafka 4.4 answers a described resource with "", not null
    auto fail = [&out](ErrorCode code, std::optional<std::string> message) {
      out.error_code = code;
      out.error_message = std::move(message);
    };
    const std::string& name = res.resource_name;
    std::vector<DescribedConfig> configs;
    if (res.resource_type == kTopicResource) {
      if (std::string why = TopicNameError(name); !why.empty()) {
        fail(ErrorCode::kInvalidTopicException, why);
      } else if (const TopicInfo* topic = broker.metadata.FindTopic(name)) {
        configs = DescribeTopicConfigs(node, *topic);
      } else {
        // Kafka sends no message with this one.
        fail(ErrorCode::kUnknownTopicOrPartition, std::nullopt);
      }
    } else if (res.resource_type == kBrokerResource) {
      int32_t id = -1;
      auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), id);
      if (name.empty()) {
        configs = DescribeClusterDefaultConfigs(node);
      } else if (ec != std::errc() || ptr != name.data() + name.size()) {
        fail(ErrorCode::kInvalidRequest,
             fmt::format("Broker id must be an integer, but it is: {}", name));
      } else if (id != broker.node_id) {
        // Each broker describes only itself; an admin client sends it to the broker named.
        fail(ErrorCode::kInvalidRequest,
             fmt::format("Unexpected broker id, expected {} or empty string, but received {}",
                         broker.node_id, name));
      } else {
        configs = DescribeBrokerConfigs(node);
      }
    } else {
      fail(ErrorCode::kInvalidRequest,
           fmt::format("Unsupported resource type: {}", ResourceTypeName(res.resource_type)));
    }

    // A null or empty key list asks for every config.
    const bool filter = res.configuration_keys.has_value() && !res.configuration_keys->empty();
    for (const DescribedConfig& c : configs) {
      if (filter && std::find(res.configuration_keys->begin(), res.configuration_keys->end(),
                              c.name) == res.configuration_keys->end()) {
        continue;
      }
      out.configs.push_back(ToWire(c, req.include_synonyms, documentation));
    }
    resp.results.push_back(std::move(out));
  }
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
