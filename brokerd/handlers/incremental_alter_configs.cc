// IncrementalAlterConfigs (key 44), v0-v1: SET / DELETE / APPEND / SUBTRACT per config, the
// resource's other configs kept. Done by the controller through the same path as
// AlterConfigs (alter_configs.cc).
#include "brokerd/handlers/alter_configs.h"

namespace runnel::brokerd {

void HandleIncrementalAlterConfigs(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                                   Respond respond) {
  ForwardAlterConfigs<protocol::IncrementalAlterConfigsRequest,
                      protocol::IncrementalAlterConfigsResponse>(broker, std::move(ctx),
                                                                 std::move(respond));
}

}  // namespace runnel::brokerd
