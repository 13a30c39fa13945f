// Focused tests of the Raft core, on a tiny deterministic harness: in-memory storage, a
// manual clock, and a message queue the test delivers (or drops) by hand. The randomized
// fault schedules are the simulator's job (controllerd/raft/sim/).
#include "controllerd/raft/raft.h"

#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>

namespace runnel::controllerd::raft {
namespace {

// In memory; everything is durable at once, but it counts Append/TruncateFrom not yet
// followed by Sync so the tests can check when the core acknowledges.
class MemStorage : public Storage {
 public:
  HardState hard_state() const override { return hs_; }
  Status SetHardState(const HardState& state) override {
    if (fail_) return absl::DataLossError("disk gone");
    hs_ = state;
    return absl::OkStatus();
  }
  SnapshotId snapshot_id() const override { return snap_; }
  int64_t start_offset() const override { return start_; }
  int64_t end_offset() const override { return start_ + static_cast<int64_t>(log_.size()); }
  StatusOr<int64_t> TermAt(int64_t offset) const override {
    if (offset == -1) return 0;
    if (snap_.end_offset > 0 && offset == snap_.end_offset - 1) return snap_.epoch;
    if (offset < start_ || offset >= end_offset()) {
      return absl::OutOfRangeError(
          fmt::format("TermAt({}) outside [{}, {})", offset, start_, end_offset()));
    }
    return log_[offset - start_].term;
  }
  StatusOr<std::vector<Entry>> Read(int64_t from, int64_t to, size_t max_bytes) const override {
    if (from < start_ || to > end_offset() || from >= to) {
      return absl::OutOfRangeError(fmt::format("Read [{}, {})", from, to));
    }
    std::vector<Entry> out;
    size_t bytes = 0;
    for (int64_t o = from; o < to; ++o) {
      const Entry& e = log_[o - start_];
      if (!out.empty() && bytes + e.data.size() > max_bytes) break;
      bytes += e.data.size();
      out.push_back(e);
    }
    return out;
  }
  Status Append(std::span<const Entry> entries) override {
    if (fail_) return absl::DataLossError("disk gone");
    for (const Entry& e : entries) {
      if (e.offset != end_offset()) return absl::InternalError("append not at the end");
      log_.push_back(e);
    }
    ++unsynced_;
    return absl::OkStatus();
  }
  Status TruncateFrom(int64_t offset) override {
    if (fail_) return absl::DataLossError("disk gone");
    if (offset < start_ || offset > end_offset()) return absl::InternalError("bad truncate");
    log_.resize(offset - start_);
    ++unsynced_;
    ++truncations_;
    return absl::OkStatus();
  }
  Status Sync() override {
    if (fail_) return absl::DataLossError("disk gone");
    unsynced_ = 0;
    return absl::OkStatus();
  }
  Status SaveSnapshot(SnapshotId id, std::string data) override {
    if (fail_) return absl::DataLossError("disk gone");
    DropBefore(id.end_offset);
    snap_ = id;
    snap_data_ = std::move(data);
    return absl::OkStatus();
  }
  Status InstallSnapshot(SnapshotId id, std::string data) override {
    if (fail_) return absl::DataLossError("disk gone");
    StatusOr<int64_t> t = TermAt(id.end_offset - 1);
    if (t.ok() && *t == id.epoch && id.end_offset <= end_offset()) {
      DropBefore(id.end_offset);
    } else {
      log_.clear();
      start_ = id.end_offset;
    }
    snap_ = id;
    snap_data_ = std::move(data);
    ++installs_;
    return absl::OkStatus();
  }
  StatusOr<std::string> ReadSnapshot() const override {
    if (snap_.end_offset == 0) return absl::NotFoundError("no snapshot");
    return snap_data_;
  }

  // Test helpers.
  void Put(int64_t term, std::string data) {
    log_.push_back(Entry{end_offset(), term, std::move(data)});
  }
  std::vector<Entry> Log() const { return log_; }
  int unsynced() const { return unsynced_; }
  int truncations() const { return truncations_; }
  int installs() const { return installs_; }
  void set_fail(bool fail) { fail_ = fail; }

 private:
  void DropBefore(int64_t offset) {
    int64_t n = std::min<int64_t>(offset - start_, static_cast<int64_t>(log_.size()));
    if (n > 0) log_.erase(log_.begin(), log_.begin() + n);
    start_ = offset;
  }

  HardState hs_;
  SnapshotId snap_;
  std::string snap_data_;
  int64_t start_ = 0;
  std::vector<Entry> log_;
  int unsynced_ = 0;
  int truncations_ = 0;
  int installs_ = 0;
  bool fail_ = false;
};

class ManualClock : public Clock {
 public:
  int64_t NowMs() const override { return now; }
  int64_t now = 1000;
};

// The state machine: the payloads applied, in order ("" for no-ops), restorable from a
// snapshot (the payloads joined with '\n').
class Recorder : public Listener {
 public:
  void OnCommit(const Entry& entry) override {
    EXPECT_EQ(entry.offset, next_offset) << "commits must be consecutive";
    next_offset = entry.offset + 1;
    applied.push_back(entry.data);
    if (on_commit) on_commit(entry);
  }
  void OnSnapshot(SnapshotId id, const std::string& data) override {
    snapshots.push_back(id);
    applied.clear();
    size_t pos = 0;
    for (int64_t i = 0; i < id.end_offset; ++i) {
      size_t nl = data.find('\n', pos);
      applied.push_back(data.substr(pos, nl == std::string::npos ? nl : nl - pos));
      pos = nl == std::string::npos ? data.size() : nl + 1;
    }
    next_offset = id.end_offset;
  }
  void OnRoleChange(Role role, int64_t term, NodeId leader) override {
    roles.push_back({role, term, leader});
  }
  void OnReadIndex(uint64_t read_id, StatusOr<int64_t> commit) override {
    reads.emplace(read_id, commit);
  }
  void OnFatal(const Status& why) override {
    ++fatal;
    last_fatal = why;
  }

  std::string SnapshotOf(int64_t end) const {
    std::string out;
    for (int64_t i = 0; i < end; ++i) {
      if (i > 0) out += '\n';
      out += applied[i];
    }
    return out;
  }
  // The non-empty payloads (what clients proposed), in order.
  std::vector<std::string> Payloads() const {
    std::vector<std::string> out;
    for (const std::string& s : applied) {
      if (!s.empty()) out.push_back(s);
    }
    return out;
  }

  struct RoleChange {
    Role role;
    int64_t term;
    NodeId leader;
  };
  std::function<void(const Entry&)> on_commit;
  int64_t next_offset = 0;
  std::vector<std::string> applied;
  std::vector<SnapshotId> snapshots;
  std::vector<RoleChange> roles;
  std::map<uint64_t, StatusOr<int64_t>> reads;
  int fatal = 0;
  Status last_fatal;
};

class Cluster;

// Queues what a node sends into the cluster, and checks the durability rules on the way.
class QueueTransport : public Transport {
 public:
  QueueTransport(Cluster& cluster, NodeId id) : cluster_(cluster), id_(id) {}
  void Send(Message message) override;

