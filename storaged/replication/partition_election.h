// The controller's rules for one partition, pure (no I/O, no clock, no metadata log): who
// leads after a change, and whether an AlterPartition from a leader is accepted. They follow
// Kafka's KRaft controller (ReplicationControlManager.validateAlterPartitionData,
// PartitionChangeBuilder's election; KIP-497, KIP-903) and are built into runnel_replication
// so that controllerd can link them when it elects and answers AlterPartition (today it
// elects in controller_brokers.cc); the replication simulator's controller model uses them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/protocol/error_code.h"

namespace runnel::storaged::replication {

inline constexpr int32_t kNoLeader = -1;

// One partition as the controller holds it (PartitionRecord in proto/runnel/metadata.proto):
// replicas in preference order, the in-sync replicas, the leader (kNoLeader when none), the
// leader epoch (bumped at every leader change) and the partition epoch (bumped at every
// change of the record).
struct PartitionRegistration {
  std::vector<int32_t> replicas;
  std::vector<int32_t> isr;
  int32_t leader = kNoLeader;
  int32_t leader_epoch = 0;
  int32_t partition_epoch = 0;

  bool InIsr(int32_t broker) const;
  bool IsReplica(int32_t broker) const;
  std::string ToString() const;
  bool operator==(const PartitionRegistration&) const = default;
};

// Whether a broker may lead or join an ISR now: registered, not fenced, not shutting down,
// (KIP-903) the broker epoch the leader saw is the current one.
using EligibleFn = std::function<bool(int32_t broker)>;

struct ElectionOptions {
  bool unclean_leader_election = false;  // unclean.leader.election.enable
};

// The leader this partition should have: the first replica in replica order that is in the
// ISR and eligible; with unclean election allowed and no such replica, the first eligible
// replica outside the ISR. kNoLeader when none qualifies.
int32_t ChooseLeader(const PartitionRegistration& p, const EligibleFn& eligible,
                     const ElectionOptions& options);

// The record after `broker` is fenced or shut down (Kafka's handleBrokerFenced): it leaves
// the ISR unless it is the last member (the ISR never empties: that last member is the one
// that must come back); when it led, a new leader is chosen (ChooseLeader; an unclean
// leader's ISR is itself alone), else the leader stays. Leader epoch + 1 when the leader
// changed, partition epoch + 1 when anything changed; nullopt when nothing changed.
std::optional<PartitionRegistration> OnBrokerFenced(const PartitionRegistration& p, int32_t broker,
                                                    const EligibleFn& eligible,
                                                    const ElectionOptions& options);

// The record after a broker became eligible again (unfenced): a partition without a leader
// elects one. nullopt when nothing changed.
std::optional<PartitionRegistration> OnBrokerUnfenced(const PartitionRegistration& p,
                                                      const EligibleFn& eligible,
                                                      const ElectionOptions& options);

// The record after `broker` restarted without a clean shutdown (KIP-966's unclean shutdown):
// it leaves the ISR (unless it is the last member) and, when it led, leadership moves as
// for a fence. nullopt when nothing changed.
std::optional<PartitionRegistration> OnBrokerUncleanRestart(const PartitionRegistration& p,
                                                            int32_t broker,
                                                            const EligibleFn& eligible,
                                                            const ElectionOptions& options);

struct AlterPartitionRequest {
  int32_t broker = -1;  // the sender, which believes it leads
  int32_t leader_epoch = 0;
  int32_t partition_epoch = 0;  // the record the proposal is based on
  std::vector<int32_t> new_isr;
};

struct AlterPartitionResult {
  protocol::ErrorCode error = protocol::ErrorCode::kNone;
  PartitionRegistration partition;  // the new record on success, else the current one
};

// Kafka's AlterPartition validation, in its order: a leader epoch above ours NOT_CONTROLLER
// (we are behind), below ours FENCED_LEADER_EPOCH; a sender that is not the leader
// INVALID_REQUEST; a partition epoch below ours INVALID_UPDATE_VERSION (above ours
// NOT_CONTROLLER); an ISR with a non-replica or a duplicate INVALID_REQUEST; an ISR without
// the leader INVALID_REQUEST; an ISR member not eligible INELIGIBLE_REPLICA. On success the
// ISR is replaced and the partition epoch bumped (an ISR equal to the current one is
// answered with the current record unchanged).
AlterPartitionResult AlterPartition(const PartitionRegistration& p,
                                    const AlterPartitionRequest& request,
                                    const EligibleFn& eligible);

}  // namespace runnel::storaged::replication
