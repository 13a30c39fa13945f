// libFuzzer target: arbitrary bytes as what storaged's append socket reads (common/util/
// frames.h). The first byte picks the size of the pieces the rest is fed in. Nothing may
// crash, and the reader must be exact: the frames it pops, framed again, are byte for byte
// the prefix of the input they came from, what it keeps is the rest, and it refuses a
// length over its bound.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/util/frames.h"

namespace {

// Small, so that the fuzzer reaches the refusal with short inputs.
constexpr uint32_t kBound = 4096;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  const char* stream = reinterpret_cast<const char*>(data + 1);
  const size_t n = size - 1;
  runnel::FrameReader reader(kBound);
  std::string reframed;
  bool refused = false;
  for (size_t at = 0; at < n && !refused; at += piece) {
    reader.Feed(stream + at, std::min(piece, n - at));
    while (true) {
      std::string_view payload;
      runnel::FrameReader::Next next = reader.Pop(&payload);
      if (next == runnel::FrameReader::Next::kNeedMore) break;
      if (next == runnel::FrameReader::Next::kTooLarge) {
        refused = true;
        break;
      }
      if (payload.size() > kBound) Fail("a frame over the bound came out");
      runnel::AppendFrame(payload, &reframed);
    }
  }
  if (reframed.size() > n || std::memcmp(reframed.data(), stream, reframed.size()) != 0) {
    Fail("the frames popped are not the input's prefix");
  }
  if (!refused && reframed.size() + reader.buffered() != n) {
    Fail("bytes were lost or invented");
  }
  if (refused) {
    // The refused header is the first thing after the popped frames.
    if (n - reframed.size() < 4) Fail("refused without a whole header");
    const auto* h = reinterpret_cast<const uint8_t*>(stream + reframed.size());
    const uint32_t len =
        (uint32_t{h[0]} << 24) | (uint32_t{h[1]} << 16) | (uint32_t{h[2]} << 8) | uint32_t{h[3]};
    if (len <= kBound) Fail("a frame within the bound was refused");
  }
  return 0;
}
