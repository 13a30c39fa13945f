#include "brokerd/net/uv_handle.h"

#include "common/log/log.h"

namespace runnel::brokerd::uv_internal {

void LogCallbackFailure(const char* what) {
  log::Get("brokerd.loop")->error("libuv callback failed: {}", what);
}

}  // namespace runnel::brokerd::uv_internal
