// Kafka record batches (magic 2), the unit in which records are produced, stored and
// fetched. Runnel stores a batch exactly as the producer sent it, so this file is about
// reading a batch's header and records in place, the few in-place edits the broker makes
// (base offset, leader epoch, LogAppendTime) and building new batches (compaction, control
// records, tests).
//
// Byte layout (all integers big-endian; Kafka's "RecordBatch" v2):
//
//   offset size field
//        0    8 baseOffset
//        8    4 batchLength            bytes after this field: the batch is 12 + batchLength
//       12    4 partitionLeaderEpoch
//       16    1 magic                  2
//       17    4 crc                    CRC32C of bytes [21, end)
//       21    2 attributes             bits 0-2 compression, 3 timestamp type (1 = LogAppendTime),
//                                      4 transactional, 5 control, 6 has delete horizon
//       23    4 lastOffsetDelta
//       27    8 baseTimestamp          (firstTimestamp; the delete horizon when bit 6 is set)
//       35    8 maxTimestamp
//       43    8 producerId
//       51    2 producerEpoch
//       53    4 baseSequence
//       57    4 recordCount
//       61      records                compressed as one block when compression != none
//
// A record (varint = zig-zag LEB128 as in protobuf sint, "varlong" likewise 64-bit):
//   length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
//   keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
//   headerCount varint, headers: [keyLength varint, key, valueLength varint (-1 null), value]
//
// The CRC does not cover baseOffset, batchLength, partitionLeaderEpoch or magic, so the
// broker can assign offsets and stamp the leader epoch without recomputing it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/util/status.h"

namespace runnel::record {

using ByteSpan = std::span<const uint8_t>;

inline constexpr size_t kLogOverhead = 12;      // baseOffset + batchLength
inline constexpr size_t kBatchHeaderSize = 61;  // everything before the records
inline constexpr int8_t kMagicV2 = 2;
inline constexpr int64_t kNoTimestamp = -1;
inline constexpr int64_t kNoProducerId = -1;

enum class Compression : uint8_t { kNone = 0, kGzip = 1, kSnappy = 2, kLz4 = 3, kZstd = 4 };
enum class TimestampType : uint8_t { kCreateTime = 0, kLogAppendTime = 1 };

// A view of one batch whose header (61 bytes) and declared length are known to be inside
// the bytes it was parsed from. Holds no copy: the bytes must outlive the view.
class BatchView {
 public:
  // Parses the batch at the start of `bytes`. Fails (kDataLoss, saying why) when fewer than
  // 12 bytes are present, batchLength is below 49 or runs past `bytes`, or magic is not 2.
  // Does not check the CRC: see CrcValid.
  static StatusOr<BatchView> Parse(ByteSpan bytes);

  // The bytes of this batch only (12 + batchLength).
  ByteSpan bytes() const { return bytes_; }
  size_t size_in_bytes() const { return bytes_.size(); }

  int64_t base_offset() const;
  int32_t batch_length() const;
  int32_t partition_leader_epoch() const;
  int8_t magic() const;
  uint32_t crc() const;
  int16_t attributes() const;
  Compression compression() const;  // the raw 3 bits may name no codec: see ValidateBatch
  TimestampType timestamp_type() const;
  bool is_transactional() const;
  bool is_control() const;
  bool has_delete_horizon() const;
  int32_t last_offset_delta() const;
  int64_t last_offset() const { return base_offset() + last_offset_delta(); }
  int64_t base_timestamp() const;
  int64_t max_timestamp() const;
  int64_t producer_id() const;
  int16_t producer_epoch() const;
  int32_t base_sequence() const;
  int32_t record_count() const;
  // The records as stored (one compressed block when compression() != kNone).
  ByteSpan records_payload() const { return bytes_.subspan(kBatchHeaderSize); }

  // Whether the stored CRC matches CRC32C of bytes [21, end).
  bool CrcValid() const;

 private:
  explicit BatchView(ByteSpan bytes) : bytes_(bytes) {}
  ByteSpan bytes_;
};

struct RecordHeader {
  ByteSpan key;
  std::optional<ByteSpan> value;
};

// One record, its spans pointing into the (decompressed) records payload.
struct Record {
  int8_t attributes = 0;
  int64_t timestamp_delta = 0;
  int32_t offset_delta = 0;
  std::optional<ByteSpan> key;    // nullopt = null key
  std::optional<ByteSpan> value;  // nullopt = null value (a tombstone)
  std::vector<RecordHeader> headers;
};

// Reads records one by one from an uncompressed records payload, bounds-checked: a length
// that runs past the payload or a malformed varint ends iteration with an error.
class RecordReader {
 public:
  RecordReader(ByteSpan payload, int32_t expected_count);
  // Reads the next record into *out; false at the end or on error (see status()).
  bool Next(Record* out);
  // OK after all expected records were read and no bytes are left over; kDataLoss saying
  // what was wrong otherwise (also when fewer or more records than expected are present).
  const Status& status() const { return status_; }

