#include "common/protocol/uuid.h"

#include <gtest/gtest.h>

#include <set>

namespace runnel::protocol {
namespace {

TEST(UuidTest, TextFormMatchesKafka) {
  EXPECT_EQ(Uuid().ToString(), "AAAAAAAAAAAAAAAAAAAAAA");
  // Kafka's METADATA_TOPIC_ID (0, 1) prints as AAAAAAAAAAAAAAAAAAAAAQ.
  EXPECT_EQ(kMetadataTopicId.ToString(), "AAAAAAAAAAAAAAAAAAAAAQ");
  Uuid all_ones = Uuid::FromBits(~uint64_t{0}, ~uint64_t{0});
  EXPECT_EQ(all_ones.ToString(), "_____________________w");
  Uuid u = Uuid::FromBits(0x0123456789abcdef, 0xfedcba9876543210);
  EXPECT_EQ(u.ToString(), "ASNFZ4mrze_-3LqYdlQyEA");
  EXPECT_EQ(u.MostSignificantBits(), 0x0123456789abcdefu);
  EXPECT_EQ(u.LeastSignificantBits(), 0xfedcba9876543210u);
}

TEST(UuidTest, FromStringRoundTripsAndRejectsOtherText) {
  Uuid u = Uuid::FromBits(0x0123456789abcdef, 0xfedcba9876543210);
  EXPECT_EQ(Uuid::FromString(u.ToString()), u);
  EXPECT_EQ(Uuid::FromString("AAAAAAAAAAAAAAAAAAAAAA"), Uuid());
  EXPECT_EQ(Uuid::FromString(""), std::nullopt);
  EXPECT_EQ(Uuid::FromString("AAAAAAAAAAAAAAAAAAAAA"), std::nullopt);   // 21 chars
  EXPECT_EQ(Uuid::FromString("AAAAAAAAAAAAAAAAAAAAA="), std::nullopt);  // padding
  EXPECT_EQ(Uuid::FromString("AAAAAAAAAAAAAAAAAAAAA+"), std::nullopt);  // not URL-safe
  EXPECT_EQ(Uuid::FromString("AAAAAAAAAAAAAAAAAAAAAR"), std::nullopt);  // stray low bits
}

TEST(UuidTest, RandomIsVersion4AndNeverReserved) {
  std::set<Uuid> seen;
  for (int i = 0; i < 1000; ++i) {
    Uuid u = Uuid::Random();
    EXPECT_FALSE(u.IsZero());
    EXPECT_NE(u, kMetadataTopicId);
    EXPECT_NE(u.ToString()[0], '-');
    EXPECT_EQ((u.MostSignificantBits() >> 12) & 0xf, 4u);
    EXPECT_EQ(u.LeastSignificantBits() >> 62, 2u);
    seen.insert(u);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace runnel::protocol
