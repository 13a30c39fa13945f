// A partition as brokerd's storage side names it: (topic name, partition index), and its
// hash for unordered containers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace runnel::brokerd {

using PartitionKey = std::pair<std::string, int32_t>;

struct PartitionKeyHash {
  size_t operator()(const PartitionKey& k) const {
    return std::hash<std::string>()(k.first) * 31 + static_cast<size_t>(k.second);
  }
};

}  // namespace runnel::brokerd
