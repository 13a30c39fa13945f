#include <gtest/gtest.h>
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "common/record/batch.h"
#include "common/util/crc32c.h"

// The largest single operator-new request while tracking is on, to show that decompressing a
// bomb never allocates much past max_output. Replacing the global operator new is allowed; the
// other forms (new[], sized and nothrow delete) call these two.
namespace {
std::atomic<bool> g_track_allocations{false};
std::atomic<size_t> g_largest_allocation{0};
}  // namespace

void* operator new(size_t n) {
  if (g_track_allocations.load(std::memory_order_relaxed)) {
    size_t seen = g_largest_allocation.load(std::memory_order_relaxed);
    while (n > seen && !g_largest_allocation.compare_exchange_weak(seen, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace runnel::record {
namespace {

using protocol::ErrorCode;

ByteSpan Span(const std::string& s) {
  return ByteSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}
std::string Str(ByteSpan b) { return std::string(b.begin(), b.end()); }

// The batch of GoldenBatch: two records, written out byte by byte.
//   record 0: key "k", value "v1", timestamp = base, offset delta 0, no headers
//   record 1: null key, value "x", timestamp = base + 5, offset delta 1, header "h" -> null
const std::vector<uint8_t> kGolden = {
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02,  // baseOffset 2^32 + 2
    0x00, 0x00, 0x00, 0x46,                          // batchLength 70 (82 - 12)
    0x00, 0x00, 0x00, 0x07,                          // partitionLeaderEpoch 7
    0x02,                                            // magic 2
    0xCD, 0xCC, 0x43, 0x23,                          // crc (CRC32C of bytes 21..81)
    0x00, 0x10,                                      // attributes: transactional, no codec
    0x00, 0x00, 0x00, 0x01,                          // lastOffsetDelta 1
    0x00, 0x00, 0x01, 0x8B, 0xCF, 0xE5, 0x68, 0x00,  // baseTimestamp 1700000000000
    0x00, 0x00, 0x01, 0x8B, 0xCF, 0xE5, 0x68, 0x05,  // maxTimestamp 1700000000005
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x30, 0x39,  // producerId 12345
    0x00, 0x03,                                      // producerEpoch 3
    0x00, 0x00, 0x00, 0x0A,                          // baseSequence 10
    0x00, 0x00, 0x00, 0x02,                          // recordCount 2
    // record 0: length 9 (zig-zag 0x12), attributes 0, timestampDelta 0, offsetDelta 0,
    // key length 1 (0x02) "k", value length 2 (0x04) "v1", 0 headers
    0x12, 0x00, 0x00, 0x00, 0x02, 'k', 0x04, 'v', '1', 0x00,
    // record 1: length 10 (0x14), attributes 0, timestampDelta 5 (0x0A), offsetDelta 1 (0x02),
    // key null (-1 = 0x01), value length 1 (0x02) "x", 1 header (0x02): key length 1 "h",
    // value null (0x01)
    0x14, 0x00, 0x0A, 0x02, 0x01, 0x02, 'x', 0x02, 0x02, 'h', 0x01};

constexpr int64_t kGoldenTimestamp = 1700000000000;

void RecomputeCrc(std::vector<uint8_t>& b) {
  const uint32_t crc = crc32c::Value(b.data() + 21, b.size() - 21);
  for (int i = 0; i < 4; ++i) b[17 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
}
void Put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

// A Record whose bytes are copied out: ForEachRecord's spans live only during the callback.
struct OwnedRecord {
  int64_t timestamp_delta = 0;
  int32_t offset_delta = 0;
  std::optional<std::string> key;
  std::optional<std::string> value;
  std::vector<std::pair<std::string, std::optional<std::string>>> headers;
};
std::optional<std::string> Copy(const std::optional<ByteSpan>& b) {
  if (!b) return std::nullopt;
  return Str(*b);
}

std::vector<OwnedRecord> ReadAll(const BatchView& view, Status* status = nullptr) {
  std::vector<OwnedRecord> out;
  Status s = ForEachRecord(view, [&](const Record& r) {
    OwnedRecord o{r.timestamp_delta, r.offset_delta, Copy(r.key), Copy(r.value), {}};
    for (const RecordHeader& h : r.headers) o.headers.emplace_back(Str(h.key), Copy(h.value));
    out.push_back(std::move(o));
    return true;
  });
  if (status != nullptr) *status = s;
  EXPECT_TRUE(status != nullptr || s.ok()) << s;
  return out;
}

TEST(BatchViewTest, GoldenHeaderGetters) {
  auto view = BatchView::Parse(kGolden);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->size_in_bytes(), 82u);
  EXPECT_EQ(view->base_offset(), (int64_t{1} << 32) + 2);
  EXPECT_EQ(view->batch_length(), 70);
  EXPECT_EQ(view->partition_leader_epoch(), 7);
  EXPECT_EQ(view->magic(), 2);
  EXPECT_EQ(view->crc(), 0xCDCC4323u);
  EXPECT_EQ(view->attributes(), 0x10);
  EXPECT_EQ(view->compression(), Compression::kNone);
  EXPECT_EQ(view->timestamp_type(), TimestampType::kCreateTime);
  EXPECT_TRUE(view->is_transactional());
  EXPECT_FALSE(view->is_control());
  EXPECT_FALSE(view->has_delete_horizon());
  EXPECT_EQ(view->last_offset_delta(), 1);
  EXPECT_EQ(view->last_offset(), (int64_t{1} << 32) + 3);
  EXPECT_EQ(view->base_timestamp(), kGoldenTimestamp);
  EXPECT_EQ(view->max_timestamp(), kGoldenTimestamp + 5);
  EXPECT_EQ(view->producer_id(), 12345);
  EXPECT_EQ(view->producer_epoch(), 3);
  EXPECT_EQ(view->base_sequence(), 10);
  EXPECT_EQ(view->record_count(), 2);
  EXPECT_EQ(view->records_payload().size(), 21u);
  EXPECT_TRUE(view->CrcValid());
}

TEST(BatchViewTest, GoldenRecords) {
  auto view = BatchView::Parse(kGolden);
  ASSERT_TRUE(view.ok());
  std::vector<OwnedRecord> records = ReadAll(*view);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].offset_delta, 0);
  EXPECT_EQ(records[0].timestamp_delta, 0);
  ASSERT_TRUE(records[0].key.has_value());
  EXPECT_EQ(*records[0].key, "k");
  ASSERT_TRUE(records[0].value.has_value());
  EXPECT_EQ(*records[0].value, "v1");
  EXPECT_TRUE(records[0].headers.empty());
  EXPECT_EQ(records[1].offset_delta, 1);
  EXPECT_EQ(records[1].timestamp_delta, 5);
  EXPECT_FALSE(records[1].key.has_value());
  EXPECT_EQ(*records[1].value, "x");
  ASSERT_EQ(records[1].headers.size(), 1u);
  EXPECT_EQ(records[1].headers[0].first, "h");
  EXPECT_FALSE(records[1].headers[0].second.has_value());
}

TEST(BatchViewTest, CrcDetectsAFlippedBitAnywhereItCovers) {
  for (size_t i = 21; i < kGolden.size(); ++i) {
    std::vector<uint8_t> b = kGolden;
    b[i] ^= 0x04;
    auto view = BatchView::Parse(b);
    if (!view.ok()) continue;  // the flip hit the record area in a way Parse does not read
    EXPECT_FALSE(view->CrcValid()) << "byte " << i;
  }
  // The fields before the CRC are not covered: the broker rewrites them.
  std::vector<uint8_t> b = kGolden;
  b[3] ^= 0xFF;   // baseOffset
  b[15] ^= 0xFF;  // partitionLeaderEpoch
  EXPECT_TRUE(BatchView::Parse(b)->CrcValid());
}

TEST(BatchViewTest, ParseRejectsBadFraming) {
  EXPECT_FALSE(BatchView::Parse(ByteSpan(kGolden).first(11)).ok());
  std::vector<uint8_t> b = kGolden;
  Put32(b, 8, 48);  // below the v2 header
  EXPECT_FALSE(BatchView::Parse(b).ok());
  b = kGolden;
  Put32(b, 8, 71);  // one byte past the end
  EXPECT_FALSE(BatchView::Parse(b).ok());
  b = kGolden;
  b[16] = 1;
  EXPECT_FALSE(BatchView::Parse(b).ok());
  // Extra bytes after the batch are not part of the view.
  b = kGolden;
  b.push_back(0xAB);
  auto view = BatchView::Parse(b);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->size_in_bytes(), kGolden.size());
}

TEST(BuilderTest, ReproducesTheGoldenBatchByteForByte) {
  BatchBuilder::Options o;
  o.base_offset = (int64_t{1} << 32) + 2;
  o.partition_leader_epoch = 7;
  o.producer_id = 12345;
  o.producer_epoch = 3;
  o.base_sequence = 10;
  o.transactional = true;
  BatchBuilder builder(o);
  builder.Add(0, kGoldenTimestamp, Span("k"), Span("v1"));
  builder.Add(1, kGoldenTimestamp + 5, std::nullopt, Span("x"),
              {RecordHeader{Span("h"), std::nullopt}});
  auto built = builder.Build();
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ(*built, kGolden);
}

// ---- setters ----

TEST(SettersTest, SetBaseOffsetLeavesTheCrcAlone) {
  std::vector<uint8_t> b = kGolden;
  SetBaseOffset(b, 0x0102030405060708);
  auto view = BatchView::Parse(b);
  EXPECT_EQ(view->base_offset(), 0x0102030405060708);
  EXPECT_EQ(view->crc(), 0xCDCC4323u);
  EXPECT_TRUE(view->CrcValid());
  EXPECT_TRUE(std::equal(b.begin() + 8, b.end(), kGolden.begin() + 8));
}

TEST(SettersTest, SetPartitionLeaderEpochLeavesTheCrcAlone) {
  std::vector<uint8_t> b = kGolden;
  SetPartitionLeaderEpoch(b, -2);
  auto view = BatchView::Parse(b);
  EXPECT_EQ(view->partition_leader_epoch(), -2);
  EXPECT_EQ(view->crc(), 0xCDCC4323u);
  EXPECT_TRUE(view->CrcValid());
}

TEST(SettersTest, SetLogAppendTimeRewritesTheCrc) {
  std::vector<uint8_t> b = kGolden;
  SetLogAppendTime(b, 1800000000000);
  auto view = BatchView::Parse(b);
  EXPECT_EQ(view->timestamp_type(), TimestampType::kLogAppendTime);
  EXPECT_EQ(view->max_timestamp(), 1800000000000);
  EXPECT_TRUE(view->is_transactional());  // other attribute bits kept
  EXPECT_EQ(view->base_timestamp(), kGoldenTimestamp);
  EXPECT_NE(view->crc(), 0xCDCC4323u);
  EXPECT_TRUE(view->CrcValid());
}

// ---- builder round trips ----

constexpr Compression kAllCodecs[] = {Compression::kNone, Compression::kGzip, Compression::kSnappy,
                                      Compression::kLz4, Compression::kZstd};

class CodecTest : public ::testing::TestWithParam<Compression> {};

TEST_P(CodecTest, BuilderRoundTripWithNullsHeadersAndGaps) {
  BatchBuilder::Options o;
  o.base_offset = 1000;
  o.compression = GetParam();
  o.producer_id = 7;
  o.producer_epoch = 1;
  o.base_sequence = 0;
  BatchBuilder builder(o);
  EXPECT_TRUE(builder.empty());
  const std::string big(100000, 'z');  // spans several xerial / lz4 blocks
  builder.Add(0, 5000, Span("a"), Span("1"));
  builder.Add(3, 4000, std::nullopt, std::nullopt,
              {RecordHeader{Span("h1"), Span("v")}, RecordHeader{Span("h2"), std::nullopt}});
  builder.Add(7, 6000, Span(""), Span(big));
  EXPECT_FALSE(builder.empty());
  auto built = builder.Build(9);
  ASSERT_TRUE(built.ok()) << built.status();

  auto view = BatchView::Parse(*built);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_TRUE(view->CrcValid());
  EXPECT_EQ(view->compression(), GetParam());
  EXPECT_EQ(view->base_offset(), 1000);
  EXPECT_EQ(view->last_offset_delta(), 9);
  EXPECT_EQ(view->record_count(), 3);
  EXPECT_EQ(view->base_timestamp(), 5000);
  EXPECT_EQ(view->max_timestamp(), 6000);
  EXPECT_EQ(view->producer_id(), 7);
  if (GetParam() != Compression::kNone) {
    EXPECT_LT(view->size_in_bytes(), big.size());
  }

  std::vector<OwnedRecord> r = ReadAll(*view);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].offset_delta, 0);
  EXPECT_EQ(*r[0].key, "a");
  EXPECT_EQ(*r[0].value, "1");
  EXPECT_EQ(r[1].offset_delta, 3);
  EXPECT_EQ(view->base_timestamp() + r[1].timestamp_delta, 4000);  // negative delta
  EXPECT_FALSE(r[1].key.has_value());
  EXPECT_FALSE(r[1].value.has_value());
  ASSERT_EQ(r[1].headers.size(), 2u);
  EXPECT_EQ(r[1].headers[0].first, "h1");
  EXPECT_EQ(*r[1].headers[0].second, "v");
  EXPECT_EQ(r[1].headers[1].first, "h2");
  EXPECT_FALSE(r[1].headers[1].second.has_value());
  EXPECT_EQ(r[2].offset_delta, 7);
  ASSERT_TRUE(r[2].key.has_value());  // empty, not null
  EXPECT_TRUE(r[2].key->empty());
  EXPECT_EQ(*r[2].value, big);

  // Gaps are fine for a batch that does not come from a client.
  ValidationOptions options;
  options.from_client = false;
  EXPECT_TRUE(ValidateBatch(*built, options).ok()) << ValidateBatch(*built, options).message;
}

TEST_P(CodecTest, ClientBatchValidates) {
  BatchBuilder::Options o;
  o.compression = GetParam();
  BatchBuilder builder(o);
  for (int i = 0; i < 50; ++i) {
    builder.Add(1000 + i, Span("key" + std::to_string(i)), Span(std::string(i, 'v')));
  }
  auto built = builder.Build();
  ASSERT_TRUE(built.ok());
  ValidationOptions options;
  options.require_keys = true;
  options.now_ms = 1000;
  options.timestamp_before_max_ms = 0;
  options.timestamp_after_max_ms = 49;
  const protocol::KafkaError e = ValidateBatch(*built, options);
  EXPECT_TRUE(e.ok()) << e.message;
}

TEST_P(CodecTest, EveryTruncationFails) {
  BatchBuilder::Options o;
  o.compression = GetParam();
  BatchBuilder builder(o);
  for (int i = 0; i < 3; ++i) builder.Add(i, Span("key"), Span("value-" + std::to_string(i)));
  auto built = builder.Build();
  ASSERT_TRUE(built.ok());
  ASSERT_TRUE(ValidateBatch(*built, {}).ok());
  for (size_t n = 0; n < built->size(); ++n) {
    const ByteSpan cut = ByteSpan(*built).first(n);
    EXPECT_FALSE(BatchView::Parse(cut).ok()) << n;
    EXPECT_FALSE(ValidateBatch(cut, {}).ok()) << n;
    if (n > 0) {  // an empty payload is zero batches
      EXPECT_FALSE(SplitBatches(cut).ok()) << n;
    }
  }
  // Cut the records instead, with batchLength and CRC fixed up so only the records are wrong.
  for (size_t n = kBatchHeaderSize; n < built->size(); ++n) {
    std::vector<uint8_t> b(built->begin(), built->begin() + static_cast<ptrdiff_t>(n));
    Put32(b, 8, static_cast<uint32_t>(n - kLogOverhead));
    RecomputeCrc(b);
    const protocol::KafkaError e = ValidateBatch(b, {});
    EXPECT_TRUE(e.code == ErrorCode::kInvalidRecord || e.code == ErrorCode::kCorruptMessage)
        << n << ": " << protocol::ErrorName(e.code) << " " << e.message;
    auto view = BatchView::Parse(b);
    ASSERT_TRUE(view.ok());
    Status s;
    ReadAll(*view, &s);
    EXPECT_FALSE(s.ok()) << n;
  }
}

std::string CodecName(const ::testing::TestParamInfo<Compression>& info) {
  static const char* const kNames[] = {"None", "Gzip", "Snappy", "Lz4", "Zstd"};
  return kNames[static_cast<int>(info.param)];
}
INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecTest, ::testing::ValuesIn(kAllCodecs), CodecName);

