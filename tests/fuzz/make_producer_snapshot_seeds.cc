// Writes producer_snapshot_fuzzer's seed corpus: snapshots of an empty state, of one
// idempotent producer, of several with an ongoing transaction and a marker, and one cut short.
#include <cstdio>
#include <string>
#include <vector>

#include "common/record/batch.h"
#include "storaged/log/producer_state.h"
#include "tests/fuzz/write_seeds.h"

namespace {

using runnel::storaged::ProducerBatchHeader;
using runnel::storaged::ProducerStateManager;

ProducerBatchHeader Batch(int64_t pid, int16_t epoch, int32_t seq, int64_t offset, int32_t n,
                          bool transactional = false, bool control = false) {
  ProducerBatchHeader h;
  h.producer_id = pid;
  h.producer_epoch = epoch;
  h.base_sequence = control ? -1 : seq;
  h.base_offset = offset;
  h.last_offset = offset + n - 1;
  h.max_timestamp = 1'700'000'000'000 + offset;
  h.transactional = transactional;
  h.control = control;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  std::vector<std::string> seeds;
  ProducerStateManager state;
  seeds.push_back(state.EncodeSnapshot());
  state.ReplayBatch(Batch(7, 0, 0, 0, 3), std::nullopt);
  seeds.push_back(state.EncodeSnapshot());
  state.ReplayBatch(Batch(9, 2, 2147483646, 3, 4, /*transactional=*/true), std::nullopt);
  state.ReplayBatch(Batch(11, 1, 0, 7, 1, /*transactional=*/true), std::nullopt);
  state.ReplayBatch(Batch(11, 1, 0, 8, 1, /*transactional=*/true, /*control=*/true),
                    runnel::record::EndTxnMarker{true, 5});
  seeds.push_back(state.EncodeSnapshot());
  std::string cut = seeds.back();
  cut.resize(cut.size() - 7);
  seeds.push_back(cut);
  return runnel::fuzz::WriteSeeds(argv[1], seeds);
}
