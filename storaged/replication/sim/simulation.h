// The deterministic replication simulator: one partition's replicas (LeaderState and
// FollowerState, storaged/replication/) on a virtual clock, a simulated network, a
// controller model using the pure election and AlterPartition rules
// (partition_election.h), producers with acks=all and consumers, all driven by one seed.
//
// What is modelled:
//   - replicas 0..N-1 and the controller (node N); every message (fetch, fetch answer,
//     AlterPartition and its answer, metadata, heartbeat) goes through the network, which
//     delays each one 1-20 ms (5% of them 50-300 ms, so messages overtake each other), loses
//     2%, and drops everything across a network partition (a random group of nodes, the
//     controller included or not, cut from the rest for 100-1000 ms). Messages to or from
//     an earlier incarnation of a restarted replica are dropped (its connections broke).
//   - crashes: a replica stops for 50-600 ms and loses the unflushed tail of its log (its
//     epoch history is cut to the flushed end, as recovery does); it restarts with no role
//     and a high watermark of 0 and reports an unclean restart to the controller, which
//     takes it out of the ISR (KIP-966) unless it is the last member.
//   - the controller: heartbeats every 50 ms; a replica silent for 300 ms is fenced (out of
//     the ISR, leadership moves: OnBrokerFenced); a heartbeat unfences it; AlterPartition
//     answered with the pure rules; the record is broadcast on every change and every
//     100 ms (metadata may be lost like any message).
//   - flushing (Durability::kFlushedOnIsr, the model the invariants assume; see Durability
//     for Kafka's): a follower flushes what it has before each fetch, so the offset it
//     reports is on its disk; the leader flushes at random ticks and reports its flushed
//     end as its own end for the high watermark. So acks=all and the high watermark mean
//     "flushed on every member of the (maximal) ISR", and a crash of any number of replicas
//     loses nothing below a high watermark: the failure assumption is that no disk loses
//     flushed data (fewer than min.insync.replicas replicas losing flushed data is not
//     modelled).
//   - producers: every 5-20 ms an acks=all record goes to a random live replica that
//     believes it leads (a deposed leader that does not know it yet included):
//     NOT_ENOUGH_REPLICAS before the append when its ISR is below min.insync.replicas;
//     answered once its high watermark passes the offset (NOT_ENOUGH_REPLICAS_AFTER_APPEND
//     counts as not acknowledged); dropped when it loses leadership or after 2 s.
//   - consumers: every 15-40 ms a read from a random live replica that believes it leads, of
//     the offsets from the consumer's position up to that replica's high watermark.
//
// Invariants, checked after every step (the first violation ends the run with the seed, the
// step and the tail of the trace):
//   1. leader epochs only grow (the controller's, and the epoch each replica knows), and at
//      most one replica leads in an epoch;
//   2. a leader's high watermark never moves back within its leader epoch;
//   3. replicas agree below their high watermarks: every replica's log below its high
//      watermark equals one "committed" sequence kept by the checker, which also holds every
//      acknowledged record and every record a consumer read;
//   4. nothing committed is lost: the replica acting as the controller's current leader
//      (it knows the current epoch) holds the whole committed sequence, so no acknowledged
//      record and no consumed record was truncated, across leaders;
//   5. no consumer reads above the high watermark, nor past the log end.
//
// Determinism: every choice comes from one std::mt19937_64 seeded with `seed`; events are
// ordered by (time, sequence number); only ordered containers are iterated. The same seed
// replays the same run, step for step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace runnel::storaged::replication::sim {

// Deliberately wrong rules, so tests can show the invariants notice them.
enum class Plant {
  kNone,
  kHighWatermarkIsLogEnd,  // acks and consumers use the leader's log end, not its HW
  kElectOutsideIsr,        // the controller elects the first live replica, ISR or not
  kNoDivergenceCheck,      // followers fetch without their last epoch (pre-KIP-101): a
                           // diverged tail is never found, the leader appends after it
  kAckBeforeReplicated,    // acks=all answered as soon as the leader appended
};

// When a replica's log end counts for the high watermark.
enum class Durability {
  // A follower flushes before each fetch; the leader counts its flushed end. acks=all means
  // flushed on every ISR member, and any number of crashes loses nothing acknowledged.
  kFlushedOnIsr,
  // Kafka's default: log ends count as soon as written (flushes are rare and random). A
  // crash loses the unflushed tail of at most min.insync.replicas - 1 replicas at once (a
  // replica counts as failed from such a crash until an AlterPartition brings it back into
  // the ISR); other crashes keep the page cache. Without KIP-966's eligible leader replicas
  // this loses acknowledged records (ReplicationSimKafkaModel).
  kKafkaUnflushed,
};

struct SimConfig {
  uint64_t seed = 1;
  int replicas = 3;
  int min_insync_replicas = 2;
  int64_t steps = 1000;  // events handled
  Plant plant = Plant::kNone;
  Durability durability = Durability::kFlushedOnIsr;
  std::function<void(const std::string&)> trace_sink;  // every trace line as it happens
  bool keep_trace = false;                             // keep every line in SimResult::trace
  size_t trace_tail = 40;                              // trace lines shown with a failure
};

struct SimStats {
  int64_t steps = 0;
  int64_t virtual_ms = 0;
  int64_t produced = 0;
  int64_t acked = 0;
  int64_t not_enough_replicas = 0;
  int64_t not_enough_after_append = 0;
  int64_t consumed = 0;
  int64_t committed = 0;
  int64_t leaders = 0;
  int64_t crashes = 0;
  int64_t partitions = 0;
  int64_t truncations = 0;
  int64_t isr_changes = 0;
  int64_t dropped = 0;
};

struct SimResult {
  bool ok = true;
  std::string report;  // with a failure: seed, step, what broke, trace tail, replay command
  SimStats stats;
  std::vector<std::string> trace;  // with keep_trace
  uint64_t trace_hash = 0;         // FNV-1a of every trace line
};

SimResult RunSimulation(const SimConfig& config);

// How to replay `config` exactly, with its trace.
std::string ReplayCommand(const SimConfig& config);

}  // namespace runnel::storaged::replication::sim
