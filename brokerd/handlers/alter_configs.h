// AlterConfigs and IncrementalAlterConfigs differ only in each config's operation: the
// legacy API always sets (its configs replace the resource's explicit ones), the incremental
// one says SET / DELETE / APPEND / SUBTRACT. Both go to the controller through
// AlterConfigsThroughController and answer one result per resource, in request order.
#pragma once

#include <memory>
#include <type_traits>

#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {

template <typename Req, typename Resp>
void ForwardAlterConfigs(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                         Respond respond) {
  constexpr bool kIncremental = std::is_same_v<Req, protocol::IncrementalAlterConfigsRequest>;
  Req req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  runnel::controller::AlterConfigsRequest call;
  call.set_incremental(kIncremental);
  call.set_validate_only(req.validate_only);
  for (const auto& res : req.resources) {
    runnel::controller::AlterConfigsResource* r = call.add_resources();
    r->set_resource_type(res.resource_type);
    r->set_resource_name(res.resource_name);
    for (const auto& c : res.configs) {
      runnel::controller::AlterableConfig* config = r->add_configs();
      config->set_name(c.name);
      if constexpr (kIncremental) {
        config->set_operation(c.config_operation);
      } else {
        config->set_operation(0);  // SET
      }
      if (c.value.has_value()) config->set_value(*c.value);
    }
  }
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  AlterConfigsThroughController(
      broker, std::move(call),
      [shared_ctx, req = std::move(req), respond](std::vector<protocol::KafkaError> outcomes) {
        Resp resp;
        for (size_t i = 0; i < outcomes.size(); ++i) {
          typename Resp::AlterConfigsResourceResponse r;
          r.error_code = outcomes[i].code;
          // Null when there is nothing to say, as Kafka's ApiError gives it.
          if (!outcomes[i].message.empty())
            r.error_message = std::move(outcomes[i].message);
          else
            r.error_message.reset();
          r.resource_type = req.resources[i].resource_type;
          r.resource_name = req.resources[i].resource_name;
          resp.responses.push_back(std::move(r));
        }
        respond(EncodeResponse(*shared_ctx, resp));
      });
}

}  // namespace runnel::brokerd
