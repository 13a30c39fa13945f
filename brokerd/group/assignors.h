// Server-side partition assignors of KIP-848 consumer groups: `uniform` and `range`, the two
// Kafka ships. The group coordinator runs one at each new group epoch to compute the target
// assignment; members then reconcile towards it (consumer_group.h).
//
// Both are deterministic: the same spec gives the same assignment, whatever the order of
// members or topics in it, so a coordinator that fails over computes what its predecessor
// would have.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/protocol/uuid.h"

namespace runnel::brokerd::group {

// Partitions by topic id. Ordered containers so that equal assignments compare equal and
// iterate identically (records, responses and tests see one order).
using Assignment = std::map<protocol::Uuid, std::set<int32_t>>;

// Partitions in `a`, all topics counted.
size_t PartitionCount(const Assignment& a);

struct AssignmentSpec {
  struct Member {
    std::optional<std::string> instance_id;
    std::optional<std::string> rack_id;
    // Subscribed topics that exist (ids present in `partitions_per_topic`).
    std::set<protocol::Uuid> topics;
    // The member's current target assignment (what stickiness keeps).
    Assignment current;
  };
  std::map<std::string, Member> members;  // by member id
  std::map<protocol::Uuid, int32_t> partitions_per_topic;
};

class Assignor {
 public:
  virtual ~Assignor() = default;
  virtual std::string_view name() const = 0;
  // One entry per member of the spec (an empty assignment when it gets nothing). Every
  // partition of every subscribed topic goes to exactly one member subscribed to its topic.
  virtual std::map<std::string, Assignment> Assign(const AssignmentSpec& spec) const = 0;
};

// Balanced and sticky. Each member keeps what it had as long as it stays subscribed and
// under its share; the rest goes to the members with the fewest partitions; then partitions
// move from the fullest members to the emptiest ones that can take them until no move
// improves balance. With identical subscriptions every member ends with floor(N/M) or
// ceil(N/M) partitions.
class UniformAssignor final : public Assignor {
 public:
  std::string_view name() const override { return "uniform"; }
  std::map<std::string, Assignment> Assign(const AssignmentSpec& spec) const override;
};

// Per topic, the members subscribed to it sorted (static members first by instance id, then
// the others by member id) get contiguous ranges, the first ones one extra partition when it
// does not divide evenly. Members subscribed to the same co-partitioned topics get the same
// partition numbers of each. Not sticky, as in Kafka.
class RangeAssignor final : public Assignor {
 public:
  std::string_view name() const override { return "range"; }
  std::map<std::string, Assignment> Assign(const AssignmentSpec& spec) const override;
};

// The built-in assignor named `name` ("uniform" or "range"), or null.
const Assignor* FindAssignor(std::string_view name);

}  // namespace runnel::brokerd::group
