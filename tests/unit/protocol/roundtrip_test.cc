// Runs the generated round-trip cases: every message of every API at every version.
#include "tests/unit/protocol/roundtrip.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace runnel::protocol::testing {
namespace {

// Seed 0 is the default-constructed message; seeds 1..n fill every present field with the
// null policies of NullsForSeed (never, always, random) in turn.
constexpr uint64_t kSeeds = 12;

class RoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(RoundTripTest, EncodeDecodeAllSeeds) {
  const RoundTripCase& c = GetParam();
  for (uint64_t seed = 0; seed <= kSeeds; ++seed) {
    absl::Status s = c.run(c.version, seed);
    ASSERT_TRUE(s.ok()) << s.message();
  }
}

INSTANTIATE_TEST_SUITE_P(AllMessages, RoundTripTest, ::testing::ValuesIn(AllRoundTripCases()),
                         [](const ::testing::TestParamInfo<RoundTripCase>& info) {
                           return info.param.message + "_v" + std::to_string(info.param.version);
                         });

TEST(RoundTripCasesTest, CoverEveryApi) {
  // 91 APIs in the schema folder, each with a request and a response at >= 1 version, plus
  // the 16 __consumer_offsets record schemas of schema/coordinator/ and the 2
  // __transaction_state ones of schema/transaction/ (api_key -1).
  std::vector<RoundTripCase> cases = AllRoundTripCases();
  std::set<std::string> messages, data;
  for (const RoundTripCase& c : cases) (c.api_key >= 0 ? messages : data).insert(c.message);
  EXPECT_EQ(messages.size(), 2u * 91u);
  EXPECT_GT(cases.size(), 2u * 91u);
  EXPECT_EQ(data.size(), 18u);
  EXPECT_EQ(data.count("OffsetCommitValue"), 1u);
  EXPECT_EQ(data.count("TransactionLogValue"), 1u);
}

}  // namespace
}  // namespace runnel::protocol::testing