 private:
  ByteSpan rest_;
  int32_t remaining_;
  Status status_;
};

// Decompresses a records payload written with Kafka's framing for the codec: gzip stream,
// snappy raw or xerial-framed (Java's SnappyOutputStream), LZ4 frame, zstd frame.
// `max_output` bounds the output; exceeding it is an error, not an allocation.
StatusOr<std::vector<uint8_t>> Decompress(Compression codec, ByteSpan input, size_t max_output);
// Compresses with the framing Kafka's Java client writes (snappy: xerial-framed).
StatusOr<std::vector<uint8_t>> Compress(Compression codec, ByteSpan input);

// Calls `fn` for every record of the batch in order, decompressing once if needed; stops
// early when fn returns false. Errors as RecordReader, plus decompression failures. A record's
// spans are valid during its call only (they may point into the decompressed buffer).
Status ForEachRecord(const BatchView& batch, const std::function<bool(const Record&)>& fn,
                     size_t max_decompressed = 64 << 20);

struct ValidationOptions {
  int32_t max_batch_bytes = 1048588;  // max.message.bytes: the whole batch incl. overhead
  bool require_keys = false;          // compacted topic: null keys are INVALID_RECORD
  bool check_records = true;          // walk records: count, offset deltas, keys
  // The batch comes from a producer (Kafka's AppendOrigin CLIENT). Only then are a non-zero
  // baseOffset, a control batch, a producer id without a base sequence and a LogAppendTime
  // batch rejected, and must the record count be exactly lastOffsetDelta + 1 with deltas
  // 0..n-1. Otherwise (transaction markers, batches copied from a leader or a cleaned log)
  // deltas need only increase within [0, lastOffsetDelta], as compaction leaves gaps.
  bool from_client = true;
  // message.timestamp.before.max.ms / after.max.ms, checked for CreateTime topics when now_ms
  // is set: a record timestamp outside [now - before, now + after] is INVALID_TIMESTAMP.
  std::optional<int64_t> now_ms = std::nullopt;
  int64_t timestamp_before_max_ms = std::numeric_limits<int64_t>::max();
  int64_t timestamp_after_max_ms = std::numeric_limits<int64_t>::max();
  size_t max_decompressed_bytes = 64 << 20;  // a batch inflating past this: MESSAGE_TOO_LARGE
};

// Checks one batch (exactly one: `batch` must end where the batch does), in Kafka's order:
//   magic outside 0..2, bad lengths (CORRUPT_MESSAGE); magic 0 or 1 (INVALID_RECORD, as
//   Kafka answers produce v3+, the only versions that carry magic 2);
//   baseOffset != 0 from a client (INVALID_RECORD); size over max_batch_bytes
//   (MESSAGE_TOO_LARGE); CRC (CORRUPT_MESSAGE); codec bits 5..7 (UNSUPPORTED_COMPRESSION_TYPE);
//   record count / lastOffsetDelta / control / sequence (INVALID_RECORD); then every record:
//   undecompressable payload (CORRUPT_MESSAGE), malformed record or wrong offset delta
//   (INVALID_RECORD), null key when required (INVALID_RECORD, "Compacted topic cannot accept
//   message without key"), timestamp out of range (INVALID_TIMESTAMP).
// Messages do not name the partition; the caller may prefix it.
protocol::KafkaError ValidateBatch(ByteSpan batch, const ValidationOptions& options);

// Splits a records payload (several batches back to back) into batches; any trailing
// bytes that are not a whole batch are an error (kDataLoss naming the byte position; Kafka
// would silently drop a partial trailing batch). Each view passed Parse (magic 2, lengths);
// nothing else is checked. An empty payload gives no batches. Used on produce: on error,
// ValidateBatch on the bytes from that position gives the Kafka error code (e.g. magic 1).
StatusOr<std::vector<BatchView>> SplitBatches(ByteSpan records);

// In-place edits of a batch's header. Base offset and leader epoch are outside the CRC;
// SetLogAppendTime sets the timestamp-type bit and maxTimestamp and recomputes the CRC.
void SetBaseOffset(std::span<uint8_t> batch, int64_t base_offset);
void SetPartitionLeaderEpoch(std::span<uint8_t> batch, int32_t epoch);
void SetLogAppendTime(std::span<uint8_t> batch, int64_t timestamp_ms);

// Builds one batch (for compaction, control records and tests).
class BatchBuilder {
 public:
  struct Options {
    int64_t base_offset = 0;
    Compression compression = Compression::kNone;
    TimestampType timestamp_type = TimestampType::kCreateTime;
    int32_t partition_leader_epoch = -1;
    int64_t producer_id = kNoProducerId;
    int16_t producer_epoch = -1;
    int32_t base_sequence = -1;
    bool transactional = false;
    bool control = false;
    std::optional<int64_t> delete_horizon_ms;  // sets bit 6 and baseTimestamp
  };
  explicit BatchBuilder(Options options);

  // Appends a record at base_offset + offset_delta (deltas must increase; gaps are allowed,
  // as compaction leaves them).
  void Add(int32_t offset_delta, int64_t timestamp, std::optional<ByteSpan> key,
           std::optional<ByteSpan> value, const std::vector<RecordHeader>& headers = {});
  // Convenience: offset_delta = number of records added so far.
  void Add(int64_t timestamp, std::optional<ByteSpan> key, std::optional<ByteSpan> value);

  bool empty() const;
  // Encodes (compressing the records if asked), fills lastOffsetDelta (or
  // `last_offset_delta` when given, to keep a compacted batch's range), count and CRC.
  // kInvalidArgument when an Add broke the delta order or `last_offset_delta` is below the
  // last record's delta. An empty builder gives an empty batch (count 0), as compaction
  // keeps one to preserve a producer's last sequence.
  StatusOr<std::vector<uint8_t>> Build(
      std::optional<int32_t> last_offset_delta = std::nullopt) const;

 private:
  Options options_;
  std::vector<uint8_t> records_;      // encoded records, uncompressed
  bool deltas_out_of_order_ = false;  // an Add broke the increasing-delta rule: Build fails
  int32_t count_ = 0;
  int32_t last_delta_ = -1;
  int64_t first_timestamp_ = kNoTimestamp;
  int64_t max_timestamp_ = kNoTimestamp;
};

}  // namespace runnel::record
