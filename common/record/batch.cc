#include "common/record/batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "common/util/big_endian.h"
#include "common/util/crc32c.h"

namespace runnel::record {
namespace {

using protocol::ErrorCode;

// Field offsets of the batch header (see the layout in batch.h).
constexpr size_t kBaseOffsetAt = 0;
constexpr size_t kBatchLengthAt = 8;
constexpr size_t kLeaderEpochAt = 12;
constexpr size_t kMagicAt = 16;
constexpr size_t kCrcAt = 17;
constexpr size_t kAttributesAt = 21;
constexpr size_t kLastOffsetDeltaAt = 23;
constexpr size_t kBaseTimestampAt = 27;
constexpr size_t kMaxTimestampAt = 35;
constexpr size_t kProducerIdAt = 43;
constexpr size_t kProducerEpochAt = 51;
constexpr size_t kBaseSequenceAt = 53;
constexpr size_t kRecordCountAt = 57;

// The smallest batchLength: the header after the length field, no records.
constexpr int32_t kMinBatchLength = static_cast<int32_t>(kBatchHeaderSize - kLogOverhead);
// Kafka reads batchLength before magic and rejects anything below the smallest legacy (magic
// 0) message, so a shorter length is corrupt whatever the magic says.
constexpr int32_t kMinLegacyLength = 14;

constexpr uint16_t kCompressionMask = 0x07;
constexpr uint16_t kTimestampTypeBit = 0x08;
constexpr uint16_t kTransactionalBit = 0x10;
constexpr uint16_t kControlBit = 0x20;
constexpr uint16_t kDeleteHorizonBit = 0x40;

int16_t Load16(ByteSpan b, size_t at) { return static_cast<int16_t>(LoadBigEndian(&b[at], 2)); }
int32_t Load32(ByteSpan b, size_t at) { return static_cast<int32_t>(LoadBigEndian(&b[at], 4)); }
int64_t Load64(ByteSpan b, size_t at) { return static_cast<int64_t>(LoadBigEndian(&b[at], 8)); }

uint32_t BatchCrc(ByteSpan batch) {
  return crc32c::Value(batch.data() + kAttributesAt, batch.size() - kAttributesAt);
}

// Zig-zag LEB128 (protobuf sint32 / sint64): at most 5 or 10 bytes, and the last byte may
// carry only the bits that fit, so every value has one accepted encoding length bound.
bool ReadUnsigned(ByteSpan* in, int max_bytes, int value_bits, uint64_t* out) {
  uint64_t v = 0;
  for (int i = 0; i < max_bytes; ++i) {
    if (static_cast<size_t>(i) >= in->size()) return false;
    const uint8_t b = (*in)[i];
    const int shift = 7 * i;
    if (i == max_bytes - 1 && (b >> (value_bits - shift)) != 0) return false;
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) {
      *in = in->subspan(i + 1);
      *out = v;
      return true;
    }
  }
  return false;
}
bool ReadVarint(ByteSpan* in, int32_t* out) {
  uint64_t u = 0;
  if (!ReadUnsigned(in, 5, 32, &u)) return false;
  const uint32_t z = static_cast<uint32_t>(u);
  *out = static_cast<int32_t>((z >> 1) ^ (~(z & 1) + 1));
  return true;
}
bool ReadVarlong(ByteSpan* in, int64_t* out) {
  uint64_t z = 0;
  if (!ReadUnsigned(in, 10, 64, &z)) return false;
  *out = static_cast<int64_t>((z >> 1) ^ (~(z & 1) + 1));
  return true;
}

void WriteUnsigned(std::vector<uint8_t>* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<uint8_t>(v) | 0x80);
    v >>= 7;
  }
  out->push_back(static_cast<uint8_t>(v));
}
uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
void WriteVarint(std::vector<uint8_t>* out, int64_t v) { WriteUnsigned(out, ZigZag(v)); }
size_t VarintSize(int64_t v) {
  uint64_t z = ZigZag(v);
  size_t n = 1;
  while (z >= 0x80) {
    z >>= 7;
    ++n;
  }
  return n;
}

// A length-prefixed byte field: -1 is null; anything else below 0 or past the end is not.
bool ReadBytesField(ByteSpan* in, std::optional<ByteSpan>* out) {
  int32_t len = 0;
  if (!ReadVarint(in, &len)) return false;
  if (len == -1) {
    out->reset();
    return true;
  }
  if (len < 0 || static_cast<size_t>(len) > in->size()) return false;
  *out = in->first(static_cast<size_t>(len));
  *in = in->subspan(static_cast<size_t>(len));
  return true;
}

