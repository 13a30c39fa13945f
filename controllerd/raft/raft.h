// Raft as a state machine: the consensus core of the controller quorum.
//
// `Node` holds no thread, clock, socket or file of its own. Everything it touches comes in
// through four small seams, so the same code runs in the daemon and in the deterministic
// simulator (controllerd/raft/sim/):
//
//   Clock      the time, in milliseconds (virtual in the simulator);
//   Transport  fire-and-forget delivery of a Message to another node (may lose, delay,
//              duplicate or reorder; the core tolerates all four);
//   Storage    the durable log, the term and vote, the snapshot;
//   Listener   the state machine above: committed entries, installed snapshots, role changes.
//
// The caller drives it from one thread: Receive() for every message that arrives, Tick()
// whenever NextTickMs() is reached (or more often), Propose() for new entries. Every
// callback runs synchronously inside those calls. Not thread-safe.
//
// The protocol is Raft (Ongaro's thesis) with:
// - pre-vote (thesis 9.6): a candidate first asks whether it could win, without raising
//   terms, so a node cut off and rejoining does not depose a healthy leader;
// - leader stickiness: a voter that heard from a live leader within the election timeout
//   refuses (pre-)votes, unless the request is a leadership transfer;
// - check-quorum: a leader that has not heard from a majority within an election timeout
//   steps down, so a partitioned leader stops claiming leadership;
// - leader-driven replication (Append messages, empty ones as heartbeats), with the
//   follower's answer carrying a hint to skip back over a conflicting term at once;
// - a no-op entry (empty data) appended by every new leader, so entries of earlier terms
//   commit (thesis 3.6.2) and read-index can start;
// - read-index (thesis 6.4) for linearizable reads;
// - snapshots: made by the state machine (CompactTo), sent in chunks to a follower whose
//   next entry is no longer in the log;
// - leadership transfer (thesis 3.10) on graceful shutdown: TimeoutNow to an up-to-date voter;
// - observers: non-voting nodes (brokers) that receive the log but never vote or count
//   towards a quorum. An observer announces itself with Observe messages; the leader keeps
//   one while it answers.
//
// Offsets are 0-based log positions, the same numbers as WatchMetadata offsets: the first
// entry ever is offset 0. A snapshot {end_offset, epoch} holds the state after every entry
// < end_offset; epoch is the term of entry end_offset - 1.
//
// Durability rules the core keeps (and the simulator checks): the term and vote are stored
// (SetHardState, durable on return) before any message that depends on them is sent; log
// entries are Sync()ed before the node acknowledges them to a leader, counts them itself as
// a leader, or votes on the strength of them.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/util/status.h"
#include "controllerd/log_format.h"

namespace runnel::controllerd::raft {

using NodeId = int32_t;
inline constexpr NodeId kNoNode = -1;

using logformat::SnapshotId;

struct Entry {
  int64_t offset = 0;
  int64_t term = 0;
  std::string data;  // opaque to the core; empty = the new leader's no-op
  bool operator==(const Entry&) const = default;
};

enum class MessageType {
  kPreVote,  // would you vote for me in `term` (= my term + 1)? terms unchanged
  kPreVoteResponse,
  kVote,  // vote for me in `term`
  kVoteResponse,
  kAppend,  // entries after prev_offset (none = heartbeat), and the leader's commit
  kAppendResponse,
  kSnapshot,  // one chunk of the leader's snapshot
  kSnapshotResponse,
  kTimeoutNow,       // leadership transfer: start an election now, no pre-vote
  kObserve,          // observer -> voter: I follow the log, send me appends
  kObserveResponse,  // voter -> observer: who leads (`leader`), when not the receiver
};

std::string_view MessageTypeName(MessageType type);

// One message; which fields mean something depends on `type` (see each field).
struct Message {
  MessageType type = MessageType::kAppend;
  NodeId from = kNoNode;
  NodeId to = kNoNode;
  int64_t term = 0;  // the sender's term (for kPreVote: the term it would stand in)

  // kPreVote, kVote: the candidate's last log entry (offset -1 and term 0 when empty).
  int64_t last_offset = -1;
  int64_t last_term = 0;
  bool transfer = false;  // kVote/kPreVote sent because of a TimeoutNow: ignore stickiness
  // kPreVoteResponse, kVoteResponse.
  bool granted = false;

