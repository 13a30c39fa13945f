// The seed tools' common tail: writes each seed as <dir>/seed-<i>.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace runnel::fuzz {

// 0 when every seed was written; 1 after saying which file failed.
inline int WriteSeeds(const std::string& dir, const std::vector<std::string>& seeds) {
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::string path = dir + "/seed-" + std::to_string(i);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(seeds[i].data(), 1, seeds[i].size(), f) != seeds[i].size()) {
      std::perror(path.c_str());
      if (f != nullptr) std::fclose(f);
      return 1;
    }
    std::fclose(f);
  }
  return 0;
}

}  // namespace runnel::fuzz
