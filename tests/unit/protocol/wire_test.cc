// Wire primitives: varint vectors from Kafka's encoding rules, bounds and hostile lengths.
#include "common/protocol/wire.h"

#include <gtest/gtest.h>

#include <limits>

#include "common/protocol/messages/produce.h"

namespace runnel::protocol {
namespace {

Bytes Encode(auto&& write) {
  Bytes out;
  Writer w(out);
  write(w);
  return out;
}

TEST(WireTest, UnsignedVarintVectors) {
  const std::pair<uint32_t, Bytes> cases[] = {
      {0, {0x00}},
      {1, {0x01}},
      {127, {0x7f}},
      {128, {0x80, 0x01}},
      {300, {0xac, 0x02}},
      {16383, {0xff, 0x7f}},
      {16384, {0x80, 0x80, 0x01}},
      {0xffffffffu, {0xff, 0xff, 0xff, 0xff, 0x0f}},
  };
  for (const auto& [value, bytes] : cases) {
    // A copy: clang 14 cannot capture a structured binding.
    EXPECT_EQ(Encode([v = value](Writer& w) { w.WriteUnsignedVarint(v); }), bytes) << value;
    EXPECT_EQ(UnsignedVarintSize(value), bytes.size());
    Reader r(bytes);
    uint32_t got = 0;
    ASSERT_TRUE(r.ReadUnsignedVarint(&got).ok());
    EXPECT_EQ(got, value);
    EXPECT_TRUE(r.empty());
  }
}

TEST(WireTest, ZigzagVarintVectors) {
  const std::pair<int32_t, Bytes> cases[] = {
      {0, {0x00}},
      {-1, {0x01}},
      {1, {0x02}},
      {-2, {0x03}},
      {63, {0x7e}},
      {-64, {0x7f}},
      {64, {0x80, 0x01}},
      {std::numeric_limits<int32_t>::max(), {0xfe, 0xff, 0xff, 0xff, 0x0f}},
      {std::numeric_limits<int32_t>::min(), {0xff, 0xff, 0xff, 0xff, 0x0f}},
  };
  for (const auto& [value, bytes] : cases) {
    EXPECT_EQ(Encode([v = value](Writer& w) { w.WriteVarint(v); }), bytes) << value;
    EXPECT_EQ(VarintSize(value), bytes.size());
    Reader r(bytes);
    int32_t got = 0;
    ASSERT_TRUE(r.ReadVarint(&got).ok());
    EXPECT_EQ(got, value);
  }
}

TEST(WireTest, ZigzagVarlongVectors) {
  const std::pair<int64_t, Bytes> cases[] = {
      {0, {0x00}},
      {-1, {0x01}},
      {150, {0xac, 0x02}},
      {std::numeric_limits<int64_t>::max(),
       {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
      {std::numeric_limits<int64_t>::min(),
       {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
  };
  for (const auto& [value, bytes] : cases) {
    EXPECT_EQ(Encode([v = value](Writer& w) { w.WriteVarlong(v); }), bytes) << value;
    EXPECT_EQ(VarlongSize(value), bytes.size());
    Reader r(bytes);
    int64_t got = 0;
    ASSERT_TRUE(r.ReadVarlong(&got).ok());
    EXPECT_EQ(got, value);
  }
}

TEST(WireTest, OverlongVarintsAreErrors) {
  {
    Bytes six = {0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    Reader r(six);
    uint32_t v;
    EXPECT_FALSE(r.ReadUnsignedVarint(&v).ok());
  }
  {
    Bytes too_big = {0xff, 0xff, 0xff, 0xff, 0x10};  // bit 32 set
    Reader r(too_big);
    uint32_t v;
    EXPECT_FALSE(r.ReadUnsignedVarint(&v).ok());
  }
  {
    Bytes eleven(10, 0x80);
    eleven.push_back(0x01);
    Reader r(eleven);
    uint64_t v;
    EXPECT_FALSE(r.ReadUnsignedVarlong(&v).ok());
  }
  {
    Bytes truncated = {0x80};
    Reader r(truncated);
    int32_t v;
    EXPECT_FALSE(r.ReadVarint(&v).ok());
  }
}

TEST(WireTest, FixedWidthBigEndian) {
  Bytes b = Encode([](Writer& w) {
    w.WriteInt8(-2);
    w.WriteInt16(0x0102);
    w.WriteInt32(-1);
    w.WriteInt64(0x0102030405060708);
    w.WriteUint16(0xfffe);
    w.WriteUint32(0x80000001u);
    w.WriteFloat64(1.5);
    w.WriteBool(true);
  });
  Bytes want = {0xfe, 0x01, 0x02, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02, 0x03,
                0x04, 0x05, 0x06, 0x07, 0x08, 0xff, 0xfe, 0x80, 0x00, 0x00,
                0x01, 0x3f, 0xf8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01};
  EXPECT_EQ(b, want);
  Reader r(b);
  int8_t i8;
  int16_t i16;
  int32_t i32;
  int64_t i64;
  uint16_t u16;
  uint32_t u32;
  double f;
  bool t;
  ASSERT_TRUE(r.ReadInt8(&i8).ok());
  ASSERT_TRUE(r.ReadInt16(&i16).ok());
  ASSERT_TRUE(r.ReadInt32(&i32).ok());
  ASSERT_TRUE(r.ReadInt64(&i64).ok());
  ASSERT_TRUE(r.ReadUint16(&u16).ok());
  ASSERT_TRUE(r.ReadUint32(&u32).ok());
  ASSERT_TRUE(r.ReadFloat64(&f).ok());
  ASSERT_TRUE(r.ReadBool(&t).ok());
  EXPECT_EQ(i8, -2);
  EXPECT_EQ(i16, 0x0102);
  EXPECT_EQ(i32, -1);
  EXPECT_EQ(i64, 0x0102030405060708);
  EXPECT_EQ(u16, 0xfffe);
  EXPECT_EQ(u32, 0x80000001u);
  EXPECT_EQ(f, 1.5);
  EXPECT_TRUE(t);
  EXPECT_TRUE(r.empty());
  int8_t extra;
  absl::Status s = r.ReadInt8(&extra);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireTest, TruncatedFixedWidthIsAnErrorAndConsumesNothing) {
  Bytes three = {1, 2, 3};
  Reader r(three);
  int32_t v;
  EXPECT_FALSE(r.ReadInt32(&v).ok());
  EXPECT_EQ(r.position(), 0u);
  Uuid u;
  EXPECT_FALSE(r.ReadUuid(&u).ok());
}

TEST(WireTest, StringsBothEncodings) {
  Bytes b = Encode([](Writer& w) {
    w.WriteString("abc", false);
    w.WriteString("abc", true);
    w.WriteNullableString(std::nullopt, false, true);
    w.WriteNullableString(std::nullopt, true, true);
    w.WriteNullableString(std::nullopt, true, false);  // not nullable: written empty
  });
  Bytes want = {0x00, 0x03, 'a', 'b', 'c', 0x04, 'a', 'b', 'c', 0xff, 0xff, 0x00, 0x01};
  EXPECT_EQ(b, want);
  Reader r(b);
  std::string s;
  std::optional<std::string> o;
  ASSERT_TRUE(r.ReadString(&s, false).ok());
  EXPECT_EQ(s, "abc");
  ASSERT_TRUE(r.ReadNullableString(&o, true, true).ok());
  EXPECT_EQ(o, "abc");
  ASSERT_TRUE(r.ReadNullableString(&o, false, true).ok());
  EXPECT_EQ(o, std::nullopt);
  // A null where the field is not nullable is an error.
  Reader r2(std::span<const uint8_t>(b).subspan(11));
  EXPECT_FALSE(r2.ReadString(&s, true).ok());
}

TEST(WireTest, HostileStringLengths) {
  std::string s;
  {
    Bytes b = {0x7f, 0xff, 'a'};  // claims 32767 bytes, has 1
    Reader r(b);
    absl::Status st = r.ReadString(&s, false);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(st.message()).find("exceeds"), std::string::npos) << st.message();
  }
  {
    Bytes b = {0xff, 0xfe};  // -2
    Reader r(b);
    EXPECT_FALSE(r.ReadString(&s, false).ok());
  }
  {
    // Compact length 0xffffffff - 1 with nothing behind it.
    Bytes b = {0xff, 0xff, 0xff, 0xff, 0x0f};
    Reader r(b);
    EXPECT_FALSE(r.ReadString(&s, true).ok());
  }
  {
    // A compact string longer than Kafka's 32767-byte limit, fully present, is refused.
    Bytes b;
    Writer w(b);
    w.WriteUnsignedVarint(40000 + 1);
    b.resize(b.size() + 40000, 'x');
    Reader r(b);
    EXPECT_FALSE(r.ReadString(&s, true).ok());
  }
}

TEST(WireTest, HostileBytesLengths) {
  Bytes out;
  {
    Bytes b = {0x7f, 0xff, 0xff, 0xff, 0x00};
    Reader r(b);
    EXPECT_FALSE(r.ReadBytes(&out, false).ok());
  }
  {
    Bytes b = {0xff, 0xff, 0xff, 0xfb};  // -5
    Reader r(b);
    std::optional<Bytes> o;
    EXPECT_FALSE(r.ReadNullableBytes(&o, false, true).ok());
  }
  {
    Bytes b = {0xff, 0xff, 0xff, 0xff};  // null
    Reader r(b);
    std::optional<Bytes> o = Bytes{1};
    ASSERT_TRUE(r.ReadNullableBytes(&o, false, true).ok());
    EXPECT_EQ(o, std::nullopt);
  }
}

TEST(WireTest, HostileArrayCountsFailBeforeAllocating) {
  int32_t n;
  {
    Bytes b = {0x7f, 0xff, 0xff, 0xff};
    Reader r(b);
    absl::Status s = r.ReadArrayLength(&n, false, true, 1);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  }
  {
    Bytes b = {0xff, 0xff, 0xff, 0xff, 0x07};  // compact count 0x7ffffffe
    Reader r(b);
    EXPECT_FALSE(r.ReadArrayLength(&n, true, true, 1).ok());
  }
  {
    Bytes b = {0x80, 0x00, 0x00, 0x00};  // INT32_MIN
    Reader r(b);
    EXPECT_FALSE(r.ReadArrayLength(&n, false, true, 1).ok());
  }
  {
    // Two elements of at least 4 bytes need 8 bytes; 7 are left.
    Bytes b = {0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7};
    Reader r(b);
    EXPECT_FALSE(r.ReadArrayLength(&n, false, false, 4).ok());
    Reader r2(b);
    ASSERT_TRUE(r2.ReadArrayLength(&n, false, false, 3).ok());
    EXPECT_EQ(n, 2);
  }
  {
    Bytes b = {0x00};  // compact null
    Reader r(b);
    EXPECT_FALSE(r.ReadArrayLength(&n, true, /*nullable=*/false, 1).ok());
    Reader r2(b);
    ASSERT_TRUE(r2.ReadArrayLength(&n, true, /*nullable=*/true, 1).ok());
    EXPECT_EQ(n, -1);
  }
}

TEST(WireTest, SizeCounterMatchesWriter) {
  auto both = [](auto&& f) {
    Bytes out;
    Writer w(out);
    SizeCounter c;
    f(w);
    f(c);
    EXPECT_EQ(out.size(), c.size());
  };
  both([](auto& w) { w.WriteString(std::string(200, 'x'), true); });
  both([](auto& w) { w.WriteNullableString(std::nullopt, false, true); });
  both([](auto& w) { w.WriteNullableString(std::nullopt, true, false); });
  both([](auto& w) { w.WriteBytes(Bytes(130), true); });
  both([](auto& w) { w.WriteNullableBytes(std::nullopt, false, true); });
  both([](auto& w) { w.WriteArrayLength(127, true); });
  both([](auto& w) { w.WriteArrayLength(128, true); });
  both([](auto& w) { w.WriteVarlong(-1234567890123); });
  both([](auto& w) { w.WriteRecords(Records{Bytes(5)}, false, true); });
}

TEST(WireTest, WriterAppends) {
  Bytes out = {9, 9};
  Writer w(out);
  w.WriteInt16(1);
  EXPECT_EQ(out, (Bytes{9, 9, 0, 1}));
  EXPECT_EQ(w.size(), 4u);
}

// brokerd decodes Produce with borrowed records: the same message as a copying decode, whose
// payloads point into the decoded buffer, and null records stay null.
TEST(WireTest, BorrowedRecordsPointIntoTheBufferAndEncodeTheSame) {
  for (int16_t version : {3, 9}) {  // int32 lengths, compact lengths
    ProduceRequest req;
    req.acks = -1;
    req.timeout_ms = 30000;
    auto& topic = req.topic_data.emplace_back();
    topic.name = "t";
    topic.partition_data.emplace_back().records.data = Bytes{1, 2, 3, 4, 5};
    topic.partition_data.emplace_back().records.data = Bytes{};
    topic.partition_data.emplace_back();  // null records
    const Bytes wire = Encode([&](Writer& w) { req.Encode(w, version); });

    ProduceRequest copied;
    Reader copying(wire);
    ASSERT_TRUE(copied.Decode(copying, version).ok());
    ProduceRequest borrowed;
    Reader borrowing(wire);
    borrowing.BorrowRecords();
    ASSERT_TRUE(borrowed.Decode(borrowing, version).ok());
    EXPECT_TRUE(borrowing.empty());
    EXPECT_EQ(borrowed, copied);
    EXPECT_EQ(borrowed, req);

    const auto& parts = borrowed.topic_data[0].partition_data;
    ASSERT_EQ(parts.size(), 3u);
    for (const auto& p : parts) EXPECT_FALSE(p.records.data.has_value());
    ASSERT_TRUE(parts[0].records.borrowed.has_value());
    const std::span<const uint8_t> payload = *parts[0].records.borrowed;
    EXPECT_GE(payload.data(), wire.data());
    EXPECT_LE(payload.data() + payload.size(), wire.data() + wire.size());
    EXPECT_EQ(Bytes(payload.begin(), payload.end()), (Bytes{1, 2, 3, 4, 5}));
    EXPECT_EQ(parts[1].records.SizeInBytes(), 0u);
    EXPECT_FALSE(parts[1].records.IsNull());
    EXPECT_TRUE(parts[2].records.IsNull());

    EXPECT_EQ(Encode([&](Writer& w) { borrowed.Encode(w, version); }), wire);
    EXPECT_EQ(borrowed.Size(version), wire.size());

    // A payload that differs by one byte is a different message.
    ProduceRequest other = copied;
    (*other.topic_data[0].partition_data[0].records.data)[4] = 9;
    EXPECT_FALSE(borrowed == other);
  }
}

// A borrowed length past the end of the buffer is an error, as a copied one is.
TEST(WireTest, BorrowedRecordsLongerThanTheBufferAreMalformed) {
  const Bytes wire = {0, 0, 0, 9, 1, 2, 3};  // int32 length 9, three bytes follow
  Reader r(wire);
  r.BorrowRecords();
  Records records;
  EXPECT_FALSE(r.ReadRecords(&records, /*compact=*/false, /*nullable=*/true).ok());
  EXPECT_FALSE(records.borrowed.has_value());
}

// Reading into a Records decoded before leaves the payload in one place only: a copying
// read drops an earlier borrowed view, and a borrowing read drops earlier owned bytes.
TEST(WireTest, RecordsReadOverAnEarlierDecodeKeepOnlyTheNewPayload) {
  const Bytes first = {0, 0, 0, 2, 7, 8};
  const Bytes second = {0, 0, 0, 1, 5};
  Records records;
  Reader borrowing(first);
  borrowing.BorrowRecords();
  ASSERT_TRUE(borrowing.ReadRecords(&records, /*compact=*/false, /*nullable=*/true).ok());
  Reader copying(second);
  ASSERT_TRUE(copying.ReadRecords(&records, /*compact=*/false, /*nullable=*/true).ok());
  EXPECT_FALSE(records.borrowed.has_value());
  EXPECT_EQ(records, (Records{Bytes{5}}));
  Reader borrowing_again(first);
  borrowing_again.BorrowRecords();
  ASSERT_TRUE(borrowing_again.ReadRecords(&records, /*compact=*/false, /*nullable=*/true).ok());
  EXPECT_FALSE(records.data.has_value());
  EXPECT_EQ(records, (Records{Bytes{7, 8}}));
}

}  // namespace
}  // namespace runnel::protocol
