#include "common/protocol/api_keys.h"

#include <gtest/gtest.h>

#include "common/protocol/messages.h"

namespace runnel::protocol {
namespace {

TEST(ApiKeysTest, TableFacts) {
  const ApiSchemaInfo* metadata = FindApiSchema(3);
  ASSERT_NE(metadata, nullptr);
  EXPECT_EQ(metadata->name, "Metadata");
  EXPECT_EQ(metadata->min_version, 0);
  EXPECT_EQ(metadata->max_version, 13);
  EXPECT_EQ(metadata->first_flexible_request, 9);
  EXPECT_EQ(metadata->first_flexible_response, 9);

  const ApiSchemaInfo* sasl = FindApiSchema(17);
  ASSERT_NE(sasl, nullptr);
  EXPECT_EQ(sasl->name, "SaslHandshake");
  EXPECT_EQ(sasl->first_flexible_request, -1);

  const ApiSchemaInfo* api_versions = FindApiSchema(static_cast<int16_t>(ApiKey::kApiVersions));
  ASSERT_NE(api_versions, nullptr);
  EXPECT_EQ(api_versions->key, 18);
  EXPECT_EQ(api_versions->first_flexible_request, 3);
  EXPECT_TRUE(api_versions->listeners & kListenerBroker);

  EXPECT_EQ(FindApiSchema(-1), nullptr);
  EXPECT_EQ(FindApiSchema(1000), nullptr);
  EXPECT_EQ(static_cast<int16_t>(ApiKey::kProduce), 0);
  EXPECT_EQ(static_cast<int16_t>(ApiKey::kDescribeCluster), 60);
  EXPECT_EQ(static_cast<int16_t>(ApiKey::kCreateTopics), 19);
}

TEST(ApiKeysTest, TableAgreesWithMessageTypes) {
  auto all = AllApiSchemas();
  EXPECT_EQ(all.size(), 91u);
  int16_t previous = -1;
  for (const ApiSchemaInfo& api : all) {
    EXPECT_GT(api.key, previous);
    previous = api.key;
    EXPECT_EQ(FindApiSchema(api.key), &api);
    bool found = VisitRequestType(api.key, [&](auto type) {
      using T = typename decltype(type)::type;
      EXPECT_EQ(T::kApiKey, api.key);
      EXPECT_EQ(T::kMinVersion, api.min_version);
      EXPECT_EQ(T::kMaxVersion, api.max_version);
      EXPECT_EQ(T::kFirstFlexibleVersion, api.first_flexible_request);
      EXPECT_EQ(std::string(T::kName), std::string(api.name) + "Request");
    });
    EXPECT_TRUE(found);
    found = VisitResponseType(api.key, [&](auto type) {
      using T = typename decltype(type)::type;
      EXPECT_EQ(T::kApiKey, api.key);
      EXPECT_EQ(T::kFirstFlexibleVersion, api.first_flexible_response);
    });
    EXPECT_TRUE(found);
  }
  EXPECT_FALSE(VisitRequestType(1000, [](auto) {}));
}

TEST(ApiKeysTest, DecodeRequestBody) {
  Bytes empty;
  Reader r0(empty);
  EXPECT_TRUE(DecodeRequestBody(18, 0, r0).ok());  // ApiVersions v0 has no fields

  Reader r1(empty);
  EXPECT_EQ(DecodeRequestBody(1000, 0, r1).code(), absl::StatusCode::kUnimplemented);
  Reader r2(empty);
  EXPECT_EQ(DecodeRequestBody(18, 6, r2).code(), absl::StatusCode::kUnimplemented);
  Reader r3(empty);
  EXPECT_EQ(DecodeRequestBody(18, -1, r3).code(), absl::StatusCode::kUnimplemented);

  Bytes hostile = {0x7f, 0xff, 0xff, 0xff};  // Metadata v1: 2^31-1 topics
  Reader r4(hostile);
  absl::Status s = DecodeRequestBody(3, 1, r4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("Topics"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace runnel::protocol
