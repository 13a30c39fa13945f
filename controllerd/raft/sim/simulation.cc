#include "controllerd/raft/sim/simulation.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "controllerd/raft/sim/checker.h"

namespace runnel::controllerd::raft::sim {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
// Ticks of one node at one instant before NextTickMs() counts as stuck.
constexpr int kMaxTicksAtOneTime = 1000;
// How often (in steps) every node's log is re-checked from the start, not just the new part.
constexpr int64_t kFullCheckEvery = 256;

// One trace line, kept unformatted (formatting every event would cost more than the run).
struct TraceEvent {
  int64_t step = 0;
  int64_t time = 0;
  // D delivered, d dropped, p postponed (paused receiver), T tick, A action, R role change or
  // callback, C commit advanced, F fatal.
  char kind = ' ';
  NodeId node = kNoNode;
  bool has_message = false;
  Message message;  // without entries and chunk bytes
  size_t entries = 0;
  size_t chunk = 0;
  std::string text;
  int64_t repeats = 0;  // identical events folded into this one (trace tail only)
};

std::string FormatMessage(const Message& m, size_t entries, size_t chunk) {
  std::string head = fmt::format("{} {}->{} t{}", MessageTypeName(m.type), m.from, m.to, m.term);
  switch (m.type) {
    case MessageType::kPreVote:
    case MessageType::kVote:
      return fmt::format("{} last={}/{}{}", head, m.last_offset, m.last_term,
                         m.transfer ? " transfer" : "");
    case MessageType::kPreVoteResponse:
    case MessageType::kVoteResponse:
      return fmt::format("{} {}", head, m.granted ? "granted" : "refused");
    case MessageType::kAppend:
      return fmt::format("{} prev={}/{} n={} commit={} seq={}", head, m.prev_offset, m.prev_term,
                         entries, m.commit, m.seq);
    case MessageType::kAppendResponse:
      return fmt::format("{} {} match={} hint={} seq={} leader={}", head,
                         m.success ? "ok" : "reject", m.match_offset, m.hint_offset, m.seq,
                         m.leader);
    case MessageType::kSnapshot:
      return fmt::format("{} snap={}/{} at={} len={}{} commit={}", head, m.snapshot.end_offset,
                         m.snapshot.epoch, m.chunk_offset, chunk, m.done ? " done" : "", m.commit);
    case MessageType::kSnapshotResponse:
      return fmt::format("{} snap={}/{} at={}{}", head, m.snapshot.end_offset, m.snapshot.epoch,
                         m.chunk_offset, m.success ? " installed" : "");
    case MessageType::kTimeoutNow:
      return head;
    case MessageType::kObserve:
    case MessageType::kObserveResponse:
      return fmt::format("{} leader={}", head, m.leader);
  }
  return head;
}

std::string FormatEvent(const TraceEvent& e) {
  std::string what = e.has_message ? FormatMessage(e.message, e.entries, e.chunk) : "";
  if (!e.text.empty()) what = what.empty() ? e.text : fmt::format("{} ({})", what, e.text);
  if (e.repeats > 0) what += fmt::format(" [and {} more times]", e.repeats);
  if (e.node == kNoNode) return fmt::format("{:>7} {:>7}ms {} {}", e.step, e.time, e.kind, what);
  return fmt::format("{:>7} {:>7}ms {} n{} {}", e.step, e.time, e.kind, e.node, what);
}

// The term of the entry at `offset` when `s` knows it (in its log, its snapshot's last entry,
// or 0 for offset -1); MemStorage::TermAt would report any other offset as a violation.
std::optional<int64_t> KnownTerm(const MemStorage& s, int64_t offset) {
  if (offset == -1) return 0;
  if (const Entry* e = s.EntryAt(offset)) return e->term;
  const SnapshotId snap = s.snapshot_id();
  if (snap.end_offset > 0 && offset == snap.end_offset - 1) return snap.epoch;
  return std::nullopt;
}

// (term, offset) of the last entry: the order the vote rule compares logs in.
std::pair<int64_t, int64_t> LastEntry(const MemStorage& s) {
  const int64_t last = s.end_offset() - 1;
  return {KnownTerm(s, last).value_or(0), last};
}

uint64_t Mix(uint64_t hash, uint64_t value) {
  hash ^= value + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
  return hash;
}

uint64_t HashEvent(uint64_t hash, const TraceEvent& e) {
  hash = Mix(hash, static_cast<uint64_t>(e.step));
  hash = Mix(hash, static_cast<uint64_t>(e.time));
  hash = Mix(hash, static_cast<uint64_t>(e.kind));
  hash = Mix(hash, static_cast<uint64_t>(e.node));
  if (e.has_message) {
    const Message& m = e.message;
    for (int64_t v :
         {static_cast<int64_t>(m.type), static_cast<int64_t>(m.from), static_cast<int64_t>(m.to),
          m.term, m.last_offset, m.last_term, m.prev_offset, m.prev_term, m.commit,
          static_cast<int64_t>(m.seq), m.match_offset, m.hint_offset, m.snapshot.end_offset,
          static_cast<int64_t>(m.chunk_offset), static_cast<int64_t>(e.entries),
          static_cast<int64_t>(e.chunk), static_cast<int64_t>(m.leader),
          static_cast<int64_t>(m.granted) * 4 + static_cast<int64_t>(m.success) * 2 + m.done}) {
      hash = Mix(hash, static_cast<uint64_t>(v));
    }
  }
  for (char c : e.text) hash = Mix(hash, static_cast<uint8_t>(c));
  return hash;
}

class Simulation {
 public:
  explicit Simulation(const SimConfig& config);
  SimResult Run();

 private:
  struct SimNode;

  class SimClock final : public Clock {
   public:
    explicit SimClock(const int64_t& now) : now_(now) {}
    int64_t NowMs() const override { return now_; }

   private:
    const int64_t& now_;
  };

  class SimTransport final : public Transport {
   public:
    SimTransport(Simulation& sim, SimNode& node) : sim_(sim), node_(node) {}
    void Send(Message message) override { sim_.Send(node_, std::move(message)); }

   private:
    Simulation& sim_;
    SimNode& node_;
  };

  class SimListener final : public Listener {
   public:
    SimListener(Simulation& sim, SimNode& node) : sim_(sim), node_(node) {}
    void OnCommit(const Entry& entry) override { sim_.OnCommit(node_, entry); }
    void OnSnapshot(SnapshotId id, const std::string& data) override {
      sim_.OnSnapshot(node_, id, data);
    }
    void OnRoleChange(Role role, int64_t term, NodeId leader) override {
      sim_.OnRoleChange(node_, role, term, leader);
    }
    void OnReadIndex(uint64_t read_id, StatusOr<int64_t> commit) override {
      sim_.OnReadIndex(node_, read_id, std::move(commit));
    }
    void OnFatal(const Status& why) override { sim_.OnFatal(node_, why); }

   private:
    Simulation& sim_;
    SimNode& node_;
  };

