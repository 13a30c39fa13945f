// Quorum: the driver of the controller's Raft node (controllerd/raft/raft.h).
//
// It owns the raft::Node, its Storage (the RaftLogStore) and its Transport, and runs them on
// one thread. Everything else only posts to that thread's inbox: Raft messages from the
// RaftService, proposals, read-index requests, a leadership transfer, tasks. The thread
// waits on a condition variable until the node's next timer (NextTickMs) or inbox work, then
// handles the whole inbox in one pass — every proposal queued by then goes to the node as
// ONE Propose call, so one fsync covers them — and ticks the node.
//
// The state machine above (the Controller) sees the node's callbacks on that thread:
// committed entries, installed snapshots, role changes, a fatal storage error. A proposal's
// future completes once its entry is committed AND applied by the state machine (so the
// proposer reads its own write), or with an error: not the leader (FailedPrecondition,
// nothing was written), leadership lost or the outcome replaced by a snapshot (Unavailable:
// the entry may or may not commit), shut down or a fatal error (Unavailable).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "common/util/mutex.h"
#include "common/util/status.h"
#include "controllerd/raft/raft.h"

namespace runnel::config {
class Config;
}

namespace runnel::controllerd {

using Deadline = std::chrono::steady_clock::time_point;

struct QuorumOptions {
  raft::NodeId id = 1;                 // node.id
  std::vector<raft::NodeId> voters;    // controller.quorum.voters' ids; empty = {id}
  int64_t election_timeout_ms = 1000;  // controller.quorum.election.timeout.ms
  int64_t observer_timeout_ms = 2000;  // controller.quorum.fetch.timeout.ms
  // Seeds the node's election timeouts; from std::random_device when unset.
  std::optional<uint64_t> seed;

  static QuorumOptions FromConfig(const config::Config& config);
};

// What the quorum looks like from this node, published by the driver thread.
struct QuorumState {
  raft::Role role = raft::Role::kFollower;
  int64_t term = 0;
  raft::NodeId leader = raft::kNoNode;
  // This node leads and has applied its own term's no-op: everything committed before its
  // term is in the state machine, so it may validate and write.
  bool leader_ready = false;
  int64_t commit_offset = -1;
  int64_t applied_offset = -1;
  int64_t end_offset = 0;  // this node's log end (the next offset)
  // Leader only: every voter and observer (ReplicaState), and when each last had the
  // leader's whole log (steady-clock ms, -1 never).
  std::vector<raft::ReplicaState> replicas;
  std::map<raft::NodeId, int64_t> caught_up_ms;
  int64_t now_ms = 0;  // the steady-clock ms these were taken at
  // Set once the node stopped: shut down or a fatal error.
  std::optional<Status> stopped;
};

class Quorum {
 public:
  // The state machine over the log. Called on the driver thread only, one call at a time.
  class StateMachine {
   public:
    virtual ~StateMachine() = default;
    // A committed entry, in offset order (empty data = a leader's no-op).
    virtual void Apply(const raft::Entry& entry) = 0;
    // Replace the whole state with a snapshot covering every entry < id.end_offset.
    virtual void Restore(raft::SnapshotId id, const std::string& data) = 0;
    virtual void RoleChanged(raft::Role role, int64_t term, raft::NodeId leader) = 0;
    // The log cannot be written: the process should exit and recover on restart.
    virtual void Fatal(const Status& why) = 0;
  };

  // `transport` null: no other node (a single voter).
  Quorum(QuorumOptions options, std::unique_ptr<raft::Storage> storage,
         std::unique_ptr<raft::Transport> transport);
  // Stop(). Its std::visit of the inbox could throw bad_variant_access only for a valueless
  // Item, and an Item is only constructed and moved, never assigned, so never valueless.
  ~Quorum();  // NOLINT(bugprone-exception-escape)
  Quorum(const Quorum&) = delete;
  Quorum& operator=(const Quorum&) = delete;

  // Opens the node on the calling thread (the stored snapshot goes to machine->Restore
  // before this returns) and starts the driver thread. Once only.
  Status Start(StateMachine* machine);
  // Stops the driver thread; whatever waits is failed with Unavailable. Idempotent.
  void Stop();
  // Graceful stop: a leader hands leadership to the most up-to-date voter and waits up to
  // `max_wait` for another node to lead, then Stop(). A non-leader just stops.
  void TransferLeadershipAndStop(std::chrono::milliseconds max_wait);

  // Messages that arrived for this node (from the RaftService). Never blocks.
  void Deliver(std::vector<raft::Message> messages);

