#include "controllerd/quorum.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "common/config/config.h"
#include "common/config/quorum_voters.h"
#include "common/log/log.h"
#include "common/metrics/metrics.h"

namespace runnel::controllerd {
namespace {

const log::ModuleLogger kLog("controllerd.quorum");

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

Status ShuttingDown() { return absl::UnavailableError("the controller quorum is shutting down"); }

}  // namespace

QuorumOptions QuorumOptions::FromConfig(const config::Config& config) {
  QuorumOptions o;
  o.id = config.GetInt("node.id");
  StatusOr<std::vector<config::QuorumVoter>> voters =
      config::ParseQuorumVoters(config.Raw("controller.quorum.voters"));
  if (voters.ok()) {
    for (const config::QuorumVoter& v : *voters) o.voters.push_back(v.id);
  }
  o.election_timeout_ms = config.GetInt("controller.quorum.election.timeout.ms");
  o.observer_timeout_ms = config.GetInt("controller.quorum.fetch.timeout.ms");
  return o;
}

// The node's seams that are this object: its clock, its listener, and (for a single voter)
// a transport with nowhere to send.
class Quorum::Adapter final : public raft::Listener, public raft::Clock, public raft::Transport {
 public:
  explicit Adapter(Quorum* q) : q_(q) {}
  void OnCommit(const raft::Entry& entry) override { q_->OnCommit(entry); }
  void OnSnapshot(raft::SnapshotId id, const std::string& data) override {
    q_->OnSnapshot(id, data);
  }
  void OnRoleChange(raft::Role role, int64_t term, raft::NodeId leader) override {
    q_->OnRoleChange(role, term, leader);
  }
  void OnReadIndex(uint64_t read_id, StatusOr<int64_t> commit) override {
    q_->OnReadIndex(read_id, std::move(commit));
  }
  void OnFatal(const Status& why) override { q_->OnFatal(why); }
  int64_t NowMs() const override { return q_->NowMs(); }
  void Send(raft::Message) override {}