  struct SimNode {
    NodeId id = kNoNode;
    bool voter = false;
    std::unique_ptr<MemStorage> storage;
    std::unique_ptr<SimTransport> transport;
    std::unique_ptr<SimListener> listener;
    std::unique_ptr<Node> node;  // null while down
    int incarnation = 0;
    bool fatal = false;
    bool opening = false;
    SmState sm;
    int64_t applied_term = 0;      // the term of entry sm.next - 1
    int64_t last_compact_end = 0;  // sm.next at the last CompactTo
    int64_t last_commit = -1;      // commit_offset() after the previous step
    int64_t verified = -1;         // log checked against G up to here (this incarnation)
    int64_t durable_prefix = 0;    // leading entries of G that survive a crash
    int64_t last_tick_time = -1;
    int ticks_at_time = 0;
    int64_t paused_until = -1;  // a stalled process (GC, SIGSTOP): no events until then
  };

  enum class ActionKind { kClient, kFault, kCrash, kRestart, kHealPartition, kHealCut };
  struct Action {
    ActionKind kind = ActionKind::kClient;
    NodeId a = kNoNode;
    NodeId b = kNoNode;
    uint64_t generation = 0;
  };

  struct Read {
    NodeId node = kNoNode;
    int incarnation = 0;
    int64_t floor = -1;  // the highest committed offset when the read started
    int64_t start_ms = 0;
    bool done = false;
    bool abandoned = false;
  };

  enum class Phase { kFault, kHeal };

  // What one node needs from one possible leader to catch up after healing (simulation.h).
  struct CatchUp {
    NodeId node = kNoNode;
    NodeId leader = kNoNode;
    int64_t probes = 0;           // Appends until one matches, the rejected ones included
    int64_t entries = 0;          // entries sent (the no-op and heal proposal included)
    int64_t messages = 0;         // the Appends carrying them
    int64_t snapshot_chunks = 0;  // over every snapshot transfer allowed for
    int64_t round_trips = 0;
  };

  // Randomness.
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  int64_t Between(int64_t lo, int64_t hi) {
    return hi <= lo ? lo : lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo + 1)));
  }
  bool Chance(double p) { return static_cast<double>(rng_() >> 11) * 0x1.0p-53 < p; }
  template <typename T>
  T Pick(std::initializer_list<T> options) {
    return *(options.begin() + Below(options.size()));
  }

  int PickWeighted(const std::vector<int>& weights) {
    int total = 0;
    for (int w : weights) total += w;
    int r = static_cast<int>(Below(static_cast<uint64_t>(total)));
    for (size_t i = 0; i < weights.size(); ++i) {
      if (r < weights[i]) return static_cast<int>(i);
      r -= weights[i];
    }
    return 0;
  }

  SimNode& NodeById(NodeId id) { return *nodes_[id - 1]; }
  // Up: running, not stopped by a storage error, not paused.
  bool Up(const SimNode& n) const {
    return n.node != nullptr && !n.fatal && n.paused_until <= now_;
  }
  bool Valid(NodeId id) const { return id >= 1 && id <= static_cast<NodeId>(nodes_.size()); }
  SimNode* CurrentLeader();
  SimNode* RandomUpNode();

  // Tracing.
  void Trace(char kind, NodeId node, std::string text);
  void TraceMessage(char kind, const Message& message, std::string text);
  void Record(TraceEvent e);

  // Events.
  void Schedule(int64_t time, Action action);
  void Send(SimNode& from, Message message);
  void CheckSend(SimNode& from, const Message& message);
  bool Blocked(NodeId from, NodeId to) const;
  void Deliver();
  void TickNode(SimNode& n);
  void DoAction(const Action& action);
  void ClientAction();
  void FaultAction();
  void Heal();
  CatchUp CatchUpWork(const SimNode& n, const SimNode& leader) const;
  CatchUp SlowestCatchUp() const;

  // Node lifecycle.
  void Open(SimNode& n);
  void Crash(SimNode& n, CrashMode mode, std::string_view why);
  void CrashAndRestartLater(SimNode& n, std::string_view why);
  void Compact(SimNode& n);

  // Listener callbacks.
  void OnCommit(SimNode& n, const Entry& entry);
  void OnSnapshot(SimNode& n, SnapshotId id, const std::string& data);
  void OnRoleChange(SimNode& n, Role role, int64_t term, NodeId leader);
  void OnReadIndex(SimNode& n, uint64_t read_id, StatusOr<int64_t> commit);
  void OnFatal(SimNode& n, const Status& why);

  // Checks.
  void EndOfStep();
  void CheckNode(SimNode& n);
  void CheckReplicas(SimNode& leader);
  int64_t DurablePrefix(SimNode& n);
  void DriveLiveness();
  bool LivenessDone();
  std::string LivenessLaggards();  // which nodes have not applied the heal proposal
  void FinalChecks();
  void Fail(std::string why) { checker_->Fail(std::move(why)); }

  SimConfig config_;
  std::mt19937_64 rng_;
  int observers_ = 0;
  std::unique_ptr<Checker> checker_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
  Options options_;  // shared by all nodes but id and seed
  int64_t compact_every_ = 10;
  bool compact_in_callback_ = false;
  int64_t client_gap_ms_ = 20;  // mean time between client actions
  int64_t fault_gap_ms_ = 300;  // mean time between faults
  // Swarm testing: each seed weighs the kinds of client actions and faults differently, so
  // some runs are mostly crashes, others mostly partitions, and rare mixes get their turn.
  std::vector<int> client_weights_;  // propose, read, transfer, early tick
  std::vector<int> fault_weights_;   // crash, partition, cut, network, storage, pause
  // How often a leader crashes right after a proposal, leaving its entries on a minority.
  double crash_after_propose_ = 0;

  int64_t now_ = 0;
  int64_t step_ = 0;
  uint64_t seq_ = 0;
  Phase phase_ = Phase::kFault;
  SimClock clock_{now_};

  // The network.
  std::map<std::pair<int64_t, uint64_t>, Message> in_flight_;
  int64_t delay_min_ = 1;
  int64_t delay_max_ = 5;
  double loss_ = 0;
  double duplicate_ = 0;
  double long_delay_ = 0;
  std::vector<int> group_;  // partition group per node index
  uint64_t partition_generation_ = 0;
  std::set<std::pair<NodeId, NodeId>> cuts_;  // one-way: (from, to) messages dropped

  std::map<std::pair<int64_t, uint64_t>, Action> actions_;

  // Clients.
  int64_t next_payload_ = 0;
  uint64_t next_read_id_ = 1;
  std::map<uint64_t, Read> reads_;
  std::vector<std::pair<uint64_t, int64_t>> answered_reads_;  // this step's answers

  // Healing.
  int64_t heal_start_ms_ = 0;
  int64_t heal_deadline_ms_ = 0;
  CatchUp heal_catch_up_;  // the slowest node's catch-up work, in the liveness bound
  int64_t heal_proposed_term_ = -1;
  std::vector<std::string> heal_payloads_;

  // Trace.
  std::vector<TraceEvent> tail_;
  size_t tail_next_ = 0;
  uint64_t trace_hash_ = 0;
  std::vector<std::string> full_trace_;

  SimStats stats_;
};