// Parses one record body (everything after its length varint).
Status ParseRecordBody(ByteSpan body, Record* out) {
  ByteSpan in = body;
  if (in.empty()) return absl::DataLossError("record body is empty");
  out->attributes = static_cast<int8_t>(in[0]);
  in = in.subspan(1);
  if (!ReadVarlong(&in, &out->timestamp_delta)) {
    return absl::DataLossError("record timestampDelta is not a valid varlong");
  }
  if (!ReadVarint(&in, &out->offset_delta)) {
    return absl::DataLossError("record offsetDelta is not a valid varint");
  }
  if (!ReadBytesField(&in, &out->key)) return absl::DataLossError("record key length is invalid");
  if (!ReadBytesField(&in, &out->value)) {
    return absl::DataLossError("record value length is invalid");
  }
  int32_t header_count = 0;
  if (!ReadVarint(&in, &header_count) || header_count < 0) {
    return absl::DataLossError("record header count is invalid");
  }
  // Each header takes at least two bytes, so a hostile count never reaches reserve().
  if (static_cast<size_t>(header_count) > in.size() / 2) {
    return absl::DataLossError(
        fmt::format("record header count {} exceeds the {} bytes left", header_count, in.size()));
  }
  out->headers.clear();
  out->headers.reserve(static_cast<size_t>(header_count));
  for (int32_t i = 0; i < header_count; ++i) {
    std::optional<ByteSpan> key;
    RecordHeader h;
    if (!ReadBytesField(&in, &key) || !key.has_value()) {
      return absl::DataLossError(fmt::format("record header {} key is invalid or null", i));
    }
    h.key = *key;
    if (!ReadBytesField(&in, &h.value)) {
      return absl::DataLossError(fmt::format("record header {} value length is invalid", i));
    }
    out->headers.push_back(h);
  }
  if (!in.empty()) {
    return absl::DataLossError(fmt::format(
        "record length says {} bytes but its fields end {} bytes earlier", body.size(), in.size()));
  }
  return absl::OkStatus();
}

// The fast path of ValidateBatch's record walk: the same acceptance rules as RecordReader
// and ParseRecordBody (lengths, varint encodings, offset deltas, keys, timestamps), without
// building Records. It only says whether everything is valid; on false the detailed walk
// runs again to say what is wrong, so messages are worded in one place.
inline bool FastVarint(const uint8_t*& p, const uint8_t* end, int max_bytes, int value_bits,
                       int64_t* out) {
  if (p < end && *p < 0x80) {  // most lengths and deltas fit one byte
    const uint8_t b = *p++;
    *out = static_cast<int64_t>(b >> 1) ^ -static_cast<int64_t>(b & 1);
    return true;
  }
  uint64_t v = 0;
  for (int i = 0; i < max_bytes; ++i) {
    if (p >= end) return false;
    const uint8_t b = *p++;
    const int shift = 7 * i;
    if (i == max_bytes - 1 && (b >> (value_bits - shift)) != 0) return false;
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) {
      if (value_bits == 32) {
        const uint32_t z = static_cast<uint32_t>(v);
        *out = static_cast<int32_t>((z >> 1) ^ (~(z & 1) + 1));
      } else {
        *out = static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
      }
      return true;
    }
  }
  return false;
}

// Skips a length-prefixed field; `null_ok` allows length -1. Sets *is_null.
inline bool FastSkipBytes(const uint8_t*& p, const uint8_t* end, bool null_ok, bool* is_null) {
  int64_t len = 0;
  if (!FastVarint(p, end, 5, 32, &len)) return false;
  *is_null = len == -1;
  if (len == -1) return null_ok;
  if (len < 0 || len > end - p) return false;
  p += len;
  return true;
}

struct FastWalkRules {
  bool from_client;
  int32_t last_delta;
  bool require_keys;
  bool check_time;
  int64_t base_timestamp;
  int64_t now;
  int64_t before_max_ms;
  int64_t after_max_ms;
};

