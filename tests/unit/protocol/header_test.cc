#include "common/protocol/header.h"

#include <gtest/gtest.h>

namespace runnel::protocol {
namespace {

constexpr int16_t kProduce = 0, kMetadata = 3, kControlledShutdown = 7, kSaslHandshake = 17,
                  kApiVersions = 18;

TEST(HeaderVersionTest, RequestHeaderFollowsRequestFlexibility) {
  EXPECT_EQ(RequestHeaderVersion(kMetadata, 0), 1);
  EXPECT_EQ(RequestHeaderVersion(kMetadata, 8), 1);
  EXPECT_EQ(RequestHeaderVersion(kMetadata, 9), 2);
  EXPECT_EQ(RequestHeaderVersion(kMetadata, 12), 2);
  EXPECT_EQ(RequestHeaderVersion(kProduce, 8), 1);
  EXPECT_EQ(RequestHeaderVersion(kProduce, 9), 2);
  EXPECT_EQ(RequestHeaderVersion(kApiVersions, 2), 1);
  EXPECT_EQ(RequestHeaderVersion(kApiVersions, 3), 2);
  EXPECT_EQ(RequestHeaderVersion(kSaslHandshake, 1), 1);  // never flexible
}

TEST(HeaderVersionTest, ControlledShutdownIsAnUnknownKey) {
  // Kafka 4 removed ControlledShutdown (and with it request header v0, which only its v0
  // used): an unknown key, read with header v1.
  EXPECT_EQ(RequestHeaderVersion(kControlledShutdown, 0), 1);
  EXPECT_EQ(RequestHeaderVersion(kControlledShutdown, 3), 1);
}

TEST(HeaderVersionTest, OutsideTheTable) {
  // A newer version than we know keeps the flexible rule (so the header can still be read).
  EXPECT_EQ(RequestHeaderVersion(kApiVersions, 99), 2);
  EXPECT_EQ(RequestHeaderVersion(kMetadata, 14), 2);
  EXPECT_EQ(RequestHeaderVersion(kMetadata, -1), 1);
  // Unknown keys are read as non-flexible.
  EXPECT_EQ(RequestHeaderVersion(1000, 5), 1);
  EXPECT_EQ(RequestHeaderVersion(-1, 0), 1);
  EXPECT_EQ(ResponseHeaderVersion(1000, 5), 0);
}

TEST(HeaderVersionTest, ResponseHeader) {
  EXPECT_EQ(ResponseHeaderVersion(kMetadata, 8), 0);
  EXPECT_EQ(ResponseHeaderVersion(kMetadata, 9), 1);
  EXPECT_EQ(ResponseHeaderVersion(kProduce, 9), 1);
  // ApiVersions answers with header v0 at every version, flexible ones included.
  for (int16_t v = 0; v <= 10; ++v) EXPECT_EQ(ResponseHeaderVersion(kApiVersions, v), 0) << v;
}

TEST(RequestHeaderTest, GoldenBytesAllVersions) {
  RequestHeader h;
  h.api_key = kMetadata;
  h.api_version = 9;
  h.correlation_id = 42;
  h.client_id = "abc";
  const Bytes v0 = {0x00, 0x03, 0x00, 0x09, 0x00, 0x00, 0x00, 0x2a};
  Bytes v1 = v0;
  v1.insert(v1.end(), {0x00, 0x03, 'a', 'b', 'c'});  // client id stays an int16 string
  Bytes v2 = v1;
  v2.push_back(0x00);  // empty tagged-field section
  const Bytes* want[] = {&v0, &v1, &v2};
  for (int16_t hv = 0; hv <= 2; ++hv) {
    Bytes out;
    Writer w(out);
    h.Encode(w, hv);
    EXPECT_EQ(out, *want[hv]) << "header v" << hv;
    EXPECT_EQ(h.Size(hv), out.size());
    RequestHeader d;
    Reader r(out);
    ASSERT_TRUE(d.Decode(r, hv).ok());
    EXPECT_TRUE(r.empty());
    RequestHeader expected = h;
    if (hv == 0) expected.client_id.reset();
    EXPECT_EQ(d, expected);
  }
}

TEST(RequestHeaderTest, NullClientIdAndUnknownTags) {
  Bytes in = {0x00, 0x12, 0x00, 0x03, 0x00, 0x00, 0x00, 0x07,
              0xff, 0xff, 0x01, 0x05, 0x02, 0xaa, 0xbb};  // one unknown tag 5 with 2 bytes
  RequestHeader h;
  Reader r(in);
  ASSERT_TRUE(h.Decode(r, 2).ok());
  EXPECT_EQ(h.api_key, 18);
  EXPECT_EQ(h.correlation_id, 7);
  EXPECT_EQ(h.client_id, std::nullopt);
  ASSERT_EQ(h.unknown_tagged_fields.size(), 1u);
  EXPECT_EQ(h.unknown_tagged_fields[0].tag, 5u);
  EXPECT_EQ(h.unknown_tagged_fields[0].data, (Bytes{0xaa, 0xbb}));
  Bytes out;
  Writer w(out);
  h.Encode(w, 2);
  EXPECT_EQ(out, in);
}

TEST(RequestHeaderTest, MalformedHeadersAreErrors) {
  RequestHeader h;
  Bytes short_header = {0x00, 0x03, 0x00};
  Reader r1(short_header);
  EXPECT_FALSE(h.Decode(r1, 1).ok());
  Bytes bad_client = {0x00, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x09, 'a'};
  Reader r2(bad_client);
  EXPECT_FALSE(h.Decode(r2, 1).ok());
  Bytes ok = {0x00, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01};
  Reader r3(ok);
  EXPECT_FALSE(h.Decode(r3, 3).ok());  // no header v3
}

TEST(ResponseHeaderTest, V0AndV1) {
  ResponseHeader h;
  h.correlation_id = -2;
  Bytes out;
  Writer w(out);
  h.Encode(w, 0);
  EXPECT_EQ(out, (Bytes{0xff, 0xff, 0xff, 0xfe}));
  out.clear();
  h.Encode(w, 1);
  EXPECT_EQ(out, (Bytes{0xff, 0xff, 0xff, 0xfe, 0x00}));
  ResponseHeader d;
  Reader r(out);
  ASSERT_TRUE(d.Decode(r, 1).ok());
  EXPECT_EQ(d, h);
  Reader r2(out);
  EXPECT_FALSE(d.Decode(r2, 2).ok());
}

}  // namespace
}  // namespace runnel::protocol