 private:
  Cluster& cluster_;
  NodeId id_;
};

struct Peer {
  MemStorage storage;
  Recorder listener;
  std::unique_ptr<QueueTransport> transport;
  std::unique_ptr<Node> node;
};

// N nodes, zero-latency delivery, links the test can cut.
class Cluster {
 public:
  explicit Cluster(std::vector<NodeId> voters, std::vector<NodeId> observers = {},
                   Options base = {})
      : voters_(std::move(voters)) {
    base.voters = voters_;
    if (base.election_timeout_ms == 1000) base.election_timeout_ms = 100;
    if (base.heartbeat_interval_ms == 100) base.heartbeat_interval_ms = 10;
    if (base.observer_timeout_ms == 3000) base.observer_timeout_ms = 300;
    base_ = base;
    for (NodeId id : voters_) ids_.push_back(id);
    for (NodeId id : observers) ids_.push_back(id);
    for (NodeId id : ids_) {
      auto& p = peers_[id];
      p = std::make_unique<Peer>();
      p->transport = std::make_unique<QueueTransport>(*this, id);
    }
  }

  void StartAll() {
    for (NodeId id : ids_) Start(id);
  }
  void Start(NodeId id) {
    Peer& p = peer(id);
    p.listener = Recorder();
    if (on_commit) p.listener.on_commit = [this, id](const Entry& e) { on_commit(id, e); };
    Options o = base_;
    o.id = id;
    o.seed = seed + static_cast<uint64_t>(id);
    auto node = Node::Open(o, p.storage, clock, *p.transport, p.listener);
    ASSERT_TRUE(node.ok()) << node.status();
    p.node = std::move(*node);
  }
  void Stop(NodeId id) { peer(id).node.reset(); }

  Peer& peer(NodeId id) { return *peers_.at(id); }
  // The running node `id`, or null (not started, stopped, or no such node).
  Node* find(NodeId id) {
    auto it = peers_.find(id);
    return it == peers_.end() ? nullptr : it->second->node.get();
  }
  Node& node(NodeId id) { return *peers_.at(id)->node; }
  MemStorage& storage(NodeId id) { return peers_.at(id)->storage; }
  Recorder& listener(NodeId id) { return peers_.at(id)->listener; }

  // Cuts (or heals) both directions between `a` and everyone else.
  void Isolate(NodeId a, bool cut = true) {
    for (NodeId b : ids_) {
      if (b == a) continue;
      SetLink(a, b, cut);
      SetLink(b, a, cut);
    }
  }
  void SetLink(NodeId from, NodeId to, bool cut) {
    if (cut) {
      cut_.insert({from, to});
    } else {
      cut_.erase({from, to});
    }
  }
  void HealAll() { cut_.clear(); }

  // Delivers queued messages until none is left (bounded).
  void DeliverAll() {
    for (int i = 0; i < 100000 && !queue.empty(); ++i) {
      Message m = std::move(queue.front());
      queue.pop_front();
      if (cut_.count({m.from, m.to})) continue;
      auto it = peers_.find(m.to);
      if (it == peers_.end() || !it->second->node) continue;
      ++delivered;
      it->second->node->Receive(m);
    }
    ASSERT_TRUE(queue.empty()) << "messages kept coming";
  }

  // Delivers only what is queued now (one network hop); returns how many.
  int DeliverHop() {
    std::deque<Message> hop;
    hop.swap(queue);
    int n = 0;
    for (Message& m : hop) {
      if (cut_.count({m.from, m.to})) continue;
      auto it = peers_.find(m.to);
      if (it == peers_.end() || !it->second->node) continue;
      ++n;
      it->second->node->Receive(m);
    }
    return n;
  }

  // Runs `ms` of virtual time in 1 ms steps: due ticks, then every message.
  void Run(int64_t ms) {
    for (int64_t i = 0; i < ms; ++i) {
      TickDue();
      DeliverAll();
      clock.now += 1;
    }
    TickDue();
    DeliverAll();
  }
  void TickDue() {
    for (NodeId id : ids_) {
      Peer& p = peer(id);
      if (p.node && p.node->NextTickMs() <= clock.now) p.node->Tick();
    }
  }
  // Runs until `done` holds (at most `max_ms`).
  bool RunUntil(const std::function<bool()>& done, int64_t max_ms = 5000) {
    for (int64_t i = 0; i < max_ms; ++i) {
      if (done()) return true;
      Run(1);
    }
    return done();
  }

  std::vector<NodeId> Leaders() {
    std::vector<NodeId> out;
    for (NodeId id : ids_) {
      Peer& p = peer(id);
      if (p.node && p.node->role() == Role::kLeader) out.push_back(id);
    }
    return out;
  }
  NodeId WaitLeader(int64_t max_ms = 5000) {
    NodeId leader = kNoNode;
    RunUntil(
        [&] {
          auto l = Leaders();
          if (l.size() != 1) return false;
          leader = l[0];
          return node(leader).commit_offset() >= 0 &&
                 node(leader).commit_offset() == node(leader).applied_offset();
        },
        max_ms);
    return leader;
  }

  const std::vector<NodeId>& ids() const { return ids_; }

  ManualClock clock;
  std::deque<Message> queue;
  std::vector<Message> sent;  // every message ever sent, for the durability checks
  int64_t delivered = 0;
  // Called on each send (with the sender's storage), to check rules at that instant.
  std::function<void(const Message&, const MemStorage&)> on_send;
  std::function<void(NodeId, const Entry&)> on_commit;
  uint64_t seed = 1234;

