#include "storaged/log/aborted_txn.h"

#include <fmt/format.h>

#include "common/util/big_endian.h"

namespace runnel::storaged {
namespace {

constexpr int16_t kAbortedTxnVersion = 0;

}  // namespace

void EncodeAbortedTxn(const AbortedTxn& txn, uint8_t out[kAbortedTxnSize]) {
  StoreBigEndian(out, uint16_t(kAbortedTxnVersion), 2);
  StoreBigEndian(out + 2, uint64_t(txn.producer_id), 8);
  StoreBigEndian(out + 10, uint64_t(txn.first_offset), 8);
  StoreBigEndian(out + 18, uint64_t(txn.last_offset), 8);
  StoreBigEndian(out + 26, uint64_t(txn.last_stable_offset), 8);
}

StatusOr<std::vector<AbortedTxn>> DecodeTxnIndex(std::span<const uint8_t> bytes) {
  if (bytes.size() % kAbortedTxnSize != 0) {
    return absl::DataLossError(
        fmt::format("transaction index of {} bytes is not a whole number of {}-byte entries",
                    bytes.size(), kAbortedTxnSize));
  }
  std::vector<AbortedTxn> out;
  out.reserve(bytes.size() / kAbortedTxnSize);
  for (size_t at = 0; at < bytes.size(); at += kAbortedTxnSize) {
    const uint8_t* p = bytes.data() + at;
    const int16_t version = int16_t(LoadBigEndian16(p));
    if (version != kAbortedTxnVersion) {
      return absl::DataLossError(
          fmt::format("transaction index entry {} has version {}", at / kAbortedTxnSize, version));
    }
    AbortedTxn txn;
    txn.producer_id = int64_t(LoadBigEndian64(p + 2));
    txn.first_offset = int64_t(LoadBigEndian64(p + 10));
    txn.last_offset = int64_t(LoadBigEndian64(p + 18));
    txn.last_stable_offset = int64_t(LoadBigEndian64(p + 26));
    if (txn.producer_id < 0 || txn.first_offset < 0 || txn.last_offset < txn.first_offset ||
        txn.last_stable_offset < 0) {
      return absl::DataLossError(
          fmt::format("transaction index entry {} is not a transaction: producer {}, offsets "
                      "{}..{}, last stable offset {}",
                      at / kAbortedTxnSize, txn.producer_id, txn.first_offset, txn.last_offset,
                      txn.last_stable_offset));
    }
    if (!out.empty() && txn.last_offset <= out.back().last_offset) {
      return absl::DataLossError(
          fmt::format("transaction index entry {}: last offset {} does not follow {}",
                      at / kAbortedTxnSize, txn.last_offset, out.back().last_offset));
    }
    out.push_back(txn);
  }
  return out;
}

}  // namespace runnel::storaged