Simulation::Simulation(const SimConfig& config) : config_(config), rng_(config.seed) {
  if (config_.observers >= 0) {
    observers_ = config_.observers;
  } else {
    uint64_t r = Below(100);
    observers_ = r < 50 ? 0 : r < 85 ? 1 : 2;
  }
  std::vector<NodeId> voters;
  for (int i = 1; i <= config_.voters; ++i) voters.push_back(i);
  checker_ = std::make_unique<Checker>(voters);

  // Timing and sizes, drawn per seed so runs cover fast and slow heartbeats, small and large
  // messages, and shallow and deep pipelines.
  options_.voters = voters;
  options_.election_timeout_ms = Between(80, 200);
  options_.heartbeat_interval_ms = options_.election_timeout_ms / Between(3, 6);
  options_.max_append_bytes = Pick<size_t>({8, 24, 256, 1 << 20});
  options_.snapshot_chunk_bytes = Pick<size_t>({16, 48, 1 << 20});
  options_.max_inflight_appends = static_cast<int>(Between(1, 8));
  options_.observer_timeout_ms = options_.election_timeout_ms * Between(2, 5);
  compact_every_ = Between(3, 40);
  compact_in_callback_ = Chance(0.5);
  client_gap_ms_ = Between(5, 40);
  fault_gap_ms_ =
      std::max<int64_t>(1, options_.election_timeout_ms * Pick<int64_t>({1, 2, 4, 8, 16}) / 4);
  client_weights_ = {static_cast<int>(Between(4, 12)), static_cast<int>(Between(0, 6)),
                     static_cast<int>(Between(0, 2)), static_cast<int>(Between(0, 2))};
  int fault_total = 0;
  for (int i = 0; i < 6; ++i) {
    fault_weights_.push_back(Pick<int>({0, 1, 2, 4}));
    fault_total += fault_weights_.back();
  }
  if (fault_total == 0) fault_weights_[0] = 1;
  crash_after_propose_ = Pick<double>({0, 0, 0.03, 0.1});
  int64_t retain = Pick<int64_t>({0, 0, 2, 10});
  delay_max_ = Between(1, 15);
  loss_ = Pick<double>({0, 0, 0.02});
  duplicate_ = Pick<double>({0, 0.02});

  int total = config_.voters + observers_;
  group_.assign(total, 0);
  for (int i = 1; i <= total; ++i) {
    auto n = std::make_unique<SimNode>();
    n->id = i;
    n->voter = i <= config_.voters;
    n->storage = std::make_unique<MemStorage>(i, checker_.get(), config_.bugs, retain);
    n->transport = std::make_unique<SimTransport>(*this, *n);
    n->listener = std::make_unique<SimListener>(*this, *n);
    SimNode* raw = n.get();
    n->storage->set_commit_probe([raw]() -> std::optional<int64_t> {
      if (raw->node == nullptr) return std::nullopt;
      return raw->node->commit_offset();
    });
    nodes_.push_back(std::move(n));
  }
}

// --- Tracing ---

void Simulation::Trace(char kind, NodeId node, std::string text) {
  TraceEvent e;
  e.step = step_;
  e.time = now_;
  e.kind = kind;
  e.node = node;
  e.text = std::move(text);
  Record(std::move(e));
}

void Simulation::Record(TraceEvent e) {
  trace_hash_ = HashEvent(trace_hash_, e);
  if (config_.trace_sink || config_.keep_trace) {
    std::string line = FormatEvent(e);
    if (config_.trace_sink) config_.trace_sink(line);
    if (config_.keep_trace) full_trace_.push_back(std::move(line));
  }
  if (config_.trace_tail == 0) return;
  if (!tail_.empty()) {
    // A node stuck in a loop would fill the tail with one line: fold repeats.
    TraceEvent& last = tail_[(tail_next_ + tail_.size() - 1) % tail_.size()];
    if (!last.has_message && !e.has_message && last.kind == e.kind && last.node == e.node &&
        last.text == e.text) {
      ++last.repeats;
      return;
    }
  }
  if (tail_.size() < config_.trace_tail) {
    tail_.push_back(std::move(e));
  } else {
    tail_[tail_next_] = std::move(e);
    tail_next_ = (tail_next_ + 1) % tail_.size();
  }
}

void Simulation::TraceMessage(char kind, const Message& message, std::string text) {
  TraceEvent e;
  e.step = step_;
  e.time = now_;
  e.kind = kind;
  e.node = kNoNode;
  e.has_message = true;
  e.message.type = message.type;
  e.message.from = message.from;
  e.message.to = message.to;
  e.message.term = message.term;
  e.message.last_offset = message.last_offset;
  e.message.last_term = message.last_term;
  e.message.transfer = message.transfer;
  e.message.granted = message.granted;
  e.message.prev_offset = message.prev_offset;
  e.message.prev_term = message.prev_term;
  e.message.commit = message.commit;
  e.message.seq = message.seq;
  e.message.success = message.success;
  e.message.match_offset = message.match_offset;
  e.message.hint_offset = message.hint_offset;
  e.message.snapshot = message.snapshot;
  e.message.chunk_offset = message.chunk_offset;
  e.message.done = message.done;
  e.message.leader = message.leader;
  e.entries = message.entries.size();
  e.chunk = message.chunk.size();
  e.text = std::move(text);
  Record(std::move(e));
}

// --- Helpers ---

Simulation::SimNode* Simulation::CurrentLeader() {
  SimNode* best = nullptr;
  for (auto& n : nodes_) {
    if (!Up(*n) || n->node->role() != Role::kLeader) continue;
    if (best == nullptr || n->node->term() > best->node->term()) best = n.get();
  }
  return best;
}

Simulation::SimNode* Simulation::RandomUpNode() {
  std::vector<SimNode*> up;
  for (auto& n : nodes_) {
    if (Up(*n)) up.push_back(n.get());
  }
  if (up.empty()) return nullptr;
  return up[Below(up.size())];
}

void Simulation::Schedule(int64_t time, Action action) {
  actions_.emplace(std::make_pair(time, seq_++), action);
}

// --- The network ---

bool Simulation::Blocked(NodeId from, NodeId to) const {
  return group_[from - 1] != group_[to - 1] || cuts_.contains({from, to});
}

