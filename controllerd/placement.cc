#include "controllerd/placement.h"

#include <algorithm>
#include <map>
#include <set>

namespace runnel::controllerd {

std::vector<std::vector<int32_t>> PlaceRackAware(int32_t partitions, int32_t rf,
                                                 const std::vector<PlacementBroker>& brokers,
                                                 uint64_t start, uint64_t shift) {
  std::map<std::string, std::vector<int32_t>> by_rack;
  std::map<int32_t, std::string> rack_of;
  for (const PlacementBroker& b : brokers) {
    by_rack[b.rack].push_back(b.id);
    rack_of[b.id] = b.rack;
  }
  for (auto& [rack, ids] : by_rack) std::sort(ids.begin(), ids.end());
  // a1, b1, c1, a2, b2, ...: one broker of each rack in turn.
  std::vector<int32_t> arranged;
  for (size_t i = 0; arranged.size() < rack_of.size(); ++i) {
    for (const auto& [rack, ids] : by_rack) {
      if (i < ids.size()) arranged.push_back(ids[i]);
    }
  }
  const size_t n = arranged.size();
  const size_t racks = by_rack.size();
  std::vector<std::vector<int32_t>> placement;
  if (n == 0) return placement;
  size_t start_index = start % n;
  size_t next_shift = shift % n;
  for (int32_t p = 0; p < partitions; ++p) {
    if (p > 0 && static_cast<size_t>(p) % n == 0) ++next_shift;
    const size_t first = (static_cast<size_t>(p) + start_index) % n;
    std::vector<int32_t> replicas{arranged[first]};
    std::set<std::string> racks_used{rack_of[arranged[first]]};
    std::set<int32_t> used{arranged[first]};
    // The k-th candidate after `first`: never `first` itself (the offset is 1..n-1).
    auto candidate = [&](size_t k) {
      if (n == 1) return arranged[first];
      const size_t offset = 1 + (next_shift * racks + k) % (n - 1);
      return arranged[(first + offset) % n];
    };
    size_t k = 0;
    // Bounded: each pass over n-1 candidates finds a broker not used yet (rf <= n).
    while (replicas.size() < static_cast<size_t>(rf) && k < 4 * n * static_cast<size_t>(rf)) {
      const int32_t b = candidate(k++);
      const bool rack_ok = racks_used.count(rack_of[b]) == 0 || racks_used.size() == racks;
      const bool broker_ok = used.count(b) == 0;
      if (rack_ok && broker_ok) {
        replicas.push_back(b);
        racks_used.insert(rack_of[b]);
        used.insert(b);
      }
    }
    placement.push_back(std::move(replicas));
  }
  return placement;
}

}  // namespace runnel::controllerd
