#include "controllerd/placement.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace runnel::controllerd {
namespace {

std::vector<PlacementBroker> Brokers(const std::map<int32_t, std::string>& racks) {
  std::vector<PlacementBroker> out;
  for (const auto& [id, rack] : racks) out.push_back(PlacementBroker{id, rack});
  return out;
}

// Every partition has rf distinct brokers, on min(rf, racks) distinct racks.
void ExpectSpread(const std::vector<std::vector<int32_t>>& placement, int32_t partitions,
                  int32_t rf, const std::map<int32_t, std::string>& racks) {
  std::set<std::string> all_racks;
  for (const auto& [id, rack] : racks) all_racks.insert(rack);
  ASSERT_EQ(placement.size(), static_cast<size_t>(partitions));
  for (const auto& replicas : placement) {
    ASSERT_EQ(replicas.size(), static_cast<size_t>(rf));
    std::set<int32_t> ids(replicas.begin(), replicas.end());
    EXPECT_EQ(ids.size(), replicas.size()) << "a broker twice in one partition";
    std::set<std::string> used;
    for (int32_t b : replicas) used.insert(racks.at(b));
    EXPECT_EQ(used.size(), std::min<size_t>(rf, all_racks.size()));
  }
}

TEST(PlacementTest, ReplicasOfAPartitionAreOnDifferentRacks) {
  const std::map<int32_t, std::string> racks = {{1, "a"}, {2, "a"}, {3, "b"},
                                                {4, "b"}, {5, "c"}, {6, "c"}};
  for (uint64_t seed = 0; seed < 12; ++seed) {
    auto placement = PlaceRackAware(12, 3, Brokers(racks), seed, seed * 7);
    ExpectSpread(placement, 12, 3, racks);
    // Leaders go round the brokers: each leads 12 / 6 = 2 partitions.
    std::map<int32_t, int> leads;
    for (const auto& r : placement) ++leads[r[0]];
    for (const auto& [id, rack] : racks) EXPECT_EQ(leads[id], 2) << "broker " << id;
  }
}

TEST(PlacementTest, UnevenRacksStillGetOneReplicaEach) {
  // Rack b has a single broker: with rf 2 it holds a replica of every partition.
  const std::map<int32_t, std::string> racks = {{1, "a"}, {2, "a"}, {3, "a"}, {4, "b"}};
  auto placement = PlaceRackAware(8, 2, Brokers(racks), 3, 5);
  ExpectSpread(placement, 8, 2, racks);
  for (const auto& r : placement) EXPECT_TRUE(r[0] == 4 || r[1] == 4);
}

TEST(PlacementTest, MoreReplicasThanRacksUseEveryRackThenRepeat) {
  const std::map<int32_t, std::string> racks = {{1, "a"}, {2, "a"}, {3, "b"}, {4, "b"}};
  auto placement = PlaceRackAware(6, 3, Brokers(racks), 1, 2);
  ExpectSpread(placement, 6, 3, racks);
}

TEST(PlacementTest, BrokersWithoutARackCountAsOneRack) {
  const std::map<int32_t, std::string> racks = {{1, "a"}, {2, ""}, {3, ""}};
  auto placement = PlaceRackAware(4, 2, Brokers(racks), 0, 0);
  ExpectSpread(placement, 4, 2, racks);
  for (const auto& r : placement) EXPECT_TRUE(r[0] == 1 || r[1] == 1);
}

TEST(PlacementTest, OneBroker) {
  auto placement = PlaceRackAware(3, 1, Brokers({{7, "a"}}), 9, 9);
  ASSERT_EQ(placement.size(), 3u);
  for (const auto& r : placement) EXPECT_EQ(r, std::vector<int32_t>{7});
}

}  // namespace
}  // namespace runnel::controllerd
