// ParseTxnRecord (brokerd/txn/txn_metadata.cc) on arbitrary __transaction_state records: it
// must never crash or read out of bounds, answer only OK / InvalidArgument / NotFound, and a
// record it parses must survive being rebuilt from the parsed value and parsed again.
//
// Input: a 2-byte big-endian key length, the key, then (if any bytes are left) one flag byte,
// 0 for a tombstone, else the value is the rest (as group_records_fuzzer).
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>

#include "brokerd/txn/txn_metadata.h"

namespace runnel::brokerd::txn {
namespace {

group::LogRecord Rebuild(const ParsedTxnRecord& parsed) {
  return parsed.value.has_value() ? EncodeTxnRecord(*parsed.value)
                                  : EncodeTxnTombstone(parsed.transactional_id);
}

StatusOr<ParsedTxnRecord> Parse(const group::LogRecord& r) {
  std::optional<std::span<const uint8_t>> value;
  if (r.value) value = std::span<const uint8_t>(*r.value);
  return ParseTxnRecord(r.key, value);
}

}  // namespace
}  // namespace runnel::brokerd::txn

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace runnel::brokerd::txn;
  if (size < 2) return 0;
  size_t key_len = (static_cast<size_t>(data[0]) << 8) | data[1];
  std::span<const uint8_t> rest(data + 2, size - 2);
  if (key_len > rest.size()) key_len = rest.size();
  std::span<const uint8_t> key = rest.first(key_len);
  rest = rest.subspan(key_len);
  std::optional<std::span<const uint8_t>> value;
  if (!rest.empty() && rest[0] != 0) value = rest.subspan(1);

  runnel::StatusOr<ParsedTxnRecord> parsed = ParseTxnRecord(key, value);
  if (!parsed.ok()) {
    const absl::StatusCode code = parsed.status().code();
    if (code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kNotFound) {
      std::abort();
    }
    return 0;
  }
  // What we write back must parse, and rebuild to the same bytes.
  runnel::brokerd::group::LogRecord once = Rebuild(*parsed);
  runnel::StatusOr<ParsedTxnRecord> again = Parse(once);
  if (!again.ok()) std::abort();
  runnel::brokerd::group::LogRecord twice = Rebuild(*again);
  if (twice.key != once.key || twice.value != once.value) std::abort();
  return 0;
}
