// Writes control_batch_fuzzer's seed corpus: appends as a partition sees them in
// transactions (data batches of transactional producers followed by their COMMIT or ABORT
// markers, two producers interleaved, an epoch bump, a marker of an older coordinator
// epoch), an empty control batch (compaction's leftover), a control record that is no
// marker, a marker value cut short, a gzip-compressed marker and a marker of version 1.
#include <cstdio>
#include <string>
#include <vector>

#include "common/record/batch.h"
#include "common/record/control.h"
#include "tests/fuzz/write_seeds.h"

namespace {

using runnel::record::BatchBuilder;
using runnel::record::BuildEndTxnMarkerBatch;
using runnel::record::ByteSpan;
using runnel::record::Compression;
using runnel::record::EndTxnMarker;

constexpr int64_t kNow = 1700000000000;

std::string Str(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

ByteSpan Span(const std::string& s) {
  return ByteSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// A transactional producer's data batch of `n` records.
std::string Data(int64_t producer_id, int16_t epoch, int32_t sequence, int n,
                 bool transactional = true) {
  BatchBuilder::Options o;
  o.producer_id = producer_id;
  o.producer_epoch = epoch;
  o.base_sequence = sequence;
  o.transactional = transactional;
  BatchBuilder b(o);
  for (int i = 0; i < n; ++i) b.Add(kNow + i, std::nullopt, Span("value"));
  return Str(*b.Build());
}

std::string Marker(int64_t producer_id, int16_t epoch, bool commit, int32_t coordinator_epoch) {
  return Str(BuildEndTxnMarkerBatch(
      producer_id, epoch, EndTxnMarker{.commit = commit, .coordinator_epoch = coordinator_epoch},
      kNow + 100));
}

// A control batch of one record with this key and value.
std::string Control(const std::string& key, const std::string& value,
                    Compression codec = Compression::kNone) {
  BatchBuilder::Options o;
  o.producer_id = 1000;
  o.producer_epoch = 0;
  o.transactional = true;
  o.control = true;
  o.compression = codec;
  BatchBuilder b(o);
  b.Add(kNow, Span(key), Span(value));
  return Str(*b.Build());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  const std::string commit_key("\0\0\0\1", 4);
  const std::string abort_key("\0\0\0\0", 4);
  const std::string epoch_7("\0\0\0\0\0\7", 6);
  std::vector<std::string> seeds;
  seeds.push_back(Data(1000, 0, 0, 3) + Marker(1000, 0, true, 0));
  seeds.push_back(Data(1000, 0, 0, 2) + Data(1000, 0, 2, 2) + Marker(1000, 0, false, 3));
  seeds.push_back(Data(1000, 0, 0, 2) + Data(2000, 5, 0, 1) + Marker(2000, 5, true, 1) +
                  Data(1000, 0, 2, 1) + Marker(1000, 0, false, 1));
  // transaction.version 2: the marker carries the bumped epoch; then one at the old epoch.
  seeds.push_back(Data(1000, 0, 0, 1) + Marker(1000, 1, true, 2) + Marker(1000, 0, true, 2));
  // A marker of an older coordinator epoch after a newer one (TRANSACTION_COORDINATOR_FENCED).
  seeds.push_back(Data(1000, 0, 0, 1) + Marker(1000, 0, true, 5) + Data(1000, 0, 1, 1) +
                  Marker(1000, 0, true, 4));
  // A non-transactional batch inside a transaction (INVALID_TXN_STATE).
  seeds.push_back(Data(1000, 0, 0, 1) + Data(1000, 0, 1, 1, /*transactional=*/false));
  BatchBuilder::Options empty;
  empty.producer_id = 1000;
  empty.producer_epoch = 0;
  empty.transactional = true;
  empty.control = true;
  seeds.push_back(Data(1000, 0, 0, 1) + Str(*BatchBuilder(empty).Build()));
  seeds.push_back(Control(std::string("\0\0\0\2", 4), epoch_7));     // type 2: no marker
  seeds.push_back(Control(commit_key, std::string("\0\0\0\7", 4)));  // value cut short
  seeds.push_back(Data(1000, 0, 0, 1) + Control(abort_key, epoch_7, Compression::kGzip));
  // Version 1 of key and value, with a field more: read as version 0.
  seeds.push_back(Control(std::string("\0\1\0\1", 4), std::string("\0\1\0\0\0\7\0\0", 8)));
  return runnel::fuzz::WriteSeeds(argv[1], seeds);
}