bool FastWalkRecords(ByteSpan payload, int32_t count, const FastWalkRules& r) {
  const uint8_t* p = payload.data();
  const uint8_t* const end = p + payload.size();
  int32_t previous_delta = -1;
  for (int32_t index = 0; index < count; ++index) {
    int64_t length = 0;
    if (!FastVarint(p, end, 5, 32, &length)) return false;
    if (length < 0 || length > end - p) return false;
    const uint8_t* const record_end = p + length;
    if (p >= record_end) return false;  // an empty body
    ++p;                                // attributes
    int64_t timestamp_delta = 0, offset_delta = 0;
    if (!FastVarint(p, record_end, 10, 64, &timestamp_delta)) return false;
    if (!FastVarint(p, record_end, 5, 32, &offset_delta)) return false;
    if (r.from_client ? offset_delta != index
                      : (offset_delta <= previous_delta || offset_delta > r.last_delta)) {
      return false;
    }
    previous_delta = int32_t(offset_delta);
    bool null_key = false, null_value = false;
    if (!FastSkipBytes(p, record_end, true, &null_key)) return false;
    if (r.require_keys && null_key) return false;
    if (!FastSkipBytes(p, record_end, true, &null_value)) return false;
    int64_t headers = 0;
    if (!FastVarint(p, record_end, 5, 32, &headers) || headers < 0) return false;
    if (headers > (record_end - p) / 2) return false;
    for (int64_t h = 0; h < headers; ++h) {
      bool null_header_key = false, null_header_value = false;
      if (!FastSkipBytes(p, record_end, false, &null_header_key)) return false;
      if (!FastSkipBytes(p, record_end, true, &null_header_value)) return false;
    }
    if (p != record_end) return false;
    if (r.check_time) {
      const int64_t ts = static_cast<int64_t>(static_cast<uint64_t>(r.base_timestamp) +
                                              static_cast<uint64_t>(timestamp_delta));
      const __int128 ahead = static_cast<__int128>(ts) - r.now;
      if (ts != kNoTimestamp && (ahead > r.after_max_ms || -ahead > r.before_max_ms)) {
        return false;
      }
    }
  }
  return p == end;
}

protocol::KafkaError Error(ErrorCode code, std::string message) {
  return protocol::KafkaError{code, std::move(message)};
}

}  // namespace

// ---- BatchView ----

StatusOr<BatchView> BatchView::Parse(ByteSpan bytes) {
  if (bytes.size() < kLogOverhead) {
    return absl::DataLossError(fmt::format("batch truncated: {} bytes, a batch needs at least {}",
                                           bytes.size(), kLogOverhead));
  }
  const int32_t length = Load32(bytes, kBatchLengthAt);
  if (length < kMinBatchLength) {
    return absl::DataLossError(
        fmt::format("batchLength {} is below the minimum {}", length, kMinBatchLength));
  }
  const size_t total = kLogOverhead + static_cast<size_t>(length);
  if (total > bytes.size()) {
    return absl::DataLossError(fmt::format(
        "batch truncated: batchLength {} needs {} bytes, {} present", length, total, bytes.size()));
  }
  const int8_t magic = static_cast<int8_t>(bytes[kMagicAt]);
  if (magic != kMagicV2) {
    return absl::DataLossError(
        fmt::format("batch magic is {}, only {} is supported", magic, static_cast<int>(kMagicV2)));
  }
  return BatchView(bytes.first(total));
}

int64_t BatchView::base_offset() const { return Load64(bytes_, kBaseOffsetAt); }
int32_t BatchView::batch_length() const { return Load32(bytes_, kBatchLengthAt); }
int32_t BatchView::partition_leader_epoch() const { return Load32(bytes_, kLeaderEpochAt); }
int8_t BatchView::magic() const { return static_cast<int8_t>(bytes_[kMagicAt]); }
uint32_t BatchView::crc() const { return static_cast<uint32_t>(LoadBigEndian(&bytes_[kCrcAt], 4)); }
int16_t BatchView::attributes() const { return Load16(bytes_, kAttributesAt); }
Compression BatchView::compression() const {
  return static_cast<Compression>(static_cast<uint16_t>(attributes()) & kCompressionMask);
}
TimestampType BatchView::timestamp_type() const {
  return (attributes() & kTimestampTypeBit) != 0 ? TimestampType::kLogAppendTime
                                                 : TimestampType::kCreateTime;
}
bool BatchView::is_transactional() const { return (attributes() & kTransactionalBit) != 0; }
bool BatchView::is_control() const { return (attributes() & kControlBit) != 0; }
bool BatchView::has_delete_horizon() const { return (attributes() & kDeleteHorizonBit) != 0; }
int32_t BatchView::last_offset_delta() const { return Load32(bytes_, kLastOffsetDeltaAt); }
int64_t BatchView::base_timestamp() const { return Load64(bytes_, kBaseTimestampAt); }
int64_t BatchView::max_timestamp() const { return Load64(bytes_, kMaxTimestampAt); }
int64_t BatchView::producer_id() const { return Load64(bytes_, kProducerIdAt); }
int16_t BatchView::producer_epoch() const { return Load16(bytes_, kProducerEpochAt); }
int32_t BatchView::base_sequence() const { return Load32(bytes_, kBaseSequenceAt); }
int32_t BatchView::record_count() const { return Load32(bytes_, kRecordCountAt); }

