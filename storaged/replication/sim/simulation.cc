#include "storaged/replication/sim/simulation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include "storaged/replication/epoch_history.h"
#include "storaged/replication/follower_state.h"
#include "storaged/replication/leader_state.h"
#include "storaged/replication/partition_election.h"

namespace runnel::storaged::replication::sim {
namespace {

using protocol::ErrorCode;

constexpr int64_t kTickMs = 20;
constexpr int64_t kHeartbeatMs = 50;
constexpr int64_t kSessionTimeoutMs = 300;
constexpr int64_t kBroadcastMs = 100;
constexpr int64_t kFetchTimeoutMs = 200;
constexpr int64_t kProposalResendMs = 200;
constexpr int64_t kProduceTimeoutMs = 2000;
constexpr int64_t kLagTimeMaxMs = 150;  // replica.lag.time.max.ms, scaled to the sim
constexpr size_t kMaxFetchRecords = 8;

struct Rec {
  int32_t epoch = 0;
  int64_t value = 0;
  bool operator==(const Rec&) const = default;
};

enum class MsgKind {
  kFetch,
  kFetchAnswer,
  kAlterPartition,
  kAlterPartitionAnswer,
  kMetadata,
  kHeartbeat
};

struct Msg {
  MsgKind kind = MsgKind::kFetch;
  int from = 0;
  int to = 0;
  int from_incarnation = 0;
  int to_incarnation = 0;
  FollowerFetch fetch;                 // kFetch, and echoed in kFetchAnswer
  FetchAnswer answer;                  // kFetchAnswer
  int32_t answer_leader_epoch = 0;     // kFetchAnswer: the leader epoch that answered
  std::vector<Rec> records;            // kFetchAnswer
  IsrProposal proposal;                // kAlterPartition(+Answer)
  ErrorCode error = ErrorCode::kNone;  // kAlterPartitionAnswer
  PartitionRegistration partition;     // kAlterPartitionAnswer, kMetadata
  bool unclean_restart = false;        // kHeartbeat
  bool registration = false;           // kMetadata: the answer to an unclean restart's heartbeat
};

enum class EventKind {
  kDeliver,
  kReplicaTick,
  kControllerTick,
  kProduce,
  kConsume,
  kFault,
  kRestart,
  kHeal
};

struct Event {
  EventKind kind = EventKind::kDeliver;
  int node = 0;
  std::unique_ptr<Msg> msg;  // kDeliver
};

// An event in the queue: ordered by time, then by scheduling order.
struct Queued {
  int64_t at = 0;
  uint64_t seq = 0;
  Event event;
};

// For std::push_heap / pop_heap: the earliest event on top.
bool Later(const Queued& a, const Queued& b) { return a.at != b.at ? a.at > b.at : a.seq > b.seq; }

struct Replica {
  bool up = true;
  int incarnation = 0;
  std::vector<Rec> log;
  int64_t flushed = 0;
  bool failed = false;  // kKafkaUnflushed: lost its unflushed tail, not back in the ISR yet
  EpochHistory epochs;
  std::optional<LeaderState> leader;
  std::optional<FollowerState> follower;
  PartitionRegistration known;
  bool fetch_in_flight = false;
  int64_t fetch_sent_ms = 0;
  int64_t proposal_sent_ms = 0;
  int64_t last_heartbeat_ms = -kHeartbeatMs;
  // After a restart: heartbeats say so, and records are ignored until the controller's
  // answer (it has then moved leadership and the ISR away from the old incarnation).
  bool report_unclean_restart = false;
  int64_t log_verified = 0;           // checker: log[0, this) equals the committed sequence
  int64_t hw_verified = 0;            // checker: the same, below the high watermark
  int32_t checked_leader_epoch = -1;  // checker: the leader epoch and high watermark seen
  int64_t checked_leader_hw = 0;      // last step, for "never moves back"

  int64_t end() const { return static_cast<int64_t>(log.size()); }
  int64_t HighWatermark() const {
    if (leader) return leader->high_watermark();
    if (follower) return follower->high_watermark();
    return 0;
  }
};

struct PendingProduce {
  int replica = 0;
  int32_t leader_epoch = 0;
  int64_t offset = 0;
  int64_t value = 0;
  int64_t sent_ms = 0;
};

class Simulation {
 public:
  explicit Simulation(const SimConfig& config)
      : config_(config), rng_(config.seed), controller_id_(config.replicas) {}

  SimResult Run();

