// The leader side of one partition's replication, as a pure state machine: the ISR and its
// pending change, each follower's log end and catch-up times, the high watermark, and the
// answers to follower fetches and acks=all produces. Kafka's rules (Partition.scala,
// Replica.scala; KIP-101/279/320 for fetches, KIP-497 for the pending ISR), taken as facts.
//
// No I/O, no threads, no clock: the caller (storaged, under the partition's lock; or the
// replication simulator) passes the time in, reads records itself, sends the ISR proposals
// this returns to the controller and feeds back the controller's records.
//
// The leader's own contribution to the high watermark is the "durable end" its caller
// reports: the log end for Kafka's model (replicated, not flushed), or the flushed end when
// acks=all must mean "flushed on every ISR member" (the simulator's model, README).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/protocol/error_code.h"
#include "storaged/replication/epoch_history.h"
#include "storaged/replication/partition_election.h"

namespace runnel::storaged::replication {

struct ReplicationConfig {
  int64_t replica_lag_time_max_ms = 30000;  // replica.lag.time.max.ms
  int32_t min_insync_replicas = 1;          // min.insync.replicas
};

// An ISR change for the controller (AlterPartition): the new ISR and the record it is based
// on. Applied only when the controller's record comes back.
struct IsrProposal {
  int32_t leader_epoch = 0;
  int32_t partition_epoch = 0;
  std::vector<int32_t> new_isr;
  bool operator==(const IsrProposal&) const = default;
};

struct EpochEndOffset {
  int32_t epoch = -1;
  int64_t end_offset = -1;
  bool operator==(const EpochEndOffset&) const = default;
};

// A follower's fetch, as Fetch v12+ carries it (-1: absent).
struct FollowerFetch {
  int32_t replica = -1;
  int32_t current_leader_epoch = -1;
  int64_t fetch_offset = 0;
  int32_t last_fetched_epoch = -1;
};

struct FetchAnswer {
  // NONE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER (not a
  // replica), OFFSET_OUT_OF_RANGE.
  protocol::ErrorCode error = protocol::ErrorCode::kNone;
  // Set: the follower's log diverges (KIP-279); it truncates, no records are served.
  std::optional<EpochEndOffset> diverging_epoch;
  // NONE without a diverging epoch: serve records from the fetch offset.
  bool serve_records = false;
  int64_t high_watermark = 0;
  // An ISR expansion to send to the controller (the follower caught up).
  std::optional<IsrProposal> proposal;
};

class LeaderState {
 public:
  struct Follower {
    int64_t log_end_offset = -1;  // -1: not fetched in this leader epoch yet
    int64_t last_fetch_time_ms = 0;
    int64_t last_fetch_leader_end = -1;  // the leader's log end at that fetch
    int64_t last_caught_up_time_ms = 0;
  };

  // `self` becomes leader of `partition` (partition.leader == self). `log_end_offset` is its
  // log end now, where this leader epoch starts; the caller has assigned the epoch there in
  // its EpochHistory (Kafka's makeLeader). `high_watermark` is the one it had as a follower.
  // Every follower's log end is unknown until it fetches (so the high watermark waits for
  // every ISR member to fetch in the new epoch); ISR members count as caught up now.
  LeaderState(int32_t self, const PartitionRegistration& partition, int64_t log_end_offset,
              int64_t durable_end_offset, int64_t high_watermark, int64_t now_ms,
              ReplicationConfig config);

  int32_t self() const { return self_; }
  int32_t leader_epoch() const { return leader_epoch_; }
  int32_t partition_epoch() const { return partition_epoch_; }
  int64_t epoch_start_offset() const { return epoch_start_offset_; }
  int64_t log_end_offset() const { return log_end_offset_; }
  int64_t high_watermark() const { return high_watermark_; }
  const std::vector<int32_t>& replicas() const { return replicas_; }
  const std::vector<int32_t>& isr() const { return isr_; }
  // The ISR and the additions of the change in flight: what the HW and acks count.
  std::vector<int32_t> MaximalIsr() const;
  const std::optional<IsrProposal>& pending() const { return pending_; }
  const Follower* follower(int32_t replica) const;

  // The local log moved: appended (log end) or flushed (durable end, <= log end). Returns
  // whether the high watermark moved.
  bool OnLocalEnd(int64_t log_end_offset, int64_t durable_end_offset, int64_t now_ms);

  // Before appending a produce: NOT_ENOUGH_REPLICAS for acks=all when the ISR is smaller
  // than min.insync.replicas, else NONE.
  protocol::ErrorCode CheckAppend(bool acks_all) const;

  struct AckCheck {
    bool done = false;
    // With done: NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR (maximal) is now
    // below min.insync.replicas.
    protocol::ErrorCode error = protocol::ErrorCode::kNone;
  };
  // Whether an acks=all produce whose last offset is `last_offset` can be answered: the high
  // watermark is past it.
  AckCheck CheckAcksAll(int64_t last_offset) const;

  // A follower's fetch. `epochs` and `log_start_offset` are the leader's log as it is now.
  FetchAnswer OnFollowerFetch(const FollowerFetch& fetch, const EpochHistory& epochs,
                              int64_t log_start_offset, int64_t now_ms);

  // ISR members (not the leader) not caught up within replica.lag.time.max.ms leave: the
  // proposal to send, or nullopt (nobody lags, or a change is already in flight).
  std::optional<IsrProposal> MaybeShrinkIsr(int64_t now_ms);

  enum class RecordUpdate {
    kApplied,   // a newer record of our epoch: ISR and partition epoch taken, pending dropped
    kStale,     // not newer than what we have: ignored
    kResigned,  // a newer leader epoch or another leader: this state is over
  };
  // The controller's record for the partition: metadata, or an AlterPartition answer.
  RecordUpdate OnPartitionRecord(const PartitionRegistration& partition, int64_t now_ms);

  // The controller refused `proposal`. When it is the change in flight: INELIGIBLE_REPLICA
  // and INVALID_REQUEST drop it (the controller did not apply it); any other error keeps it
  // in the maximal ISR until a newer record arrives (the controller may hold a newer record
  // that includes it: a lost answer to an earlier send of the same change).
  void OnAlterPartitionError(protocol::ErrorCode error, const IsrProposal& proposal);

 private:
  bool IsCaughtUp(const Follower& f, int64_t now_ms) const;
  bool InMaximalIsr(int32_t replica) const;
  size_t MaximalIsrSize() const;
  bool MaybeAdvanceHighWatermark(int64_t now_ms);

  int32_t self_;
  ReplicationConfig config_;
  std::vector<int32_t> replicas_;
  std::vector<int32_t> isr_;
  int32_t leader_epoch_;
  int32_t partition_epoch_;
  int64_t epoch_start_offset_;
  int64_t log_end_offset_;
  int64_t durable_end_offset_;
  int64_t high_watermark_;
  std::optional<IsrProposal> pending_;
  std::map<int32_t, Follower> followers_;
};

}  // namespace runnel::storaged::replication