void Simulation::CheckSend(SimNode& n, const Message& m) {
  if (m.from != n.id) {
    return Fail(fmt::format("node {} sent a {} claiming to be from {}", n.id,
                            MessageTypeName(m.type), m.from));
  }
  if (!Valid(m.to) || m.to == n.id) {
    return Fail(fmt::format("node {} sent a {} to node {}", n.id, MessageTypeName(m.type), m.to));
  }
  if (n.fatal) {
    return Fail(fmt::format("node {} sent a {} after OnFatal", n.id, MessageTypeName(m.type)));
  }
  bool granted_vote =
      (m.type == MessageType::kVoteResponse || m.type == MessageType::kPreVoteResponse) &&
      m.granted;
  if (!n.voter) {
    if (m.type == MessageType::kPreVote || m.type == MessageType::kVote ||
        m.type == MessageType::kAppend || m.type == MessageType::kSnapshot ||
        m.type == MessageType::kTimeoutNow || granted_vote) {
      return Fail(fmt::format("observer {} sent {}", n.id, FormatMessage(m, 0, 0)));
    }
  } else {
    HardState hs = n.storage->hard_state();
    if (m.type != MessageType::kPreVote && m.type != MessageType::kPreVoteResponse &&
        m.term > hs.term) {
      return Fail(fmt::format("node {} sent {} before storing term {} (stored: {})", n.id,
                              FormatMessage(m, 0, 0), m.term, hs.term));
    }
    if (m.type == MessageType::kVote && (hs.term != m.term || hs.voted_for != n.id)) {
      return Fail(fmt::format("node {} asked for votes in term {} with stored term {} vote {}",
                              n.id, m.term, hs.term, hs.voted_for));
    }
    if (m.type == MessageType::kVote && m.last_offset >= 0) {
      // The candidate votes for itself on the strength of its log: that log must be synced.
      const Entry* last = n.storage->EntryAt(m.last_offset);
      if (last != nullptr ? !n.storage->DurablyHolds(*last)
                          : m.last_offset >= n.storage->snapshot_id().end_offset) {
        return Fail(fmt::format("node {} asked for votes with last offset {} not synced", n.id,
                                m.last_offset));
      }
    }
    if (m.type == MessageType::kVoteResponse && m.granted &&
        (hs.term != m.term || hs.voted_for != m.to)) {
      return Fail(
          fmt::format("node {} granted its vote to {} in term {} with stored term {} "
                      "vote {}",
                      n.id, m.to, m.term, hs.term, hs.voted_for));
    }
    if (m.type == MessageType::kAppend || m.type == MessageType::kSnapshot ||
        m.type == MessageType::kTimeoutNow) {
      checker_->Leader(n.id, m.term);
    }
  }
  if (m.type == MessageType::kAppendResponse && m.success && m.match_offset >= 0) {
    const Entry* e = n.storage->EntryAt(m.match_offset);
    if (e == nullptr) {
      if (m.match_offset >= n.storage->snapshot_id().end_offset) {
        Fail(fmt::format("node {} acknowledged offset {} that is not in its log [{}, {})", n.id,
                         m.match_offset, n.storage->start_offset(), n.storage->end_offset()));
      }
    } else if (!n.storage->DurablyHolds(*e)) {
      Fail(fmt::format("node {} acknowledged offset {} before syncing it", n.id, m.match_offset));
    }
  }
}

void Simulation::Send(SimNode& n, Message message) {
  CheckSend(n, message);
  if (config_.plant == Plant::kGrantEveryVote && (message.type == MessageType::kVoteResponse ||
                                                  message.type == MessageType::kPreVoteResponse)) {
    message.granted = true;
  }
  if (config_.plant == Plant::kCorruptEntries && message.type == MessageType::kAppend &&
      !message.entries.empty() && Chance(0.05)) {
    message.entries[Below(message.entries.size())].data += "!";
  }
  if (config_.plant == Plant::kCorruptSnapshots && message.type == MessageType::kSnapshot &&
      !message.chunk.empty() && Chance(0.3)) {
    message.chunk[Below(message.chunk.size())] ^= 0x01;
  }
  if (!Valid(message.to) || message.to == n.id) return;
  if (Blocked(message.from, message.to)) {
    ++stats_.dropped;
    return TraceMessage('d', message, "cut");
  }
  if (Chance(loss_)) {
    ++stats_.dropped;
    return TraceMessage('d', message, "lost");
  }
  auto delay = [&] {
    int64_t d = Between(delay_min_, delay_max_);
    if (Chance(long_delay_)) {
      d += Between(options_.election_timeout_ms / 2, 3 * options_.election_timeout_ms);
    }
    return d;
  };
  if (Chance(duplicate_)) in_flight_.emplace(std::make_pair(now_ + delay(), seq_++), message);
  in_flight_.emplace(std::make_pair(now_ + delay(), seq_++), std::move(message));
}

void Simulation::Deliver() {
  auto handle = in_flight_.extract(in_flight_.begin());
  Message& m = handle.mapped();
  SimNode& to = NodeById(m.to);
  if (to.node == nullptr || to.fatal) {
    ++stats_.dropped;
    return TraceMessage('d', m, "down");
  }
  if (config_.plant == Plant::kStarveAfterHeal && phase_ == Phase::kHeal &&
      m.to == static_cast<NodeId>(nodes_.size()) &&
      (m.type == MessageType::kAppend || m.type == MessageType::kSnapshot)) {
    ++stats_.dropped;
    return TraceMessage('d', m, "starved");
  }
  if (to.paused_until > now_) {
    // Waits in the socket buffer until the process runs again.
    TraceMessage('p', m, "paused");
    in_flight_.emplace(std::make_pair(to.paused_until, seq_++), std::move(m));
    return;
  }
  if (Blocked(m.from, m.to)) {
    ++stats_.dropped;
    return TraceMessage('d', m, "cut");
  }
  ++stats_.delivered;
  TraceMessage('D', m, "");
  to.node->Receive(m);
}

void Simulation::TickNode(SimNode& n) {
  if (n.last_tick_time == now_) {
    if (++n.ticks_at_time > kMaxTicksAtOneTime) {
      return Fail(fmt::format("node {}: NextTickMs() stays at {} after {} ticks", n.id, now_,
                              kMaxTicksAtOneTime));
    }
  } else {
    n.last_tick_time = now_;
    n.ticks_at_time = 0;
  }
  Trace('T', n.id, "");
  n.node->Tick();
}

// --- Node lifecycle ---

void Simulation::Open(SimNode& n) {
  if (n.node != nullptr) return;
  n.sm = SmState{};
  n.applied_term = 0;
  n.last_commit = -1;
  n.verified = -1;
  n.fatal = false;
  n.last_tick_time = -1;
  n.ticks_at_time = 0;
  n.paused_until = -1;
  Options options = options_;
  options.id = n.id;
  options.seed = rng_();
  Trace('A', n.id, fmt::format("open (incarnation {})", n.incarnation));
  n.opening = true;
  auto node = Node::Open(options, *n.storage, clock_, *n.transport, *n.listener);
  n.opening = false;
  if (!node.ok()) {
    return Fail(fmt::format("node {}: Open failed: {}", n.id, node.status().message()));
  }
  n.node = std::move(*node);
  n.last_compact_end = n.sm.next;
  n.last_commit = n.node->commit_offset();
}

void Simulation::Crash(SimNode& n, CrashMode mode, std::string_view why) {
  Trace('A', n.id, fmt::format("crash ({}, {})", why, CrashModeName(mode)));
  n.node.reset();
  n.storage->Crash(mode, rng_);
  ++n.incarnation;
  n.fatal = false;
  n.paused_until = -1;
  ++stats_.crashes;
  for (auto& [id, read] : reads_) {
    if (read.node == n.id && !read.done) read.abandoned = true;
  }
}

void Simulation::CrashAndRestartLater(SimNode& n, std::string_view why) {
  const int64_t et = options_.election_timeout_ms;
  Crash(n, static_cast<CrashMode>(Below(3)), why);
  Schedule(now_ + Between(et / 2, 4 * et), Action{ActionKind::kRestart, n.id});
}

void Simulation::Compact(SimNode& n) {
  SnapshotId id{n.sm.next, n.applied_term};
  n.last_compact_end = n.sm.next;
  Status status = n.node->CompactTo(id, EncodeSnapshot(n.sm));
  ++stats_.snapshots_saved;
  Trace('A', n.id,
        fmt::format("compact to {}/{}: {}", id.end_offset, id.epoch,
                    status.ok() ? "ok" : status.ToString()));
  // The state machine applied everything before id.end_offset, so only a storage error (an
  // injected one, which also makes the node fatal) may refuse it.
  if (!status.ok() && !n.fatal && status.message().find("injected") == absl::string_view::npos) {
    Fail(fmt::format("node {}: CompactTo({}/{}) after applying up to {} failed: {}", n.id,
                     id.end_offset, id.epoch, n.sm.next - 1, status.ToString()));
  }
}

