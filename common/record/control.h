// Control records: the transaction markers (Kafka's EndTransactionMarker) a transaction
// coordinator writes to end a producer's transaction in a partition.
//
// A marker is a control batch (attributes: control and transactional bits) of the
// producer's id and epoch, base sequence -1, holding one record whose bytes are, big-endian:
//
//   key:   int16 version (0), int16 type (0 ABORT, 1 COMMIT; 2+ are other control types)
//   value: int16 version (0), int32 coordinator epoch
//
// Readers take a higher version as Kafka does: the fields they know come first.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/record/batch.h"

namespace runnel::record {

inline constexpr int16_t kControlTypeAbort = 0;
inline constexpr int16_t kControlTypeCommit = 1;

struct EndTxnMarker {
  bool commit = false;
  int32_t coordinator_epoch = -1;
};

// The marker in `record`, a control batch's record: INVALID_RECORD when its key is not an
// ABORT or COMMIT control key or its value is shorter than 6 bytes.
protocol::KafkaError ParseEndTxnMarker(const Record& record, EndTxnMarker* out);
// The marker of a control batch (its first record); nullopt in `*out` for an empty batch
// (compaction may leave one). Errors as ParseEndTxnMarker, and CORRUPT_MESSAGE when the
// records cannot be read.
protocol::KafkaError ReadEndTxnMarker(const BatchView& batch, std::optional<EndTxnMarker>* out);

// A whole marker batch at base offset 0 (the log assigns the real one).
std::vector<uint8_t> BuildEndTxnMarkerBatch(int64_t producer_id, int16_t producer_epoch,
                                            const EndTxnMarker& marker, int64_t timestamp_ms);

}  // namespace runnel::record