 private:
  Quorum* q_;
};

Quorum::Quorum(QuorumOptions options, std::unique_ptr<raft::Storage> storage,
               std::unique_ptr<raft::Transport> transport)
    : options_(std::move(options)),
      voters_(options_.voters.empty() ? std::vector<raft::NodeId>{options_.id} : options_.voters),
      storage_(std::move(storage)),
      transport_(std::move(transport)),
      adapter_(std::make_unique<Adapter>(this)) {}

Quorum::~Quorum() {  // NOLINT(bugprone-exception-escape): see quorum.h
  Stop();
  // The node goes before the transport and storage it points to.
  node_.reset();
}

int64_t Quorum::NowMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Status Quorum::Start(StateMachine* machine) {
  if (node_ != nullptr) return absl::FailedPreconditionError("the quorum is already started");
  machine_ = machine;
  raft::Options o;
  o.id = options_.id;
  o.voters = voters_;
  o.election_timeout_ms = options_.election_timeout_ms;
  // Ten heartbeats per election timeout: a follower misses several before it campaigns.
  o.heartbeat_interval_ms = std::max<int64_t>(5, options_.election_timeout_ms / 10);
  o.observer_timeout_ms = options_.observer_timeout_ms;
  if (options_.seed) {
    o.seed = *options_.seed;
  } else {
    std::random_device rd;
    o.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  raft::Transport& transport = transport_ ? *transport_ : *adapter_;
  RUNNEL_ASSIGN_OR_RETURN(node_, raft::Node::Open(o, *storage_, *adapter_, transport, *adapter_));
  if (fatal_) return *fatal_;
  PublishState();
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Quorum::Stop() {
  MutexLock stop_lock(&stop_mu_);
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    if (!dead_) dead_ = ShuttingDown();
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
  // The driver is gone: what it owned can be failed from here.
  std::vector<Item> rest;
  {
    MutexLock lock(&mu_);
    rest.swap(inbox_);
  }
  const Status why =
      fatal_ ? absl::UnavailableError(fmt::format(
                   "the controller quorum stopped after a fatal error: {}", fatal_->message()))
             : ShuttingDown();
  FailInbox(rest, why);
  FailPending(why);
  for (auto& [id, read] : reads_) read.done->set_value(why);
  reads_.clear();
  for (auto& [offset, read] : reads_waiting_apply_) read.done->set_value(why);
  reads_waiting_apply_.clear();
  {
    MutexLock lock(&state_mu_);
    if (!state_.stopped) state_.stopped = why;
    state_.leader_ready = false;
  }
  state_cv_.SignalAll();
}

void Quorum::TransferLeadershipAndStop(std::chrono::milliseconds max_wait) {
  QuorumState s = State();
  if (s.role == raft::Role::kLeader && voters_.size() > 1 && !s.stopped) {
    kLog()->info("handing leadership of term {} to another controller before stopping", s.term);
    Post(Transfer{});
    const bool moved = WaitFor(
        [&](const QuorumState& st) {
          return st.leader != raft::kNoNode && st.leader != options_.id;
        },
        std::chrono::steady_clock::now() + max_wait);
    if (moved) {
      kLog()->info("controller {} leads now", Leader());
    } else {
      kLog()->warn("no other controller took the leadership within {} ms; stopping anyway",
                   max_wait.count());
    }
  }
  Stop();
}

// ---- the inbox --------------------------------------------------------------------------

void Quorum::Post(Item item) {
  Status why;
  {
    MutexLock lock(&mu_);
    if (!stopping_ && !dead_) {
      inbox_.push_back(std::move(item));
      cv_.Signal();
      return;
    }
    why = dead_ ? *dead_ : ShuttingDown();
  }
  std::vector<Item> one;
  one.push_back(std::move(item));
  FailInbox(one, why);
}

void Quorum::Deliver(std::vector<raft::Message> messages) {
  MutexLock lock(&mu_);
  if (stopping_ || dead_) return;
  for (raft::Message& m : messages) inbox_.push_back(std::move(m));
  cv_.Signal();
}

std::future<StatusOr<int64_t>> Quorum::Propose(std::string data,
                                               std::optional<int64_t> expected_offset) {
  auto done = std::make_shared<std::promise<StatusOr<int64_t>>>();
  std::future<StatusOr<int64_t>> result = done->get_future();
  Post(Proposal{std::move(data), expected_offset, std::move(done)});
  return result;
}

std::future<StatusOr<int64_t>> Quorum::ReadIndex() {
  auto done = std::make_shared<std::promise<StatusOr<int64_t>>>();
  std::future<StatusOr<int64_t>> result = done->get_future();
  Post(Read{std::move(done)});
  return result;
}

std::future<Status> Quorum::RunOnDriver(std::function<Status(const raft::Storage&)> task) {
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  Post(Task{std::move(task), std::move(done)});
  return result;
}

void Quorum::FailInbox(std::vector<Item>& items, const Status& why) {
  for (Item& item : items) {
    std::visit(Overloaded{
                   [](raft::Message&) {},
                   [&](Proposal& p) { p.done->set_value(why); },
                   [&](Read& r) { r.done->set_value(why); },
                   [](Transfer&) {},
                   [&](Task& t) { t.done->set_value(why); },
               },
               item);
  }
  items.clear();
}

void Quorum::FailPending(const Status& why, int64_t below) {
  while (!pending_.empty() && pending_.begin()->first < below) {
    pending_.begin()->second.done->set_value(why);
    pending_.erase(pending_.begin());
  }
}

// ---- the driver thread ------------------------------------------------------------------

void Quorum::Loop() {
  while (true) {
    std::vector<Item> items;
    const int64_t next_tick = node_->NextTickMs();
    {
      MutexLock lock(&mu_);
      const int64_t wait_ms = std::max<int64_t>(0, next_tick - NowMs());
      cv_.WaitFor(&mu_, std::chrono::milliseconds(wait_ms),
                  [&]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !inbox_.empty(); });
      if (stopping_) return;
      items.swap(inbox_);
    }

    std::vector<Proposal> proposals;
    for (Item& item : items) {
      std::visit(Overloaded{
                     [&](raft::Message& m) {
                       if (!fatal_) node_->Receive(m);
                     },
                     [&](Proposal& p) { proposals.push_back(std::move(p)); },
                     [&](Read& r) {
                       if (fatal_) {
                         r.done->set_value(*fatal_);
                         return;
                       }
                       // Registered first: a non-leader answers inside ReadIndex.
                       const uint64_t id = next_read_id_++;
                       reads_.emplace(id, std::move(r));
                       node_->ReadIndex(id);
                     },
                     [&](Transfer&) {
                       if (fatal_ || role_ != raft::Role::kLeader) return;
                       if (Status st = node_->TransferLeadership(raft::kNoNode); !st.ok()) {
                         kLog()->warn("leadership transfer refused: {}", st.message());
                       }
                     },
                     [&](Task& t) { t.done->set_value(fatal_ ? *fatal_ : t.run(*storage_)); },
                 },
                 item);
    }
    HandleProposals(proposals);
    if (!fatal_) node_->Tick();
    PublishState();

    if (fatal_) {
      // The node does nothing more: refuse everything from now on; Stop() joins.
      const Status why = absl::UnavailableError(
          fmt::format("the controller quorum stopped after a fatal error: {}", fatal_->message()));
      std::vector<Item> rest;
      {
        MutexLock lock(&mu_);
        dead_ = why;
        rest.swap(inbox_);
      }
      FailInbox(rest, why);
      FailPending(why);
      {
        MutexLock lock(&state_mu_);
        state_.stopped = why;
        state_.leader_ready = false;
      }
      state_cv_.SignalAll();
      return;
    }
  }
}

void Quorum::HandleProposals(std::vector<Proposal>& proposals) {
  if (proposals.empty()) return;
  if (fatal_) {
    for (Proposal& p : proposals) p.done->set_value(*fatal_);
    return;
  }
  if (role_ != raft::Role::kLeader) {
    const Status why =
        leader_ != raft::kNoNode
            ? absl::FailedPreconditionError(fmt::format(
                  "controller {} is not the leader; controller {} is", options_.id, leader_))
            : absl::FailedPreconditionError(fmt::format(
                  "controller {} is not the leader and no leader is known", options_.id));
    for (Proposal& p : proposals) p.done->set_value(why);
    return;
  }
  // A leader appends at the end of its log.
  const int64_t base = storage_->end_offset();
  std::vector<std::string> data;
  std::vector<std::shared_ptr<std::promise<StatusOr<int64_t>>>> accepted;
  for (Proposal& p : proposals) {
    const int64_t at = base + static_cast<int64_t>(accepted.size());
    if (p.expected_offset && *p.expected_offset != at) {
      p.done->set_value(absl::AbortedError(fmt::format(
          "the entry would be at offset {}, not {} as expected", at, *p.expected_offset)));
      continue;
    }
    data.push_back(std::move(p.data));
    accepted.push_back(std::move(p.done));
  }
  if (accepted.empty()) return;
  // Registered before Propose: a single voter commits and applies inside it.
  for (size_t i = 0; i < accepted.size(); ++i) {
    pending_[base + static_cast<int64_t>(i)] = Pending{term_, accepted[i]};
  }
  StatusOr<int64_t> first = node_->Propose(std::move(data));
  if (!first.ok() || *first != base) {
    Status why = first.ok() ? absl::InternalError(fmt::format(
                                  "entries were appended at offset {}, expected {}", *first, base))
                            : first.status();
    if (first.ok()) kLog()->error("{}", why.message());
    for (size_t i = 0; i < accepted.size(); ++i) {
      auto it = pending_.find(base + static_cast<int64_t>(i));
      if (it != pending_.end() && it->second.done == accepted[i]) {
        it->second.done->set_value(why);
        pending_.erase(it);
      }
    }
  }
}

void Quorum::PublishState() {
  const int64_t now = NowMs();
  const int64_t end = storage_->end_offset();
  std::vector<raft::ReplicaState> replicas;
  if (role_ == raft::Role::kLeader && !fatal_) {
    replicas = node_->Replicas();
    for (const raft::ReplicaState& r : replicas) {
      if (r.id == options_.id) {
        caught_up_ms_[r.id] = now;
      } else if (r.match_offset >= end - 1 && r.last_contact_ms >= 0) {
        caught_up_ms_[r.id] = r.last_contact_ms;
      }
    }
  } else {
    caught_up_ms_.clear();
  }
  {
    MutexLock lock(&state_mu_);
    state_.role = role_;
    state_.term = term_;
    state_.leader = leader_;
    state_.leader_ready = leader_ready_ && !fatal_;
    state_.commit_offset = fatal_ ? state_.commit_offset : node_->commit_offset();
    state_.applied_offset = applied_;
    state_.end_offset = end;
    state_.replicas = std::move(replicas);
    state_.caught_up_ms = caught_up_ms_;
    state_.now_ms = now;
  }
  state_cv_.SignalAll();
}

// ---- raft::Listener ---------------------------------------------------------------------

void Quorum::OnCommit(const raft::Entry& entry) {
  machine_->Apply(entry);
  applied_ = entry.offset;
  // The first entry of a leader's term is its no-op: once applied, so is every earlier entry.
  if (role_ == raft::Role::kLeader && entry.term == term_) leader_ready_ = true;
  last_applied_term_ = entry.term;
  while (!pending_.empty() && pending_.begin()->first <= entry.offset) {
    auto node = pending_.extract(pending_.begin());
    if (node.key() == entry.offset && node.mapped().term == entry.term) {
      node.mapped().done->set_value(entry.offset);
    } else {
      node.mapped().done->set_value(absl::UnavailableError(fmt::format(
          "the proposed entry at offset {} was replaced by another leader's", node.key())));
    }
  }
  while (!reads_waiting_apply_.empty() && reads_waiting_apply_.begin()->first <= applied_) {
    reads_waiting_apply_.begin()->second.done->set_value(reads_waiting_apply_.begin()->first);
    reads_waiting_apply_.erase(reads_waiting_apply_.begin());
  }
  {
    MutexLock lock(&state_mu_);
    state_.applied_offset = applied_;
    state_.leader_ready = leader_ready_;
  }
  state_cv_.SignalAll();
}

void Quorum::OnSnapshot(raft::SnapshotId id, const std::string& data) {
  machine_->Restore(id, data);
  applied_ = id.end_offset - 1;
  last_applied_term_ = id.epoch;
  FailPending(absl::UnavailableError("the proposed entry was covered by a snapshot from the "
                                     "leader; it may or may not have committed"),
              id.end_offset);
  while (!reads_waiting_apply_.empty() && reads_waiting_apply_.begin()->first <= applied_) {
    reads_waiting_apply_.begin()->second.done->set_value(reads_waiting_apply_.begin()->first);
    reads_waiting_apply_.erase(reads_waiting_apply_.begin());
  }
  {
    MutexLock lock(&state_mu_);
    state_.applied_offset = applied_;
  }
  state_cv_.SignalAll();
}

void Quorum::OnRoleChange(raft::Role role, int64_t term, raft::NodeId leader) {
  static metrics::Counter* const kElections =
      metrics::ProcessRegistry()
          .AddCounter("runnel_controller_raft_elections_total",
                      "Elections this node started (it became a candidate for a new term).")
          .WithLabels({});
  static metrics::Counter* const kLeaderChanges =
      metrics::ProcessRegistry()
          .AddCounter("runnel_controller_raft_leader_changes_total",
                      "Times this node saw the quorum's leader change.")
          .WithLabels({});
  if (role == raft::Role::kCandidate && (role_ != raft::Role::kCandidate || term != term_)) {
    kElections->Inc();
  }
  if (leader != leader_ && leader != raft::kNoNode) kLeaderChanges->Inc();
  const bool was_leader = role_ == raft::Role::kLeader;
  const bool lost = was_leader && (role != raft::Role::kLeader || term != term_);
  const bool gained = role == raft::Role::kLeader && (!was_leader || term != term_);
  role_ = role;
  term_ = term;
  leader_ = leader;
  if (role != raft::Role::kLeader) leader_ready_ = false;
  // The no-op may have been applied before this call (a single voter commits at once).
  if (gained) leader_ready_ = applied_ >= 0 && last_applied_term_ == term;
  if (lost) {
    FailPending(absl::UnavailableError(
        "this controller lost the leadership; the write may or may not commit"));
  }
  machine_->RoleChanged(role, term, leader);
  {
    MutexLock lock(&state_mu_);
    state_.role = role_;
    state_.term = term_;
    state_.leader = leader_;
    state_.leader_ready = leader_ready_;
  }
  state_cv_.SignalAll();
}

void Quorum::OnReadIndex(uint64_t read_id, StatusOr<int64_t> commit) {
  auto it = reads_.find(read_id);
  if (it == reads_.end()) return;
  Read read = std::move(it->second);
  reads_.erase(it);
  if (!commit.ok()) {
    read.done->set_value(commit.status());
  } else if (*commit <= applied_) {
    read.done->set_value(*commit);
  } else {
    reads_waiting_apply_.emplace(*commit, std::move(read));
  }
}

void Quorum::OnFatal(const Status& why) {
  if (fatal_) return;
  fatal_ = why;
  kLog()->critical("the metadata log failed: {}", why.message());
  machine_->Fatal(why);
}

// ---- waiting and state ------------------------------------------------------------------

Status Quorum::WaitLeaderReady(Deadline deadline) {
  MutexLock lock(&state_mu_);
  while (true) {
    if (state_.stopped) return *state_.stopped;
    if (state_.leader_ready) return absl::OkStatus();
    if (state_.leader != raft::kNoNode && state_.leader != options_.id) {
      return absl::FailedPreconditionError(fmt::format(
          "controller {} is not the leader; controller {} is", options_.id, state_.leader));
    }
    if (state_cv_.WaitUntil(&state_mu_, deadline) == std::cv_status::timeout &&
        !state_.leader_ready && !state_.stopped) {
      return absl::UnavailableError(
          fmt::format("no controller quorum leader was ready within the deadline (controller {} "
                      "is {} in term {})",
                      options_.id, raft::RoleName(state_.role), state_.term));
    }
  }
}

bool Quorum::WaitFor(const std::function<bool(const QuorumState&)>& done, Deadline deadline) {
  MutexLock lock(&state_mu_);
  while (true) {
    if (done(state_)) return true;
    if (state_.stopped) return false;
    if (state_cv_.WaitUntil(&state_mu_, deadline) == std::cv_status::timeout) return done(state_);
  }
}

bool Quorum::WaitApplied(int64_t offset, Deadline deadline) {
  return WaitFor([offset](const QuorumState& s) { return s.applied_offset >= offset; }, deadline);
}

QuorumState Quorum::State() const {
  MutexLock lock(&state_mu_);
  return state_;
}

raft::NodeId Quorum::Leader() const {
  MutexLock lock(&state_mu_);
  return state_.leader;
}

int64_t Quorum::Term() const {
  MutexLock lock(&state_mu_);
  return state_.term;
}

bool Quorum::IsLeaderReady() const {
  MutexLock lock(&state_mu_);
  return state_.leader_ready;
}

Status Quorum::CompactTo(raft::SnapshotId id, std::string data) {
  return node_->CompactTo(id, std::move(data));
}

}  // namespace runnel::controllerd
