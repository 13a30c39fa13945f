// A partition as brokerd's storage side names it: (topic name, partition index), and its
// hash for unordered containers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace runnel::brokerd {

using PartitionKey = std::pair<std::string, int32_t>;

struct PartitionKeyHash {
  size_t operator()(const PartitionKey& k) const {
    return std::hash<std::string>()(k.first) * 31 + static_cast<size_t>(k.second);
  }
};

// A PartitionKey that does not own its topic name (for lookups that should not copy it),
// hashed as PartitionKeyHash hashes the owning key.
using PartitionKeyView = std::pair<std::string_view, int32_t>;

struct PartitionKeyViewHash {
  size_t operator()(const PartitionKeyView& k) const {
    return std::hash<std::string_view>()(k.first) * 31 + static_cast<size_t>(k.second);
  }
};

}  // namespace runnel::brokerd