// --- Listener callbacks ---

void Simulation::OnCommit(SimNode& n, const Entry& entry) {
  if (entry.offset != n.sm.next) {
    return Fail(
        fmt::format("node {} applied offset {} where {} was next", n.id, entry.offset, n.sm.next));
  }
  checker_->Committed(n.id, entry, "applied");
  n.sm.Apply(entry);
  n.applied_term = entry.term;
  if (compact_in_callback_ && n.node != nullptr &&
      n.sm.next - n.last_compact_end >= compact_every_) {
    Compact(n);
  }
}

void Simulation::OnSnapshot(SimNode& n, SnapshotId id, const std::string& data) {
  Trace('R', n.id, fmt::format("snapshot {}/{}", id.end_offset, id.epoch));
  checker_->CheckSnapshot(n.id, id, data, "OnSnapshot");
  if (id.end_offset < n.sm.next) {
    return Fail(
        fmt::format("node {} got OnSnapshot({}) after applying up to {}: entries would "
                    "apply twice",
                    n.id, id.end_offset, n.sm.next - 1));
  }
  auto state = DecodeSnapshot(data);
  if (!state.ok()) return;  // the checker failed already
  n.sm = *state;
  n.applied_term = id.epoch;
  n.last_compact_end = n.sm.next;
  if (!n.opening) ++stats_.snapshots_installed;
}

void Simulation::OnRoleChange(SimNode& n, Role role, int64_t term, NodeId leader) {
  Trace('R', n.id, fmt::format("{} term {} leader {}", RoleName(role), term, leader));
  if (n.voter && role == Role::kObserver) {
    return Fail(fmt::format("voter {} became an observer", n.id));
  }
  if (!n.voter && role != Role::kObserver && role != Role::kFollower) {
    return Fail(fmt::format("observer {} became {} in term {}", n.id, RoleName(role), term));
  }
  if (role == Role::kLeader) checker_->Leader(n.id, term);
}

void Simulation::OnReadIndex(SimNode& n, uint64_t read_id, StatusOr<int64_t> commit) {
  auto it = reads_.find(read_id);
  if (it == reads_.end()) {
    return Fail(fmt::format("node {} answered read {} that nobody started", n.id, read_id));
  }
  Read& read = it->second;
  if (read.node != n.id || read.incarnation != n.incarnation) {
    return Fail(
        fmt::format("node {} answered read {} started on node {}", n.id, read_id, read.node));
  }
  if (read.done) return Fail(fmt::format("node {} answered read {} twice", n.id, read_id));
  read.done = true;
  Trace('R', n.id,
        fmt::format("read {} -> {}", read_id,
                    commit.ok() ? std::to_string(*commit) : commit.status().ToString()));
  if (!commit.ok()) return;
  ++stats_.reads_ok;
  if (*commit < read.floor) {
    return Fail(
        fmt::format("node {} answered read {} with commit {}, below offset {} committed "
                    "before the read started (stale read)",
                    n.id, read_id, *commit, read.floor));
  }
  answered_reads_.emplace_back(read_id, *commit);
}

void Simulation::OnFatal(SimNode& n, const Status& why) {
  Trace('F', n.id, why.ToString());
  if (n.fatal) return Fail(fmt::format("node {}: OnFatal twice", n.id));
  n.fatal = true;
}

// --- Actions ---

void Simulation::DoAction(const Action& action) {
  switch (action.kind) {
    case ActionKind::kClient:
      ClientAction();
      Schedule(now_ + Between(1, 2 * client_gap_ms_), Action{ActionKind::kClient});
      return;
    case ActionKind::kFault:
      FaultAction();
      Schedule(now_ + Between(1, 2 * fault_gap_ms_), Action{ActionKind::kFault});
      return;
    case ActionKind::kCrash:
      if (Up(NodeById(action.a))) CrashAndRestartLater(NodeById(action.a), "after proposing");
      return;
    case ActionKind::kRestart:
      return Open(NodeById(action.a));
    case ActionKind::kHealPartition:
      if (action.generation != partition_generation_) return;
      Trace('A', kNoNode, "partition healed");
      std::fill(group_.begin(), group_.end(), 0);
      return;
    case ActionKind::kHealCut:
      Trace('A', kNoNode, fmt::format("cut {}->{} healed", action.a, action.b));
      cuts_.erase({action.a, action.b});
      return;
  }
}

void Simulation::ClientAction() {
  int kind = PickWeighted(client_weights_);
  if (kind == 0) {  // a client proposes
    SimNode* n = Chance(0.9) ? CurrentLeader() : RandomUpNode();
    if (n == nullptr) return;
    std::vector<std::string> payloads;
    int64_t count = Between(1, 3);
    for (int64_t i = 0; i < count; ++i) {
      payloads.push_back(fmt::format("p{}", next_payload_++));
      checker_->Proposed(payloads.back());
    }
    int64_t term = n->node->term();
    auto offset = n->node->Propose(payloads);
    Trace('A', n->id,
          fmt::format("propose {} x{}: {}", payloads.front(), count,
                      offset.ok() ? fmt::format("at {}", *offset) : offset.status().ToString()));
    if (!offset.ok()) return;
    for (int64_t i = 0; i < count; ++i) {
      const Entry* e = n->storage->EntryAt(*offset + i);
      if (e == nullptr && *offset + i < n->storage->snapshot_id().end_offset) continue;
      if (e == nullptr || e->term != term || e->data != payloads[i]) {
        return Fail(
            fmt::format("node {}: Propose returned offset {} but the log does not hold "
                        "the proposal there in term {}",
                        n->id, *offset, term));
      }
    }
    if (Chance(crash_after_propose_)) {
      Schedule(now_ + Between(0, delay_max_), Action{ActionKind::kCrash, n->id});
    }
  } else if (kind == 1) {  // a linearizable read
    SimNode* n =
        Chance(0.8) && config_.plant != Plant::kReadLocalCommit ? CurrentLeader() : RandomUpNode();
    if (n == nullptr) return;
    uint64_t id = next_read_id_++;
    reads_[id] = Read{n->id, n->incarnation, checker_->committed_end() - 1, now_};
    Trace('A', n->id, fmt::format("read {} (floor {})", id, checker_->committed_end() - 1));
    if (config_.plant == Plant::kReadLocalCommit) {
      return OnReadIndex(*n, id, n->node->commit_offset());
    }
    n->node->ReadIndex(id);
  } else if (kind == 2) {  // a leadership transfer
    SimNode* leader = CurrentLeader();
    if (leader == nullptr) return;
    NodeId target = Chance(0.3) ? kNoNode : static_cast<NodeId>(Between(1, config_.voters));
    Status status = leader->node->TransferLeadership(target);
    if (status.ok()) ++stats_.transfers;
    Trace('A', leader->id,
          fmt::format("transfer to {}: {}", target, status.ok() ? "ok" : status.ToString()));
  } else {  // an early tick ("or more often")
    SimNode* n = RandomUpNode();
    if (n == nullptr) return;
    Trace('A', n->id, "extra tick");
    n->node->Tick();
  }
}

