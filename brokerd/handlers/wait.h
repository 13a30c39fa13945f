// Waiting on the loop for the metadata cache to show a change made through the controller.
#pragma once

#include <functional>

#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {

// Runs `then` on the loop once `ready()` is true (checked now and after every metadata
// update) or after `timeout_ms`, whichever comes first; exactly once.
void WaitForMetadata(BrokerContext& broker, std::function<bool()> ready, int64_t timeout_ms,
                     std::function<void()> then);

// The Kafka error for a failed controller call.
protocol::ErrorCode ControllerCallError(const grpc::Status& status);

}  // namespace runnel::brokerd
