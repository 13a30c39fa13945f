#include "brokerd/group/assignors.h"

#include <algorithm>
#include <utility>

namespace runnel::brokerd::group {
namespace {

using protocol::Uuid;
using TopicPartition = std::pair<Uuid, int32_t>;

bool CanOwn(const AssignmentSpec& spec, const AssignmentSpec::Member& m, const Uuid& topic,
            int32_t partition) {
  if (!m.topics.contains(topic)) return false;
  auto it = spec.partitions_per_topic.find(topic);
  return it != spec.partitions_per_topic.end() && partition >= 0 && partition < it->second;
}

}  // namespace

size_t PartitionCount(const Assignment& a) {
  size_t n = 0;
  for (const auto& [topic, partitions] : a) n += partitions.size();
  return n;
}

std::map<std::string, Assignment> UniformAssignor::Assign(const AssignmentSpec& spec) const {
  std::map<std::string, Assignment> out;
  std::map<std::string, size_t> count;
  for (const auto& [id, m] : spec.members) {
    out[id];
    count[id] = 0;
  }

  // Topics someone subscribes to, and how many members do: the least shared topics are
  // placed first, while the members that alone can take them still have room.
  std::map<Uuid, int> subscribers;
  for (const auto& [id, m] : spec.members) {
    for (const Uuid& t : m.topics) {
      if (spec.partitions_per_topic.contains(t)) ++subscribers[t];
    }
  }

  // 1. Stickiness: each member keeps the partitions it had that it may still own and that no
  //    member earlier in id order already kept (a partition is never given twice).
  std::set<TopicPartition> taken;
  for (const auto& [id, m] : spec.members) {
    for (const auto& [topic, partitions] : m.current) {
      for (int32_t p : partitions) {
        if (!CanOwn(spec, m, topic, p) || taken.contains({topic, p})) continue;
        taken.insert({topic, p});
        out[id][topic].insert(p);
        ++count[id];
      }
    }
  }

  // 2. The rest, each to the eligible member with the fewest partitions (ties: member id).
  std::vector<std::pair<int, Uuid>> topic_order;
  topic_order.reserve(subscribers.size());
  for (const auto& [t, n] : subscribers) topic_order.push_back({n, t});
  std::sort(topic_order.begin(), topic_order.end());
  for (const auto& [n, topic] : topic_order) {
    int32_t partitions = spec.partitions_per_topic.at(topic);
    for (int32_t p = 0; p < partitions; ++p) {
      if (taken.contains({topic, p})) continue;
      const std::string* best = nullptr;
      for (const auto& [id, m] : spec.members) {
        if (!m.topics.contains(topic)) continue;
        if (best == nullptr || count[id] < count[*best]) best = &id;
      }
      if (best == nullptr) continue;  // unreachable: the topic has a subscriber
      taken.insert({topic, p});
      out[*best][topic].insert(p);
      ++count[*best];
    }
  }

  // 3. Balance: move a partition from a member with at least two more than another member
  //    that may own it, fullest donor and emptiest receiver first. Each move lowers the sum of
  //    squared counts, so this ends; the bound only guards against a bug.
  size_t total = taken.size();
  size_t max_moves = total * std::max<size_t>(1, spec.members.size()) + 1;
  for (size_t move = 0; move < max_moves; ++move) {
    std::vector<const std::string*> by_count;
    for (const auto& [id, m] : spec.members) by_count.push_back(&id);
    std::stable_sort(
        by_count.begin(), by_count.end(),
        [&](const std::string* a, const std::string* b) { return count[*a] < count[*b]; });
    bool moved = false;
    for (size_t r = 0; r < by_count.size() && !moved; ++r) {
      const std::string& receiver = *by_count[r];
      const AssignmentSpec::Member& rm = spec.members.at(receiver);
      for (size_t d = by_count.size(); d-- > r + 1 && !moved;) {
        const std::string& donor = *by_count[d];
        if (count[donor] < count[receiver] + 2) break;
        Assignment& da = out[donor];
        // The donor gives its highest movable partition, so what it keeps stays low-numbered.
        for (auto t = da.rbegin(); t != da.rend(); ++t) {
          if (!rm.topics.contains(t->first)) continue;
          int32_t p = *t->second.rbegin();
          Uuid topic = t->first;
          t->second.erase(p);
          if (da[topic].empty()) da.erase(topic);
          out[receiver][topic].insert(p);
          --count[donor];
          ++count[receiver];
          moved = true;
          break;  // `t` may point at an erased topic now
        }
      }
    }
    if (!moved) break;
  }
  return out;
}

std::map<std::string, Assignment> RangeAssignor::Assign(const AssignmentSpec& spec) const {
  std::map<std::string, Assignment> out;
  std::vector<const std::string*> order;
  for (const auto& [id, m] : spec.members) {
    out[id];
    order.push_back(&id);
  }
  // Static members first, by instance id, so a restarted static member gets its old ranges
  // back; then dynamic members by member id.
  std::stable_sort(order.begin(), order.end(), [&](const std::string* a, const std::string* b) {
    const auto& ia = spec.members.at(*a).instance_id;
    const auto& ib = spec.members.at(*b).instance_id;
    if (ia && ib) return *ia < *ib;
    if (ia || ib) return ia.has_value();
    return *a < *b;
  });
  for (const auto& [topic, partitions] : spec.partitions_per_topic) {
    std::vector<const std::string*> subs;
    for (const std::string* id : order) {
      if (spec.members.at(*id).topics.contains(topic)) subs.push_back(id);
    }
    if (subs.empty()) continue;
    int32_t quota = partitions / static_cast<int32_t>(subs.size());
    int32_t extra = partitions % static_cast<int32_t>(subs.size());
    int32_t next = 0;
    for (size_t i = 0; i < subs.size(); ++i) {
      int32_t n = quota + (static_cast<int32_t>(i) < extra ? 1 : 0);
      for (int32_t p = next; p < next + n; ++p) out[*subs[i]][topic].insert(p);
      next += n;
    }
  }
  return out;
}

const Assignor* FindAssignor(std::string_view name) {
  static const UniformAssignor kUniform;
  static const RangeAssignor kRange;
  if (name == kUniform.name()) return &kUniform;
  if (name == kRange.name()) return &kRange;
  return nullptr;
}

}  // namespace runnel::brokerd::group