 private:
  friend class QueueTransport;
  std::vector<NodeId> voters_;
  std::vector<NodeId> ids_;
  Options base_;
  std::map<NodeId, std::unique_ptr<Peer>> peers_;
  std::set<std::pair<NodeId, NodeId>> cut_;
};

void QueueTransport::Send(Message message) {
  EXPECT_EQ(message.from, id_);
  const MemStorage& s = cluster_.storage(id_);
  // Durability rules, checked at the moment of sending.
  if (message.type != MessageType::kPreVote && message.type != MessageType::kPreVoteResponse) {
    EXPECT_LE(message.term, s.hard_state().term)
        << MessageTypeName(message.type) << " sent in a term not yet stored";
  }
  if (message.type == MessageType::kVoteResponse && message.granted) {
    EXPECT_EQ(s.hard_state().voted_for, message.to) << "vote granted before it was stored";
    EXPECT_EQ(s.hard_state().term, message.term);
  }
  if (message.type == MessageType::kVote) {
    EXPECT_EQ(s.hard_state().voted_for, id_);
  }
  if (message.type == MessageType::kAppendResponse || message.type == MessageType::kVoteResponse ||
      message.type == MessageType::kAppend) {
    EXPECT_EQ(s.unsynced(), 0) << MessageTypeName(message.type) << " sent before Sync";
  }
  if (cluster_.on_send) cluster_.on_send(message, s);
  cluster_.sent.push_back(message);
  cluster_.queue.push_back(std::move(message));
}

Message Msg(MessageType type, NodeId from, NodeId to, int64_t term) {
  Message m;
  m.type = type;
  m.from = from;
  m.to = to;
  m.term = term;
  return m;
}

std::vector<std::string> Strings(std::initializer_list<const char*> list) {
  return std::vector<std::string>(list.begin(), list.end());
}

// Proposes `n` payloads "<prefix><i>" one by one on the leader.
void ProposeN(Cluster& c, NodeId leader, const std::string& prefix, int n) {
  for (int i = 0; i < n; ++i) {
    auto off = c.node(leader).Propose({prefix + std::to_string(i)});
    ASSERT_TRUE(off.ok()) << off.status();
  }
}

// ---- Tests ---------------------------------------------------------------------------------

TEST(RaftTest, NamesAreDistinct) {
  EXPECT_EQ(MessageTypeName(MessageType::kAppend), "Append");
  EXPECT_EQ(MessageTypeName(MessageType::kObserveResponse), "ObserveResponse");
  EXPECT_EQ(RoleName(Role::kPreCandidate), "pre-candidate");
  EXPECT_EQ(RoleName(Role::kObserver), "observer");
}

TEST(RaftTest, SingleVoterElectsItselfOnFirstTickAndCommits) {
  Cluster c({1});
  c.StartAll();
  Node& n = c.node(1);
  EXPECT_EQ(n.role(), Role::kFollower);
  EXPECT_LE(n.NextTickMs(), c.clock.now) << "a single voter must not wait to elect itself";
  EXPECT_FALSE(n.Propose(Strings({"x"})).ok());
  n.Tick();
  ASSERT_EQ(n.role(), Role::kLeader);
  EXPECT_EQ(n.term(), 1);
  EXPECT_EQ(n.leader(), 1);
  EXPECT_EQ(n.commit_offset(), 0) << "the no-op commits at once";
  auto off = n.Propose(Strings({"a", "b"}));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(*off, 1);
  EXPECT_EQ(n.commit_offset(), 2);
  EXPECT_EQ(n.applied_offset(), 2);
  EXPECT_EQ(c.listener(1).applied, Strings({"", "a", "b"}));
  EXPECT_TRUE(c.queue.empty()) << "nobody to send to";
  ASSERT_FALSE(c.listener(1).roles.empty());
  EXPECT_EQ(c.listener(1).roles.back().role, Role::kLeader);

  // Reads answer at once: the single voter is a majority by itself.
  n.ReadIndex(5);
  ASSERT_EQ(c.listener(1).reads.count(5), 1u);
  ASSERT_TRUE(c.listener(1).reads.at(5).ok());
  EXPECT_EQ(*c.listener(1).reads.at(5), 2);
}

TEST(RaftTest, ThreeNodesElectExactlyOneLeader) {
  Cluster c({1, 2, 3});
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  c.Run(500);
  ASSERT_EQ(c.Leaders(), std::vector<NodeId>{leader}) << "a stable cluster keeps its leader";
  for (NodeId id : c.ids()) {
    EXPECT_EQ(c.node(id).term(), c.node(leader).term());
    EXPECT_EQ(c.node(id).leader(), leader);
    EXPECT_EQ(c.listener(id).applied, Strings({""})) << "everyone applied the no-op";
  }
  auto replicas = c.node(leader).Replicas();
  ASSERT_EQ(replicas.size(), 3u);
  for (const ReplicaState& r : replicas) {
    EXPECT_TRUE(r.voter);
    EXPECT_EQ(r.match_offset, 0);
  }
  EXPECT_TRUE(c.node(leader == 1 ? 2 : 1).Replicas().empty());
}

TEST(RaftTest, ReplicatesAndCommitsOnEveryNode) {
  Options o;
  o.max_append_bytes = 8;  // several Appends per batch, pipelined
  o.max_inflight_appends = 3;
  Cluster c({1, 2, 3}, {}, o);
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  ProposeN(c, leader, "e", 20);
  auto batch = c.node(leader).Propose(Strings({"b1", "b2", "b3"}));
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(*batch, 21);
  ASSERT_TRUE(c.RunUntil([&] {
    for (NodeId id : c.ids()) {
      if (c.node(id).applied_offset() != 23) return false;
    }
    return true;
  }));
  for (NodeId id : c.ids()) {
    EXPECT_EQ(c.listener(id).applied, c.listener(leader).applied) << "node " << id;
    EXPECT_EQ(c.storage(id).Log(), c.storage(leader).Log()) << "node " << id;
  }
  EXPECT_EQ(c.listener(leader).Payloads().size(), 23u);
  NodeId follower = leader == 1 ? 2 : 1;
  auto not_leader = c.node(follower).Propose(Strings({"x"}));
  EXPECT_EQ(not_leader.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(not_leader.status().message()).find(std::to_string(leader)),
            std::string::npos)
      << "the error names the leader: " << not_leader.status();
}

TEST(RaftTest, CommitNeedsAMajority) {
  Cluster c({1, 2, 3});
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  const int64_t commit = c.node(leader).commit_offset();
  for (NodeId id : c.ids()) {
    if (id != leader) c.Isolate(id);
  }
  ProposeN(c, leader, "lonely", 3);
  c.Run(50);  // less than an election timeout: still leader, nothing commits
  EXPECT_EQ(c.node(leader).role(), Role::kLeader);
  EXPECT_EQ(c.node(leader).commit_offset(), commit);
}

TEST(RaftTest, EntriesOfEarlierTermsCommitOnlyThroughOneOfTheCurrentTerm) {
  // Thesis 3.6.2 (figure 3.7): node 1 leads term 3 holding e@2 at offset 1; a majority
  // holding e is not enough, the term-3 no-op after it must be replicated too.
  Cluster c({1, 2, 3});
  c.storage(1).Put(1, "x");
  c.storage(1).Put(2, "e");
  for (NodeId id : {2, 3}) c.storage(id).Put(1, "x");
  for (NodeId id : {1, 2, 3}) ASSERT_TRUE(c.storage(id).SetHardState({2, kNoNode}).ok());
  c.StartAll();
  c.node(1).Receive(Msg(MessageType::kTimeoutNow, 2, 1, 2));
  c.DeliverHop();  // votes
  c.DeliverHop();  // grants
  ASSERT_EQ(c.node(1).role(), Role::kLeader);
  ASSERT_EQ(c.node(1).term(), 3);
  ASSERT_EQ(c.storage(1).end_offset(), 3) << "x, e, the no-op";
  c.queue.clear();
  Message ack = Msg(MessageType::kAppendResponse, 2, 1, 3);
  ack.success = true;
  ack.match_offset = 1;  // node 2 now holds e
  c.node(1).Receive(ack);
  EXPECT_EQ(c.node(1).commit_offset(), -1) << "e is of term 2: counting it must not commit it";
  ack.match_offset = 2;
  c.node(1).Receive(ack);
  EXPECT_EQ(c.node(1).commit_offset(), 2);
  EXPECT_EQ(c.listener(1).applied, Strings({"x", "e", ""}));
}

TEST(RaftTest, FollowerWithConflictingSuffixIsTruncated) {
  // Nodes 1 and 2 hold [x@1, new@2] (term 2); node 3 holds [x@1, stale1@1, stale2@1, stale3@1]
  // from a term-1 leader that never committed them.
  Cluster c({1, 2, 3});
  for (NodeId id : {1, 2}) {
    c.storage(id).Put(1, "x");
    c.storage(id).Put(2, "new");
    ASSERT_TRUE(c.storage(id).SetHardState({2, kNoNode}).ok());
  }
  c.storage(3).Put(1, "x");
  for (const char* s : {"stale1", "stale2", "stale3"}) c.storage(3).Put(1, s);
  ASSERT_TRUE(c.storage(3).SetHardState({1, kNoNode}).ok());
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_TRUE(leader == 1 || leader == 2) << "node 3's log is behind: it cannot win";
  ProposeN(c, leader, "after", 2);
  ASSERT_TRUE(c.RunUntil([&] { return c.node(3).applied_offset() == 4; }));
  EXPECT_EQ(c.storage(3).Log(), c.storage(leader).Log());
  EXPECT_GE(c.storage(3).truncations(), 1);
  EXPECT_EQ(c.listener(3).applied, Strings({"x", "new", "", "after0", "after1"}));
}

TEST(RaftTest, PreVoteKeepsARejoiningNodeFromRaisingTerms) {
  Cluster c({1, 2, 3});
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  const int64_t term = c.node(leader).term();
  NodeId lost = leader == 3 ? 2 : 3;
  c.Isolate(lost);
  c.Run(1000);  // ten election timeouts alone
  EXPECT_EQ(c.node(lost).term(), term) << "pre-vote must not raise the term";
  EXPECT_NE(c.node(lost).role(), Role::kLeader);
  EXPECT_NE(c.node(lost).role(), Role::kCandidate);
  EXPECT_EQ(c.storage(lost).hard_state().term, term);
  ProposeN(c, leader, "while-away", 3);
  c.Isolate(lost, false);
  ASSERT_TRUE(c.RunUntil([&] { return c.node(lost).applied_offset() == 3; }));
  EXPECT_EQ(c.Leaders(), std::vector<NodeId>{leader}) << "the healthy leader stays";
  EXPECT_EQ(c.node(leader).term(), term);
}

TEST(RaftTest, StickyVotersIgnoreAVoteWithAHigherTerm) {
  Cluster c({1, 2, 3});
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  const int64_t term = c.node(leader).term();
  NodeId follower = leader == 1 ? 2 : 1;
  NodeId other = 6 - leader - follower;
  // A vote from a node that went off and raised its term (say it had no pre-vote).
  Message vote = Msg(MessageType::kVote, other, follower, term + 5);
  vote.last_offset = 100;
  vote.last_term = term + 4;
  c.node(follower).Receive(vote);
  EXPECT_EQ(c.node(follower).term(), term);
  EXPECT_EQ(c.storage(follower).hard_state().term, term);
  // Unless it is a leadership transfer.
  vote.transfer = true;
  c.node(follower).Receive(vote);
  EXPECT_EQ(c.node(follower).term(), term + 5);
  EXPECT_EQ(c.storage(follower).hard_state(), (HardState{term + 5, other}));
}

TEST(RaftTest, CheckQuorumStepsDownAPartitionedLeader) {
  Cluster c({1, 2, 3});
  c.StartAll();
  NodeId old_leader = c.WaitLeader();
  ASSERT_NE(old_leader, kNoNode);
  const int64_t term = c.node(old_leader).term();
  c.Isolate(old_leader);
  c.Run(150);  // > one election timeout (100 ms)
  EXPECT_NE(c.node(old_leader).role(), Role::kLeader);
  EXPECT_EQ(c.node(old_leader).term(), term) << "stepping down does not change the term";
  EXPECT_FALSE(c.node(old_leader).Propose(Strings({"x"})).ok());
  NodeId new_leader = c.WaitLeader();
  ASSERT_NE(new_leader, kNoNode);
  EXPECT_NE(new_leader, old_leader);
  EXPECT_GT(c.node(new_leader).term(), term);
  c.Isolate(old_leader, false);
  ASSERT_TRUE(c.RunUntil([&] { return c.node(old_leader).leader() == new_leader; }));
  EXPECT_EQ(c.node(old_leader).role(), Role::kFollower);
}

TEST(RaftTest, ReadIndexAnswersOnlyAfterAHeartbeatRound) {
  Cluster c({1, 2, 3});
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  ProposeN(c, leader, "w", 2);
  c.Run(5);
  const int64_t commit = c.node(leader).commit_offset();
  ASSERT_EQ(commit, 2);
  Recorder& l = c.listener(leader);

  // A follower refuses at once.
  NodeId follower = leader == 1 ? 2 : 1;
  c.node(follower).ReadIndex(1);
  ASSERT_EQ(c.listener(follower).reads.count(1), 1u);
  EXPECT_EQ(c.listener(follower).reads.at(1).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // Two reads share one round; nothing answers before the followers do.
  c.node(leader).ReadIndex(10);
  c.node(leader).ReadIndex(11);
  EXPECT_TRUE(l.reads.empty());
  EXPECT_LE(c.node(leader).NextTickMs(), c.clock.now) << "the round goes out at the next Tick";
  c.node(leader).Tick();
  EXPECT_TRUE(l.reads.empty());
  ASSERT_FALSE(c.queue.empty());
  // Deliver the heartbeats but not yet the answers.
  std::deque<Message> beats;
  beats.swap(c.queue);
  for (const Message& m : beats) c.node(m.to).Receive(m);
  EXPECT_TRUE(l.reads.empty());
  // One answer: the leader and one follower are a majority.
  Message answer = c.queue.front();
  c.queue.pop_front();
  ASSERT_EQ(answer.type, MessageType::kAppendResponse);
  c.node(leader).Receive(answer);
  ASSERT_EQ(l.reads.size(), 2u);
  ASSERT_TRUE(l.reads.at(10).ok());
  EXPECT_EQ(*l.reads.at(10), commit);
  ASSERT_TRUE(l.reads.at(11).ok());
  EXPECT_EQ(*l.reads.at(11), commit);
  c.DeliverAll();

  // Cut off: the read never confirms and fails once check-quorum steps down.
  c.Isolate(leader);
  c.node(leader).ReadIndex(12);
  c.Run(30);
  EXPECT_EQ(l.reads.count(12), 0u);
  c.Run(150);
  ASSERT_EQ(l.reads.count(12), 1u);
  EXPECT_FALSE(l.reads.at(12).ok());
}

TEST(RaftTest, ReadIndexWaitsForTheNoOpToCommit) {
  Cluster c({1, 2, 3});
  c.StartAll();
  // Node 1 campaigns at once (as on a transfer) and wins; its first appends are lost.
  c.node(1).Receive(Msg(MessageType::kTimeoutNow, 2, 1, 0));
  ASSERT_EQ(c.node(1).role(), Role::kCandidate);
  c.DeliverHop();  // votes
  c.DeliverHop();  // grants
  ASSERT_EQ(c.node(1).role(), Role::kLeader);
  c.queue.clear();
  ASSERT_EQ(c.node(1).commit_offset(), -1);
  c.node(1).ReadIndex(3);
  c.node(1).Tick();
  c.DeliverHop();  // heartbeats
  c.DeliverHop();  // their answers: a majority confirms the leadership...
  EXPECT_EQ(c.listener(1).reads.count(3), 0u) << "...but the no-op is not committed yet";
  EXPECT_EQ(c.node(1).commit_offset(), -1);
  ASSERT_TRUE(c.RunUntil([&] { return c.listener(1).reads.count(3) == 1; }, 100));
  ASSERT_TRUE(c.listener(1).reads.at(3).ok());
  EXPECT_EQ(*c.listener(1).reads.at(3), 0);
}

TEST(RaftTest, LaggingFollowerGetsTheSnapshotInChunks) {
  Options o;
  o.snapshot_chunk_bytes = 5;
  Cluster c({1, 2, 3}, {}, o);
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  NodeId lagging = leader == 3 ? 2 : 3;
  c.Isolate(lagging);
  ProposeN(c, leader, "s", 20);
  c.Run(5);
  ASSERT_EQ(c.node(leader).applied_offset(), 20);
  // The state machine snapshots after entry 14, and the log before it goes.
  Recorder& l = c.listener(leader);
  const SnapshotId id{15, c.node(leader).term()};
  ASSERT_TRUE(c.node(leader).CompactTo(id, l.SnapshotOf(15)).ok());
  EXPECT_EQ(c.storage(leader).start_offset(), 15);
  EXPECT_FALSE(c.node(leader).CompactTo({30, id.epoch}, "x").ok()) << "not applied yet";
  EXPECT_FALSE(c.node(leader).CompactTo({18, id.epoch + 7}, "x").ok()) << "wrong epoch";
  ProposeN(c, leader, "t", 2);
  c.Isolate(lagging, false);
  ASSERT_TRUE(c.RunUntil([&] { return c.node(lagging).applied_offset() == 22; }));
  EXPECT_EQ(c.storage(lagging).installs(), 1);
  ASSERT_EQ(c.listener(lagging).snapshots.size(), 1u);
  EXPECT_EQ(c.listener(lagging).snapshots[0], id);
  EXPECT_EQ(c.storage(lagging).snapshot_id(), id);
  EXPECT_EQ(c.listener(lagging).applied, l.applied);
  int chunks = 0;
  for (const Message& m : c.sent) chunks += m.type == MessageType::kSnapshot && m.to == lagging;
  EXPECT_GE(chunks, static_cast<int>(l.SnapshotOf(15).size() / 5)) << "sent in chunks";
  EXPECT_EQ(c.node(leader).Replicas().size(), 3u);
}

TEST(RaftTest, SnapshotTransferRestartsWhenTheLeaderSnapshotChanges) {
  Options o;
  o.snapshot_chunk_bytes = 4;
  Cluster c({1, 2, 3}, {}, o);
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  NodeId lagging = leader == 3 ? 2 : 3;
  c.Isolate(lagging);
  ProposeN(c, leader, "s", 12);
  c.Run(5);
  ASSERT_EQ(c.node(leader).applied_offset(), 12);
  Recorder& l = c.listener(leader);
  const int64_t term = c.node(leader).term();
  const SnapshotId first{8, term};
  const SnapshotId second{12, term};
  ASSERT_TRUE(c.node(leader).CompactTo(first, l.SnapshotOf(8)).ok());
  c.Isolate(lagging, false);
  c.queue.clear();
  // Step until the first chunk is on its way, then let one more chunk go.
  auto chunk_queued = [&] {
    for (const Message& m : c.queue) {
      if (m.type == MessageType::kSnapshot && m.to == lagging) return true;
    }
    return false;
  };
  for (int i = 0; i < 200 && !chunk_queued(); ++i) {
    c.clock.now += 1;
    c.TickDue();
    c.DeliverHop();
  }
  ASSERT_TRUE(chunk_queued());
  c.DeliverHop();  // chunk 0 -> answer
  c.DeliverHop();  // answer -> chunk 1
  ASSERT_TRUE(chunk_queued());
  ASSERT_TRUE(c.node(leader).CompactTo(second, l.SnapshotOf(12)).ok());
  ASSERT_TRUE(c.RunUntil([&] { return c.node(lagging).applied_offset() == 12; }));
  EXPECT_EQ(c.listener(lagging).applied, l.applied);
  ASSERT_EQ(c.listener(lagging).snapshots, std::vector<SnapshotId>{second});
  EXPECT_EQ(c.storage(lagging).installs(), 1);
  bool started_second = false;
  for (const Message& m : c.sent) {
    started_second |= m.type == MessageType::kSnapshot && m.snapshot == second &&
                      m.chunk_offset == 0 && m.to == lagging;
  }
  EXPECT_TRUE(started_second);
}

TEST(RaftTest, LeadershipTransfer) {
  Cluster c({1, 2, 3});
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  ProposeN(c, leader, "before", 3);
  NodeId target = leader == 1 ? 3 : 1;
  const int64_t term = c.node(leader).term();
  EXPECT_FALSE(c.node(leader).TransferLeadership(9).ok()) << "not a voter";
  ASSERT_TRUE(c.node(leader).TransferLeadership(target).ok());
  auto during = c.node(leader).Propose(Strings({"x"}));
  EXPECT_EQ(during.status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c.RunUntil([&] { return c.node(target).role() == Role::kLeader; }, 300));
  EXPECT_EQ(c.node(target).term(), term + 1) << "no pre-vote, one election";
  EXPECT_EQ(c.Leaders(), std::vector<NodeId>{target});
  ProposeN(c, target, "after", 2);
  ASSERT_TRUE(c.RunUntil([&] { return c.node(leader).applied_offset() == 6; }));
  EXPECT_EQ(c.listener(leader).Payloads(),
            Strings({"before0", "before1", "before2", "after0", "after1"}));
  bool timeout_now = false;
  for (const Message& m : c.sent) timeout_now |= m.type == MessageType::kTimeoutNow;
  EXPECT_TRUE(timeout_now);
}

TEST(RaftTest, LeadershipTransferIsAbandonedAfterAnElectionTimeout) {
  Cluster c({1, 2, 3});
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  NodeId target = leader == 1 ? 3 : 1;
  c.SetLink(leader, target, true);  // the target never catches up nor hears TimeoutNow
  ProposeN(c, leader, "x", 1);
  ASSERT_TRUE(c.node(leader).TransferLeadership(target).ok());
  EXPECT_FALSE(c.node(leader).Propose(Strings({"y"})).ok());
  c.Run(120);
  EXPECT_EQ(c.node(leader).role(), Role::kLeader);
  EXPECT_TRUE(c.node(leader).Propose(Strings({"y"})).ok()) << "transfer abandoned";
}

TEST(RaftTest, SingleVoterCannotTransfer) {
  Cluster c({1});
  c.StartAll();
  c.node(1).Tick();
  EXPECT_FALSE(c.node(1).TransferLeadership(kNoNode).ok());
  EXPECT_TRUE(c.node(1).Propose(Strings({"still"})).ok());
}

TEST(RaftTest, ObserverFollowsTheLogButDoesNotCount) {
  Cluster c({1, 2, 3}, {7});
  c.StartAll();
  EXPECT_EQ(c.node(7).role(), Role::kObserver);
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  ProposeN(c, leader, "o", 3);
  ASSERT_TRUE(c.RunUntil([&] { return c.node(7).applied_offset() == 3; }, 1000));
  EXPECT_EQ(c.listener(7).Payloads(), Strings({"o0", "o1", "o2"}));
  bool listed = false;
  for (const ReplicaState& r : c.node(leader).Replicas()) {
    if (r.id == 7) {
      listed = true;
      EXPECT_FALSE(r.voter);
      EXPECT_EQ(r.match_offset, 3);
    }
  }
  EXPECT_TRUE(listed);

  // With both other voters cut off, the observer's answers do not make a majority.
  for (NodeId id : {1, 2, 3}) {
    if (id != leader) c.Isolate(id);
  }
  const int64_t commit = c.node(leader).commit_offset();
  ProposeN(c, leader, "no", 1);
  c.Run(50);
  EXPECT_EQ(c.node(leader).commit_offset(), commit);
  EXPECT_EQ(c.storage(7).end_offset(), 5) << "the observer got the entry";
  c.Run(200);
  EXPECT_NE(c.node(leader).role(), Role::kLeader) << "observers do not keep a quorum alive";
  c.HealAll();
  NodeId next = c.WaitLeader();
  ASSERT_NE(next, kNoNode);
  EXPECT_NE(next, 7);
  ASSERT_TRUE(c.RunUntil([&] { return c.node(7).leader() == next; }, 2000));
  for (const auto& rc : c.listener(7).roles) EXPECT_EQ(rc.role, Role::kObserver);
  for (const Message& m : c.sent) {
    if (m.from == 7) {
      EXPECT_TRUE(m.type == MessageType::kObserve || m.type == MessageType::kAppendResponse ||
                  m.type == MessageType::kSnapshotResponse)
          << MessageTypeName(m.type);
    }
  }
}

TEST(RaftTest, LeaderDropsASilentObserver) {
  Cluster c({1}, {5});
  c.StartAll();
  c.Run(50);
  ASSERT_EQ(c.node(1).role(), Role::kLeader);
  ASSERT_TRUE(c.RunUntil([&] { return c.node(1).Replicas().size() == 2; }, 500));
  c.Stop(5);
  c.Run(400);  // > observer_timeout_ms (300)
  EXPECT_EQ(c.node(1).Replicas().size(), 1u);
}

TEST(RaftTest, HardStateIsStoredBeforeVotesAcrossManyElections) {
  // The transport checks the rules on every send; force many elections.
  Cluster c({1, 2, 3, 4, 5});
  c.StartAll();
  for (int round = 0; round < 5; ++round) {
    NodeId leader = c.WaitLeader();
    ASSERT_NE(leader, kNoNode) << "round " << round;
    ProposeN(c, leader, "r" + std::to_string(round) + "-", 2);
    c.Run(5);
    c.Isolate(leader);
    c.Run(400);
    c.Isolate(leader, false);
  }
  int granted = 0;
  for (const Message& m : c.sent) granted += m.type == MessageType::kVoteResponse && m.granted;
  EXPECT_GE(granted, 5);
}

TEST(RaftTest, VoteIsNotGivenTwiceInATerm) {
  Cluster c({1, 2, 3});
  c.StartAll();
  Node& n = c.node(1);
  Message vote = Msg(MessageType::kVote, 2, 1, 1);
  n.Receive(vote);
  ASSERT_EQ(c.queue.size(), 1u);
  EXPECT_TRUE(c.queue.back().granted);
  EXPECT_EQ(c.storage(1).hard_state(), (HardState{1, 2}));
  vote.from = 3;
  n.Receive(vote);
  ASSERT_EQ(c.queue.size(), 2u);
  EXPECT_FALSE(c.queue.back().granted);
  vote.from = 2;
  n.Receive(vote);  // a duplicate from the one we voted for: same answer
  ASSERT_EQ(c.queue.size(), 3u);
  EXPECT_TRUE(c.queue.back().granted);
  // A candidate with a shorter log is refused in a later term.
  c.storage(1).Put(1, "x");
  n.Receive(Msg(MessageType::kVote, 3, 1, 2));
  ASSERT_EQ(c.queue.size(), 4u);
  EXPECT_FALSE(c.queue.back().granted);
  EXPECT_EQ(c.storage(1).hard_state(), (HardState{2, kNoNode}));
}

TEST(RaftTest, CrashAndRestartKeepsCommittedEntries) {
  Cluster c({1, 2, 3});
  c.StartAll();
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  ProposeN(c, leader, "keep", 5);
  ASSERT_TRUE(c.RunUntil([&] {
    for (NodeId id : c.ids()) {
      if (c.node(id).applied_offset() != 5) return false;
    }
    return true;
  }));
  const auto before = c.listener(leader).applied;
  const int64_t term = c.node(leader).term();
  // One node snapshots before the crash, so it restarts from the snapshot.
  NodeId snapper = leader == 1 ? 2 : 1;
  ASSERT_TRUE(
      c.node(snapper)
          .CompactTo({3, c.storage(snapper).TermAt(2).value()}, c.listener(snapper).SnapshotOf(3))
          .ok());
  for (NodeId id : c.ids()) c.Stop(id);
  c.queue.clear();
  c.StartAll();
  EXPECT_EQ(c.listener(snapper).snapshots.size(), 1u) << "the stored snapshot goes up at Open";
  EXPECT_EQ(c.node(snapper).applied_offset(), 2);
  for (NodeId id : c.ids()) {
    if (id != snapper) {
      EXPECT_EQ(c.node(id).applied_offset(), -1) << "nothing applies before the commit is known";
      EXPECT_TRUE(c.listener(id).applied.empty());
    }
  }
  NodeId again = c.WaitLeader();
  ASSERT_NE(again, kNoNode);
  EXPECT_GT(c.node(again).term(), term);
  ASSERT_TRUE(c.RunUntil([&] {
    for (NodeId id : c.ids()) {
      if (c.node(id).applied_offset() != 6) return false;
    }
    return true;
  }));
  for (NodeId id : c.ids()) {
    std::vector<std::string> want = before;
    want.push_back("");  // the new leader's no-op
    EXPECT_EQ(c.listener(id).applied, want) << "node " << id;
  }
}

TEST(RaftTest, SingleVoterRestartAppliesItsLogOnceElected) {
  Cluster c({1});
  c.StartAll();
  c.node(1).Tick();
  ASSERT_TRUE(c.node(1).Propose(Strings({"a", "b"})).ok());
  c.Stop(1);
  c.Start(1);
  EXPECT_TRUE(c.listener(1).applied.empty());
  c.node(1).Tick();
  EXPECT_EQ(c.node(1).role(), Role::kLeader);
  EXPECT_EQ(c.node(1).term(), 2);
  EXPECT_EQ(c.listener(1).applied, Strings({"", "a", "b", ""}));
}

TEST(RaftTest, StorageErrorIsFatalOnce) {
  Cluster c({1});
  c.StartAll();
  c.node(1).Tick();
  c.storage(1).set_fail(true);
  EXPECT_FALSE(c.node(1).Propose(Strings({"a"})).ok());
  EXPECT_EQ(c.listener(1).fatal, 1);
  EXPECT_FALSE(c.node(1).Propose(Strings({"b"})).ok());
  c.node(1).Tick();
  c.node(1).Receive(Msg(MessageType::kVote, 2, 1, 9));
  EXPECT_EQ(c.listener(1).fatal, 1);
  EXPECT_GT(c.node(1).NextTickMs(), c.clock.now + 1000) << "nothing to do any more";
}

TEST(RaftTest, StorageErrorDuringElectionIsFatal) {
  Cluster c({1, 2, 3});
  c.StartAll();
  c.storage(2).set_fail(true);
  c.Run(500);
  EXPECT_EQ(c.listener(2).fatal, 1);
  EXPECT_NE(c.node(2).role(), Role::kLeader);
}

// Random junk, duplicated and reordered messages must never crash a node nor break the
// cluster's agreement.
TEST(RaftTest, SurvivesJunkDuplicatesAndReordering) {
  Cluster c({1, 2, 3}, {4});
  c.StartAll();
  std::mt19937_64 rng(42);
  auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  int proposed = 0;
  for (int step = 0; step < 3000; ++step) {
    // Junk to a random node.
    Message junk;
    junk.type = static_cast<MessageType>(pick(0, 10));
    junk.from = static_cast<NodeId>(pick(-1, 5));
    junk.to = static_cast<NodeId>(pick(1, 4));
    junk.term = pick(-1, 3);
    junk.last_offset = pick(-3, 40);
    junk.last_term = pick(-1, 3);
    junk.prev_offset = pick(-3, 40);
    junk.prev_term = pick(-1, 3);
    junk.commit = pick(-3, 40);
    junk.match_offset = pick(-3, 40);
    junk.hint_offset = pick(-3, 40);
    junk.success = pick(0, 1);
    junk.granted = false;  // a forged grant is outside the fault model (no Byzantine peers)
    junk.seq = static_cast<uint64_t>(pick(0, 1000));
    junk.snapshot = SnapshotId{pick(-1, 40), pick(0, 3)};
    junk.chunk_offset = static_cast<uint64_t>(pick(0, 10));
    junk.chunk = "junk";
    junk.done = pick(0, 1);
    // Junk with entries would be a forged leader (Byzantine); only stale-looking terms.
    if (junk.type == MessageType::kAppend || junk.type == MessageType::kSnapshot ||
        junk.type == MessageType::kTimeoutNow || junk.type == MessageType::kVote ||
        junk.type == MessageType::kPreVote || junk.type == MessageType::kAppendResponse ||
        junk.type == MessageType::kSnapshotResponse || junk.type == MessageType::kVoteResponse ||
        junk.type == MessageType::kObserveResponse) {
      junk.term = 0;
    }
    if (junk.type == MessageType::kAppend && pick(0, 1)) {
      junk.entries.push_back(Entry{junk.prev_offset + 1, 0, "bad"});
    }
    if (Node* n = c.find(junk.to)) n->Receive(junk);

    // Shuffle, duplicate and drop a little of the real traffic.
    if (c.queue.size() > 1 && pick(0, 3) == 0) {
      size_t a = static_cast<size_t>(pick(0, static_cast<int64_t>(c.queue.size()) - 1));
      size_t b = static_cast<size_t>(pick(0, static_cast<int64_t>(c.queue.size()) - 1));
      std::swap(c.queue[a], c.queue[b]);
    }
    if (!c.queue.empty() && pick(0, 5) == 0) c.queue.push_back(c.queue.front());
    if (!c.queue.empty() && pick(0, 20) == 0) c.queue.pop_front();
    if (pick(0, 9) == 0) {
      auto leaders = c.Leaders();
      if (leaders.size() == 1 &&
          c.node(leaders[0]).Propose({"p" + std::to_string(proposed)}).ok()) {
        ++proposed;
      }
    }
    c.TickDue();
    // Deliver a few, not all, so messages interleave with ticks.
    for (int i = 0; i < 8 && !c.queue.empty(); ++i) {
      Message m = std::move(c.queue.front());
      c.queue.pop_front();
      if (Node* n = c.find(m.to)) n->Receive(m);
    }
    c.clock.now += 1;
  }
  c.Run(1000);
  NodeId leader = c.WaitLeader();
  ASSERT_NE(leader, kNoNode);
  ASSERT_TRUE(c.node(leader).Propose({"final"}).ok());
  const int64_t last = c.storage(leader).end_offset() - 1;
  ASSERT_TRUE(c.RunUntil([&] {
    for (NodeId id : c.ids()) {
      if (c.node(id).applied_offset() != last) return false;
    }
    return true;
  }));
  for (NodeId id : c.ids()) {
    EXPECT_EQ(c.listener(id).applied, c.listener(leader).applied) << "node " << id;
    EXPECT_EQ(c.listener(id).fatal, 0);
  }
  EXPECT_GT(proposed, 10);
}

// A small seeded fault schedule (delays, loss, duplication, partitions, restarts, snapshots,
// transfers, reads) with the safety checks that matter most. The simulator goes much
// further; this keeps the core's own test honest.
void RunRandomSchedule(uint64_t seed, std::vector<NodeId> voters, std::vector<NodeId> observers) {
  Options o;
  o.max_append_bytes = 16;
  o.snapshot_chunk_bytes = 16;
  o.max_inflight_appends = 4;
  Cluster c(voters, observers, o);
  c.seed = seed;
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
  };
  // Every committed entry, by offset, as first seen applied anywhere.
  std::vector<Entry> committed;
  c.on_commit = [&](NodeId id, const Entry& e) {
    ASSERT_LE(e.offset, static_cast<int64_t>(committed.size())) << "node " << id << " gap";
    if (e.offset == static_cast<int64_t>(committed.size())) {
      committed.push_back(e);
    } else {
      ASSERT_EQ(committed[e.offset], e) << "node " << id << " applied a different entry";
    }
  };
  std::map<int64_t, NodeId> leader_of_term;
  std::map<uint64_t, int64_t> read_floor;  // read id -> commit known when it started
  c.StartAll();
  struct InFlight {
    int64_t at;
    Message m;
  };
  std::vector<InFlight> net;
  std::set<NodeId> down;
  int proposed = 0;
  uint64_t next_read = 1;
  const auto& ids = c.ids();
  for (int step = 0; step < 3000; ++step) {
    // Faults.
    const int64_t dice = pick(0, 999);
    if (dice < 3) {
      NodeId victim = ids[pick(0, static_cast<int64_t>(ids.size()) - 1)];
      if (!down.count(victim)) {
        c.Stop(victim);
        down.insert(victim);
      }
    } else if (dice < 15 && !down.empty()) {
      NodeId back = *down.begin();
      down.erase(back);
      c.Start(back);
    } else if (dice < 20) {
      c.Isolate(ids[pick(0, static_cast<int64_t>(ids.size()) - 1)]);
    } else if (dice < 23) {
      c.SetLink(ids[pick(0, static_cast<int64_t>(ids.size()) - 1)],
                ids[pick(0, static_cast<int64_t>(ids.size()) - 1)], true);
    } else if (dice < 40) {
      c.HealAll();
    }
    // Clients.
    for (NodeId id : ids) {
      Node* n = c.find(id);
      if (n == nullptr || n->role() != Role::kLeader) continue;
      if (pick(0, 4) == 0) {
        std::vector<std::string> batch;
        for (int64_t k = pick(1, 3); k > 0; --k) batch.push_back("p" + std::to_string(proposed++));
        (void)n->Propose(std::move(batch));
      }
      if (pick(0, 30) == 0) {
        read_floor[next_read] = static_cast<int64_t>(committed.size()) - 1;
        n->ReadIndex(next_read++);
      }
      if (pick(0, 300) == 0) (void)n->TransferLeadership(kNoNode);
    }
    for (NodeId id : ids) {
      Node* n = c.find(id);
      if (n == nullptr) continue;
      Recorder& l = c.listener(id);
      // Snapshot every few entries.
      const int64_t applied = n->applied_offset();
      if (applied - c.storage(id).snapshot_id().end_offset >= 6 && pick(0, 3) == 0) {
        auto term = c.storage(id).TermAt(applied);
        ASSERT_TRUE(term.ok()) << term.status();
        ASSERT_TRUE(n->CompactTo({applied + 1, *term}, l.SnapshotOf(applied + 1)).ok());
      }
      for (auto& [rid, result] : l.reads) {
        if (result.ok()) {
          ASSERT_GE(*result, read_floor[rid]) << "read " << rid << " missed a commit";
        }
      }
      l.reads.clear();
      ASSERT_EQ(l.fatal, 0);
      if (n->role() == Role::kLeader) {
        auto [it, fresh] = leader_of_term.emplace(n->term(), id);
        ASSERT_EQ(it->second, id) << "two leaders in term " << n->term();
      }
      if (std::find(voters.begin(), voters.end(), id) == voters.end()) {
        ASSERT_EQ(n->role(), Role::kObserver);
      }
    }
    // Network: everything sent goes out with a delay; some lost, some twice.
    for (Message& m : c.queue) {
      const int64_t roll = pick(0, 99);
      if (roll < 5) continue;
      if (roll < 10) net.push_back({c.clock.now + pick(0, 30), m});
      net.push_back({c.clock.now + pick(0, 15), std::move(m)});
    }
    c.queue.clear();
    std::stable_sort(net.begin(), net.end(),
                     [](const InFlight& a, const InFlight& b) { return a.at < b.at; });
    size_t due = 0;
    while (due < net.size() && net[due].at <= c.clock.now) ++due;
    std::vector<InFlight> now(std::make_move_iterator(net.begin()),
                              std::make_move_iterator(net.begin() + due));
    net.erase(net.begin(), net.begin() + due);
    c.queue.clear();
    for (InFlight& f : now) c.queue.push_back(std::move(f.m));
    c.DeliverHop();
    c.TickDue();
    c.clock.now += pick(1, 3);
  }
  // Heal: everyone up, a reliable network; a leader must emerge and a write commit everywhere.
  for (NodeId id : down) c.Start(id);
  c.HealAll();
  for (InFlight& f : net) c.queue.push_back(std::move(f.m));
  NodeId leader = c.WaitLeader(3000);
  ASSERT_NE(leader, kNoNode) << "seed " << seed;
  // (A transfer may be under way: retry until one leader takes it.)
  StatusOr<int64_t> off = absl::UnavailableError("not tried");
  ASSERT_TRUE(c.RunUntil(
      [&] {
        for (NodeId id : c.Leaders()) off = c.node(id).Propose({"final"});
        return off.ok();
      },
      3000))
      << "seed " << seed << ": " << off.status();
  ASSERT_TRUE(c.RunUntil(
      [&] {
        for (NodeId id : ids) {
          if (c.node(id).applied_offset() < *off) return false;
        }
        return true;
      },
      3000))
      << "seed " << seed;
  EXPECT_GT(committed.size(), 20u) << "seed " << seed << ": too little progress to mean much";
}

TEST(RaftTest, RandomSchedulesStaySafeAndLive) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE(seed);
    RunRandomSchedule(seed, {1, 2, 3}, {});
    if (HasFatalFailure()) return;
    RunRandomSchedule(seed, {1, 2, 3, 4, 5}, {9});
    if (HasFatalFailure()) return;
  }
}

TEST(RaftTest, OpenRejectsBadOptions) {
  MemStorage s;
  ManualClock clock;
  Recorder l;
  Cluster c({1});
  QueueTransport t(c, 1);
  Options o;
  EXPECT_FALSE(Node::Open(o, s, clock, t, l).ok()) << "no id";
  o.id = 1;
  o.election_timeout_ms = 0;
  EXPECT_FALSE(Node::Open(o, s, clock, t, l).ok());
}

}  // namespace
}  // namespace runnel::controllerd::raft
