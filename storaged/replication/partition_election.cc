#include "storaged/replication/partition_election.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

namespace runnel::storaged::replication {
namespace {

using protocol::ErrorCode;

bool Contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// `p` with `broker` out of its ISR (unless it is the last member) and, when it led, a new
// leader elected. nullopt when nothing changed.
std::optional<PartitionRegistration> RemoveBroker(const PartitionRegistration& p, int32_t broker,
                                                  const EligibleFn& eligible,
                                                  const ElectionOptions& options) {
  PartitionRegistration next = p;
  if (p.InIsr(broker) && p.isr.size() > 1) {
    next.isr.erase(std::remove(next.isr.begin(), next.isr.end(), broker), next.isr.end());
  }
  if (p.leader == broker) {
    auto not_broker = [&](int32_t b) { return b != broker && eligible(b); };
    next.leader = ChooseLeader(next, not_broker, options);
    if (next.leader != kNoLeader && !next.InIsr(next.leader)) next.isr = {next.leader};
    ++next.leader_epoch;
  }
  if (next == p) return std::nullopt;
  ++next.partition_epoch;
  return next;
}

}  // namespace

bool PartitionRegistration::InIsr(int32_t broker) const { return Contains(isr, broker); }
bool PartitionRegistration::IsReplica(int32_t broker) const { return Contains(replicas, broker); }

std::string PartitionRegistration::ToString() const {
  return fmt::format("leader {} epoch {} partition epoch {} replicas [{}] isr [{}]", leader,
                     leader_epoch, partition_epoch, fmt::join(replicas, ","), fmt::join(isr, ","));
}

int32_t ChooseLeader(const PartitionRegistration& p, const EligibleFn& eligible,
                     const ElectionOptions& options) {
  for (int32_t r : p.replicas) {
    if (p.InIsr(r) && eligible(r)) return r;
  }
  if (options.unclean_leader_election) {
    for (int32_t r : p.replicas) {
      if (eligible(r)) return r;
    }
  }
  return kNoLeader;
}

std::optional<PartitionRegistration> OnBrokerFenced(const PartitionRegistration& p, int32_t broker,
                                                    const EligibleFn& eligible,
                                                    const ElectionOptions& options) {
  return RemoveBroker(p, broker, eligible, options);
}

std::optional<PartitionRegistration> OnBrokerUncleanRestart(const PartitionRegistration& p,
                                                            int32_t broker,
                                                            const EligibleFn& eligible,
                                                            const ElectionOptions& options) {
  return RemoveBroker(p, broker, eligible, options);
}

std::optional<PartitionRegistration> OnBrokerUnfenced(const PartitionRegistration& p,
                                                      const EligibleFn& eligible,
                                                      const ElectionOptions& options) {
  if (p.leader != kNoLeader) return std::nullopt;
  PartitionRegistration next = p;
  next.leader = ChooseLeader(p, eligible, options);
  if (next.leader == kNoLeader) return std::nullopt;
  if (!next.InIsr(next.leader)) next.isr = {next.leader};
  ++next.leader_epoch;
  ++next.partition_epoch;
  return next;
}

AlterPartitionResult AlterPartition(const PartitionRegistration& p,
                                    const AlterPartitionRequest& request,
                                    const EligibleFn& eligible) {
  auto fail = [&](ErrorCode e) { return AlterPartitionResult{e, p}; };
  if (request.leader_epoch > p.leader_epoch) return fail(ErrorCode::kNotController);
  if (request.leader_epoch < p.leader_epoch) return fail(ErrorCode::kFencedLeaderEpoch);
  if (request.broker != p.leader) return fail(ErrorCode::kInvalidRequest);
  if (request.partition_epoch < p.partition_epoch) return fail(ErrorCode::kInvalidUpdateVersion);
  if (request.partition_epoch > p.partition_epoch) return fail(ErrorCode::kNotController);
  std::set<int32_t> seen;
  for (int32_t b : request.new_isr) {
    if (!p.IsReplica(b) || !seen.insert(b).second) return fail(ErrorCode::kInvalidRequest);
  }
  if (!seen.contains(p.leader)) return fail(ErrorCode::kInvalidRequest);
  for (int32_t b : request.new_isr) {
    if (!eligible(b)) return fail(ErrorCode::kIneligibleReplica);
  }
  PartitionRegistration next = p;
  // Replica order, so equal sets compare equal.
  next.isr.clear();
  for (int32_t r : p.replicas) {
    if (seen.contains(r)) next.isr.push_back(r);
  }
  if (next.isr == p.isr) return {ErrorCode::kNone, p};
  ++next.partition_epoch;
  return {ErrorCode::kNone, next};
}

}  // namespace runnel::storaged::replication