void Simulation::FaultAction() {
  const int64_t et = options_.election_timeout_ms;
  int kind = PickWeighted(fault_weights_);
  if (kind == 0) {  // a crash
    SimNode* leader = CurrentLeader();
    SimNode* n = leader != nullptr && Chance(0.4) ? leader : RandomUpNode();
    if (n == nullptr) return;
    CrashAndRestartLater(*n, "fault");
  } else if (kind == 1) {  // a symmetric partition
    SimNode* leader = CurrentLeader();
    std::fill(group_.begin(), group_.end(), 0);
    uint64_t kind = Below(3);
    if (kind == 0) {  // one node alone (often the leader)
      NodeId alone = leader != nullptr && Chance(0.5)
                         ? leader->id
                         : static_cast<NodeId>(Between(1, static_cast<int64_t>(nodes_.size())));
      group_[alone - 1] = 1;
    } else if (kind == 1) {  // a random split
      for (int& g : group_) g = static_cast<int>(Below(2));
    } else {  // the leader in a minority
      int minority = config_.voters / 2;
      std::vector<NodeId> ids;
      for (auto& n : nodes_) ids.push_back(n->id);
      std::shuffle(ids.begin(), ids.end(), rng_);
      if (leader != nullptr) {
        std::iter_swap(ids.begin(), std::find(ids.begin(), ids.end(), leader->id));
      }
      for (int i = 0; i < minority; ++i) group_[ids[i] - 1] = 1;
    }
    std::string groups;
    for (int g : group_) groups += static_cast<char>('a' + g);
    Trace('A', kNoNode, fmt::format("partition {}", groups));
    ++stats_.partitions;
    Schedule(now_ + Between(et, 5 * et),
             Action{ActionKind::kHealPartition, kNoNode, kNoNode, ++partition_generation_});
  } else if (kind == 2) {  // a one-way cut
    auto a = static_cast<NodeId>(Between(1, static_cast<int64_t>(nodes_.size())));
    auto b = static_cast<NodeId>(Between(1, static_cast<int64_t>(nodes_.size())));
    if (a == b) return;
    cuts_.insert({a, b});
    Trace('A', kNoNode, fmt::format("cut {}->{}", a, b));
    Schedule(now_ + Between(et, 5 * et), Action{ActionKind::kHealCut, a, b});
  } else if (kind == 3) {  // the network's quality changes (sometimes back to good)
    delay_min_ = 1;
    delay_max_ = Pick<int64_t>({1, 3, 10, 30, et / 2});
    loss_ = Pick<double>({0, 0, 0.02, 0.1, 0.3});
    duplicate_ = Pick<double>({0, 0, 0.02, 0.1});
    long_delay_ = Pick<double>({0, 0, 0.005, 0.02});
    Trace('A', kNoNode,
          fmt::format("network delay 1-{}ms loss {} dup {} long {}", delay_max_, loss_, duplicate_,
                      long_delay_));
  } else if (kind == 4) {  // a storage error (the node stops; the process restarts)
    SimNode* n = RandomUpNode();
    if (n == nullptr) return;
    if (Chance(0.5)) {
      n->storage->FailNextWrite();
      Trace('A', n->id, "next storage write fails");
    } else {
      // Dies in the middle of a call, with appends or truncations not yet synced.
      n->storage->FailNextSync();
      Trace('A', n->id, "next sync fails");
    }
  } else {  // a pause: the node stalls, then runs on with stale timers and a queue of messages
    SimNode* leader = CurrentLeader();
    SimNode* n = leader != nullptr && Chance(0.5) ? leader : RandomUpNode();
    if (n == nullptr) return;
    n->paused_until = now_ + Between(et / 2, 3 * et);
    Trace('A', n->id, fmt::format("paused until {}ms", n->paused_until));
  }
}

void Simulation::Heal() {
  phase_ = Phase::kHeal;
  Trace('A', kNoNode, "heal: everything up, the network reliable");
  actions_.clear();
  std::fill(group_.begin(), group_.end(), 0);
  cuts_.clear();
  delay_min_ = 1;
  delay_max_ = 5;
  loss_ = 0;
  duplicate_ = 0;
  long_delay_ = 0;
  for (auto& n : nodes_) {
    n->paused_until = -1;
    n->storage->ClearFaults();
    if (n->node == nullptr) Open(*n);
  }
  heal_start_ms_ = now_;
  heal_catch_up_ = SlowestCatchUp();
  const int64_t round_trip_ms = 2 * delay_max_;
  const int64_t elections_ms = config_.heal_timeouts * options_.election_timeout_ms;
  heal_deadline_ms_ = now_ + elections_ms + heal_catch_up_.round_trips * round_trip_ms;
  stats_.liveness_bound_ms = heal_deadline_ms_ - heal_start_ms_;
  stats_.catch_up_round_trips = heal_catch_up_.round_trips;
  const CatchUp& c = heal_catch_up_;
  Trace('A', kNoNode,
        fmt::format("liveness bound {}ms: {} election timeouts + {} round trips of {}ms (node {} "
                    "from leader {}: {} probes, {} entries in {} messages, {} snapshot chunks)",
                    stats_.liveness_bound_ms, config_.heal_timeouts, c.round_trips, round_trip_ms,
                    c.node, c.leader, c.probes, c.entries, c.messages, c.snapshot_chunks));
}

Simulation::CatchUp Simulation::CatchUpWork(const SimNode& n, const SimNode& leader) const {
  constexpr int64_t kSnapshotTransfers = 3;
  // EncodeSnapshot: a header line of three numbers, then the last SmState::kRecent payloads.
  constexpr size_t kSnapshotHeaderMax = 96;
  constexpr size_t kHealPayloadMax = 16;  // "heal<N>"
  CatchUp w;
  w.node = n.id;
  w.leader = leader.id;
  const MemStorage& ns = *n.storage;
  const MemStorage& ls = *leader.storage;
  const int64_t n_end = ns.end_offset();
  const int64_t l_end = ls.end_offset();
  const int64_t overlap_end = std::min(n_end, l_end);

  // The common prefix. Everything under the node's snapshot is committed, so in the log of any
  // voter that can win; above it, log matching makes the highest offset where both hold the
  // same term the end of the common part.
  const int64_t floor = std::min(ns.snapshot_id().end_offset, l_end);
  int64_t common = floor;
  for (int64_t o = overlap_end - 1; o >= floor; --o) {
    std::optional<int64_t> a = KnownTerm(ns, o);
    std::optional<int64_t> b = KnownTerm(ls, o);
    if (!a || !b) break;  // the leader no longer knows: assume nothing matches above floor
    if (*a == *b) {
      common = o + 1;
      break;
    }
  }

  // Backtracking: the first probe (at the leader's end), one reject per run of one term in the
  // node's conflicting suffix (its hint skips the whole run), and the probe that matches.
  int64_t from = common;
  w.probes = 2;
  if (common < overlap_end) {
    std::optional<int64_t> run_term;
    for (int64_t o = common; o < overlap_end; ++o) {
      std::optional<int64_t> t = KnownTerm(ns, o);
      if (o == common || t != run_term) ++w.probes;
      run_term = t;
    }
    // The last hint is the start of the node's run holding `common`, which may begin below it
    // (those entries match and are sent again), but never at or below its commit offset.
    const int64_t hint_floor = std::max(n.node->commit_offset() + 1, ns.start_offset());
    const std::optional<int64_t> t = KnownTerm(ns, common);
    while (from - 1 >= hint_floor && KnownTerm(ns, from - 1) == t) --from;
  }

  if (from < l_end) {
    // A snapshot: needed now if the leader no longer holds what comes next, and possibly later
    // when it compacts past the node while it catches up (see simulation.h: at most three).
    size_t max_payload = kHealPayloadMax;
    for (int64_t o = ls.start_offset(); o < l_end; ++o) {
      max_payload = std::max(max_payload, ls.EntryAt(o)->data.size());
    }
    size_t snapshot_bytes = kSnapshotHeaderMax + SmState::kRecent * (max_payload + 1);
    if (StatusOr<std::string> current = ls.ReadSnapshot(); current.ok()) {
      snapshot_bytes = std::max(snapshot_bytes, current->size());
    }
    const size_t chunk = std::max<size_t>(1, options_.snapshot_chunk_bytes);
    w.snapshot_chunks =
        kSnapshotTransfers * static_cast<int64_t>((snapshot_bytes + chunk - 1) / chunk);
    if (from < ls.start_offset() || !KnownTerm(ls, from - 1)) {
      from = std::max(from, ls.snapshot_id().end_offset);
    }
  }

  // The entries, in Appends of at most max_append_bytes (at least one entry each, as
  // Storage::Read gives them), followed by the new leader's no-op and the heal proposal.
  size_t bytes = 0;
  bool open = false;
  auto add = [&](size_t size) {
    ++w.entries;
    if (!open || bytes + size > options_.max_append_bytes) {
      ++w.messages;
      bytes = 0;
      open = true;
    }
    bytes += size;
  };
  for (int64_t o = std::max(from, ls.start_offset()); o < l_end; ++o) {
    add(ls.EntryAt(o)->data.size());
  }
  add(0);
  add(kHealPayloadMax);
  const int64_t window = std::max(1, options_.max_inflight_appends);
  // One more round trip when a snapshot ends (the probe after it), and two for the commit
  // offset to reach the node.
  w.round_trips = w.probes + (w.messages + window - 1) / window + w.snapshot_chunks +
                  (w.snapshot_chunks > 0 ? 1 : 0) + 2;
  return w;
}