TEST(BuilderTest, EmptyBatchKeepsTheGivenRange) {
  BatchBuilder::Options o;
  o.base_offset = 50;
  o.producer_id = 3;
  o.base_sequence = 20;
  BatchBuilder builder(o);
  auto built = builder.Build(4);
  ASSERT_TRUE(built.ok());
  auto view = BatchView::Parse(*built);
  EXPECT_EQ(view->record_count(), 0);
  EXPECT_EQ(view->last_offset(), 54);
  EXPECT_EQ(view->base_sequence(), 20);
  EXPECT_TRUE(ReadAll(*view).empty());
  ValidationOptions options;
  options.from_client = false;
  EXPECT_TRUE(ValidateBatch(*built, options).ok());
  options.from_client = true;
  EXPECT_EQ(ValidateBatch(*built, options).code, ErrorCode::kInvalidRecord);
}

TEST(BuilderTest, RejectsDecreasingDeltasAndAShortRange) {
  BatchBuilder a(BatchBuilder::Options{});
  a.Add(2, 0, Span("k"), Span("v"));
  a.Add(2, 0, Span("k"), Span("v"));
  EXPECT_EQ(a.Build().status().code(), absl::StatusCode::kInvalidArgument);
  BatchBuilder b(BatchBuilder::Options{});
  b.Add(5, 0, Span("k"), Span("v"));
  EXPECT_EQ(b.Build(4).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(b.Build(5).ok());
}

TEST(BuilderTest, ControlAndDeleteHorizonAttributes) {
  BatchBuilder::Options o;
  o.control = true;
  o.transactional = true;
  o.delete_horizon_ms = 9000;
  o.timestamp_type = TimestampType::kLogAppendTime;
  BatchBuilder builder(o);
  builder.Add(0, 100, Span(std::string("\0\0\0\1", 4)), Span(std::string("\0\0\0\0\0\0", 6)));
  auto built = builder.Build();
  ASSERT_TRUE(built.ok());
  auto view = BatchView::Parse(*built);
  EXPECT_TRUE(view->is_control());
  EXPECT_TRUE(view->is_transactional());
  EXPECT_TRUE(view->has_delete_horizon());
  EXPECT_EQ(view->timestamp_type(), TimestampType::kLogAppendTime);
  EXPECT_EQ(view->base_timestamp(), 9000);  // the delete horizon
  std::vector<OwnedRecord> r = ReadAll(*view);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(view->base_timestamp() + r[0].timestamp_delta, 100);  // record time kept
}

// ---- compression framing ----

TEST(CompressionTest, RawSnappyIsAccepted) {
  // Hand-made raw snappy: uncompressed length 5, then one literal of 5 bytes (tag (5-1)<<2).
  const std::vector<uint8_t> raw = {0x05, 0x10, 'h', 'e', 'l', 'l', 'o'};
  auto out = Decompress(Compression::kSnappy, raw, 100);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Str(*out), "hello");

  const std::string text(70000, 'q');
  std::string compressed;
  snappy::Compress(text.data(), text.size(), &compressed);
  auto big = Decompress(Compression::kSnappy, Span(compressed), 1 << 20);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(Str(*big), text);
}

