// The entries of a segment's transaction index, <20-digit base offset>.txnindex (see
// txn_index.h): Kafka's AbortedTxn, version 0, so Kafka's tools read the file. The file is
// an array of 34-byte entries, big-endian, in the order the markers were written (so by
// increasing lastOffset):
//
//   offset size field
//        0    2 version             0
//        2    8 producerId
//       10    8 firstOffset         the transaction's first batch
//       18    8 lastOffset          its ABORT marker
//       26    8 lastStableOffset    the partition's last stable offset once it ended
//
// Kept apart from TxnIndex so the decoder builds alone (tests/fuzz/txn_index_fuzzer.cc).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/util/status.h"

namespace runnel::storaged {

inline constexpr size_t kAbortedTxnSize = 34;

struct AbortedTxn {
  int64_t producer_id = -1;
  int64_t first_offset = -1;
  int64_t last_offset = -1;
  int64_t last_stable_offset = -1;
  bool operator==(const AbortedTxn&) const = default;
};

// The 34 bytes of one entry.
void EncodeAbortedTxn(const AbortedTxn& txn, uint8_t out[kAbortedTxnSize]);
// A whole file's entries; kDataLoss saying why for a size that is not a multiple of 34, an
// entry of another version, offsets that are not a transaction's (negative, or last below
// first), or entries whose lastOffset does not grow.
StatusOr<std::vector<AbortedTxn>> DecodeTxnIndex(std::span<const uint8_t> bytes);

}  // namespace runnel::storaged
