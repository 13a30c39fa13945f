// Rack-aware replica placement, Kafka's algorithm for brokers with `broker.rack`.
//
// The brokers are put in one list that alternates between racks (racks and the brokers in
// each in id order: a1, b1, c1, a2, b2, ...). Partition p's first replica (its preferred
// leader) is the broker at (start + p) in that list, so leaders go round-robin and, with one
// broker per rack in turn, across racks. Each further replica is taken from a shifted
// position after it, skipping a broker whose rack already holds a replica of the partition
// until every rack does (and skipping a broker already chosen until every broker is): with
// rf <= the number of racks, no two replicas share a rack. The shift grows every time the
// partitions have gone once round the brokers, so followers spread too.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace runnel::controllerd {

struct PlacementBroker {
  int32_t id = -1;
  std::string rack;  // "" = none (all rack-less brokers count as one rack)
};

// `partitions` partitions of `rf` replicas over `brokers` (non-empty, rf <= brokers.size()).
// `start` and `shift` are the random draws (Kafka draws both at random per request).
std::vector<std::vector<int32_t>> PlaceRackAware(int32_t partitions, int32_t rf,
                                                 const std::vector<PlacementBroker>& brokers,
                                                 uint64_t start, uint64_t shift);

}  // namespace runnel::controllerd
