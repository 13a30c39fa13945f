// Writes append_frames_fuzzer's seed corpus: a first byte (the piece size) and then frames
// back to back: empty, small, several, one cut short, and one over the fuzzer's bound.
#include <cstdio>
#include <string>
#include <vector>

#include "common/util/frames.h"
#include "tests/fuzz/write_seeds.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  std::vector<std::string> seeds;
  auto frames = [](std::vector<std::string> payloads, char piece) {
    std::string s(1, piece);
    for (const std::string& p : payloads) runnel::AppendFrame(p, &s);
    return s;
  };
  seeds.push_back(frames({""}, 0));
  seeds.push_back(frames({"one frame"}, 5));
  seeds.push_back(frames({"a", "bb", std::string(300, 'c'), ""}, 2));
  std::string cut = frames({"whole", "cut short here"}, 63);
  cut.resize(cut.size() - 4);
  seeds.push_back(cut);
  seeds.push_back(frames({"ok", std::string(5000, 'x')}, 7));
  return runnel::fuzz::WriteSeeds(argv[1], seeds);
}
