#include "common/record/control.h"

#include <fmt/format.h>

#include "common/util/big_endian.h"

namespace runnel::record {

protocol::KafkaError ParseEndTxnMarker(const Record& record, EndTxnMarker* out) {
  using protocol::ErrorCode;
  if (!record.key || record.key->size() < 4) {
    return {ErrorCode::kInvalidRecord, "a control record without a 4-byte key"};
  }
  const int16_t type = int16_t(LoadBigEndian16(record.key->data() + 2));
  if (type != kControlTypeAbort && type != kControlTypeCommit) {
    return {ErrorCode::kInvalidRecord,
            fmt::format("control record type {} is not an end transaction marker", type)};
  }
  if (!record.value || record.value->size() < 6) {
    return {ErrorCode::kInvalidRecord,
            fmt::format("end transaction marker value of {} bytes, not at least 6",
                        record.value ? record.value->size() : 0)};
  }
  out->commit = type == kControlTypeCommit;
  out->coordinator_epoch = int32_t(LoadBigEndian32(record.value->data() + 2));
  return {};
}

protocol::KafkaError ReadEndTxnMarker(const BatchView& batch, std::optional<EndTxnMarker>* out) {
  out->reset();
  protocol::KafkaError error;
  Status read = ForEachRecord(batch, [&](const Record& r) {
    EndTxnMarker marker;
    error = ParseEndTxnMarker(r, &marker);
    if (error.ok()) *out = marker;
    return false;
  });
  if (!read.ok()) {
    return {protocol::ErrorCode::kCorruptMessage,
            fmt::format("control batch records: {}", read.message())};
  }
  return error;
}

std::vector<uint8_t> BuildEndTxnMarkerBatch(int64_t producer_id, int16_t producer_epoch,
                                            const EndTxnMarker& marker, int64_t timestamp_ms) {
  BatchBuilder::Options o;
  o.producer_id = producer_id;
  o.producer_epoch = producer_epoch;
  o.base_sequence = -1;
  o.transactional = true;
  o.control = true;
  BatchBuilder builder(o);
  const int16_t type = marker.commit ? kControlTypeCommit : kControlTypeAbort;
  const uint8_t key[4] = {0, 0, uint8_t(uint16_t(type) >> 8), uint8_t(type & 0xff)};
  const uint32_t epoch = uint32_t(marker.coordinator_epoch);
  const uint8_t value[6] = {
      0, 0, uint8_t(epoch >> 24), uint8_t(epoch >> 16), uint8_t(epoch >> 8), uint8_t(epoch)};
  builder.Add(timestamp_ms, ByteSpan(key, 4), ByteSpan(value, 6));
  // A builder of one well-formed record cannot fail.
  StatusOr<std::vector<uint8_t>> built = builder.Build();
  return built.ok() ? std::move(*built) : std::vector<uint8_t>{};
}

}  // namespace runnel::record
