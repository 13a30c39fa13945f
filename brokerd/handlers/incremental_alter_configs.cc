// IncrementalAlterConfigs (key 44), v0-v1: SET / DELETE / APPEND / SUBTRACT per config, the
// resource's other configs kept. Done by the controller through the same path as
// AlterConfigs (alter_configs.cc).
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {

using protocol::IncrementalAlterConfigsRequest;
using protocol::IncrementalAlterConfigsResponse;
namespace ctl = runnel::controller;

void HandleIncrementalAlterConfigs(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                                   Respond respond) {
  IncrementalAlterConfigsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  ctl::AlterConfigsRequest call;
  call.set_incremental(true);
  call.set_validate_only(req.validate_only);
  for (const auto& res : req.resources) {
    ctl::AlterConfigsResource* r = call.add_resources();
    r->set_resource_type(res.resource_type);
    r->set_resource_name(res.resource_name);
    for (const auto& c : res.configs) {
      ctl::AlterableConfig* config = r->add_configs();
      config->set_name(c.name);
      config->set_operation(c.config_operation);
      if (c.value.has_value()) config->set_value(*c.value);
    }
  }
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  AlterConfigsThroughController(
      broker, call,
      [shared_ctx, req = std::move(req), respond](std::vector<AlterConfigsOutcome> outcomes) {
        IncrementalAlterConfigsResponse resp;
        for (size_t i = 0; i < outcomes.size(); ++i) {
          IncrementalAlterConfigsResponse::AlterConfigsResourceResponse r;
          r.error_code = outcomes[i].error_code;
          r.error_message = std::move(outcomes[i].error_message);
          r.resource_type = req.resources[i].resource_type;
          r.resource_name = req.resources[i].resource_name;
          resp.responses.push_back(std::move(r));
        }
        respond(EncodeResponse(*shared_ctx, resp));
      });
}

}  // namespace runnel::brokerd