bool BatchView::CrcValid() const { return BatchCrc(bytes_) == crc(); }

// ---- RecordReader ----

RecordReader::RecordReader(ByteSpan payload, int32_t expected_count)
    : rest_(payload), remaining_(expected_count) {
  if (expected_count < 0) {
    status_ = absl::DataLossError(fmt::format("record count {} is negative", expected_count));
  }
}

bool RecordReader::Next(Record* out) {
  if (!status_.ok()) return false;
  if (remaining_ == 0) {
    if (!rest_.empty()) {
      status_ = absl::DataLossError(
          fmt::format("{} bytes left after the declared number of records", rest_.size()));
      remaining_ = -1;  // report once; Next stays false
    }
    return false;
  }
  if (remaining_ < 0) return false;
  if (rest_.empty()) {
    status_ = absl::DataLossError(
        fmt::format("records end with {} of the declared records missing", remaining_));
    return false;
  }
  int32_t length = 0;
  if (!ReadVarint(&rest_, &length)) {
    status_ = absl::DataLossError("record length is not a valid varint");
    return false;
  }
  if (length < 0 || static_cast<size_t>(length) > rest_.size()) {
    status_ = absl::DataLossError(
        fmt::format("record length {} runs past the {} bytes left", length, rest_.size()));
    return false;
  }
  const ByteSpan body = rest_.first(static_cast<size_t>(length));
  rest_ = rest_.subspan(static_cast<size_t>(length));
  if (Status s = ParseRecordBody(body, out); !s.ok()) {
    status_ = std::move(s);
    return false;
  }
  --remaining_;
  return true;
}

// ---- ForEachRecord ----

Status ForEachRecord(const BatchView& batch, const std::function<bool(const Record&)>& fn,
                     size_t max_decompressed) {
  std::vector<uint8_t> inflated;
  ByteSpan payload = batch.records_payload();
  if (batch.compression() != Compression::kNone) {
    RUNNEL_ASSIGN_OR_RETURN(inflated, Decompress(batch.compression(), payload, max_decompressed));
    payload = inflated;
  }
  RecordReader reader(payload, batch.record_count());
  Record record;
  while (reader.Next(&record)) {
    if (!fn(record)) return absl::OkStatus();
  }
  return reader.status();
}

// ---- ValidateBatch ----

