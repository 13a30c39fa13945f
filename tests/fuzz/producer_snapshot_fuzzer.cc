// libFuzzer target: arbitrary bytes as a producer state snapshot file
// (storaged/log/producer_state.h). Nothing may crash; a refused snapshot changes nothing; an
// accepted one encodes to a snapshot that loads to the same state and encodes the same.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "storaged/log/producer_state.h"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using runnel::storaged::ProducerStateManager;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ProducerStateManager state;
  // A state to keep when the input is refused.
  const std::string before = state.EncodeSnapshot();
  if (!state.LoadSnapshot(bytes).ok()) {
    if (state.EncodeSnapshot() != before) Fail("a refused snapshot changed the state");
    return 0;
  }
  const std::string again = state.EncodeSnapshot();
  ProducerStateManager reloaded;
  if (!reloaded.LoadSnapshot(again).ok()) Fail("an encoded snapshot does not load");
  if (reloaded.producers() != state.producers()) Fail("a snapshot round trip changed the state");
  if (reloaded.EncodeSnapshot() != again) Fail("encoding is not stable");
  return 0;
}