  // Proposes one entry (see the header comment). With `expected_offset`, the proposal fails
  // with Aborted (nothing written) unless the entry would land exactly there: for records that
  // carry their own offset (a broker epoch).
  std::future<StatusOr<int64_t>> Propose(std::string data,
                                         std::optional<int64_t> expected_offset = std::nullopt);

  // A linearizable read point: completes with the leader's commit offset once this node has
  // confirmed its leadership and applied up to it.
  std::future<StatusOr<int64_t>> ReadIndex();

  // Runs `task` on the driver thread between node calls, with read access to the log (only
  // committed, applied entries are stable: < applied_offset + 1). Unavailable once stopped.
  std::future<Status> RunOnDriver(std::function<Status(const raft::Storage&)> task);

  // For the state machine, from inside Apply only: stores a snapshot of its state after every
  // entry < id.end_offset so the log before it can be dropped.
  Status CompactTo(raft::SnapshotId id, std::string data);

  // Waits until this node is a ready leader (OK), another node is known to lead
  // (FailedPrecondition naming it), or the deadline passes / the node stops (Unavailable).
  Status WaitLeaderReady(Deadline deadline);
  // Waits until `done(state)` holds; false at the deadline or once stopped.
  bool WaitFor(const std::function<bool(const QuorumState&)>& done, Deadline deadline);
  // Waits until this node has applied `offset`; false at the deadline or once stopped.
  bool WaitApplied(int64_t offset, Deadline deadline);

  QuorumState State() const;
  raft::NodeId Leader() const;
  int64_t Term() const;
  bool IsLeaderReady() const;
  raft::NodeId id() const { return options_.id; }
  const std::vector<raft::NodeId>& voters() const { return voters_; }

 private:
  class Adapter;  // raft::Listener and raft::Clock over this object
  struct Proposal {
    std::string data;
    std::optional<int64_t> expected_offset;
    std::shared_ptr<std::promise<StatusOr<int64_t>>> done;
  };
  struct Pending {
    int64_t term;
    std::shared_ptr<std::promise<StatusOr<int64_t>>> done;
  };
  struct Read {
    std::shared_ptr<std::promise<StatusOr<int64_t>>> done;
  };
  struct Transfer {};
  struct Task {
    std::function<Status(const raft::Storage&)> run;
    std::shared_ptr<std::promise<Status>> done;
  };
  using Item = std::variant<raft::Message, Proposal, Read, Transfer, Task>;

  void Post(Item item);
  void Loop();
  void HandleProposals(std::vector<Proposal>& proposals);
  void FailInbox(std::vector<Item>& items, const Status& why);
  void FailPending(const Status& why, int64_t below = INT64_MAX);
  void PublishState();
  int64_t NowMs() const;

  // raft::Listener, on the driver thread.
  void OnCommit(const raft::Entry& entry);
  void OnSnapshot(raft::SnapshotId id, const std::string& data);
  void OnRoleChange(raft::Role role, int64_t term, raft::NodeId leader);
  void OnReadIndex(uint64_t read_id, StatusOr<int64_t> commit);
  void OnFatal(const Status& why);

  const QuorumOptions options_;
  const std::vector<raft::NodeId> voters_;
  std::unique_ptr<raft::Storage> storage_;
  std::unique_ptr<raft::Transport> transport_;
  std::unique_ptr<Adapter> adapter_;
  std::unique_ptr<raft::Node> node_;
  StateMachine* machine_ = nullptr;

  // The inbox.
  Mutex mu_;
  CondVar cv_;
  std::vector<Item> inbox_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Status> dead_
      ABSL_GUARDED_BY(mu_);  // set when the driver stopped for good: no more work is taken
  std::thread thread_;
  Mutex stop_mu_;  // one Stop() at a time

  // The driver thread's own.
  raft::Role role_ = raft::Role::kFollower;
  int64_t term_ = 0;
  raft::NodeId leader_ = raft::kNoNode;
  bool leader_ready_ = false;
  int64_t applied_ = -1;
  int64_t last_applied_term_ = 0;
  std::optional<Status> fatal_;
  std::map<int64_t, Pending> pending_;  // by offset
  uint64_t next_read_id_ = 1;
  std::map<uint64_t, Read> reads_;                    // waiting for the leader
  std::multimap<int64_t, Read> reads_waiting_apply_;  // by the offset to apply
  std::map<raft::NodeId, int64_t> caught_up_ms_;

  // The published state.
  mutable Mutex state_mu_;
  CondVar state_cv_;
  QuorumState state_ ABSL_GUARDED_BY(state_mu_);
};

}  // namespace runnel::controllerd
