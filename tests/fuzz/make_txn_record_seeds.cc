// Writes txn_records_fuzzer's seed corpus: __transaction_state records of every state (and a
// tombstone), built with brokerd/txn/txn_metadata.h, framed as the fuzzer reads them.
#include <cstdio>
#include <string>
#include <vector>

#include "brokerd/txn/txn_metadata.h"
#include "tests/fuzz/write_seeds.h"

int main(int argc, char** argv) {
  using namespace runnel::brokerd::txn;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    return 2;
  }
  std::vector<runnel::brokerd::group::LogRecord> records;
  for (int s = 0; s <= static_cast<int>(TxnState::kCompleteAbort); ++s) {
    TxnMetadata m = NewTxnMetadata("txn-" + std::to_string(s), 1000 + s, 60000, 1700000000000);
    m.state = static_cast<TxnState>(s);
    m.producer_epoch = static_cast<int16_t>(s);
    if (m.state != TxnState::kEmpty) m.partitions = {{"a", 0}, {"a", 3}, {"b", 1}};
    m.client_transaction_version = s % 2 == 0 ? 0 : 2;  // v0 and v1 (flexible) values
    records.push_back(EncodeTxnRecord(m));
  }
  records.push_back(EncodeTxnTombstone("txn-0"));
  std::vector<std::string> seeds;
  for (const auto& r : records) {
    std::string bytes = {static_cast<char>(r.key.size() >> 8), static_cast<char>(r.key.size())};
    bytes.append(r.key.begin(), r.key.end());
    bytes.push_back(r.value ? 1 : 0);
    if (r.value) bytes.append(r.value->begin(), r.value->end());
    seeds.push_back(std::move(bytes));
  }
  return runnel::fuzz::WriteSeeds(argv[1], seeds);
}