TEST(CompressionTest, XerialFramedSnappyIsAccepted) {
  // Java's SnappyOutputStream: magic, version 1, compatible version 1, then two chunks.
  std::vector<uint8_t> framed = {0x82, 'S',  'N',  'A',  'P',  'P',  'Y',  0x00,
                                 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01};
  for (const char* part : {"hello", "world"}) {
    const std::vector<uint8_t> chunk = {0x00, 0x00, 0x00, 0x07, 0x05, 0x10};
    framed.insert(framed.end(), chunk.begin(), chunk.end());
    framed.insert(framed.end(), part, part + 5);
  }
  auto out = Decompress(Compression::kSnappy, framed, 100);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Str(*out), "helloworld");

  // What Compress writes is xerial-framed.
  auto ours = Compress(Compression::kSnappy, Span("abc"));
  ASSERT_TRUE(ours.ok());
  ASSERT_GE(ours->size(), 16u);
  EXPECT_EQ(std::memcmp(ours->data(), framed.data(), 16), 0);

  // A chunk length past the end is corrupt, not a crash.
  framed[19] = 0x50;
  EXPECT_EQ(Decompress(Compression::kSnappy, framed, 100).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(CompressionTest, GarbageFailsForEveryCodec) {
  const std::vector<uint8_t> garbage = {0xFF, 0x00, 0x13, 0x37, 0x42, 0x99, 0x01, 0x02};
  for (Compression c :
       {Compression::kGzip, Compression::kSnappy, Compression::kLz4, Compression::kZstd}) {
    EXPECT_FALSE(Decompress(c, garbage, 1 << 20).ok()) << static_cast<int>(c);
    EXPECT_FALSE(Decompress(c, {}, 1 << 20).ok()) << static_cast<int>(c);
  }
  EXPECT_EQ(Decompress(static_cast<Compression>(5), garbage, 100).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CompressionTest, ConcatenatedGzipMembersAreOneStream) {
  auto a = Compress(Compression::kGzip, Span("first,"));
  auto b = Compress(Compression::kGzip, Span("second"));
  std::vector<uint8_t> both = *a;
  both.insert(both.end(), b->begin(), b->end());
  auto out = Decompress(Compression::kGzip, both, 100);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(Str(*out), "first,second");
}

// A zstd frame without a content size (as Java streams it) of `mib` MiB of zeros, with the
// given window (0: the level's default).
std::vector<uint8_t> ZstdStream(int mib, int window_log) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
  if (window_log > 0) ZSTD_CCtx_setParameter(cctx, ZSTD_c_windowLog, window_log);
  const std::vector<uint8_t> zeros(1 << 20, 0);
  std::vector<uint8_t> out(1 << 20);
  ZSTD_outBuffer o{out.data(), out.size(), 0};
  for (int i = 0; i < mib; ++i) {
    ZSTD_inBuffer in{zeros.data(), zeros.size(), 0};
    for (int guard = 0; in.pos < in.size && guard < 1000; ++guard) {
      EXPECT_FALSE(ZSTD_isError(ZSTD_compressStream2(cctx, &o, &in, ZSTD_e_continue)));
    }
  }
  ZSTD_inBuffer empty{nullptr, 0, 0};
  for (int guard = 0; guard < 1000; ++guard) {
    const size_t left = ZSTD_compressStream2(cctx, &o, &empty, ZSTD_e_end);
    if (left == 0 || ZSTD_isError(left)) break;
  }
  ZSTD_freeCCtx(cctx);
  out.resize(o.pos);
  return out;
}

TEST(CompressionTest, ZstdBombStopsAtMaxOutputWithoutABigAllocation) {
  const std::vector<uint8_t> bomb = ZstdStream(256, 0);
  ASSERT_LT(bomb.size(), 64u << 10);
  ASSERT_EQ(ZSTD_getFrameContentSize(bomb.data(), bomb.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  constexpr size_t kMax = 1 << 20;
  g_largest_allocation = 0;
  g_track_allocations = true;
  auto out = Decompress(Compression::kZstd, bomb, kMax);
  g_track_allocations = false;
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << out.status();
  EXPECT_LE(g_largest_allocation.load(), kMax + 1);
  EXPECT_GT(g_largest_allocation.load(), kMax / 2);  // the hook did see the buffer grow
}

TEST(CompressionTest, ZstdDeclaredContentSizeIsCheckedBeforeAllocating) {
  const std::vector<uint8_t> zeros(4 << 20, 0);
  auto frame = Compress(Compression::kZstd, zeros);  // one-shot: the size is in the header
  ASSERT_TRUE(frame.ok());
  ASSERT_EQ(ZSTD_getFrameContentSize(frame->data(), frame->size()), zeros.size());
  g_largest_allocation = 0;
  g_track_allocations = true;
  auto out = Decompress(Compression::kZstd, *frame, 1 << 20);
  g_track_allocations = false;
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_LT(g_largest_allocation.load(), size_t{1} << 16);
}

TEST(CompressionTest, ZstdHugeDeclaredWindowIsRefused) {
  // windowLog 25 (32 MiB) for 1 MiB of content: the decoder would allocate the whole window.
  const std::vector<uint8_t> frame = ZstdStream(1, 25);
  ASSERT_EQ(ZSTD_getFrameContentSize(frame.data(), frame.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  auto out = Decompress(Compression::kZstd, frame, 2 << 20);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDataLoss) << out.status();
  // The same frame is fine when the caller allows that much output anyway.
  auto allowed = Decompress(Compression::kZstd, frame, 64 << 20);
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  EXPECT_EQ(allowed->size(), 1u << 20);
}

TEST(CompressionTest, OtherBombsStopAtMaxOutput) {
  const std::vector<uint8_t> zeros(16 << 20, 0);
  constexpr size_t kMax = 1 << 20;
  for (Compression c :
       {Compression::kGzip, Compression::kSnappy, Compression::kLz4, Compression::kZstd}) {
    auto packed = Compress(c, zeros);
    ASSERT_TRUE(packed.ok());
    g_largest_allocation = 0;
    g_track_allocations = true;
    auto out = Decompress(c, *packed, kMax);
    g_track_allocations = false;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << static_cast<int>(c);
    EXPECT_LE(g_largest_allocation.load(), kMax + 1) << static_cast<int>(c);
    // Exactly at the limit is fine.
    auto exact = Decompress(c, *packed, zeros.size());
    ASSERT_TRUE(exact.ok()) << static_cast<int>(c) << exact.status();
    EXPECT_EQ(*exact, zeros);
  }
  // A raw snappy preamble claiming 2 GiB is refused before anything is allocated.
  const std::vector<uint8_t> claim = {0x80, 0x80, 0x80, 0x80, 0x08, 0x00};
  g_largest_allocation = 0;
  g_track_allocations = true;
  auto out = Decompress(Compression::kSnappy, claim, kMax);
  g_track_allocations = false;
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_LT(g_largest_allocation.load(), size_t{1} << 16);
}

// ---- ValidateBatch: one test per error ----

std::vector<uint8_t> ClientBatch(Compression c = Compression::kNone, int records = 2) {
  BatchBuilder::Options o;
  o.compression = c;
  BatchBuilder builder(o);
  for (int i = 0; i < records; ++i) builder.Add(1000 + i, Span("k"), Span("v"));
  return *builder.Build();
}

void ExpectError(ByteSpan batch, const ValidationOptions& options, ErrorCode code,
                 const std::string& message_part = "") {
  const protocol::KafkaError e = ValidateBatch(batch, options);
  EXPECT_EQ(e.code, code) << protocol::ErrorName(e.code) << ": " << e.message;
  EXPECT_NE(e.message.find(message_part), std::string::npos) << e.message;
}

TEST(ValidateTest, ValidBatchPasses) {
  const protocol::KafkaError e = ValidateBatch(ClientBatch(), {});
  EXPECT_TRUE(e.ok()) << e.message;
  EXPECT_TRUE(ValidateBatch(kGolden, ValidationOptions{.from_client = false}).ok());
}

TEST(ValidateTest, ShorterThanLogOverheadIsCorrupt) {
  ExpectError(ByteSpan(ClientBatch()).first(11), {}, ErrorCode::kCorruptMessage);
}

TEST(ValidateTest, LengthBelowLegacyMinimumIsCorrupt) {
  std::vector<uint8_t> b = ClientBatch();
  Put32(b, 8, 13);
  ExpectError(b, {}, ErrorCode::kCorruptMessage, "minimum record overhead");
}

TEST(ValidateTest, MagicOutOfRangeIsCorrupt) {
  std::vector<uint8_t> b = ClientBatch();
  b[16] = 3;
  ExpectError(b, {}, ErrorCode::kCorruptMessage, "Invalid magic");
  b[16] = 0xFF;
  ExpectError(b, {}, ErrorCode::kCorruptMessage, "Invalid magic");
}

TEST(ValidateTest, OldMagicIsInvalidRecord) {
  // A magic 1 message set: offset, size 20, crc, magic 1, attributes, timestamp, key, value.
  const std::vector<uint8_t> v1 = {0,    0,    0,    0,    0,    0,    0, 0, 0, 0, 0, 22,
                                   0x12, 0x34, 0x56, 0x78, 1,    0,    0, 0, 0, 0, 0, 0,
                                   0,    0,    0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0};
  ExpectError(v1, {}, ErrorCode::kInvalidRecord, "magic version 2");
  std::vector<uint8_t> b = ClientBatch();
  b[16] = 0;
  ExpectError(b, {}, ErrorCode::kInvalidRecord, "magic version 2");
}

TEST(ValidateTest, LengthBelowV2HeaderIsCorrupt) {
  std::vector<uint8_t> b = ClientBatch();
  b.resize(12 + 40);
  Put32(b, 8, 40);
  ExpectError(b, {}, ErrorCode::kCorruptMessage, "minimum allowed overhead");
}

TEST(ValidateTest, LengthNotMatchingTheBytesIsCorrupt) {
  std::vector<uint8_t> b = ClientBatch();
  b.push_back(0);
  ExpectError(b, {}, ErrorCode::kCorruptMessage, "does not match");
  b.pop_back();
  b.pop_back();
  ExpectError(b, {}, ErrorCode::kCorruptMessage, "does not match");
}

TEST(ValidateTest, NonZeroBaseOffsetFromAClientIsInvalidRecord) {
  std::vector<uint8_t> b = ClientBatch();
  SetBaseOffset(b, 5);
  ExpectError(b, {}, ErrorCode::kInvalidRecord, "baseOffset");
  EXPECT_TRUE(ValidateBatch(b, ValidationOptions{.from_client = false}).ok());
}

TEST(ValidateTest, BatchOverMaxMessageBytesIsTooLarge) {
  const std::vector<uint8_t> b = ClientBatch();
  ExpectError(b, ValidationOptions{.max_batch_bytes = static_cast<int32_t>(b.size()) - 1},
              ErrorCode::kMessageTooLarge, "exceeds");
  EXPECT_TRUE(
      ValidateBatch(b, ValidationOptions{.max_batch_bytes = static_cast<int32_t>(b.size())}).ok());
}

TEST(ValidateTest, BadCrcIsCorrupt) {
  std::vector<uint8_t> b = ClientBatch();
  b.back() ^= 1;
  ExpectError(b, {}, ErrorCode::kCorruptMessage, "crc");
}

TEST(ValidateTest, UnknownCodecIsUnsupportedCompressionType) {
  for (uint8_t codec = 5; codec <= 7; ++codec) {
    std::vector<uint8_t> b = ClientBatch();
    b[22] = (b[22] & ~0x07) | codec;
    RecomputeCrc(b);
    ExpectError(b, {}, ErrorCode::kUnsupportedCompressionType, "Unknown compression type");
  }
}

TEST(ValidateTest, ZeroRecordsFromAClientIsInvalidRecord) {
  std::vector<uint8_t> b = ClientBatch(Compression::kNone, 1);
  b.resize(kBatchHeaderSize);
  Put32(b, 8, kBatchHeaderSize - kLogOverhead);
  Put32(b, 57, 0);
  RecomputeCrc(b);
  ExpectError(b, {}, ErrorCode::kInvalidRecord, "Invalid reported count");
}

TEST(ValidateTest, NegativeLastOffsetDeltaIsInvalidRecord) {
  std::vector<uint8_t> b = ClientBatch();
  Put32(b, 23, static_cast<uint32_t>(-1));
  RecomputeCrc(b);
  ExpectError(b, {}, ErrorCode::kInvalidRecord, "invalid offset range");
  ExpectError(b, ValidationOptions{.from_client = false}, ErrorCode::kInvalidRecord);
}

TEST(ValidateTest, CountNotMatchingLastOffsetDeltaIsInvalidRecord) {
  std::vector<uint8_t> b = ClientBatch();
  Put32(b, 23, 2);  // lastOffsetDelta 2 with 2 records
  RecomputeCrc(b);
  ExpectError(b, {}, ErrorCode::kInvalidRecord, "Inconsistent batch offset range");
  // A cleaned batch may have fewer records than its range, never more.
  EXPECT_TRUE(ValidateBatch(b, ValidationOptions{.from_client = false}).ok());
  Put32(b, 23, 0);
  RecomputeCrc(b);
  ExpectError(b, ValidationOptions{.from_client = false}, ErrorCode::kInvalidRecord);
}

TEST(ValidateTest, ControlBatchFromAClientIsInvalidRecord) {
  std::vector<uint8_t> b = ClientBatch();
  b[22] |= 0x20;
  RecomputeCrc(b);
  ExpectError(b, {}, ErrorCode::kInvalidRecord, "control records");
  EXPECT_TRUE(ValidateBatch(b, ValidationOptions{.from_client = false}).ok());
}

TEST(ValidateTest, ProducerIdWithoutSequenceIsInvalidRecord) {
  BatchBuilder::Options o;
  o.producer_id = 42;
  o.producer_epoch = 0;
  o.base_sequence = -1;
  BatchBuilder builder(o);
  builder.Add(0, Span("k"), Span("v"));
  ExpectError(*builder.Build(), {}, ErrorCode::kInvalidRecord, "Invalid sequence number");
}

TEST(ValidateTest, LogAppendTimeFromAClientIsInvalidTimestamp) {
  std::vector<uint8_t> b = ClientBatch();
  SetLogAppendTime(b, 123);
  ExpectError(b, {}, ErrorCode::kInvalidTimestamp, "LogAppendTime");
}

TEST(ValidateTest, UndecompressablePayloadIsCorrupt) {
  std::vector<uint8_t> b = ClientBatch(Compression::kZstd);
  for (size_t i = kBatchHeaderSize; i < b.size(); ++i) b[i] = 0x5A;
  RecomputeCrc(b);
  ExpectError(b, {}, ErrorCode::kCorruptMessage, "decompress");
}

TEST(ValidateTest, PayloadInflatingPastTheLimitIsTooLarge) {
  BatchBuilder::Options o;
  o.compression = Compression::kLz4;
  BatchBuilder builder(o);
  builder.Add(0, Span("k"), Span(std::string(1 << 20, 'a')));
  ExpectError(*builder.Build(), ValidationOptions{.max_decompressed_bytes = 1 << 16},
              ErrorCode::kMessageTooLarge, "decompress");
}

TEST(ValidateTest, OffsetDeltaGapFromAClientIsInvalidRecord) {
  std::vector<uint8_t> b = ClientBatch();
  // Record 0 is 9 bytes (a body of 8 plus its length byte); record 1's offsetDelta varint
  // follows its length, attributes and timestampDelta.
  const size_t second = kBatchHeaderSize + 9;
  ASSERT_EQ(b[second + 3], 0x02);  // delta 1
  b[second + 3] = 0x04;            // delta 2
  RecomputeCrc(b);
  ExpectError(b, {}, ErrorCode::kInvalidRecord, "incremental offsets");
}

TEST(ValidateTest, DeltaPastLastOffsetDeltaIsInvalidEvenWhenNotFromAClient) {
  BatchBuilder builder(BatchBuilder::Options{});
  builder.Add(0, 0, Span("k"), Span("v"));
  builder.Add(4, 0, Span("k"), Span("v"));
  std::vector<uint8_t> b = *builder.Build();
  Put32(b, 23, 3);
  RecomputeCrc(b);
  ExpectError(b, ValidationOptions{.from_client = false}, ErrorCode::kInvalidRecord,
              "incremental offsets");
}

TEST(ValidateTest, MalformedRecordIsInvalidRecord) {
  std::vector<uint8_t> b = ClientBatch();
  b[kBatchHeaderSize] = 0x7E;  // first record's length: 63 bytes, past the end
  RecomputeCrc(b);
  ExpectError(b, {}, ErrorCode::kInvalidRecord, "invalid record structure");
}

TEST(ValidateTest, MoreRecordsThanCountedIsInvalidRecord) {
  std::vector<uint8_t> b = ClientBatch(Compression::kNone, 3);
  Put32(b, 23, 1);
  Put32(b, 57, 2);
  RecomputeCrc(b);
  ExpectError(b, {}, ErrorCode::kInvalidRecord, "left after");
}

TEST(ValidateTest, NullKeyOnACompactedTopicIsInvalidRecord) {
  BatchBuilder builder(BatchBuilder::Options{});
  builder.Add(0, Span("k"), Span("v"));
  builder.Add(0, std::nullopt, Span("v"));
  const std::vector<uint8_t> b = *builder.Build();
  EXPECT_TRUE(ValidateBatch(b, {}).ok());
  ExpectError(b, ValidationOptions{.require_keys = true}, ErrorCode::kInvalidRecord,
              "Compacted topic cannot accept message without key");
}

TEST(ValidateTest, TimestampOutOfRangeIsInvalidTimestamp) {
  const std::vector<uint8_t> b = ClientBatch();  // timestamps 1000 and 1001
  ValidationOptions o{.now_ms = 2000, .timestamp_before_max_ms = 999};
  ExpectError(b, o, ErrorCode::kInvalidTimestamp, "out of range");
  o.timestamp_before_max_ms = 1000;
  EXPECT_TRUE(ValidateBatch(b, o).ok());
  o = ValidationOptions{.now_ms = 0, .timestamp_after_max_ms = 1000};
  ExpectError(b, o, ErrorCode::kInvalidTimestamp, "out of range");
  o.timestamp_after_max_ms = 1001;
  EXPECT_TRUE(ValidateBatch(b, o).ok());
}

TEST(ValidateTest, RecordWalkCanBeSkipped) {
  std::vector<uint8_t> b = ClientBatch();
  b[kBatchHeaderSize] = 0x7E;
  RecomputeCrc(b);
  EXPECT_TRUE(ValidateBatch(b, ValidationOptions{.check_records = false}).ok());
}

// ---- RecordReader ----

TEST(RecordReaderTest, CountMismatchesAreErrors) {
  const ByteSpan payload = BatchView::Parse(kGolden)->records_payload();
  Record r;
  RecordReader fewer(payload, 3);
  int n = 0;
  while (fewer.Next(&r) && n < 10) ++n;
  EXPECT_EQ(n, 2);
  EXPECT_FALSE(fewer.status().ok());

  RecordReader more(payload, 1);
  n = 0;
  while (more.Next(&r) && n < 10) ++n;
  EXPECT_EQ(n, 1);
  EXPECT_FALSE(more.status().ok());

  RecordReader negative(payload, -1);
  EXPECT_FALSE(negative.Next(&r));
  EXPECT_FALSE(negative.status().ok());

  RecordReader exact(payload, 2);
  n = 0;
  while (exact.Next(&r) && n < 10) ++n;
  EXPECT_EQ(n, 2);
  EXPECT_TRUE(exact.status().ok()) << exact.status();
}

TEST(RecordReaderTest, OverlongVarintsAndBadLengthsAreErrors) {
  Record r;
  const std::vector<std::vector<uint8_t>> bad = {
      {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01},  // 6-byte varint length
      {0xFF, 0xFF, 0xFF, 0xFF, 0x1F},        // 5th byte carries bits past 32
      {0x03},                                // negative length (-2)
      {0x80},                                // varint cut short
      // length 7 body: attributes, ts, offset, key length -2 (0x03), ...
      {0x0E, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00},
      // length 7 body with a header count of -1 (0x01)
      {0x0E, 0x00, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00},
      // length 7 body with a header count of 100 and no bytes for them
      {0x0E, 0x00, 0x00, 0x00, 0x01, 0x01, 0xC8, 0x01},
      // length 8 body with one header whose key is null
      {0x10, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x01, 0x01},
      // fields end before the declared length
      {0x10, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00, 0x00, 0x00},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    RecordReader reader(bad[i], 1);
    EXPECT_FALSE(reader.Next(&r)) << i;
    EXPECT_FALSE(reader.status().ok()) << i;
  }
}

// ---- SplitBatches ----

TEST(SplitBatchesTest, SplitsBackToBackBatches) {
  std::vector<uint8_t> records = kGolden;
  const std::vector<uint8_t> second = ClientBatch(Compression::kGzip, 3);
  records.insert(records.end(), second.begin(), second.end());
  auto batches = SplitBatches(records);
  ASSERT_TRUE(batches.ok()) << batches.status();
  ASSERT_EQ(batches->size(), 2u);
  EXPECT_EQ((*batches)[0].size_in_bytes(), kGolden.size());
  EXPECT_EQ((*batches)[1].record_count(), 3);
  EXPECT_EQ((*batches)[1].compression(), Compression::kGzip);
  EXPECT_TRUE(SplitBatches({})->empty());
}

TEST(SplitBatchesTest, TrailingGarbageIsAnError) {
  for (size_t extra = 1; extra <= kBatchHeaderSize + 5; ++extra) {
    std::vector<uint8_t> records = kGolden;
    records.insert(records.end(), kGolden.begin(), kGolden.begin() + static_cast<ptrdiff_t>(extra));
    auto batches = SplitBatches(records);
    EXPECT_EQ(batches.status().code(), absl::StatusCode::kDataLoss) << extra;
    EXPECT_NE(std::string(batches.status().message()).find("at byte 82"), std::string::npos)
        << batches.status();
  }
  // A whole header of zeros after a batch: batchLength 0.
  std::vector<uint8_t> records = kGolden;
  records.resize(records.size() + kBatchHeaderSize, 0);
  EXPECT_FALSE(SplitBatches(records).ok());
}

}  // namespace
}  // namespace runnel::record
