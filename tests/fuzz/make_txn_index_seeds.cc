// Writes txn_index_fuzzer's seed corpus: an empty index, one and three aborted
// transactions, one cut short and one with an entry of version 1.
#include <cstdio>
#include <string>
#include <vector>

#include "storaged/log/aborted_txn.h"
#include "tests/fuzz/write_seeds.h"

namespace {

using runnel::storaged::AbortedTxn;
using runnel::storaged::kAbortedTxnSize;

std::string Encode(const std::vector<AbortedTxn>& txns) {
  std::string out(txns.size() * kAbortedTxnSize, '\0');
  for (size_t i = 0; i < txns.size(); ++i) {
    runnel::storaged::EncodeAbortedTxn(
        txns[i], reinterpret_cast<uint8_t*>(out.data()) + i * kAbortedTxnSize);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  std::vector<std::string> seeds;
  seeds.push_back("");
  seeds.push_back(Encode({{1000, 5, 9, 10}}));
  seeds.push_back(Encode({{1000, 5, 9, 3}, {1001, 3, 12, 13}, {7, 20, 40, 41}}));
  std::string cut = seeds.back();
  cut.resize(cut.size() - 5);
  seeds.push_back(cut);
  std::string version = seeds[1];
  version[1] = 1;
  seeds.push_back(version);
  return runnel::fuzz::WriteSeeds(argv[1], seeds);
}