Simulation::CatchUp Simulation::SlowestCatchUp() const {
  // A voter can lead only if a majority (itself included) finds its log at least as up to
  // date as theirs; the leaders to come extend one of those logs.
  std::vector<const SimNode*> voters;
  for (const auto& n : nodes_) {
    if (n->voter) voters.push_back(n.get());
  }
  CatchUp slowest;
  for (const SimNode* l : voters) {
    const auto last = LastEntry(*l->storage);
    size_t behind = 0;
    for (const SimNode* v : voters) behind += LastEntry(*v->storage) <= last ? 1 : 0;
    if (behind < voters.size() / 2 + 1) continue;
    for (const auto& n : nodes_) {
      if (n.get() == l || n->node == nullptr) continue;
      CatchUp w = CatchUpWork(*n, *l);
      if (w.round_trips > slowest.round_trips) slowest = w;
    }
  }
  return slowest;
}

// --- Checks ---

int64_t Simulation::DurablePrefix(SimNode& n) {
  int64_t p = std::min(n.durable_prefix, n.storage->TakeDurableLowWater());
  while (p < checker_->committed_end() && n.storage->DurablyHolds(checker_->committed(p))) ++p;
  n.durable_prefix = p;
  return p;
}

void Simulation::CheckReplicas(SimNode& leader) {
  // What the leader believes each replica holds: a replica still in the leader's term cannot
  // have lost an entry it acknowledged (it was synced, and no other leader of the term exists).
  std::vector<ReplicaState> replicas = leader.node->Replicas();
  int voters = 0;
  for (const ReplicaState& r : replicas) {
    if (!Valid(r.id))
      return Fail(fmt::format("leader {}: Replicas() names node {}", leader.id, r.id));
    SimNode& x = NodeById(r.id);
    if (r.voter != x.voter) {
      return Fail(fmt::format("leader {}: Replicas() calls node {} a {}", leader.id, r.id,
                              r.voter ? "voter" : "observer"));
    }
    voters += r.voter ? 1 : 0;
    if (r.id == leader.id || r.match_offset < 0) continue;
    if (x.storage->hard_state().term != leader.node->term()) continue;
    const Entry* e = leader.storage->EntryAt(r.match_offset);
    if (e != nullptr && !x.storage->DurablyHolds(*e)) {
      return Fail(
          fmt::format("leader {} believes node {} holds offset {} (term {}), which it does "
                      "not hold durably",
                      leader.id, r.id, r.match_offset, e->term));
    }
  }
  if (voters != config_.voters) {
    Fail(fmt::format("leader {}: Replicas() lists {} voters of {}", leader.id, voters,
                     config_.voters));
  }
}

void Simulation::CheckNode(SimNode& n) {
  Node& node = *n.node;
  Role role = node.role();
  if (n.voter && role == Role::kObserver) {
    return Fail(fmt::format("voter {} has role observer", n.id));
  }
  if (!n.voter && role != Role::kObserver && role != Role::kFollower) {
    return Fail(fmt::format("observer {} has role {}", n.id, RoleName(role)));
  }
  if (role == Role::kLeader) {
    checker_->Leader(n.id, node.term());
    CheckReplicas(n);
  }

  int64_t commit = node.commit_offset();
  if (commit < n.last_commit) {
    return Fail(
        fmt::format("node {}: commit offset went back from {} to {}", n.id, n.last_commit, commit));
  }
  if (commit >= n.storage->end_offset()) {
    return Fail(fmt::format("node {}: commit offset {} beyond its log end {}", n.id, commit,
                            n.storage->end_offset()));
  }
  if (commit > n.last_commit) {
    Trace('C', n.id, fmt::format("commit {}", commit));
  }
  n.last_commit = commit;
  for (int64_t o = n.verified + 1; o <= commit; ++o) {
    if (const Entry* e = n.storage->EntryAt(o)) {
      checker_->Committed(n.id, *e, "holds within its commit offset");
    } else if (o >= n.storage->snapshot_id().end_offset) {
      return Fail(
          fmt::format("node {}: offset {} is within its commit offset {} but neither in "
                      "its log nor under its snapshot",
                      n.id, o, commit));
    }
  }
  n.verified = std::max(n.verified, commit);

  int64_t applied = node.applied_offset();
  if (applied != n.sm.next - 1) {
    return Fail(
        fmt::format("node {}: applied_offset() is {} but the listener got everything up "
                    "to {}",
                    n.id, applied, n.sm.next - 1));
  }
  if (applied > commit) {
    return Fail(
        fmt::format("node {}: applied {} beyond its commit offset {}", n.id, applied, commit));
  }
  if (!compact_in_callback_ && n.paused_until <= now_ &&
      n.sm.next - n.last_compact_end >= compact_every_) {
    Compact(n);
  }
}

void Simulation::EndOfStep() {
  for (auto& n : nodes_) {
    if (checker_->failed()) return;
    if (n->node == nullptr) continue;
    if (n->fatal) {
      // The process exits after a storage error and the supervisor restarts it.
      Crash(*n, static_cast<CrashMode>(Below(3)), "fatal");
      int64_t et = options_.election_timeout_ms;
      Schedule(phase_ == Phase::kHeal ? now_ + 1 : now_ + Between(et / 2, 3 * et),
               Action{ActionKind::kRestart, n->id});
      continue;
    }
    CheckNode(*n);
  }
  if (checker_->failed()) return;
  for (auto [read_id, commit] : answered_reads_) {
    if (commit >= checker_->committed_end()) {
      return Fail(
          fmt::format("read {} answered with offset {}, which is not committed", read_id, commit));
    }
  }
  answered_reads_.clear();
  std::vector<int64_t> prefixes;
  for (auto& n : nodes_) {
    if (n->voter) prefixes.push_back(DurablePrefix(*n));
  }
  checker_->CheckDurableQuorum(std::move(prefixes));
  if (step_ % kFullCheckEvery == 0) {
    for (auto& n : nodes_) {
      n->verified = -1;
      n->durable_prefix = 0;
    }
  }
}

