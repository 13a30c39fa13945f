// What every generated message header needs: wire primitives, Uuid, Records, strong ids, error
// codes.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/protocol/records.h"
#include "common/protocol/uuid.h"
#include "common/protocol/wire.h"
#include "common/util/strong_int.h"

namespace runnel::protocol {

using ::runnel::NodeId;
using ::runnel::ProducerId;

}  // namespace runnel::protocol
