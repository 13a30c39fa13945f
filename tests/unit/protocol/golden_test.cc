// Bytes written out by hand from Kafka's protocol guide, so a bug that encode and decode share
// (which a round trip cannot see) still fails.
#include <gtest/gtest.h>

#include "common/protocol/messages.h"

namespace runnel::protocol {
namespace {

template <typename T>
Bytes EncodeBody(const T& m, int16_t v) {
  Bytes out;
  Writer w(out);
  m.Encode(w, v);
  EXPECT_EQ(m.Size(v), out.size());
  return out;
}

template <typename T>
T DecodeBody(const Bytes& in, int16_t v) {
  T m;
  Reader r(in);
  absl::Status s = m.Decode(r, v);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(r.empty());
  return m;
}

TEST(GoldenTest, ApiVersionsRequestV3WithHeader) {
  RequestHeader h;
  h.api_key = ApiVersionsRequest::kApiKey;
  h.api_version = 3;
  h.correlation_id = 1;
  h.client_id = "kcat";
  ApiVersionsRequest req;
  req.client_software_name = "runnel";
  req.client_software_version = "0.1.0";

  Bytes frame;
  Writer w(frame);
  h.Encode(w, RequestHeaderVersion(h.api_key, h.api_version));
  req.Encode(w, 3);
  const Bytes want = {
      0x00, 0x12, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01,  // key 18, version 3, correlation 1
      0x00, 0x04, 'k',  'c',  'a',  't',               // client id: int16 length
      0x00,                                            // header tagged fields
      0x07, 'r',  'u',  'n',  'n',  'e',  'l',         // compact string, length+1
      0x06, '0',  '.',  '1',  '.',  '0',               //
      0x00,                                            // body tagged fields
  };
  EXPECT_EQ(frame, want);

  Reader r(want);
  RequestHeader dh;
  ASSERT_TRUE(dh.Decode(r, 2).ok());
  ApiVersionsRequest dreq;
  ASSERT_TRUE(dreq.Decode(r, 3).ok());
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(dh, h);
  EXPECT_EQ(dreq, req);
}

TEST(GoldenTest, ApiVersionsRequestV0IsEmpty) {
  ApiVersionsRequest req;
  EXPECT_TRUE(EncodeBody(req, 0).empty());
}

TEST(GoldenTest, MetadataRequestV1) {
  MetadataRequest req;
  req.topics.emplace();
  req.topics->push_back({});
  req.topics->back().name = "foo";
  const Bytes want = {0x00, 0x00, 0x00, 0x01, 0x00, 0x03, 'f', 'o', 'o'};
  EXPECT_EQ(EncodeBody(req, 1), want);
  EXPECT_EQ(DecodeBody<MetadataRequest>(want, 1), req);

  // Null topics (v1+) means "all topics".
  MetadataRequest all;
  all.topics.reset();
  const Bytes null_topics = {0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(EncodeBody(all, 1), null_topics);
  EXPECT_EQ(DecodeBody<MetadataRequest>(null_topics, 1).topics, std::nullopt);
  // v0 cannot say null: the same bytes are an error there.
  MetadataRequest m;
  Reader r(null_topics);
  EXPECT_FALSE(m.Decode(r, 0).ok());
}

TEST(GoldenTest, MetadataRequestV9Flexible) {
  MetadataRequest req;
  req.topics.emplace(1);
  (*req.topics)[0].name = "foo";
  req.allow_auto_topic_creation = false;
  req.include_topic_authorized_operations = true;
  const Bytes want = {
      0x02,                 // compact array: 1 element
      0x04, 'f', 'o', 'o',  // compact string
      0x00,                 // topic tagged fields
      0x00,                 // AllowAutoTopicCreation
      0x00,                 // IncludeClusterAuthorizedOperations (v8-10)
      0x01,                 // IncludeTopicAuthorizedOperations
      0x00,                 // tagged fields
  };
  EXPECT_EQ(EncodeBody(req, 9), want);
  EXPECT_EQ(DecodeBody<MetadataRequest>(want, 9), req);
}

TEST(GoldenTest, ApiVersionsResponseV0AndV3WithTaggedField) {
  ApiVersionsResponse resp;
  resp.api_keys.push_back({18, 0, 4, {}});
  resp.finalized_features_epoch = 5;  // tag 1, only written when not the default -1

  const Bytes v0 = {
      0x00, 0x00,              // error code
      0x00, 0x00, 0x00, 0x01,  // 1 api key
      0x00, 0x12, 0x00, 0x00, 0x00, 0x04,
  };
  // v0 cannot carry FinalizedFeaturesEpoch, but it is ignorable: dropped silently.
  EXPECT_TRUE(resp.CheckEncodable(0).ok());
  EXPECT_EQ(EncodeBody(resp, 0), v0);

  const Bytes v3 = {
      0x00, 0x00,                                            // error code
      0x02,                                                  // compact array: 1 element
      0x00, 0x12, 0x00, 0x00, 0x00, 0x04, 0x00,              // key, min, max, tagged fields
      0x00, 0x00, 0x00, 0x00,                                // throttle time
      0x01,                                                  // one tagged field
      0x01, 0x08, 0,    0,    0,    0,    0,    0, 0, 0x05,  // tag 1, 8 bytes, int64 5
  };
  EXPECT_EQ(EncodeBody(resp, 3), v3);
  EXPECT_EQ(DecodeBody<ApiVersionsResponse>(v3, 3), resp);
}

TEST(GoldenTest, UnknownTagsArePreservedInOrder) {
  // ApiVersionsResponse v3: known tag 3 (ZkMigrationReady), then tag 7, which no version
  // defines; it must survive decode + encode byte for byte.
  const Bytes in = {
      0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,  // error, empty array, throttle
      0x02,                                      // two tagged fields
      0x03, 0x01, 0x01,                          // tag 3: ZkMigrationReady = true
      0x07, 0x02, 0xab, 0xcd,                    // tag 7: unknown
  };
  ApiVersionsResponse resp = DecodeBody<ApiVersionsResponse>(in, 3);
  EXPECT_TRUE(resp.zk_migration_ready);
  ASSERT_EQ(resp.unknown_tagged_fields.size(), 1u);
  EXPECT_EQ(resp.unknown_tagged_fields[0].tag, 7u);
  EXPECT_EQ(EncodeBody(resp, 3), in);
}

TEST(GoldenTest, KnownTagWithWrongSizeIsAnError) {
  const Bytes in = {
      0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, 0x09,
      0,    0,    0,    0,    0,    0,    0,    0x05, 0x00,  // int64 tag claiming 9 bytes
  };
  ApiVersionsResponse resp;
  Reader r(in);
  EXPECT_FALSE(resp.Decode(r, 3).ok());
}

TEST(GoldenTest, ProduceRequestV3Records) {
  ProduceRequest req;
  req.transactional_id.reset();
  req.acks = -1;
  req.timeout_ms = 30000;
  auto& topic = req.topic_data.emplace_back();
  topic.name = "t";
  auto& part = topic.partition_data.emplace_back();
  part.index = 0;
  part.records.data = Bytes{0xaa, 0xbb};
  const Bytes want = {
      0xff, 0xff,              // null transactional id
      0xff, 0xff,              // acks -1
      0x00, 0x00, 0x75, 0x30,  // timeout 30000
      0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 't',  0x00,
      0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,  // 1 partition, index 0
      0x00, 0x00, 0x00, 0x02, 0xaa, 0xbb,        // records: int32 length
  };
  EXPECT_EQ(EncodeBody(req, 3), want);
  EXPECT_EQ(DecodeBody<ProduceRequest>(want, 3), req);
}

TEST(GoldenTest, DescribeClusterResponseV0) {
  DescribeClusterResponse resp;
  resp.cluster_id = "c";
  resp.controller_id = NodeId(1);
  auto& b = resp.brokers.emplace_back();
  b.broker_id = NodeId(1);
  b.host = "h";
  b.port = 9092;
  const Bytes want = {
      0x00, 0x00, 0x00, 0x00,  // throttle
      0x00, 0x00,              // error code
      0x00,                    // null error message (compact)
      0x02, 'c',               // cluster id
      0x00, 0x00, 0x00, 0x01,  // controller id
      0x02,                    // 1 broker
      0x00, 0x00, 0x00, 0x01, 0x02, 'h', 0x00, 0x00, 0x23, 0x84, 0x00, 0x00,  // id, host, port,
                                                                              // null rack, tags
      0x80, 0x00, 0x00, 0x00,  // cluster authorized operations: INT32_MIN
      0x00,                    // tagged fields
  };
  EXPECT_EQ(EncodeBody(resp, 0), want);
  EXPECT_EQ(DecodeBody<DescribeClusterResponse>(want, 0), resp);
}

}  // namespace
}  // namespace runnel::protocol
