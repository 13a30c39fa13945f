// Writes the fuzzer's seed corpus: for every request of every API at every version, a header
// plus the body the generated round-trip tests build (default and filled), one file each.
#include <cstdio>
#include <string>

#include "common/protocol/header.h"
#include "tests/unit/protocol/roundtrip.h"

int main(int argc, char** argv) {
  using namespace runnel::protocol;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int written = 0;
  for (const testing::RoundTripCase& c : testing::AllRoundTripCases()) {
    if (!c.is_request) continue;
    for (uint64_t seed = 0; seed < 3; ++seed) {
      RequestHeader header;
      header.api_key = c.api_key;
      header.api_version = c.version;
      header.correlation_id = static_cast<int32_t>(seed);
      header.client_id = "seed";
      Bytes frame;
      Writer w(frame);
      header.Encode(w, RequestHeaderVersion(c.api_key, c.version));
      w.WriteRaw(c.encode(c.version, seed));
      const std::string path =
          dir + "/" + c.message + "_v" + std::to_string(c.version) + "_" + std::to_string(seed);
      FILE* f = std::fopen(path.c_str(), "wb");
      if (f == nullptr || std::fwrite(frame.data(), 1, frame.size(), f) != frame.size() ||
          std::fclose(f) != 0) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        return 1;
      }
      ++written;
    }
  }
  std::printf("wrote %d seeds to %s\n", written, dir.c_str());
  return 0;
}