namespace {

// Framing first, in the order Kafka's batch iterator reads it: length, magic, then the rest.
protocol::KafkaError CheckFraming(ByteSpan batch) {
  if (batch.size() < kLogOverhead) {
    return Error(ErrorCode::kCorruptMessage,
                 fmt::format("Record batch truncated: {} bytes, need at least {}", batch.size(),
                             kLogOverhead));
  }
  const int32_t length = Load32(batch, kBatchLengthAt);
  if (length < kMinLegacyLength) {
    return Error(ErrorCode::kCorruptMessage,
                 fmt::format("Record size {} is less than the minimum record overhead ({})", length,
                             kMinLegacyLength));
  }
  if (batch.size() <= kMagicAt) {
    return Error(ErrorCode::kCorruptMessage,
                 fmt::format("Record batch truncated: {} bytes, magic is at byte {}", batch.size(),
                             kMagicAt));
  }
  const int8_t magic = static_cast<int8_t>(batch[kMagicAt]);
  if (magic < 0 || magic > kMagicV2) {
    return Error(ErrorCode::kCorruptMessage,
                 fmt::format("Invalid magic found in record: {}", magic));
  }
  if (magic != kMagicV2) {
    // Kafka accepts magic 0/1 only in produce v0-v2 (and 4.0 dropped those); for v3+ its
    // ProduceRequest validation answers INVALID_RECORD, not UNSUPPORTED_FOR_MESSAGE_FORMAT.
    return Error(ErrorCode::kInvalidRecord,
                 fmt::format("Produce requests with version 3 and above are only allowed to "
                             "contain record batches with magic version 2 (found magic {})",
                             magic));
  }
  if (length < kMinBatchLength) {
    return Error(ErrorCode::kCorruptMessage,
                 fmt::format("Record batch is corrupt (the size {} is smaller than the minimum "
                             "allowed overhead {})",
                             kLogOverhead + static_cast<size_t>(length), kBatchHeaderSize));
  }
  const size_t total = kLogOverhead + static_cast<size_t>(length);
  if (total != batch.size()) {
    return Error(ErrorCode::kCorruptMessage,
                 fmt::format("Record batch length {} does not match the {} bytes received", total,
                             batch.size()));
  }
  return {};
}

// The parsed header: base offset from a client, size, CRC, codec bits.
protocol::KafkaError CheckHeader(ByteSpan batch, const BatchView& view,
                                 const ValidationOptions& options) {
  if (options.from_client && view.base_offset() != 0) {
    return Error(ErrorCode::kInvalidRecord,
                 fmt::format("The baseOffset of the record batch should be 0, but it is {}",
                             view.base_offset()));
  }
  if (batch.size() > static_cast<size_t>(std::max<int32_t>(options.max_batch_bytes, 0))) {
    return Error(ErrorCode::kMessageTooLarge,
                 fmt::format("The record batch size is {} bytes which exceeds the maximum "
                             "configured value of {}",
                             batch.size(), options.max_batch_bytes));
  }
  if (!view.CrcValid()) {
    return Error(ErrorCode::kCorruptMessage,
                 fmt::format("Record is corrupt (stored crc = {}, computed crc = {})", view.crc(),
                             BatchCrc(batch)));
  }
  const uint16_t codec = static_cast<uint16_t>(view.attributes()) & kCompressionMask;
  if (codec > static_cast<uint16_t>(Compression::kZstd)) {
    // Kafka fails here with an IllegalArgumentException (UNKNOWN_SERVER_ERROR on the wire);
    // the CRC vouches for the bits, so retrying cannot help: a non-retriable, precise code.
    return Error(ErrorCode::kUnsupportedCompressionType,
                 fmt::format("Unknown compression type id: {}", codec));
  }
  return {};
}

// Record count and lastOffsetDelta; from a client also control, sequence and timestamp type.
protocol::KafkaError CheckOffsetRange(const BatchView& view, const ValidationOptions& options) {
  const int32_t count = view.record_count();
  const int32_t last_delta = view.last_offset_delta();
  if (!options.from_client) {
    if (last_delta < 0 || count < 0 || static_cast<int64_t>(count) > int64_t{last_delta} + 1) {
      return Error(ErrorCode::kInvalidRecord,
                   fmt::format("Inconsistent batch offset range [0, {}] and count of records {}",
                               last_delta, count));
    }
    return {};
  }
  if (last_delta < 0) {
    return Error(ErrorCode::kInvalidRecord,
                 fmt::format("Batch has an invalid offset range: lastOffsetDelta {}", last_delta));
  }
  if (count <= 0) {
    return Error(ErrorCode::kInvalidRecord,
                 fmt::format("Invalid reported count for record batch: {}", count));
  }
  if (static_cast<int64_t>(last_delta) + 1 != count) {
    return Error(ErrorCode::kInvalidRecord,
                 fmt::format("Inconsistent batch offset range [0, {}] and count of records {}",
                             last_delta, count));
  }
  if (view.is_control()) {
    return Error(ErrorCode::kInvalidRecord, "Clients are not allowed to write control records");
  }
  if (view.producer_id() >= 0 && view.base_sequence() < 0) {
    return Error(ErrorCode::kInvalidRecord,
                 fmt::format("Invalid sequence number {} in record batch with producerId {}",
                             view.base_sequence(), view.producer_id()));
  }
  if (view.timestamp_type() == TimestampType::kLogAppendTime) {
    return Error(ErrorCode::kInvalidTimestamp,
                 "Invalid timestamp type in record batch. Producer should not set timestamp "
                 "type to LogAppendTime.");
  }
  return {};
}

// The records' bytes in `*payload`: the batch's own, or inflated into `*inflated`.
protocol::KafkaError InflatePayload(const BatchView& view, const ValidationOptions& options,
                                    std::vector<uint8_t>* inflated, ByteSpan* payload) {
  *payload = view.records_payload();
  if (view.compression() == Compression::kNone) return {};
  StatusOr<std::vector<uint8_t>> out =
      Decompress(view.compression(), *payload, options.max_decompressed_bytes);
  if (!out.ok()) {
    // Kafka surfaces a failed decompression as a generic error; the data is what is wrong.
    const bool too_big = out.status().code() == absl::StatusCode::kResourceExhausted;
    return Error(too_big ? ErrorCode::kMessageTooLarge : ErrorCode::kCorruptMessage,
                 fmt::format("Failed to decompress the record batch: {}",
                             std::string(out.status().message())));
  }
  *inflated = std::move(*out);
  *payload = *inflated;
  return {};
}

// INVALID_TIMESTAMP when record timestamp `ts` is outside [now - before, now + after].
protocol::KafkaError CheckRecordTimestamp(int64_t ts, int32_t offset_delta,
                                          const ValidationOptions& options) {
  const int64_t now = *options.now_ms;
  // Differences in 128 bits so extreme timestamps cannot overflow the comparison.
  const __int128 ahead = static_cast<__int128>(ts) - now;
  if (ts != kNoTimestamp &&
      (ahead > options.timestamp_after_max_ms || -ahead > options.timestamp_before_max_ms)) {
    return Error(ErrorCode::kInvalidTimestamp,
                 fmt::format("Timestamp {} of message with offset delta {} is out of range. "
                             "The timestamp should be within [{}, {}]",
                             ts, offset_delta,
                             static_cast<int64_t>(std::max<__int128>(
                                 static_cast<__int128>(now) - options.timestamp_before_max_ms,
                                 std::numeric_limits<int64_t>::min())),
                             static_cast<int64_t>(std::min<__int128>(
                                 static_cast<__int128>(now) + options.timestamp_after_max_ms,
                                 std::numeric_limits<int64_t>::max()))));
  }
  return {};
}

// The detailed record walk: what is wrong with the first bad record, worded for the client.
protocol::KafkaError FindRecordError(const BatchView& view, ByteSpan payload,
                                     const ValidationOptions& options, bool check_time) {
  const int32_t last_delta = view.last_offset_delta();
  RecordReader reader(payload, view.record_count());
  Record record;
  int32_t index = 0;
  int32_t previous_delta = -1;
  while (reader.Next(&record)) {
    if (options.from_client
            ? record.offset_delta != index
            : (record.offset_delta <= previous_delta || record.offset_delta > last_delta)) {
      return Error(ErrorCode::kInvalidRecord,
                   fmt::format("Record {} inside the record batch does not have incremental "
                               "offsets: offset delta {} after {}",
                               index, record.offset_delta, previous_delta));
    }
    previous_delta = record.offset_delta;
    if (options.require_keys && !record.key.has_value() && !view.is_control()) {
      return Error(ErrorCode::kInvalidRecord, "Compacted topic cannot accept message without key");
    }
    if (check_time) {
      // Wrapping add, as Kafka's long arithmetic: a hostile delta must not be UB.
      const int64_t ts = static_cast<int64_t>(static_cast<uint64_t>(view.base_timestamp()) +
                                              static_cast<uint64_t>(record.timestamp_delta));
      if (protocol::KafkaError e = CheckRecordTimestamp(ts, record.offset_delta, options);
          !e.ok()) {
        return e;
      }
    }
    ++index;
  }
  if (!reader.status().ok()) {
    return Error(ErrorCode::kInvalidRecord, fmt::format("Found invalid record structure: {}",
                                                        std::string(reader.status().message())));
  }
  return {};
}

// Every record: the fast walk, and the detailed one only to word what it found wrong.
protocol::KafkaError CheckRecords(const BatchView& view, ByteSpan payload,
                                  const ValidationOptions& options) {
  const bool check_time = options.now_ms.has_value() && !view.has_delete_horizon() &&
                          view.timestamp_type() == TimestampType::kCreateTime;
  const bool control_keys_exempt = view.is_control();
  if (FastWalkRecords(payload, view.record_count(),
                      {options.from_client, view.last_offset_delta(),
                       options.require_keys && !control_keys_exempt, check_time,
                       view.base_timestamp(), options.now_ms.value_or(0),
                       options.timestamp_before_max_ms, options.timestamp_after_max_ms})) {
    return {};
  }
  return FindRecordError(view, payload, options, check_time);
}

}  // namespace

