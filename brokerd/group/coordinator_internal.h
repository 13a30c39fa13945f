// What the files of the group coordinator share (coordinator.cc, shard.cc, shard_loading.cc,
// shard_offsets.cc). Not an interface: include it only there.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>

#include "common/log/log.h"

namespace runnel::brokerd::group::internal {

// The group coordinator's logger, "brokerd.group".
inline const log::ModuleLogger kLog("brokerd.group");

}  // namespace runnel::brokerd::group::internal