  // kAppend: entries follow the entry at prev_offset (-1 = from the start) of term prev_term.
  // kAppendResponse: the answered Append's prev_offset, echoed (tells a stale reject apart).
  int64_t prev_offset = -1;
  int64_t prev_term = 0;
  std::vector<Entry> entries;
  int64_t commit = -1;  // kAppend, kSnapshot: the leader's commit offset (-1 = none yet)
  // kAppend, kSnapshot: a number the response echoes, to confirm leadership for read-index.
  uint64_t seq = 0;

  // kAppendResponse: success = the follower's log matches up to match_offset; otherwise
  // hint_offset is where the leader should try next (the follower's end, or the first
  // offset of the conflicting term).
  bool success = false;
  int64_t match_offset = -1;
  int64_t hint_offset = 0;

  // kSnapshot: bytes [chunk_offset, chunk_offset + chunk.size()) of the snapshot `snapshot`;
  // `done` on the last chunk. kSnapshotResponse: `snapshot`, and chunk_offset = bytes
  // received so far (the next chunk wanted), success once installed.
  SnapshotId snapshot;
  uint64_t chunk_offset = 0;
  std::string chunk;
  bool done = false;

  // kObserveResponse, and any response from a non-leader: the leader the sender knows.
  NodeId leader = kNoNode;
};

struct HardState {
  int64_t term = 0;
  NodeId voted_for = kNoNode;
  bool operator==(const HardState&) const = default;
};

// The durable state of one node. Not thread-safe; called only from the node's thread.
// A non-OK status from any call is fatal for the node (Node reports it and stops acting):
// the daemon exits and recovers on restart.
class Storage {
 public:
  virtual ~Storage() = default;

  virtual HardState hard_state() const = 0;
  // Durable on return.
  virtual Status SetHardState(const HardState& state) = 0;

  // The latest snapshot; {0, 0} when there is none.
  virtual SnapshotId snapshot_id() const = 0;
  // The log holds [start_offset(), end_offset()); start_offset() <= snapshot_id().end_offset.
  virtual int64_t start_offset() const = 0;
  virtual int64_t end_offset() const = 0;
  // The term of the entry at `offset`, for start_offset() <= offset < end_offset(), and for
  // offset == snapshot_id().end_offset - 1 (the snapshot's epoch); 0 for offset -1.
  virtual StatusOr<int64_t> TermAt(int64_t offset) const = 0;
  // Entries in [from, to), at most `max_bytes` of data but always at least one.
  virtual StatusOr<std::vector<Entry>> Read(int64_t from, int64_t to, size_t max_bytes) const = 0;

  // Appends entries (entries[0].offset == end_offset(), consecutive). Not durable until Sync.
  virtual Status Append(std::span<const Entry> entries) = 0;
  // Removes every entry with offset >= `offset` (> the commit offset). Not durable until Sync.
  virtual Status TruncateFrom(int64_t offset) = 0;
  // Makes every Append and TruncateFrom so far durable.
  virtual Status Sync() = 0;

