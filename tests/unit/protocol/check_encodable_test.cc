// Kafka's encoding rule: a version may drop a field only if the field is ignorable or holds
// its default; nulls only where nullable; strings at most 32767 bytes.
#include <gtest/gtest.h>

#include "common/protocol/messages.h"

namespace runnel::protocol {
namespace {

TEST(CheckEncodableTest, NonIgnorableFieldMissingFromVersion) {
  MetadataRequest req;
  req.allow_auto_topic_creation = false;  // versions 4+, not ignorable
  EXPECT_FALSE(req.CheckEncodable(3).ok());
  EXPECT_TRUE(req.CheckEncodable(4).ok());
  req.allow_auto_topic_creation = true;  // the default: fine everywhere
  EXPECT_TRUE(req.CheckEncodable(0).ok());
}

TEST(CheckEncodableTest, IgnorableFieldIsDroppedSilently) {
  MetadataRequest req;
  req.topics.emplace(1);
  (*req.topics)[0].name = "t";
  (*req.topics)[0].topic_id = Uuid::Random();  // versions 10+, ignorable
  EXPECT_TRUE(req.CheckEncodable(9).ok());
}

TEST(CheckEncodableTest, NestedFieldsAreChecked) {
  MetadataResponse resp;
  resp.topics.emplace_back().topic_authorized_operations = 5;  // versions 8+, not ignorable
  absl::Status s = resp.CheckEncodable(7);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("Topics: TopicAuthorizedOperations"), std::string::npos)
      << s.message();
  EXPECT_TRUE(resp.CheckEncodable(8).ok());
}

TEST(CheckEncodableTest, NullOnlyWhereNullable) {
  MetadataRequest req;
  req.topics.reset();
  EXPECT_FALSE(req.CheckEncodable(0).ok());
  EXPECT_TRUE(req.CheckEncodable(1).ok());

  MetadataRequest named;
  named.topics.emplace(1);
  (*named.topics)[0].name.reset();  // nullable from v10
  EXPECT_FALSE(named.CheckEncodable(9).ok());
  EXPECT_TRUE(named.CheckEncodable(10).ok());
}

TEST(CheckEncodableTest, OverlongString) {
  MetadataRequest req;
  req.topics.emplace(1);
  (*req.topics)[0].name = std::string(40000, 'x');
  EXPECT_FALSE(req.CheckEncodable(1).ok());
  EXPECT_FALSE(req.CheckEncodable(12).ok());
}

TEST(CheckEncodableTest, UnsupportedVersion) {
  MetadataRequest req;
  EXPECT_EQ(req.CheckEncodable(MetadataRequest::kMaxVersion + 1).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(req.CheckEncodable(-1).code(), absl::StatusCode::kUnimplemented);
}

TEST(CheckEncodableTest, DefaultsMatchKafka) {
  MetadataRequest req;
  ASSERT_TRUE(req.topics.has_value());  // nullable without a "null" default: empty, not null
  EXPECT_TRUE(req.topics->empty());
  EXPECT_TRUE(req.allow_auto_topic_creation);
  MetadataResponse resp;
  EXPECT_EQ(resp.controller_id, NodeId(-1));
  EXPECT_EQ(resp.cluster_id, std::nullopt);  // default "null"
  EXPECT_EQ(resp.cluster_authorized_operations, INT32_MIN);
  FetchResponse::PartitionData part;
  EXPECT_TRUE(part.records.IsNull());  // records default to null, as in Kafka
  EXPECT_EQ(part.last_stable_offset, -1);
  ApiVersionsResponse api;
  EXPECT_EQ(api.finalized_features_epoch, -1);
}

}  // namespace
}  // namespace runnel::protocol
