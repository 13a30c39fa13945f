// The deterministic Raft simulator: N raft::Node instances in one process on a virtual clock,
// a simulated network and MemStorage, all driven by one seed.
//
// A run has two phases. The fault phase (`fault_steps` steps) throws everything at the
// cluster: message delay, loss, duplication and reordering, symmetric partitions and one-way
// cuts, crashes and restarts (losing all, none or a torn part of the unsynced writes), storage
// errors, client proposals, read-index reads, leadership transfers and compactions. Then
// everything heals (all nodes up, a reliable network) and a leader must be elected and a new
// proposal applied on every node within the liveness bound below.
//
// The liveness bound, fixed when the cluster heals from the logs as they are then:
//
//   heal_timeouts election timeouts      (elections, observers finding the leader)
//   + R round trips of 2 * 5 ms          (5 ms: the healed network's worst one-way delay)
//
// where R is the catch-up work of the slowest node: for every node and every voter that could
// win an election (its log is at least as up to date as a majority's), the round trips that
// voter as leader needs to bring the node up to date at the rate the options allow:
//   - backtracking: one probe per term run of the node's log past the common prefix, plus the
//     first probe and the one that matches;
//   - the entries the node lacks (from where the backtracking lands), in messages of
//     max_append_bytes (at least one entry each), max_inflight_appends per round trip, plus
//     the new leader's no-op and the heal proposal;
//   - when it lacks any entry, up to three snapshot transfers of snapshot_chunk_bytes per
//     round trip (the leader may compact past the node while it catches up, and it compacts at
//     most after each of its commits of the heal phase: the no-op, then the heal proposal);
//   - two more round trips for the commit to reach it.
// A node that stops making progress (stuck, resending, backtracking one entry at a time)
// still misses the bound; one that lags by a long backlog (a minority leader's uncommitted
// entries, say) at 8-byte appends and a window of one is given the time that takes.
//
// One step is one event: a message delivered (or dropped), a node's Tick, or a scheduled
// action. The invariants (checker.h, and the checks around them here) run after every step;
// the first violation ends the run with the seed, the step and the tail of the trace.
//
// Determinism: every choice comes from one std::mt19937_64 seeded with `seed` (each Node gets
// its Options::seed from it); events are ordered by (time, sequence number); only ordered
// containers are iterated. The same seed replays the same run, step for step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "controllerd/raft/sim/mem_storage.h"

namespace runnel::controllerd::raft::sim {

// Deliberate bugs outside storage, so tests can show that the checks notice them.
enum class Plant {
  kNone,
  kGrantEveryVote,    // the network turns every refused (pre-)vote into a granted one
  kReadLocalCommit,   // reads answered with a random node's commit offset, no read-index
  kCorruptEntries,    // the network alters the data of some replicated entries
  kCorruptSnapshots,  // the network flips a byte in some snapshot chunks
  kStarveAfterHeal,   // after healing, the network drops every Append and Snapshot to the last
                      // node, which then never catches up (the liveness bound must notice)
};

struct SimConfig {
  uint64_t seed = 1;
  int voters = 3;
  int observers = -1;           // -1: the seed chooses 0, 1 or 2
  int64_t fault_steps = 1500;   // length of the fault phase, in steps
  int64_t heal_timeouts = 10;   // liveness bound after healing: election timeouts, to which
                                // the catch-up time is added (see above)
  int64_t max_steps = 2000000;  // a hard bound on the whole run
  StorageBugs bugs;             // planted storage bugs (checker tests)
  Plant plant = Plant::kNone;
  // Called with every trace line as it happens (the soak tool's --trace).
  std::function<void(const std::string&)> trace_sink;
  bool keep_trace = false;  // keep every trace line in SimResult::trace
  size_t trace_tail = 40;   // trace lines shown with a failure
};

struct SimStats {
  int64_t steps = 0;
  int64_t virtual_ms = 0;
  int64_t delivered = 0;
  int64_t dropped = 0;
  int64_t committed = 0;  // entries in the committed sequence at the end
  int64_t leaders = 0;    // terms that had a leader
  int64_t crashes = 0;
  int64_t partitions = 0;
  int64_t snapshots_saved = 0;
  int64_t snapshots_installed = 0;  // OnSnapshot from a leader's snapshot
  int64_t reads_ok = 0;
  int64_t transfers = 0;
  int64_t liveness_ms = 0;           // from healing to the new proposal applied everywhere
  int64_t liveness_bound_ms = 0;     // the liveness bound (0 when the run never healed)
  int64_t catch_up_round_trips = 0;  // R in the liveness bound
};

struct SimResult {
  bool ok = true;
  std::string violation;  // the first violation, one line
  std::string report;     // violation + seed + step + trace tail + how to replay
  int64_t failed_step = -1;
  int voters = 0;
  int observers = 0;
  uint64_t trace_hash = 0;         // a hash of the whole trace (determinism)
  std::vector<std::string> trace;  // every line, when keep_trace
  SimStats stats;
};

SimResult RunSimulation(const SimConfig& config);

// The command line that replays `config`'s run with a trace.
std::string ReplayCommand(const SimConfig& config);

}  // namespace runnel::controllerd::raft::sim