protocol::KafkaError ValidateBatch(ByteSpan batch, const ValidationOptions& options) {
  if (protocol::KafkaError e = CheckFraming(batch); !e.ok()) return e;
  StatusOr<BatchView> parsed = BatchView::Parse(batch);
  if (!parsed.ok())
    return Error(ErrorCode::kCorruptMessage, std::string(parsed.status().message()));
  const BatchView& view = *parsed;
  if (protocol::KafkaError e = CheckHeader(batch, view, options); !e.ok()) return e;
  if (protocol::KafkaError e = CheckOffsetRange(view, options); !e.ok()) return e;
  if (!options.check_records) return {};

  std::vector<uint8_t> inflated;
  ByteSpan payload;
  if (protocol::KafkaError e = InflatePayload(view, options, &inflated, &payload); !e.ok()) {
    return e;
  }
  return CheckRecords(view, payload, options);
}

// ---- SplitBatches ----

StatusOr<std::vector<BatchView>> SplitBatches(ByteSpan records) {
  std::vector<BatchView> batches;
  size_t pos = 0;
  // Every batch is at least kBatchHeaderSize bytes, so this ends within size / 61 rounds.
  while (pos < records.size()) {
    StatusOr<BatchView> batch = BatchView::Parse(records.subspan(pos));
    if (!batch.ok()) {
      return absl::DataLossError(fmt::format("at byte {} of {}: {}", pos, records.size(),
                                             std::string(batch.status().message())));
    }
    pos += batch->size_in_bytes();
    batches.push_back(*batch);
  }
  return batches;
}

