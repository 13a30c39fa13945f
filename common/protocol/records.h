// The `records` payload of Produce, Fetch and friends: a run of record batches, kept as the
// bytes the client sent (batches are validated and stored unchanged, see DESIGN.md).
//
// A named type rather than a bare byte vector because the fetch path will also carry file
// ranges here (sent with sendfile), so code that handles records must not assume they are
// contiguous bytes in memory.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace runnel::protocol {

using Bytes = std::vector<uint8_t>;

struct Records {
  // nullopt is Kafka's null records (length -1), distinct from an empty payload.
  std::optional<Bytes> data;

  bool IsNull() const { return !data.has_value(); }
  size_t SizeInBytes() const { return data ? data->size() : 0; }

  bool operator==(const Records&) const = default;
};

}  // namespace runnel::protocol