 private:
  // ---- plumbing
  int64_t Rand(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  void Schedule(int64_t at, Event e) {
    queue_.push_back(Queued{at, seq_++, std::move(e)});
    std::push_heap(queue_.begin(), queue_.end(), Later);
  }
  void Trace(const std::string& line);
  void Fail(const std::string& what);
  bool Cut(int a, int b) const;
  bool NodeUp(int node) const { return node == controller_id_ || replicas_[node].up; }
  int Incarnation(int node) const {
    return node == controller_id_ ? 0 : replicas_[node].incarnation;
  }
  void Send(Msg m);
  bool Eligible(int32_t b) const { return !fenced_.contains(b); }

  // ---- replicas
  void ReplicaTick(int r);
  void OnMessage(int r, const Msg& m);
  void OnRecord(int r, const PartitionRegistration& p);
  void OnFetchAnswer(int r, const Msg& m);
  void Truncate(int r, int64_t end);
  void Crash(int r);
  void Restart(int r);
  void SendProposal(int r, const IsrProposal& p);
  // The offset reads and acks may go up to on a replica that leads (the HW; a plant
  // changes it).
  int64_t ReadableEnd(const Replica& rep) const;
  // The end the leader counts for the high watermark.
  int64_t DurableEnd(const Replica& rep) const {
    return config_.durability == Durability::kKafkaUnflushed ? rep.end() : rep.flushed;
  }

  // ---- controller
  void ControllerTick();
  void OnControllerMessage(const Msg& m);
  void SetRecord(const PartitionRegistration& p, const std::string& why);
  void Broadcast();
  ElectionOptions Options() const { return {}; }
  void Fence(int32_t b);
  void Unfence(int32_t b);
  // A planted wrong election: the first live replica, whatever the ISR.
  void PlantedElection(PartitionRegistration& p) const;

  // ---- clients
  void Produce();
  void CheckProduces();
  void Consume();
  void Fault();

  // ---- invariants
  void CheckInvariants();
  bool CheckAgainstCommitted(int r, int64_t& verified, int64_t upto, const char* what);

  SimConfig config_;
  std::mt19937_64 rng_;
  int controller_id_;
  int64_t now_ = 0;
  uint64_t seq_ = 0;
  std::vector<Queued> queue_;  // a heap (Later)
  std::vector<Replica> replicas_;
  PartitionRegistration record_;
  std::set<int32_t> fenced_;
  std::map<int32_t, int64_t> last_heartbeat_;
  int64_t last_broadcast_ms_ = 0;
  std::set<std::pair<int, int>> cuts_;
  int64_t next_value_ = 1;
  // Waiting acks=all produces by (replica, leader epoch), in offset (and sending) order.
  std::map<std::pair<int, int32_t>, std::deque<PendingProduce>> produces_;
  int64_t consumer_position_ = 0;
  // checker
  std::vector<int64_t> committed_;  // values
  std::map<int32_t, int> leader_of_epoch_;
  std::vector<int32_t> known_epoch_;
  int32_t controller_epoch_seen_ = 0;
  // results
  SimResult result_;
  std::deque<std::string> tail_;
  bool failed_ = false;
};

void Simulation::Trace(const std::string& line) {
  std::string full = fmt::format("t={} {}", now_, line);
  for (char c : full) {
    result_.trace_hash ^= static_cast<unsigned char>(c);
    result_.trace_hash *= 1099511628211ULL;
  }
  if (config_.trace_sink) config_.trace_sink(full);
  if (config_.keep_trace) result_.trace.push_back(full);
  tail_.push_back(std::move(full));
  if (tail_.size() > config_.trace_tail) tail_.pop_front();
}

void Simulation::Fail(const std::string& what) {
  if (failed_) return;
  failed_ = true;
  result_.ok = false;
  std::string report = fmt::format(
      "replication sim seed {} ({} replicas, min.insync {}) failed at "
      "step {} t={}ms: {}\n  record: {}\n",
      config_.seed, config_.replicas, config_.min_insync_replicas, result_.stats.steps, now_, what,
      record_.ToString());
  for (int r = 0; r < config_.replicas; ++r) {
    const Replica& rep = replicas_[r];
    report += fmt::format("  replica {}: {} end {} flushed {} hw {} role {}\n", r,
                          rep.up ? "up" : "down", rep.end(), rep.flushed, rep.HighWatermark(),
                          rep.leader     ? fmt::format("leader e{}", rep.leader->leader_epoch())
                          : rep.follower ? fmt::format("follower e{}", rep.follower->leader_epoch())
                                         : std::string("none"));
  }
  report += fmt::format("  committed: {} records\n  trace tail:\n", committed_.size());
  for (const std::string& l : tail_) report += "    " + l + "\n";
  report += "  replay: " + ReplayCommand(config_) + "\n";
  result_.report = report;
}

bool Simulation::Cut(int a, int b) const {
  return cuts_.contains({std::min(a, b), std::max(a, b)});
}

void Simulation::Send(Msg m) {
  m.from_incarnation = Incarnation(m.from);
  m.to_incarnation = Incarnation(m.to);
  if (!NodeUp(m.from) || !NodeUp(m.to) || Cut(m.from, m.to) || Chance(0.02)) {
    ++result_.stats.dropped;
    return;
  }
  int64_t delay = Chance(0.05) ? Rand(50, 300) : Rand(1, 20);
  Event e;
  e.kind = EventKind::kDeliver;
  e.node = m.to;
  e.msg = std::make_unique<Msg>(std::move(m));
  Schedule(now_ + delay, std::move(e));
}

// ---------------------------------------------------------------- replicas

int64_t Simulation::ReadableEnd(const Replica& rep) const {
  if (config_.plant == Plant::kHighWatermarkIsLogEnd) return rep.end();
  return rep.HighWatermark();
}

void Simulation::SendProposal(int r, const IsrProposal& p) {
  Replica& rep = replicas_[r];
  rep.proposal_sent_ms = now_;
  Msg m;
  m.kind = MsgKind::kAlterPartition;
  m.from = r;
  m.to = controller_id_;
  m.proposal = p;
  Trace(fmt::format("r{} proposes isr [{}] (e{} p{})", r, fmt::join(p.new_isr, ","), p.leader_epoch,
                    p.partition_epoch));
  Send(std::move(m));
}

void Simulation::ReplicaTick(int r) {
  Replica& rep = replicas_[r];
  if (!rep.up) return;
  Schedule(now_ + kTickMs, Event{EventKind::kReplicaTick, r, {}});
  if (now_ - rep.last_heartbeat_ms >= kHeartbeatMs) {
    rep.last_heartbeat_ms = now_;
    Msg m;
    m.kind = MsgKind::kHeartbeat;
    m.from = r;
    m.to = controller_id_;
    m.unclean_restart = rep.report_unclean_restart;
    Send(std::move(m));
  }
  bool unflushed_model = config_.durability == Durability::kKafkaUnflushed;
  if (Chance(unflushed_model ? 0.1 : 0.5)) rep.flushed = rep.end();
  if (rep.leader) {
    if (std::optional<IsrProposal> p = rep.leader->MaybeShrinkIsr(now_)) {
      SendProposal(r, *p);
    } else if (rep.leader->pending() && now_ - rep.proposal_sent_ms >= kProposalResendMs) {
      SendProposal(r, *rep.leader->pending());
    }
    rep.leader->OnLocalEnd(rep.end(), DurableEnd(rep), now_);
  } else if (rep.follower) {
    if (rep.fetch_in_flight && now_ - rep.fetch_sent_ms < kFetchTimeoutMs) return;
    // kFlushedOnIsr: what a follower reports in a fetch is on its disk.
    if (!unflushed_model) rep.flushed = rep.end();
    Msg m;
    m.kind = MsgKind::kFetch;
    m.from = r;
    m.to = rep.follower->leader();
    m.fetch = rep.follower->NextFetch(rep.epochs, rep.end());
    if (config_.plant == Plant::kNoDivergenceCheck) m.fetch.last_fetched_epoch = -1;
    rep.fetch_in_flight = true;
    rep.fetch_sent_ms = now_;
    Send(std::move(m));
  }
}

void Simulation::OnRecord(int r, const PartitionRegistration& p) {
  Replica& rep = replicas_[r];
  if (p.partition_epoch <= rep.known.partition_epoch) return;
  rep.known = p;
  if (p.leader == r) {
    if (rep.leader && rep.leader->leader_epoch() == p.leader_epoch) {
      LeaderState::RecordUpdate u = rep.leader->OnPartitionRecord(p, now_);
      if (u == LeaderState::RecordUpdate::kApplied) {
        Trace(fmt::format("r{} leader takes {}", r, p.ToString()));
      }
      return;
    }
    int64_t hw = rep.HighWatermark();
    rep.epochs.Assign(p.leader_epoch, rep.end());
    rep.follower.reset();
    ReplicationConfig rc;
    rc.replica_lag_time_max_ms = kLagTimeMaxMs;
    rc.min_insync_replicas = config_.min_insync_replicas;
    rep.leader.emplace(r, p, rep.end(), DurableEnd(rep), hw, now_, rc);
    ++result_.stats.leaders;
    Trace(fmt::format("r{} becomes leader e{} at end {} hw {}", r, p.leader_epoch, rep.end(),
                      rep.leader->high_watermark()));
    auto [it, inserted] = leader_of_epoch_.emplace(p.leader_epoch, r);
    if (!inserted && it->second != r) {
      Fail(fmt::format("two leaders in epoch {}: r{} and r{}", p.leader_epoch, it->second, r));
    }
    return;
  }
  if (rep.leader)
    Trace(fmt::format("r{} resigns leadership of e{}", r, rep.leader->leader_epoch()));
  rep.leader.reset();
  if (p.leader == kNoLeader) {
    rep.follower.reset();
    return;
  }
  if (!rep.follower || rep.follower->leader_epoch() != p.leader_epoch ||
      rep.follower->leader() != p.leader) {
    int64_t hw = rep.HighWatermark();
    rep.follower.emplace(r, p.leader, p.leader_epoch, hw, rep.end());
    rep.fetch_in_flight = false;
    Trace(fmt::format("r{} follows r{} in e{}", r, p.leader, p.leader_epoch));
  }
}

void Simulation::Truncate(int r, int64_t end) {
  Replica& rep = replicas_[r];
  if (end >= rep.end()) return;
  ++result_.stats.truncations;
  Trace(fmt::format("r{} truncates {} -> {}", r, rep.end(), end));
  rep.log.resize(static_cast<size_t>(end));
  rep.flushed = std::min(rep.flushed, end);
  rep.epochs.TruncateFromEnd(end);
  rep.log_verified = std::min(rep.log_verified, end);
  rep.hw_verified = std::min(rep.hw_verified, end);
  if (rep.follower) rep.follower->OnTruncated(end);
}

void Simulation::OnFetchAnswer(int r, const Msg& m) {
  Replica& rep = replicas_[r];
  rep.fetch_in_flight = false;
  if (!rep.follower || rep.follower->leader() != m.from ||
      rep.follower->leader_epoch() != m.fetch.current_leader_epoch) {
    return;  // an answer for an earlier role
  }
  const FetchAnswer& a = m.answer;
  if (a.error != ErrorCode::kNone) return;  // retried at the next tick
  // Only the answer to the fetch we would send now (the planted rule sends no epoch).
  FollowerFetch sent = m.fetch;
  if (config_.plant == Plant::kNoDivergenceCheck) {
    sent.last_fetched_epoch = rep.follower->NextFetch(rep.epochs, rep.end()).last_fetched_epoch;
  }
  if (!rep.follower->IsCurrent(sent, rep.epochs, rep.end())) return;
  if (a.diverging_epoch) {
    FollowerState::Truncation t =
        FollowerState::TruncationFor(*a.diverging_epoch, rep.epochs, rep.end());
    Trace(fmt::format("r{} diverges from r{}: leader (e{} end {}), truncate to {}{}", r, m.from,
                      a.diverging_epoch->epoch, a.diverging_epoch->end_offset, t.offset,
                      t.complete ? "" : " (intermediate)"));
    Truncate(r, t.offset);
    return;
  }
  for (const Rec& rec : m.records) {
    rep.epochs.Assign(rec.epoch, rep.end());
    rep.log.push_back(rec);
  }
  rep.follower->OnFetchAnswer(a.high_watermark, rep.end());
}

void Simulation::OnMessage(int r, const Msg& m) {
  Replica& rep = replicas_[r];
  switch (m.kind) {
    case MsgKind::kMetadata:
    case MsgKind::kAlterPartitionAnswer:
      if (m.registration) rep.report_unclean_restart = false;
      if (rep.report_unclean_restart) return;
      if (m.kind == MsgKind::kAlterPartitionAnswer && m.error != ErrorCode::kNone) {
        if (rep.leader) rep.leader->OnAlterPartitionError(m.error, m.proposal);
        Trace(fmt::format("r{} proposal refused: {}", r, protocol::ErrorName(m.error)));
      }
      OnRecord(r, m.partition);
      return;
    case MsgKind::kFetch: {
      Msg a;
      a.kind = MsgKind::kFetchAnswer;
      a.from = r;
      a.to = m.from;
      a.fetch = m.fetch;
      if (!rep.leader) {
        a.answer.error = ErrorCode::kNotLeaderOrFollower;
        Send(std::move(a));
        return;
      }
      a.answer_leader_epoch = rep.leader->leader_epoch();
      a.answer = rep.leader->OnFollowerFetch(m.fetch, rep.epochs, 0, now_);
      if (a.answer.serve_records) {
        for (int64_t o = m.fetch.fetch_offset; o < rep.end() && a.records.size() < kMaxFetchRecords;
             ++o) {
          a.records.push_back(rep.log[static_cast<size_t>(o)]);
        }
      }
      if (a.answer.proposal) SendProposal(r, *a.answer.proposal);
      Send(std::move(a));
      return;
    }
    case MsgKind::kFetchAnswer:
      OnFetchAnswer(r, m);
      return;
    case MsgKind::kAlterPartition:
    case MsgKind::kHeartbeat:
      return;
  }
}

void Simulation::Crash(int r) {
  Replica& rep = replicas_[r];
  ++result_.stats.crashes;
  if (config_.durability == Durability::kKafkaUnflushed) {
    // The failure assumption: fewer than min.insync.replicas replicas lose data at once;
    // past that, a crash keeps the page cache (a process crash, not a power loss).
    int failed = 0;
    for (const Replica& other : replicas_) failed += other.failed ? 1 : 0;
    if (failed + 1 < config_.min_insync_replicas && rep.flushed < rep.end()) {
      rep.failed = true;
    } else {
      rep.flushed = rep.end();
    }
  }
  Trace(fmt::format("r{} crashes (end {}, flushed {})", r, rep.end(), rep.flushed));
  rep.up = false;
  ++rep.incarnation;
  rep.log.resize(static_cast<size_t>(rep.flushed));
  rep.epochs.TruncateFromEnd(rep.flushed);
  rep.log_verified = std::min(rep.log_verified, rep.flushed);
  rep.hw_verified = 0;
  rep.leader.reset();
  rep.follower.reset();
  rep.known = PartitionRegistration{};
  rep.known.partition_epoch = -1;
  rep.fetch_in_flight = false;
  Schedule(now_ + Rand(50, 600), Event{EventKind::kRestart, r, {}});
}

void Simulation::Restart(int r) {
  Replica& rep = replicas_[r];
  rep.up = true;
  rep.report_unclean_restart = true;
  rep.last_heartbeat_ms = now_ - kHeartbeatMs;
  Trace(fmt::format("r{} restarts with end {}", r, rep.end()));
  Schedule(now_, Event{EventKind::kReplicaTick, r, {}});
}

// ---------------------------------------------------------------- controller

void Simulation::PlantedElection(PartitionRegistration& p) const {
  for (int32_t b : p.replicas) {
    if (Eligible(b)) {
      if (p.leader != b) {
        p.leader = b;
        ++p.leader_epoch;
      }
      if (!p.InIsr(b)) p.isr = {b};
      return;
    }
  }
}

void Simulation::SetRecord(const PartitionRegistration& p, const std::string& why) {
  if (p == record_) return;
  PartitionRegistration next = p;
  if (config_.plant == Plant::kElectOutsideIsr &&
      (next.leader == kNoLeader || next.leader != record_.leader)) {
    PartitionRegistration planted = next;
    PlantedElection(planted);
    next = planted;
  }
  if (next.leader_epoch < record_.leader_epoch) {
    Fail(fmt::format("controller leader epoch went back: {} -> {}", record_.leader_epoch,
                     next.leader_epoch));
  }
  if (!(next.isr == record_.isr)) ++result_.stats.isr_changes;
  // A failed replica has recovered once an AlterPartition brings it back into the ISR (it
  // then holds everything below the high watermark).
  for (int32_t b : next.isr) {
    Replica& rep = replicas_[static_cast<size_t>(b)];
    if (rep.failed && rep.up && !record_.InIsr(b)) rep.failed = false;
  }
  record_ = next;
  Trace(fmt::format("controller: {} -> {}", why, record_.ToString()));
  Broadcast();
}

void Simulation::Broadcast() {
  last_broadcast_ms_ = now_;
  for (int r = 0; r < config_.replicas; ++r) {
    Msg m;
    m.kind = MsgKind::kMetadata;
    m.from = controller_id_;
    m.to = r;
    m.partition = record_;
    Send(std::move(m));
  }
}

void Simulation::Fence(int32_t b) {
  fenced_.insert(b);
  auto eligible = [this](int32_t x) { return Eligible(x); };
  if (std::optional<PartitionRegistration> p = OnBrokerFenced(record_, b, eligible, Options())) {
    SetRecord(*p, fmt::format("r{} fenced", b));
  } else {
    Trace(fmt::format("controller: r{} fenced", b));
  }
}

void Simulation::Unfence(int32_t b) {
  if (!fenced_.erase(b) && record_.leader != kNoLeader) return;
  auto eligible = [this](int32_t x) { return Eligible(x); };
  if (std::optional<PartitionRegistration> p = OnBrokerUnfenced(record_, eligible, Options())) {
    SetRecord(*p, fmt::format("r{} unfenced", b));
  } else {
    Trace(fmt::format("controller: r{} unfenced", b));
  }
}

void Simulation::ControllerTick() {
  Schedule(now_ + kTickMs, Event{EventKind::kControllerTick, controller_id_, {}});
  for (int32_t b = 0; b < config_.replicas; ++b) {
    if (!fenced_.contains(b) && now_ - last_heartbeat_[b] > kSessionTimeoutMs) Fence(b);
  }
  if (now_ - last_broadcast_ms_ >= kBroadcastMs) Broadcast();
}

void Simulation::OnControllerMessage(const Msg& m) {
  auto eligible = [this](int32_t x) { return Eligible(x); };
  if (m.kind == MsgKind::kHeartbeat) {
    last_heartbeat_[m.from] = now_;
    if (m.unclean_restart) {
      // KIP-966: the broker's unflushed data may be gone, so it leaves the ISR first; its
      // old incarnation's leadership moves (a new leader epoch) before it acts again.
      auto others = [&](int32_t x) { return x != m.from && Eligible(x); };
      if (std::optional<PartitionRegistration> p =
              OnBrokerUncleanRestart(record_, m.from, others, Options())) {
        SetRecord(*p, fmt::format("r{} restarted uncleanly", m.from));
      }
      Unfence(m.from);
      Msg a;
      a.kind = MsgKind::kMetadata;
      a.from = controller_id_;
      a.to = m.from;
      a.partition = record_;
      a.registration = true;
      Send(std::move(a));
      return;
    }
    if (fenced_.contains(m.from)) Unfence(m.from);
    return;
  }
  if (m.kind != MsgKind::kAlterPartition) return;
  AlterPartitionRequest req{m.from, m.proposal.leader_epoch, m.proposal.partition_epoch,
                            m.proposal.new_isr};
  AlterPartitionResult res = AlterPartition(record_, req, eligible);
  if (res.error == ErrorCode::kNone)
    SetRecord(res.partition, fmt::format("r{} alters isr", m.from));
  Msg a;
  a.kind = MsgKind::kAlterPartitionAnswer;
  a.from = controller_id_;
  a.to = m.from;
  a.error = res.error;
  a.proposal = m.proposal;
  a.partition = record_;
  Send(std::move(a));
}

// ---------------------------------------------------------------- clients

void Simulation::Produce() {
  Schedule(now_ + Rand(5, 20), Event{EventKind::kProduce, 0, {}});
  std::vector<int> leaders;
  for (int r = 0; r < config_.replicas; ++r) {
    if (replicas_[r].up && replicas_[r].leader) leaders.push_back(r);
  }
  if (leaders.empty()) return;
  int r = leaders[static_cast<size_t>(Rand(0, static_cast<int64_t>(leaders.size()) - 1))];
  Replica& rep = replicas_[r];
  if (rep.leader->CheckAppend(true) != ErrorCode::kNone) {
    ++result_.stats.not_enough_replicas;
    return;
  }
  PendingProduce p{r, rep.leader->leader_epoch(), rep.end(), next_value_++, now_};
  rep.log.push_back(Rec{p.leader_epoch, p.value});
  rep.leader->OnLocalEnd(rep.end(), DurableEnd(rep), now_);
  ++result_.stats.produced;
  produces_[{r, p.leader_epoch}].push_back(p);
}

void Simulation::CheckProduces() {
  for (auto group = produces_.begin(); group != produces_.end();) {
    const auto [r, epoch] = group->first;
    std::deque<PendingProduce>& waiting = group->second;
    const Replica& rep = replicas_[static_cast<size_t>(r)];
    bool leads = rep.up && rep.leader && rep.leader->leader_epoch() == epoch;
    if (!leads) waiting.clear();  // failed: the client retries elsewhere (a new record)
    // Acks come in offset order: the first one not done stops the scan (but times out).
    while (!waiting.empty()) {
      const PendingProduce& p = waiting.front();
      LeaderState::AckCheck ack = rep.leader->CheckAcksAll(p.offset);
      if (config_.plant == Plant::kHighWatermarkIsLogEnd) ack.done = ReadableEnd(rep) > p.offset;
      if (config_.plant == Plant::kAckBeforeReplicated) ack.done = true;
      if (!ack.done) {
        if (now_ - p.sent_ms <= kProduceTimeoutMs) break;
        waiting.pop_front();
        continue;
      }
      if (ack.error == ErrorCode::kNone) {
        ++result_.stats.acked;
        // The acknowledged record becomes part of the committed sequence, with every offset
        // below it.
        size_t o = static_cast<size_t>(p.offset);
        for (size_t i = committed_.size(); i <= o && i < rep.log.size(); ++i) {
          committed_.push_back(rep.log[i].value);
        }
        if (o >= committed_.size() || committed_[o] != p.value) {
          Fail(
              fmt::format("acked value {} at offset {} from r{} differs from the committed "
                          "sequence",
                          p.value, o, r));
          return;
        }
        Trace(fmt::format("ack value {} at offset {} from r{} e{}", p.value, p.offset, r, epoch));
      } else {
        ++result_.stats.not_enough_after_append;
      }
      waiting.pop_front();
    }
    group = waiting.empty() ? produces_.erase(group) : std::next(group);
  }
}

void Simulation::Consume() {
  Schedule(now_ + Rand(15, 40), Event{EventKind::kConsume, 0, {}});
  std::vector<int> leaders;
  for (int r = 0; r < config_.replicas; ++r) {
    if (replicas_[r].up && replicas_[r].leader) leaders.push_back(r);
  }
  if (leaders.empty()) return;
  int r = leaders[static_cast<size_t>(Rand(0, static_cast<int64_t>(leaders.size()) - 1))];
  const Replica& rep = replicas_[r];
  int64_t end = ReadableEnd(rep);
  if (end > rep.end())
    Fail(fmt::format("r{} would serve reads up to {} past its end {}", r, end, rep.end()));
  if (config_.plant == Plant::kNone && end > rep.HighWatermark()) {
    Fail(fmt::format("consumer reads up to {} above r{}'s high watermark {}", end, r,
                     rep.HighWatermark()));
  }
  for (int64_t o = consumer_position_; o < end; ++o) {
    size_t i = static_cast<size_t>(o);
    int64_t value = rep.log[i].value;
    if (i < committed_.size()) {
      if (committed_[i] != value) {
        Fail(
            fmt::format("consumer read value {} at offset {} from r{}, but {} was read or "
                        "acknowledged there before",
                        value, o, r, committed_[i]));
        return;
      }
    } else {
      committed_.push_back(value);
    }
    ++result_.stats.consumed;
  }
  if (end > consumer_position_) {
    Trace(fmt::format("consumer reads [{}, {}) from r{}", consumer_position_, end, r));
    consumer_position_ = end;
  }
}

void Simulation::Fault() {
  Schedule(now_ + Rand(50, 400), Event{EventKind::kFault, 0, {}});
  int64_t kind = Rand(0, 9);
  if (kind < 3) {
    std::vector<int> up;
    for (int r = 0; r < config_.replicas; ++r) {
      if (replicas_[r].up) up.push_back(r);
    }
    if (up.empty()) return;
    Crash(up[static_cast<size_t>(Rand(0, static_cast<int64_t>(up.size()) - 1))]);
  } else if (kind < 7 && cuts_.empty()) {
    // A network partition: each node (the controller too) lands on side 0 or 1.
    std::vector<int> side(static_cast<size_t>(controller_id_ + 1));
    for (int& s : side) s = static_cast<int>(Rand(0, 1));
    for (int a = 0; a <= controller_id_; ++a) {
      for (int b = a + 1; b <= controller_id_; ++b) {
        if (side[static_cast<size_t>(a)] != side[static_cast<size_t>(b)]) cuts_.insert({a, b});
      }
    }
    if (cuts_.empty()) return;
    ++result_.stats.partitions;
    Trace(fmt::format("network partition: sides [{}]", fmt::join(side, ",")));
    Schedule(now_ + Rand(100, 1000), Event{EventKind::kHeal, 0, {}});
  }
}

// ---------------------------------------------------------------- invariants

bool Simulation::CheckAgainstCommitted(int r, int64_t& verified, int64_t upto, const char* what) {
  const Replica& rep = replicas_[r];
  for (int64_t o = verified; o < upto; ++o) {
    size_t i = static_cast<size_t>(o);
    if (i >= rep.log.size()) {
      Fail(fmt::format("r{} ({}) lacks committed offset {}: its log ends at {}", r, what, o,
                       rep.end()));
      return false;
    }
    if (i < committed_.size()) {
      if (committed_[i] != rep.log[i].value) {
        Fail(fmt::format("r{} ({}) holds value {} at offset {}, committed is {}", r, what,
                         rep.log[i].value, o, committed_[i]));
        return false;
      }
    } else {
      committed_.push_back(rep.log[i].value);
    }
  }
  verified = std::max(verified, upto);
  return true;
}

void Simulation::CheckInvariants() {
  if (record_.leader_epoch < controller_epoch_seen_) {
    Fail("controller leader epoch went back");
    return;
  }
  controller_epoch_seen_ = record_.leader_epoch;
  for (int r = 0; r < config_.replicas && !failed_; ++r) {
    Replica& rep = replicas_[r];
    if (!rep.up) continue;
    if (rep.known.leader_epoch < known_epoch_[static_cast<size_t>(r)] &&
        rep.known.partition_epoch >= 0) {
      Fail(fmt::format("r{} went back from leader epoch {} to {}", r,
                       known_epoch_[static_cast<size_t>(r)], rep.known.leader_epoch));
      return;
    }
    known_epoch_[static_cast<size_t>(r)] =
        std::max(known_epoch_[static_cast<size_t>(r)], rep.known.leader_epoch);
    int64_t hw = rep.HighWatermark();
    if (hw > rep.end()) {
      Fail(fmt::format("r{} high watermark {} above its log end {}", r, hw, rep.end()));
      return;
    }
    // A replica leads an epoch at most once (a restart waits for a new epoch), so the HW
    // of its one LeaderState for that epoch is the epoch's.
    if (rep.leader) {
      int32_t epoch = rep.leader->leader_epoch();
      if (epoch == rep.checked_leader_epoch && hw < rep.checked_leader_hw) {
        Fail(fmt::format("r{} high watermark went back in epoch {}: {} -> {}", r, epoch,
                         rep.checked_leader_hw, hw));
        return;
      }
      rep.checked_leader_epoch = epoch;
      rep.checked_leader_hw = hw;
    }
    // Invariant 3: agreement below the high watermark.
    if (!CheckAgainstCommitted(r, rep.hw_verified, hw, "below its high watermark")) return;
    // Invariant 4: the current leader holds everything committed.
    if (rep.leader && record_.leader == r && rep.leader->leader_epoch() == record_.leader_epoch) {
      if (!CheckAgainstCommitted(r, rep.log_verified, static_cast<int64_t>(committed_.size()),
                                 "the current leader")) {
        return;
      }
    }
  }
  result_.stats.committed = static_cast<int64_t>(committed_.size());
}

// ---------------------------------------------------------------- run

SimResult Simulation::Run() {
  replicas_.resize(static_cast<size_t>(config_.replicas));
  known_epoch_.assign(static_cast<size_t>(config_.replicas), 0);
  record_.leader = 0;
  for (int r = 0; r < config_.replicas; ++r) {
    record_.replicas.push_back(r);
    record_.isr.push_back(r);
    last_heartbeat_[r] = 0;
  }
  for (int r = 0; r < config_.replicas; ++r) {
    replicas_[static_cast<size_t>(r)].known.partition_epoch = -1;
    OnRecord(r, record_);
    Schedule(Rand(0, kTickMs), Event{EventKind::kReplicaTick, r, {}});
  }
  Schedule(0, Event{EventKind::kControllerTick, controller_id_, {}});
  Schedule(Rand(1, 10), Event{EventKind::kProduce, 0, {}});
  Schedule(Rand(1, 10), Event{EventKind::kConsume, 0, {}});
  Schedule(Rand(100, 300), Event{EventKind::kFault, 0, {}});

  while (!failed_ && result_.stats.steps < config_.steps && !queue_.empty()) {
    std::pop_heap(queue_.begin(), queue_.end(), Later);
    now_ = queue_.back().at;
    Event e = std::move(queue_.back().event);
    queue_.pop_back();
    ++result_.stats.steps;
    switch (e.kind) {
      case EventKind::kDeliver: {
        const Msg& m = *e.msg;
        if (!NodeUp(m.to) || !NodeUp(m.from) || Incarnation(m.to) != m.to_incarnation ||
            Incarnation(m.from) != m.from_incarnation || Cut(m.from, m.to)) {
          ++result_.stats.dropped;
          break;
        }
        if (m.to == controller_id_) {
          OnControllerMessage(m);
        } else {
          OnMessage(m.to, m);
        }
        break;
      }
      case EventKind::kReplicaTick:
        ReplicaTick(e.node);
        break;
      case EventKind::kControllerTick:
        ControllerTick();
        break;
      case EventKind::kProduce:
        Produce();
        break;
      case EventKind::kConsume:
        Consume();
        break;
      case EventKind::kFault:
        Fault();
        break;
      case EventKind::kRestart:
        Restart(e.node);
        break;
      case EventKind::kHeal:
        cuts_.clear();
        Trace("network heals");
        break;
    }
    if (!failed_) CheckProduces();
    if (!failed_) CheckInvariants();
  }
  result_.stats.virtual_ms = now_;
  return std::move(result_);
}

}  // namespace

SimResult RunSimulation(const SimConfig& config) { return Simulation(config).Run(); }

std::string ReplayCommand(const SimConfig& config) {
  return fmt::format(
      "RUNNEL_REPLICATION_SIM_SEED={} RUNNEL_REPLICATION_SIM_REPLICAS={} "
      "RUNNEL_REPLICATION_SIM_STEPS={} storaged_replication_sim_test "
      "--gtest_filter=ReplicationSim.ReplayFromEnvironment  (or: runnel-replication-soak "
      "--replicas {} --seed {} --steps {} --trace)",
      config.seed, config.replicas, config.steps, config.replicas, config.seed, config.steps);
}

}  // namespace runnel::storaged::replication::sim
