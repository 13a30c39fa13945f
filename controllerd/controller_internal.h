// What the files of the Controller class share (controller.cc, controller_topics.cc,
// controller_brokers.cc, controller_configs.cc, controller_features.cc). Not an interface:
// include it only there.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

#include "common/log/log.h"

namespace runnel::controllerd::internal {

// The controller's logger, "controllerd.controller".
inline const log::ModuleLogger kLog("controllerd.controller");

}  // namespace runnel::controllerd::internal
