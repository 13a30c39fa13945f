// libFuzzer target: arbitrary bytes as a segment's transaction index file
// (storaged/log/aborted_txn.h). Nothing may crash; an accepted file holds entries whose
// last offsets grow and which encode back to exactly its bytes (the format has no slack).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "storaged/log/aborted_txn.h"

namespace {

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using runnel::storaged::AbortedTxn;
  using runnel::storaged::kAbortedTxnSize;
  auto decoded = runnel::storaged::DecodeTxnIndex(std::span<const uint8_t>(data, size));
  if (!decoded.ok()) return 0;
  if (decoded->size() * kAbortedTxnSize != size) Fail("entries do not cover the file");
  std::vector<uint8_t> again(size);
  for (size_t i = 0; i < decoded->size(); ++i) {
    const AbortedTxn& txn = (*decoded)[i];
    if (txn.first_offset < 0 || txn.last_offset < txn.first_offset) Fail("not a transaction");
    if (i > 0 && txn.last_offset <= (*decoded)[i - 1].last_offset) Fail("last offsets shrink");
    runnel::storaged::EncodeAbortedTxn(txn, again.data() + i * kAbortedTxnSize);
  }
  if (size > 0 && std::memcmp(again.data(), data, size) != 0) Fail("round trip changed bytes");
  return 0;
}