void Simulation::DriveLiveness() {
  SimNode* leader = CurrentLeader();
  if (leader == nullptr || leader->node->term() == heal_proposed_term_) return;
  std::string payload = fmt::format("heal{}", heal_payloads_.size());
  checker_->Proposed(payload);
  auto offset = leader->node->Propose({payload});
  Trace('A', leader->id,
        fmt::format("propose {}: {}", payload,
                    offset.ok() ? fmt::format("at {}", *offset) : offset.status().ToString()));
  if (!offset.ok()) return;
  heal_proposed_term_ = leader->node->term();
  heal_payloads_.push_back(payload);
}

bool Simulation::LivenessDone() {
  for (const std::string& p : heal_payloads_) {
    std::optional<int64_t> offset = checker_->OffsetOfPayload(p);
    if (!offset) continue;
    bool everywhere = true;
    for (auto& n : nodes_) {
      if (n->node == nullptr || n->node->applied_offset() < *offset) everywhere = false;
    }
    if (everywhere) return true;
  }
  return false;
}

std::string Simulation::LivenessLaggards() {
  std::optional<int64_t> target;
  for (const std::string& p : heal_payloads_) {
    if ((target = checker_->OffsetOfPayload(p))) break;
  }
  if (!target) return "no heal proposal committed";
  std::string out = fmt::format("heal proposal at {}; applied", *target);
  for (auto& n : nodes_) {
    const int64_t applied = n->node == nullptr ? -1 : n->node->applied_offset();
    if (applied < *target) out += fmt::format(" n{}:{}", n->id, applied);
  }
  return out;
}

void Simulation::FinalChecks() {
  for (auto& n : nodes_) {
    n->verified = -1;
    n->durable_prefix = 0;
  }
  EndOfStep();
  int64_t grace = 3 * options_.election_timeout_ms;
  for (const auto& [id, read] : reads_) {
    if (!read.done && !read.abandoned && read.start_ms + grace <= now_) {
      return Fail(fmt::format("read {} on node {} (started at {}ms) was never answered", id,
                              read.node, read.start_ms));
    }
  }
}

SimResult Simulation::Run() {
  Trace('A', kNoNode,
        fmt::format("seed {} voters {} observers {} election {}ms heartbeat {}ms append {}B "
                    "chunk {}B inflight {} compact every {}{} retain",
                    config_.seed, config_.voters, observers_, options_.election_timeout_ms,
                    options_.heartbeat_interval_ms, options_.max_append_bytes,
                    options_.snapshot_chunk_bytes, options_.max_inflight_appends, compact_every_,
                    compact_in_callback_ ? " (in OnCommit)" : ""));
  for (auto& n : nodes_) Open(*n);
  Schedule(now_ + Between(1, client_gap_ms_), Action{ActionKind::kClient});
  Schedule(now_ + Between(1, fault_gap_ms_), Action{ActionKind::kFault});
  bool done = false;
  while (!checker_->failed()) {
    ++step_;
    if (step_ > config_.max_steps) {
      Fail(fmt::format("no end after {} steps", config_.max_steps));
      break;
    }
    if (phase_ == Phase::kFault && step_ > config_.fault_steps) {
      Heal();
    } else {
      int64_t t_message = in_flight_.empty() ? kNever : in_flight_.begin()->first.first;
      int64_t t_action = actions_.empty() ? kNever : actions_.begin()->first.first;
      int64_t t_tick = kNever;
      SimNode* ticker = nullptr;
      for (auto& n : nodes_) {
        if (n->node == nullptr || n->fatal) continue;
        int64_t t = std::max({now_, n->node->NextTickMs(), n->paused_until});
        if (t < t_tick) {
          t_tick = t;
          ticker = n.get();
        }
      }
      int64_t t = std::min({t_message, t_action, t_tick});
      if (t == kNever) {
        Fail("nothing left to happen: no message, action or tick");
        break;
      }
      if (phase_ == Phase::kHeal && t > heal_deadline_ms_) {
        now_ = heal_deadline_ms_;
        Fail(fmt::format(
            "liveness: {}ms ({} election timeouts + {} round trips for node {} to catch up) "
            "after healing, no new proposal was applied on every node (leader: {}; {})",
            now_ - heal_start_ms_, config_.heal_timeouts, heal_catch_up_.round_trips,
            heal_catch_up_.node,
            CurrentLeader() == nullptr ? "none" : std::to_string(CurrentLeader()->id),
            LivenessLaggards()));
        break;
      }
      now_ = std::max(now_, t);
      if (t == t_action) {
        auto handle = actions_.extract(actions_.begin());
        DoAction(handle.mapped());
      } else if (t == t_message) {
        Deliver();
      } else {
        TickNode(*ticker);
      }
    }
    EndOfStep();
    if (phase_ == Phase::kHeal && !checker_->failed()) {
      DriveLiveness();
      if (LivenessDone()) {
        done = true;
        break;
      }
    }
  }
  if (done) {
    stats_.liveness_ms = now_ - heal_start_ms_;
    FinalChecks();
  }

  SimResult result;
  result.voters = config_.voters;
  result.observers = observers_;
  stats_.steps = step_;
  stats_.virtual_ms = now_;
  stats_.committed = checker_->committed_end();
  stats_.leaders = checker_->leaders_seen();
  result.stats = stats_;
  result.trace_hash = Mix(trace_hash_, static_cast<uint64_t>(checker_->committed_end()));
  if (checker_->committed_end() > 0) {
    result.trace_hash = Mix(result.trace_hash, checker_->HashAt(checker_->committed_end()));
  }
  result.trace = std::move(full_trace_);
  if (checker_->failed()) {
    result.ok = false;
    result.violation = checker_->failure();
    result.failed_step = step_;
    std::string report = fmt::format(
        "seed={} nodes={} observers={}: violation at step {} ({}ms)"
        "\n  {}\nlast events:\n",
        config_.seed, config_.voters, observers_, step_, now_, result.violation);
    for (size_t i = 0; i < tail_.size(); ++i) {
      report += "  " + FormatEvent(tail_[(tail_next_ + i) % tail_.size()]) + "\n";
    }
    report += "replay: " + ReplayCommand(config_) + "\n";
    result.report = std::move(report);
  }
  return result;
}

}  // namespace

SimResult RunSimulation(const SimConfig& config) {
  Simulation sim(config);
  return sim.Run();
}

std::string ReplayCommand(const SimConfig& config) {
  std::string cmd = fmt::format("runnel-raft-soak --nodes {} --seed {} --steps {}", config.voters,
                                config.seed, config.fault_steps);
  if (config.observers >= 0) cmd += fmt::format(" --observers {}", config.observers);
  return cmd + " --trace";
}

}  // namespace runnel::controllerd::raft::sim
