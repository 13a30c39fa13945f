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
  // 88 APIs in the schema folder, each with a request and a response at >= 1 version.
  std::vector<RoundTripCase> cases = AllRoundTripCases();
  std::set<std::string> messages;
  for (const RoundTripCase& c : cases) messages.insert(c.message);
  EXPECT_EQ(messages.size(), 2u * 88u);
  EXPECT_GT(cases.size(), 2u * 88u);
}

}  // namespace
}  // namespace runnel::protocol::testing
