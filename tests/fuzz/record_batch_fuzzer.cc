// libFuzzer target: arbitrary bytes as the records of a produce request (batches back to back).
// Nothing may crash, and what the code accepts must be self-consistent:
//   - a batch ValidateBatch accepts walks cleanly with ForEachRecord, with exactly
//     record_count records;
//   - rebuilding an accepted batch with BatchBuilder (same header fields, codec and records)
//     gives a batch that validates the same way and yields the same records.
// The four decoders also see the raw input directly, bounded as on the produce path.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/record/batch.h"

namespace runnel::record {
namespace {

constexpr size_t kMaxDecompressed = 1 << 20;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

struct OwnedRecord {
  int64_t timestamp = 0;  // absolute (base + delta, wrapping as Kafka's long arithmetic)
  int32_t offset_delta = 0;
  std::optional<std::vector<uint8_t>> key;
  std::optional<std::vector<uint8_t>> value;
  std::vector<std::pair<std::vector<uint8_t>, std::optional<std::vector<uint8_t>>>> headers;
  bool operator==(const OwnedRecord&) const = default;
};

std::optional<std::vector<uint8_t>> Copy(const std::optional<ByteSpan>& b) {
  if (!b) return std::nullopt;
  return std::vector<uint8_t>(b->begin(), b->end());
}

std::optional<std::vector<OwnedRecord>> ReadRecords(const BatchView& batch) {
  std::vector<OwnedRecord> out;
  const Status s = ForEachRecord(
      batch,
      [&](const Record& r) {
        OwnedRecord o;
        o.timestamp = static_cast<int64_t>(static_cast<uint64_t>(batch.base_timestamp()) +
                                           static_cast<uint64_t>(r.timestamp_delta));
        o.offset_delta = r.offset_delta;
        o.key = Copy(r.key);
        o.value = Copy(r.value);
        for (const RecordHeader& h : r.headers) {
          o.headers.emplace_back(std::vector<uint8_t>(h.key.begin(), h.key.end()), Copy(h.value));
        }
        out.push_back(std::move(o));
        return true;
      },
      kMaxDecompressed);
  if (!s.ok()) return std::nullopt;
  return out;
}

void CheckBatch(const BatchView& batch) {
  ValidationOptions producer;
  producer.max_decompressed_bytes = kMaxDecompressed;
  ValidationOptions replica = producer;
  replica.from_client = false;
  replica.require_keys = true;
  replica.now_ms = 1700000000000;
  replica.timestamp_before_max_ms = 7 * 24 * 3600 * 1000LL;
  replica.timestamp_after_max_ms = 3600 * 1000LL;
  const protocol::KafkaError from_producer = ValidateBatch(batch.bytes(), producer);
  (void)ValidateBatch(batch.bytes(), replica);

  std::optional<std::vector<OwnedRecord>> records = ReadRecords(batch);
  const protocol::KafkaError relaxed = ValidateBatch(
      batch.bytes(),
      ValidationOptions{.from_client = false, .max_decompressed_bytes = kMaxDecompressed});
  if (from_producer.ok() && !relaxed.ok()) Fail("a producer batch fails the relaxed checks");
  if (!relaxed.ok()) return;
  if (!records.has_value()) Fail("a valid batch does not walk");
  if (records->size() != static_cast<size_t>(batch.record_count())) Fail("record count");

  BatchBuilder::Options o;
  o.base_offset = batch.base_offset();
  o.compression = batch.compression();
  o.timestamp_type = batch.timestamp_type();
  o.partition_leader_epoch = batch.partition_leader_epoch();
  o.producer_id = batch.producer_id();
  o.producer_epoch = batch.producer_epoch();
  o.base_sequence = batch.base_sequence();
  o.transactional = batch.is_transactional();
  o.control = batch.is_control();
  if (batch.has_delete_horizon()) o.delete_horizon_ms = batch.base_timestamp();
  BatchBuilder builder(o);
  for (const OwnedRecord& r : *records) {
    std::optional<ByteSpan> key, value;
    if (r.key) key = ByteSpan(*r.key);
    if (r.value) value = ByteSpan(*r.value);
    std::vector<RecordHeader> headers;
    for (const auto& [k, v] : r.headers) {
      headers.push_back(RecordHeader{k, v ? std::optional<ByteSpan>(*v) : std::nullopt});
    }
    builder.Add(r.offset_delta, r.timestamp, key, value, headers);
  }
  StatusOr<std::vector<uint8_t>> rebuilt = builder.Build(batch.last_offset_delta());
  if (!rebuilt.ok()) Fail("rebuilding a valid batch failed");
  StatusOr<BatchView> again = BatchView::Parse(*rebuilt);
  if (!again.ok() || again->size_in_bytes() != rebuilt->size()) Fail("rebuilt batch framing");
  if (!again->CrcValid()) Fail("rebuilt batch CRC");
  if (again->record_count() != batch.record_count() ||
      again->last_offset_delta() != batch.last_offset_delta() ||
      again->producer_id() != batch.producer_id() ||
      again->base_sequence() != batch.base_sequence()) {
    Fail("rebuilt batch header");
  }
  const protocol::KafkaError rebuilt_relaxed = ValidateBatch(
      *rebuilt,
      ValidationOptions{.from_client = false, .max_decompressed_bytes = kMaxDecompressed});
  if (!rebuilt_relaxed.ok()) {
    std::fprintf(stderr, "%s\n", rebuilt_relaxed.message.c_str());
    Fail("rebuilt batch does not validate");
  }
  std::optional<std::vector<OwnedRecord>> reread = ReadRecords(*again);
  if (!reread.has_value() || *reread != *records) Fail("rebuilt batch records differ");
}

}  // namespace
}  // namespace runnel::record

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace runnel::record;
  using runnel::StatusOr;
  const ByteSpan input(data, size);

  StatusOr<std::vector<BatchView>> batches = SplitBatches(input);
  if (batches.ok()) {
    for (const BatchView& batch : *batches) CheckBatch(batch);
  }
  // The whole input as one batch, as a producer would send it.
  (void)ValidateBatch(input, ValidationOptions{.max_decompressed_bytes = kMaxDecompressed});

  // The decoders on raw bytes.
  for (Compression codec :
       {Compression::kGzip, Compression::kSnappy, Compression::kLz4, Compression::kZstd}) {
    StatusOr<std::vector<uint8_t>> out = Decompress(codec, input, kMaxDecompressed);
    if (out.ok() && out->size() > kMaxDecompressed) Fail("decompressed past max_output");
  }
  // And as an uncompressed records payload whose count is the first byte.
  if (size > 0) {
    RecordReader reader(input.subspan(1), data[0]);
    Record r;
    for (int i = 0; i <= data[0] && reader.Next(&r); ++i) {
    }
  }
  return 0;
}