// ---- In-place edits ----

void SetBaseOffset(std::span<uint8_t> batch, int64_t base_offset) {
  if (batch.size() < kBatchHeaderSize) return;
  StoreBigEndian(&batch[kBaseOffsetAt], static_cast<uint64_t>(base_offset), 8);
}

void SetPartitionLeaderEpoch(std::span<uint8_t> batch, int32_t epoch) {
  if (batch.size() < kBatchHeaderSize) return;
  StoreBigEndian(&batch[kLeaderEpochAt], static_cast<uint32_t>(epoch), 4);
}

void SetLogAppendTime(std::span<uint8_t> batch, int64_t timestamp_ms) {
  if (batch.size() < kBatchHeaderSize) return;
  const uint16_t attributes = static_cast<uint16_t>(LoadBigEndian(&batch[kAttributesAt], 2));
  StoreBigEndian(&batch[kAttributesAt], attributes | kTimestampTypeBit, 2);
  StoreBigEndian(&batch[kMaxTimestampAt], static_cast<uint64_t>(timestamp_ms), 8);
  StoreBigEndian(&batch[kCrcAt], BatchCrc(batch), 4);
}

// ---- BatchBuilder ----

BatchBuilder::BatchBuilder(Options options) : options_(options) {}

void BatchBuilder::Add(int32_t offset_delta, int64_t timestamp, std::optional<ByteSpan> key,
                       std::optional<ByteSpan> value, const std::vector<RecordHeader>& headers) {
  if (offset_delta <= last_delta_) deltas_out_of_order_ = true;
  if (count_ == 0) {
    first_timestamp_ = options_.delete_horizon_ms.value_or(timestamp);
    max_timestamp_ = timestamp;
  }
  max_timestamp_ = std::max(max_timestamp_, timestamp);
  // Deltas wrap like Kafka's long arithmetic; the reader adds them back the same way.
  const int64_t timestamp_delta = static_cast<int64_t>(static_cast<uint64_t>(timestamp) -
                                                       static_cast<uint64_t>(first_timestamp_));
  const auto field_size = [](const std::optional<ByteSpan>& f) {
    return f ? VarintSize(static_cast<int64_t>(f->size())) + f->size() : VarintSize(-1);
  };
  size_t body = 1 + VarintSize(timestamp_delta) + VarintSize(offset_delta) + field_size(key) +
                field_size(value) + VarintSize(static_cast<int64_t>(headers.size()));
  for (const RecordHeader& h : headers) body += field_size(h.key) + field_size(h.value);

  records_.reserve(records_.size() + VarintSize(static_cast<int64_t>(body)) + body);
  const auto write_field = [this](const std::optional<ByteSpan>& f) {
    if (!f) {
      WriteVarint(&records_, -1);
      return;
    }
    WriteVarint(&records_, static_cast<int64_t>(f->size()));
    records_.insert(records_.end(), f->begin(), f->end());
  };
  WriteVarint(&records_, static_cast<int64_t>(body));
  records_.push_back(0);  // record attributes: unused
  WriteVarint(&records_, timestamp_delta);
  WriteVarint(&records_, offset_delta);
  write_field(key);
  write_field(value);
  WriteVarint(&records_, static_cast<int64_t>(headers.size()));
  for (const RecordHeader& h : headers) {
    write_field(h.key);
    write_field(h.value);
  }
  ++count_;
  last_delta_ = std::max(last_delta_, offset_delta);
}

