#include "common/protocol/error_code.h"

#include <ostream>

namespace runnel::protocol {

std::ostream& operator<<(std::ostream& os, ErrorCode code) {
  return os << ErrorName(code) << " (" << ToWire(code) << ")";
}

}  // namespace runnel::protocol