  // Stores a snapshot this node's state machine made (id.end_offset <= end_offset(), and
  // every entry before it committed). Entries before it may then be dropped. Durable on return.
  virtual Status SaveSnapshot(SnapshotId id, std::string data) = 0;
  // Stores a snapshot received from the leader. If the log holds the entry at
  // id.end_offset - 1 with term id.epoch, the entries after it are kept; otherwise the whole
  // log is discarded and the log continues at id.end_offset. Durable on return.
  virtual Status InstallSnapshot(SnapshotId id, std::string data) = 0;
  // The latest snapshot's bytes; NotFound when there is none.
  virtual StatusOr<std::string> ReadSnapshot() const = 0;
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Queues `message` for message.to; never blocks, may silently drop.
  virtual void Send(Message message) = 0;
};

enum class Role { kFollower, kPreCandidate, kCandidate, kLeader, kObserver };
std::string_view RoleName(Role role);

// What the state machine above sees. Called synchronously from inside Node's methods; must
// not call back into the Node except for CompactTo.
class Listener {
 public:
  virtual ~Listener() = default;
  // Entries become committed in offset order, each exactly once per Node instance (a
  // restarted node starts again from its snapshot). Empty data = a leader's no-op.
  virtual void OnCommit(const Entry& entry) = 0;
  // The state is replaced by `data`, a snapshot covering every entry < id.end_offset: at
  // start (the stored snapshot) and when a leader sends one. OnCommit continues at
  // id.end_offset.
  virtual void OnSnapshot(SnapshotId id, const std::string& data) = 0;
  // The role, term or known leader changed.
  virtual void OnRoleChange(Role role, int64_t term, NodeId leader) = 0;
  // A read started with ReadIndex is safe once offset `commit` is applied (ok), or could not
  // be confirmed (leadership lost) (!ok).
  virtual void OnReadIndex(uint64_t read_id, StatusOr<int64_t> commit) = 0;
  // Storage failed: the node stops acting; the process should exit and recover.
  virtual void OnFatal(const Status& why) = 0;
};

struct Options {
  NodeId id = kNoNode;
  // The voter set (controller.quorum.voters). A node not in it is an observer.
  std::vector<NodeId> voters;
  // Base election timeout; each wait is drawn from [t, 2t). controller.quorum.election.timeout.ms
  int64_t election_timeout_ms = 1000;
  // How often a leader sends heartbeats (and retries unanswered appends).
  int64_t heartbeat_interval_ms = 100;
  // Bytes of entry data per Append message, at least one entry per message.
  size_t max_append_bytes = 1 << 20;
  // Bytes of snapshot per Snapshot chunk.
  size_t snapshot_chunk_bytes = 1 << 20;
  // Appends a leader may have unanswered to one follower before it waits.
  int max_inflight_appends = 8;
  // An observer unheard of for this long is dropped by the leader.
  int64_t observer_timeout_ms = 3000;
  // Seeds the election timeout draws (the simulator sets it; the daemon uses a random one).
  uint64_t seed = 0;
};

// Counters for tests, the simulator and DescribeQuorum.
struct ReplicaState {
  NodeId id = kNoNode;
  bool voter = false;
  int64_t match_offset = -1;     // the highest offset known replicated there
  int64_t last_contact_ms = -1;  // when the leader last heard from it
};

class Node {
 public:
  // Loads the hard state and the snapshot from `storage` (OnSnapshot if there is one) and
  // starts as a follower (or observer) with a fresh election timer.
  static StatusOr<std::unique_ptr<Node>> Open(const Options& options, Storage& storage,
                                              Clock& clock, Transport& transport,
                                              Listener& listener);
  ~Node();

  // Handles one message addressed to this node.
  void Receive(const Message& message);
  // Acts on timers (elections, heartbeats, retries, check-quorum, observer announcements).
  void Tick();
  // The next time Tick() has something to do.
  int64_t NextTickMs() const;

  // Leader only: appends entries with these payloads (empty data is allowed but looks like a
  // no-op to the listener) and returns the offset of the first. FailedPrecondition naming
  // the known leader otherwise, or while a leadership transfer is under way.
  StatusOr<int64_t> Propose(std::vector<std::string> data);

  // Starts a linearizable read; OnReadIndex(read_id, ...) follows. A leader confirms its
  // leadership with one heartbeat round; others answer FailedPrecondition at once.
  void ReadIndex(uint64_t read_id);

  // The state machine has applied every entry < id.end_offset and `data` is its state then:
  // stores the snapshot, and the log before it may be dropped.
  Status CompactTo(SnapshotId id, std::string data);

  // Leader only: hands leadership to `target` (kNoNode = the most up-to-date voter). The
  // leader stops taking proposals; once the target has the whole log it gets TimeoutNow.
  // Abandoned after one election timeout.
  Status TransferLeadership(NodeId target);

  Role role() const;
  int64_t term() const;
  NodeId leader() const;           // kNoNode when not known
  int64_t commit_offset() const;   // -1 when nothing is known committed
  int64_t applied_offset() const;  // the last offset given to OnCommit or covered by OnSnapshot
  // Leader only (empty otherwise): every voter and current observer, by id.
  std::vector<ReplicaState> Replicas() const;

 private:
  class Impl;
  explicit Node(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace runnel::controllerd::raft