void BatchBuilder::Add(int64_t timestamp, std::optional<ByteSpan> key,
                       std::optional<ByteSpan> value) {
  Add(count_, timestamp, key, value);
}

bool BatchBuilder::empty() const { return count_ == 0; }

StatusOr<std::vector<uint8_t>> BatchBuilder::Build(std::optional<int32_t> last_offset_delta) const {
  if (deltas_out_of_order_) {
    return absl::InvalidArgumentError("record offset deltas must increase");
  }
  if (last_offset_delta.has_value() && *last_offset_delta < std::max(last_delta_, 0)) {
    return absl::InvalidArgumentError(
        fmt::format("last_offset_delta {} is below the last record's delta {}", *last_offset_delta,
                    last_delta_));
  }
  std::vector<uint8_t> compressed;
  ByteSpan payload = records_;
  if (options_.compression != Compression::kNone) {
    RUNNEL_ASSIGN_OR_RETURN(compressed, Compress(options_.compression, records_));
    payload = compressed;
  }
  const size_t total = kBatchHeaderSize + payload.size();
  if (total - kLogOverhead > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(fmt::format("batch of {} bytes is too large", total));
  }
  uint16_t attributes = static_cast<uint16_t>(options_.compression) & kCompressionMask;
  if (options_.timestamp_type == TimestampType::kLogAppendTime) attributes |= kTimestampTypeBit;
  if (options_.transactional) attributes |= kTransactionalBit;
  if (options_.control) attributes |= kControlBit;
  if (options_.delete_horizon_ms.has_value()) attributes |= kDeleteHorizonBit;
  const int64_t base_timestamp =
      count_ > 0 ? first_timestamp_ : options_.delete_horizon_ms.value_or(kNoTimestamp);

  std::vector<uint8_t> out(total);
  uint8_t* p = out.data();
  StoreBigEndian(p + kBaseOffsetAt, static_cast<uint64_t>(options_.base_offset), 8);
  StoreBigEndian(p + kBatchLengthAt, total - kLogOverhead, 4);
  StoreBigEndian(p + kLeaderEpochAt, static_cast<uint32_t>(options_.partition_leader_epoch), 4);
  p[kMagicAt] = static_cast<uint8_t>(kMagicV2);
  StoreBigEndian(p + kAttributesAt, attributes, 2);
  StoreBigEndian(p + kLastOffsetDeltaAt,
                 static_cast<uint32_t>(last_offset_delta.value_or(std::max(last_delta_, 0))), 4);
  StoreBigEndian(p + kBaseTimestampAt, static_cast<uint64_t>(base_timestamp), 8);
  StoreBigEndian(p + kMaxTimestampAt, static_cast<uint64_t>(max_timestamp_), 8);
  StoreBigEndian(p + kProducerIdAt, static_cast<uint64_t>(options_.producer_id), 8);
  StoreBigEndian(p + kProducerEpochAt, static_cast<uint16_t>(options_.producer_epoch), 2);
  StoreBigEndian(p + kBaseSequenceAt, static_cast<uint32_t>(options_.base_sequence), 4);
  StoreBigEndian(p + kRecordCountAt, static_cast<uint32_t>(count_), 4);
  if (!payload.empty()) std::memcpy(p + kBatchHeaderSize, payload.data(), payload.size());
  StoreBigEndian(p + kCrcAt, BatchCrc(out), 4);
  return out;
}

}  // namespace runnel::record
