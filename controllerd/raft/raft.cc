// The Raft core. See raft.h for the protocol choices; this file keeps to them.
//
// Layout: Node::Impl holds the persistent view (term, vote, commit, applied), the role's
// volatile state (pre-votes or votes while campaigning; per-replica progress while leading)
// and the timers. Every entry point (Receive, Tick, Propose, ReadIndex, CompactTo,
// TransferLeadership) runs to completion and leaves the storage synced. A storage error sets
// `fatal_` and the node does nothing more.
//
// Replication per follower (Progress): `probing` sends one Append at a time until the
// follower's log is known to match at next - 1; then up to max_inflight_appends are sent
// optimistically (next advances as they go). A reject names the prev_offset it rejects
// (echoed in the response) so stale rejects of an old window are recognised and dropped; an
// append unanswered for a heartbeat interval sends the follower back to probing at match + 1.
// A follower whose next entry is no longer in the log gets the snapshot, one chunk at a time.
#include "controllerd/raft/raft.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <utility>

namespace runnel::controllerd::raft {

std::string_view MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kPreVote:
      return "PreVote";
    case MessageType::kPreVoteResponse:
      return "PreVoteResponse";
    case MessageType::kVote:
      return "Vote";
    case MessageType::kVoteResponse:
      return "VoteResponse";
    case MessageType::kAppend:
      return "Append";
    case MessageType::kAppendResponse:
      return "AppendResponse";
    case MessageType::kSnapshot:
      return "Snapshot";
    case MessageType::kSnapshotResponse:
      return "SnapshotResponse";
    case MessageType::kTimeoutNow:
      return "TimeoutNow";
    case MessageType::kObserve:
      return "Observe";
    case MessageType::kObserveResponse:
      return "ObserveResponse";
  }
  return "Unknown";
}

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kFollower:
      return "follower";
    case Role::kPreCandidate:
      return "pre-candidate";
    case Role::kCandidate:
      return "candidate";
    case Role::kLeader:
      return "leader";
    case Role::kObserver:
      return "observer";
  }
  return "unknown";
}

namespace {

// How far NextTickMs() looks ahead once the node has stopped (fatal): nothing is due.
constexpr int64_t kIdleMs = 3'600'000;

// std::clamp without its precondition (lo <= hi): lo wins.
int64_t Clamp(int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(v, hi)); }

}  // namespace

class Node::Impl {
 public:
  Impl(const Options& options, Storage& storage, Clock& clock, Transport& transport,
       Listener& listener)
      : options_(options),
        storage_(storage),
        clock_(clock),
        transport_(transport),
        listener_(listener),
        // Mix the id in so nodes given the same seed still draw different timeouts.
        rng_(options.seed ^ (0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(options.id) + 1))) {
    for (NodeId v : options_.voters) voters_.insert(v);
    if (voters_.empty()) voters_.insert(options_.id);
    is_voter_ = voters_.count(options_.id) > 0;
    options_.max_inflight_appends = std::max(1, options_.max_inflight_appends);
    options_.snapshot_chunk_bytes = std::max<size_t>(1, options_.snapshot_chunk_bytes);
  }

  Status Load() {
    HardState hs = storage_.hard_state();
    term_ = hs.term;
    voted_for_ = hs.voted_for;
    SnapshotId snap = storage_.snapshot_id();
    if (storage_.start_offset() > storage_.end_offset() ||
        storage_.start_offset() > snap.end_offset) {
      return absl::FailedPreconditionError(
          fmt::format("raft storage is inconsistent: log [{}, {}), snapshot end {}",
                      storage_.start_offset(), storage_.end_offset(), snap.end_offset));
    }
    if (snap.end_offset > 0) {
      RUNNEL_ASSIGN_OR_RETURN(std::string data, storage_.ReadSnapshot());
      listener_.OnSnapshot(snap, data);
    }
    commit_ = snap.end_offset - 1;
    applied_ = commit_;
    role_ = is_voter_ ? Role::kFollower : Role::kObserver;
    const int64_t now = clock_.NowMs();
    // A single voter elects itself on the first Tick; an observer announces itself at once.
    if (SingleVoter() || !is_voter_) {
      election_deadline_ms_ = now;
    } else {
      ResetElectionTimer(now);
    }
    notified_role_ = role_;
    notified_term_ = term_;
    notified_leader_ = leader_;
    return absl::OkStatus();
  }

  // ---- Public entry points -------------------------------------------------------------------

  void Receive(const Message& m) {
    if (fatal_) return;
    if (m.to != options_.id || m.from == options_.id || m.from == kNoNode) return;
    const bool from_voter = IsVoter(m.from);
    switch (m.type) {
      case MessageType::kPreVote:
        HandlePreVote(m, from_voter);
        return;
      case MessageType::kPreVoteResponse:
        HandlePreVoteResponse(m, from_voter);
        return;
      case MessageType::kVote:
        HandleVote(m, from_voter);
        return;
      default:
        break;
    }
    // Every other message: a higher term from a voter makes this node a follower of it. A
    // non-voter (an observer, a removed node) never moves terms.
    if (m.term > term_) {
      if (!from_voter) {
        if (m.type != MessageType::kObserve) return;
      } else {
        NodeId leader = kNoNode;
        if (m.type == MessageType::kAppend || m.type == MessageType::kSnapshot ||
            m.type == MessageType::kTimeoutNow) {
          leader = m.from;
        } else if (m.type == MessageType::kObserveResponse && !is_voter_) {
          leader = m.leader;
        }
        if (!BecomeFollower(m.term, leader)) return;
      }
    }
    switch (m.type) {
      case MessageType::kVoteResponse:
        HandleVoteResponse(m, from_voter);
        break;
      case MessageType::kAppend:
        HandleAppend(m, from_voter);
        break;
      case MessageType::kAppendResponse:
        HandleAppendResponse(m);
        break;
      case MessageType::kSnapshot:
        HandleSnapshot(m, from_voter);
        break;
      case MessageType::kSnapshotResponse:
        HandleSnapshotResponse(m);
        break;
      case MessageType::kTimeoutNow:
        if (from_voter && is_voter_ && m.term == term_ && role_ != Role::kLeader) {
          Campaign(/*transfer=*/true);
        }
        break;
      case MessageType::kObserve:
        HandleObserve(m, from_voter);
        break;
      case MessageType::kObserveResponse:
        if (!is_voter_ && from_voter && m.term == term_ && m.leader != kNoNode &&
            m.leader != options_.id && m.leader != m.from && IsVoter(m.leader)) {
          Send(Msg(MessageType::kObserve, m.leader));
        }
        break;
      case MessageType::kPreVote:
      case MessageType::kPreVoteResponse:
      case MessageType::kVote:
        break;  // handled above
    }
  }

  void Tick() {
    if (fatal_) return;
    const int64_t now = clock_.NowMs();
    switch (role_) {
      case Role::kLeader:
        TickLeader(now);
        break;
      case Role::kObserver:
        if (now >= election_deadline_ms_) {
          // Not heard from a leader for an election timeout: announce to every voter; the
          // leader starts replicating, the others answer with the leader they know.
          for (NodeId v : voters_) Send(Msg(MessageType::kObserve, v));
          ResetElectionTimer(now);
        }
        break;
      case Role::kFollower:
      case Role::kPreCandidate:
      case Role::kCandidate:
        if (now >= election_deadline_ms_) {
          if (SingleVoter()) {
            Campaign(/*transfer=*/false);
          } else {
            PreCampaign();
          }
        }
        break;
    }
  }

  int64_t NextTickMs() const {
    const int64_t now = clock_.NowMs();
    if (fatal_) return now + kIdleMs;
    if (role_ != Role::kLeader) return election_deadline_ms_;
    if (read_round_pending_) return now;
    int64_t next = next_heartbeat_ms_;
    if (transfer_target_ != kNoNode) next = std::min(next, transfer_deadline_ms_);
    if (std::optional<int64_t> due = CheckQuorumDueMs()) next = std::min(next, *due);
    return next;
  }

  StatusOr<int64_t> Propose(std::vector<std::string> data) {
    if (fatal_) return absl::FailedPreconditionError("raft node stopped after a storage error");
    if (role_ != Role::kLeader) {
      return absl::FailedPreconditionError(
          fmt::format("not the leader (node {}); the leader is {}", options_.id,
                      leader_ == kNoNode ? std::string("unknown") : std::to_string(leader_)));
    }
    if (transfer_target_ != kNoNode) {
      return absl::FailedPreconditionError(
          fmt::format("leadership transfer to node {} under way", transfer_target_));
    }
    if (data.empty()) return absl::InvalidArgumentError("nothing to propose");
    const int64_t first = storage_.end_offset();
    std::vector<Entry> entries;
    entries.reserve(data.size());
    for (size_t i = 0; i < data.size(); ++i) {
      entries.push_back(Entry{first + static_cast<int64_t>(i), term_, std::move(data[i])});
    }
    if (!Ok(storage_.Append(entries)) || !Ok(storage_.Sync())) return fatal_status_;
    for (auto& [id, pr] : progress_) {
      SendAppends(pr, /*heartbeat=*/false);
      if (fatal_) return fatal_status_;
    }
    MaybeCommit();
    if (fatal_) return fatal_status_;
    return first;
  }

  void ReadIndex(uint64_t read_id) {
    if (fatal_ || role_ != Role::kLeader) {
      listener_.OnReadIndex(read_id, absl::FailedPreconditionError(
                                         fmt::format("not the leader; the leader is {}", leader_)));
      return;
    }
    // Confirmed by the next heartbeat round (the one after this call), shared by every read
    // that arrives before it goes out.
    reads_.push_back(PendingRead{read_id, seq_ + 1});
    read_round_pending_ = true;
    AnswerReads();
  }

  Status CompactTo(SnapshotId id, std::string data) {
    if (fatal_) return fatal_status_;
    if (id.end_offset <= 0) return absl::InvalidArgumentError("snapshot covers no entry");
    if (id.end_offset - 1 > applied_) {
      return absl::InvalidArgumentError(
          fmt::format("snapshot end {} is past the applied offset {}", id.end_offset, applied_));
    }
    if (id.end_offset <= storage_.snapshot_id().end_offset) return absl::OkStatus();
    std::optional<int64_t> epoch = TermAt(id.end_offset - 1);
    if (fatal_) return fatal_status_;
    if (!epoch || *epoch != id.epoch) {
      return absl::InvalidArgumentError(fmt::format("snapshot epoch {} is not the term of entry {}",
                                                    id.epoch, id.end_offset - 1));
    }
    if (!Ok(storage_.SaveSnapshot(id, std::move(data)))) return fatal_status_;
    return absl::OkStatus();
  }

  Status TransferLeadership(NodeId target) {
    if (fatal_) return fatal_status_;
    if (role_ != Role::kLeader) {
      return absl::FailedPreconditionError(
          fmt::format("not the leader; the leader is {}", leader_));
    }
    if (target == options_.id) return absl::OkStatus();
    if (target == kNoNode) {
      int64_t best = -2;
      for (const auto& [id, pr] : progress_) {
        if (pr.voter && pr.match > best) {
          best = pr.match;
          target = id;
        }
      }
      if (target == kNoNode) {
        return absl::FailedPreconditionError("no other voter to transfer leadership to");
      }
    } else if (!IsVoter(target)) {
      return absl::InvalidArgumentError(fmt::format("node {} is not a voter", target));
    }
    transfer_target_ = target;
    transfer_deadline_ms_ = clock_.NowMs() + options_.election_timeout_ms;
    Progress& pr = progress_.at(target);
    SendAppends(pr, /*heartbeat=*/false);
    MaybeSendTimeoutNow();
    return fatal_ ? fatal_status_ : absl::OkStatus();
  }

  Role role() const { return role_; }
  int64_t term() const { return term_; }
  NodeId leader() const { return leader_; }
  int64_t commit_offset() const { return commit_; }
  int64_t applied_offset() const { return applied_; }

  std::vector<ReplicaState> Replicas() const {
    std::vector<ReplicaState> out;
    if (role_ != Role::kLeader) return out;
    out.push_back(ReplicaState{options_.id, true, storage_.end_offset() - 1, clock_.NowMs()});
    for (const auto& [id, pr] : progress_) {
      out.push_back(ReplicaState{id, pr.voter, pr.match, pr.last_contact_ms});
    }
    std::sort(out.begin(), out.end(),
              [](const ReplicaState& a, const ReplicaState& b) { return a.id < b.id; });
    return out;
  }

 private:
  struct Inflight {
    int64_t prev = -1;  // the Append's prev_offset (how its reject is recognised)
    int64_t last = -1;  // the last offset it carried (prev when empty)
    int64_t sent_ms = 0;
  };

  // The leader's view of one follower or observer.
  struct Progress {
    NodeId id = kNoNode;
    bool voter = false;
    int64_t match = -1;
    int64_t next = 0;
    bool probing = true;
    std::deque<Inflight> inflight;
    int64_t last_contact_ms = -1;
    uint64_t acked_seq = 0;
    // Snapshot transfer (stop-and-wait, one chunk at a time).
    bool sending_snapshot = false;
    SnapshotId snapshot;
    uint64_t snapshot_acked = 0;     // bytes the follower confirmed (drives the next chunk)
    uint64_t snapshot_reported = 0;  // the follower's last answer (where a retry restarts)
    int64_t snapshot_sent_ms = -1;   // -1: no chunk in flight
  };

  struct PendingRead {
    uint64_t id = 0;
    uint64_t seq = 0;  // a heartbeat round with at least this seq must be acked by a majority
  };

  // ---- Helpers -------------------------------------------------------------------------------

  bool IsVoter(NodeId id) const { return voters_.count(id) > 0; }
  bool SingleVoter() const { return is_voter_ && voters_.size() == 1; }
  size_t Majority() const { return voters_.size() / 2 + 1; }

  // Records a storage failure: reported once, then the node stops acting.
  bool Ok(const Status& s) {
    if (s.ok()) return true;
    if (!fatal_) {
      fatal_ = true;
      fatal_status_ = s;
      listener_.OnFatal(s);
    }
    return false;
  }

  // The term of the entry at `offset` when the node knows it (in the log, the snapshot's
  // last entry, or -1); nullopt otherwise or after a storage error (check fatal_).
  std::optional<int64_t> TermAt(int64_t offset) {
    if (offset == -1) return 0;
    if (offset < -1) return std::nullopt;
    SnapshotId snap = storage_.snapshot_id();
    if (snap.end_offset > 0 && offset == snap.end_offset - 1) return snap.epoch;
    if (offset < storage_.start_offset() || offset >= storage_.end_offset()) return std::nullopt;
    StatusOr<int64_t> t = storage_.TermAt(offset);
    if (!Ok(t.status())) return std::nullopt;
    return *t;
  }

  int64_t LastOffset() const { return storage_.end_offset() - 1; }

  // Is a candidate's log (last_offset, last_term) at least as up to date as ours?
  bool UpToDate(int64_t last_offset, int64_t last_term) {
    std::optional<int64_t> my_term = TermAt(LastOffset());
    if (fatal_ || !my_term) return false;
    if (last_term != *my_term) return last_term > *my_term;
    return last_offset >= LastOffset();
  }

  // A voter that heard from a live leader within the election timeout (or leads) refuses
  // (pre-)votes, so a node that was cut off cannot disturb a working quorum.
  bool Sticky(int64_t now) const {
    if (role_ == Role::kLeader) return true;
    return leader_ != kNoNode && last_leader_contact_ms_ >= 0 &&
           now - last_leader_contact_ms_ < options_.election_timeout_ms;
  }

  void ResetElectionTimer(int64_t now) {
    const int64_t t = std::max<int64_t>(1, options_.election_timeout_ms);
    election_deadline_ms_ = now + t + static_cast<int64_t>(rng_() % static_cast<uint64_t>(t));
  }

  static Message Msg(MessageType type, NodeId to) {
    Message m;
    m.type = type;
    m.to = to;
    return m;
  }

  // Stamps the sender, its term (except where a pre-vote names another) and known leader.
  void Send(Message m) {
    m.from = options_.id;
    // A pre-vote names the term it would stand in; a granted answer echoes it.
    if (m.type != MessageType::kPreVote && m.type != MessageType::kPreVoteResponse) {
      m.term = term_;
    }
    m.leader = leader_;
    transport_.Send(std::move(m));
  }

  void NotifyRole() {
    if (role_ == notified_role_ && term_ == notified_term_ && leader_ == notified_leader_) return;
    notified_role_ = role_;
    notified_term_ = term_;
    notified_leader_ = leader_;
    listener_.OnRoleChange(role_, term_, leader_);
  }

  // Moves to `term` (stored first) as a follower (observer) of `leader`.
  bool BecomeFollower(int64_t term, NodeId leader) {
    if (term > term_) {
      if (!Ok(storage_.SetHardState(HardState{term, kNoNode}))) return false;
      term_ = term;
      voted_for_ = kNoNode;
    }
    if (role_ == Role::kLeader) StopLeading();
    role_ = is_voter_ ? Role::kFollower : Role::kObserver;
    leader_ = leader;
    votes_.clear();
    const int64_t now = clock_.NowMs();
    if (leader != kNoNode) last_leader_contact_ms_ = now;
    ResetElectionTimer(now);
    NotifyRole();
    return true;
  }

  void StopLeading() {
    progress_.clear();
    transfer_target_ = kNoNode;
    read_round_pending_ = false;
    std::deque<PendingRead> reads;
    reads.swap(reads_);
    for (const PendingRead& r : reads) {
      listener_.OnReadIndex(r.id, absl::FailedPreconditionError("leadership lost"));
    }
  }

  // ---- Elections -----------------------------------------------------------------------------

  void PreCampaign() {
    const int64_t now = clock_.NowMs();
    role_ = Role::kPreCandidate;
    leader_ = kNoNode;
    votes_.clear();
    votes_.insert(options_.id);
    ResetElectionTimer(now);
    NotifyRole();
    std::optional<int64_t> last_term = TermAt(LastOffset());
    if (fatal_ || !last_term) return;
    for (NodeId v : voters_) {
      if (v == options_.id) continue;
      Message m = Msg(MessageType::kPreVote, v);
      m.term = term_ + 1;
      m.last_offset = LastOffset();
      m.last_term = *last_term;
      Send(std::move(m));
    }
  }

  void Campaign(bool transfer) {
    if (!is_voter_) return;
    const int64_t now = clock_.NowMs();
    if (!Ok(storage_.SetHardState(HardState{term_ + 1, options_.id}))) return;
    term_ += 1;
    voted_for_ = options_.id;
    role_ = Role::kCandidate;
    leader_ = kNoNode;
    votes_.clear();
    votes_.insert(options_.id);
    ResetElectionTimer(now);
    NotifyRole();
    if (votes_.size() >= Majority()) {
      BecomeLeader();
      return;
    }
    std::optional<int64_t> last_term = TermAt(LastOffset());
    if (fatal_ || !last_term) return;
    for (NodeId v : voters_) {
      if (v == options_.id) continue;
      Message m = Msg(MessageType::kVote, v);
      m.last_offset = LastOffset();
      m.last_term = *last_term;
      m.transfer = transfer;
      Send(std::move(m));
    }
  }

  void HandlePreVote(const Message& m, bool from_voter) {
    if (!is_voter_ || !from_voter) return;
    // Terms never change here: a pre-vote is only a question.
    const bool grant = m.term > term_ && (m.transfer || !Sticky(clock_.NowMs())) &&
                       UpToDate(m.last_offset, m.last_term);
    if (fatal_) return;
    Message r = Msg(MessageType::kPreVoteResponse, m.from);
    r.granted = grant;
    // A refusal carries our term, so a candidate behind in terms catches up.
    r.term = grant ? m.term : term_;
    Send(std::move(r));
  }

  void HandlePreVoteResponse(const Message& m, bool from_voter) {
    if (!from_voter) return;
    if (m.granted) {
      if (role_ == Role::kPreCandidate && m.term == term_ + 1) {
        votes_.insert(m.from);
        if (votes_.size() >= Majority()) Campaign(/*transfer=*/false);
      }
      return;
    }
    // Refused by a voter already in a later term: join that term (as a follower) so that our
    // next pre-vote asks for a term the others can grant.
    if (m.term > term_) BecomeFollower(m.term, kNoNode);
  }

  void HandleVote(const Message& m, bool from_voter) {
    if (!is_voter_ || !from_voter) return;
    const int64_t now = clock_.NowMs();
    if (m.term < term_) {
      Send(Msg(MessageType::kVoteResponse, m.from));
      return;
    }
    if (m.term > term_) {
      // Ignored while a live leader is known, so a partitioned node cannot raise our term.
      if (!m.transfer && Sticky(now)) return;
      if (!BecomeFollower(m.term, kNoNode)) return;
    }
    bool grant = voted_for_ == m.from || (voted_for_ == kNoNode && leader_ == kNoNode);
    if (grant && !m.transfer && Sticky(now)) grant = false;
    if (grant) grant = UpToDate(m.last_offset, m.last_term);
    if (fatal_) return;
    if (grant) {
      if (voted_for_ != m.from) {
        if (!Ok(storage_.SetHardState(HardState{term_, m.from}))) return;
        voted_for_ = m.from;
      }
      ResetElectionTimer(now);
    }
    Message r = Msg(MessageType::kVoteResponse, m.from);
    r.granted = grant;
    Send(std::move(r));
  }

  void HandleVoteResponse(const Message& m, bool from_voter) {
    if (!from_voter || role_ != Role::kCandidate || m.term != term_ || !m.granted) return;
    votes_.insert(m.from);
    if (votes_.size() >= Majority()) BecomeLeader();
  }

  void BecomeLeader() {
    const int64_t now = clock_.NowMs();
    role_ = Role::kLeader;
    leader_ = options_.id;
    votes_.clear();
    progress_.clear();
    reads_.clear();
    read_round_pending_ = false;
    transfer_target_ = kNoNode;
    const int64_t end = storage_.end_offset();
    for (NodeId v : voters_) {
      if (v == options_.id) continue;
      Progress& pr = progress_[v];
      pr.id = v;
      pr.voter = true;
      pr.next = end;
      pr.last_contact_ms = now;  // check-quorum counts from the election
    }
    NotifyRole();
    // The no-op: commits every earlier entry once it commits, and opens read-index.
    Entry noop{end, term_, std::string()};
    if (!Ok(storage_.Append(std::span<const Entry>(&noop, 1))) || !Ok(storage_.Sync())) return;
    noop_offset_ = end;
    ++seq_;
    for (auto& [id, pr] : progress_) {
      SendAppends(pr, /*heartbeat=*/true);
      if (fatal_) return;
    }
    next_heartbeat_ms_ = now + options_.heartbeat_interval_ms;
    MaybeCommit();
  }

  // ---- Leader --------------------------------------------------------------------------------

  // When check-quorum would step down if nobody answers before then; nullopt for a single
  // voter.
  std::optional<int64_t> CheckQuorumDueMs() const {
    const size_t need = Majority() - 1;  // besides ourselves
    if (need == 0) return std::nullopt;
    std::vector<int64_t> contacts;
    for (const auto& [id, pr] : progress_) {
      if (pr.voter) contacts.push_back(pr.last_contact_ms);
    }
    if (contacts.size() < need) return std::nullopt;
    std::sort(contacts.begin(), contacts.end(), std::greater<>());
    return contacts[need - 1] + options_.election_timeout_ms;
  }

  void TickLeader(int64_t now) {
    if (transfer_target_ != kNoNode && now >= transfer_deadline_ms_) transfer_target_ = kNoNode;
    if (std::optional<int64_t> due = CheckQuorumDueMs(); due && now >= *due) {
      BecomeFollower(term_, kNoNode);  // not heard from a majority: stop claiming leadership
      return;
    }
    if (now < next_heartbeat_ms_ && !read_round_pending_) return;
    read_round_pending_ = false;
    ++seq_;
    next_heartbeat_ms_ = now + options_.heartbeat_interval_ms;
    for (auto it = progress_.begin(); it != progress_.end();) {
      Progress& pr = it->second;
      if (!pr.voter && now - pr.last_contact_ms > options_.observer_timeout_ms) {
        it = progress_.erase(it);  // an observer that stopped answering
        continue;
      }
      if (!pr.inflight.empty() &&
          now - pr.inflight.front().sent_ms >= options_.heartbeat_interval_ms) {
        // Unanswered: the follower may have lost them; probe again from what it has.
        pr.inflight.clear();
        pr.probing = true;
        pr.next = pr.match + 1;
      }
      if (pr.sending_snapshot && pr.snapshot_sent_ms >= 0 &&
          now - pr.snapshot_sent_ms >= options_.heartbeat_interval_ms) {
        pr.snapshot_acked = pr.snapshot_reported;
        pr.snapshot_sent_ms = -1;
      }
      SendAppends(pr, /*heartbeat=*/true);
      if (fatal_) return;
      ++it;
    }
    MaybeSendTimeoutNow();
  }

  // Sends what `pr` can take now: entries up to the window, or a snapshot chunk. With
  // `heartbeat`, sends at least an empty Append (leadership, commit, read-index seq).
  void SendAppends(Progress& pr, bool heartbeat) {
    const NodeId to = pr.id;
    const int64_t now = clock_.NowMs();
    bool sent = false;
    const size_t window = pr.probing ? 1 : static_cast<size_t>(options_.max_inflight_appends);
    while (!pr.sending_snapshot && pr.inflight.size() < window) {
      const int64_t end = storage_.end_offset();
      pr.next = Clamp(pr.next, pr.match + 1, end);
      const bool has_entries = pr.next < end;
      // Probing with nothing to send: an empty Append at next - 1 still tells whether the
      // follower matches there.
      const bool probe = !has_entries && pr.probing && pr.match < pr.next - 1;
      if (!has_entries && !probe) break;
      std::optional<int64_t> prev_term = TermAt(pr.next - 1);
      if (fatal_) return;
      if (!prev_term || (has_entries && pr.next < storage_.start_offset())) {
        pr.sending_snapshot = true;
        pr.inflight.clear();
        pr.snapshot_sent_ms = -1;
        pr.snapshot = SnapshotId{};  // set by SendSnapshotChunk
        break;
      }
      Message m = Msg(MessageType::kAppend, to);
      m.prev_offset = pr.next - 1;
      m.prev_term = *prev_term;
      m.commit = commit_;
      m.seq = seq_;
      if (has_entries) {
        StatusOr<std::vector<Entry>> entries =
            storage_.Read(pr.next, end, options_.max_append_bytes);
        if (!Ok(entries.status())) return;
        m.entries = std::move(*entries);
        if (m.entries.empty()) {
          Ok(absl::InternalError(
              fmt::format("storage read of [{}, {}) returned nothing", pr.next, end)));
          return;
        }
      }
      const int64_t last = pr.next - 1 + static_cast<int64_t>(m.entries.size());
      pr.inflight.push_back(Inflight{pr.next - 1, last, now});
      pr.next = last + 1;
      Send(std::move(m));
      sent = true;
      if (probe) break;
    }
    if (pr.sending_snapshot) {
      SendSnapshotChunk(pr, to);
      if (fatal_) return;
    }
    if (heartbeat && !sent) {
      std::optional<int64_t> match_term = TermAt(pr.match);
      if (fatal_) return;
      Message m = Msg(MessageType::kAppend, to);
      m.commit = commit_;
      m.seq = seq_;
      if (match_term) {
        m.prev_offset = pr.match;
        m.prev_term = *match_term;
      }
      Send(std::move(m));
    }
  }

  // The leader's snapshot bytes, read once per snapshot.
  const std::string* SnapshotData(SnapshotId id) {
    if (snapshot_cache_ && snapshot_cache_id_ == id) return snapshot_cache_.get();
    StatusOr<std::string> data = storage_.ReadSnapshot();
    if (!Ok(data.status())) return nullptr;
    snapshot_cache_ = std::make_shared<std::string>(std::move(*data));
    snapshot_cache_id_ = id;
    return snapshot_cache_.get();
  }

  void SendSnapshotChunk(Progress& pr, NodeId to) {
    const SnapshotId current = storage_.snapshot_id();
    if (current.end_offset <= 0) {
      // Nothing to send (cannot happen with a consistent storage): probe again.
      pr.sending_snapshot = false;
      pr.probing = true;
      return;
    }
    if (pr.snapshot != current) {
      // A new snapshot (or the first): start over from its first byte.
      pr.snapshot = current;
      pr.snapshot_acked = 0;
      pr.snapshot_reported = 0;
      pr.snapshot_sent_ms = -1;
    }
    if (pr.snapshot_sent_ms >= 0) return;  // a chunk is in flight
    const std::string* data = SnapshotData(current);
    if (data == nullptr) return;
    const uint64_t off = std::min<uint64_t>(pr.snapshot_acked, data->size());
    const uint64_t len = std::min<uint64_t>(options_.snapshot_chunk_bytes, data->size() - off);
    pr.snapshot_sent_ms = clock_.NowMs();
    Message m = Msg(MessageType::kSnapshot, to);
    m.commit = commit_;
    m.seq = seq_;
    m.snapshot = current;
    m.chunk_offset = off;
    m.chunk = data->substr(off, len);
    m.done = off + len == data->size();
    Send(std::move(m));
  }

  void HandleAppendResponse(const Message& m) {
    if (role_ != Role::kLeader || m.term != term_) return;
    auto it = progress_.find(m.from);
    if (it == progress_.end()) return;
    Progress& pr = it->second;
    pr.last_contact_ms = clock_.NowMs();
    pr.acked_seq = std::max(pr.acked_seq, m.seq);
    if (m.success) {
      if (m.match_offset >= storage_.end_offset() || m.match_offset < -1) return;
      pr.match = std::max(pr.match, m.match_offset);
      pr.next = std::max(pr.next, pr.match + 1);
      while (!pr.inflight.empty() && pr.inflight.front().last <= m.match_offset) {
        pr.inflight.pop_front();
      }
      if (pr.probing && pr.inflight.empty() && pr.match == pr.next - 1) pr.probing = false;
      SendAppends(pr, /*heartbeat=*/false);
      if (fatal_) return;
      if (pr.voter) MaybeCommit();
      if (fatal_ || role_ != Role::kLeader) return;
      if (m.from == transfer_target_) MaybeSendTimeoutNow();
    } else {
      // Only a reject of an Append still in flight counts: others are stale or duplicated.
      bool current = false;
      for (const Inflight& f : pr.inflight) current |= f.prev == m.prev_offset;
      if (current && !pr.sending_snapshot) {
        pr.inflight.clear();
        pr.probing = true;
        pr.next = Clamp(m.hint_offset, pr.match + 1, storage_.end_offset());
        SendAppends(pr, /*heartbeat=*/false);
        if (fatal_) return;
      }
    }
    if (pr.voter) AnswerReads();
  }

  void HandleSnapshotResponse(const Message& m) {
    if (role_ != Role::kLeader || m.term != term_) return;
    auto it = progress_.find(m.from);
    if (it == progress_.end()) return;
    Progress& pr = it->second;
    pr.last_contact_ms = clock_.NowMs();
    pr.acked_seq = std::max(pr.acked_seq, m.seq);
    if (m.success) {
      // The follower's state covers the snapshot, which matches ours.
      const int64_t covered = m.snapshot.end_offset - 1;
      if (covered >= storage_.end_offset()) return;
      pr.match = std::max(pr.match, covered);
      if (pr.sending_snapshot) {
        pr.sending_snapshot = false;
        pr.snapshot_sent_ms = -1;
        pr.inflight.clear();
        pr.probing = true;
        pr.next = pr.match + 1;
      }
      SendAppends(pr, /*heartbeat=*/false);
      if (fatal_) return;
      if (pr.voter) MaybeCommit();
      if (fatal_ || role_ != Role::kLeader) return;
      if (m.from == transfer_target_) MaybeSendTimeoutNow();
    } else if (pr.sending_snapshot && m.snapshot == pr.snapshot) {
      pr.snapshot_reported = m.chunk_offset;
      // Only progress sends the next chunk, so duplicated answers cannot multiply chunks;
      // anything else waits for the retry.
      if (m.chunk_offset > pr.snapshot_acked) {
        pr.snapshot_acked = m.chunk_offset;
        pr.snapshot_sent_ms = -1;
        SendSnapshotChunk(pr, m.from);
        if (fatal_) return;
      }
    }
    if (pr.voter) AnswerReads();
  }

  // Commits the highest offset of this term that a majority of voters hold (synced).
  void MaybeCommit() {
    if (role_ != Role::kLeader) return;
    std::vector<int64_t> matches{LastOffset()};
    for (const auto& [id, pr] : progress_) {
      if (pr.voter) matches.push_back(pr.match);
    }
    const size_t majority = Majority();
    if (matches.size() < majority) return;
    std::sort(matches.begin(), matches.end(), std::greater<>());
    const int64_t n = matches[majority - 1];
    if (n <= commit_) return;
    std::optional<int64_t> t = TermAt(n);
    if (fatal_ || !t || *t != term_) return;  // thesis 3.6.2: count only this term's entries
    commit_ = n;
    Apply();
    if (fatal_ || role_ != Role::kLeader) return;
    AnswerReads();
    // Tell the followers at once rather than at the next heartbeat.
    for (auto& [id, pr] : progress_) {
      SendAppends(pr, /*heartbeat=*/true);
      if (fatal_) return;
    }
  }

  void AnswerReads() {
    if (role_ != Role::kLeader || reads_.empty()) return;
    if (commit_ < noop_offset_) return;  // our no-op makes commit_ cover every earlier commit
    while (!reads_.empty()) {
      const PendingRead r = reads_.front();
      size_t acks = 1;
      for (const auto& [id, pr] : progress_) {
        if (pr.voter && pr.acked_seq >= r.seq) ++acks;
      }
      if (acks < Majority()) break;
      reads_.pop_front();
      listener_.OnReadIndex(r.id, commit_);
      if (fatal_ || role_ != Role::kLeader) return;
    }
  }

  void MaybeSendTimeoutNow() {
    if (role_ != Role::kLeader || transfer_target_ == kNoNode) return;
    auto it = progress_.find(transfer_target_);
    if (it == progress_.end()) return;
    if (it->second.match == LastOffset()) {
      Send(Msg(MessageType::kTimeoutNow, transfer_target_));
    }
  }

  void HandleObserve(const Message& m, bool from_voter) {
    if (!is_voter_ || from_voter) return;
    if (role_ != Role::kLeader) {
      Send(Msg(MessageType::kObserveResponse, m.from));
      return;
    }
    auto [it, created] = progress_.try_emplace(m.from);
    Progress& pr = it->second;
    pr.last_contact_ms = clock_.NowMs();
    if (created) {
      pr.id = m.from;
      pr.voter = false;
      pr.next = storage_.end_offset();
      SendAppends(pr, /*heartbeat=*/true);
    }
  }

  // ---- Follower ------------------------------------------------------------------------------

  // Common to Append and Snapshot from the leader of our term: follow it. False when the
  // message must be dropped.
  bool AcceptLeader(const Message& m) {
    if (role_ == Role::kLeader) return false;  // two leaders in one term cannot happen
    const int64_t now = clock_.NowMs();
    if (role_ == Role::kPreCandidate || role_ == Role::kCandidate) {
      if (!BecomeFollower(term_, m.from)) return false;
    } else if (leader_ != m.from) {
      leader_ = m.from;
      NotifyRole();
    }
    last_leader_contact_ms_ = now;
    ResetElectionTimer(now);
    return true;
  }

  void HandleAppend(const Message& m, bool from_voter) {
    if (!from_voter) return;
    Message r = Msg(MessageType::kAppendResponse, m.from);
    r.prev_offset = m.prev_offset;
    r.seq = m.seq;
    if (m.term < term_) {
      // A deposed leader: our term in the answer makes it step down.
      r.hint_offset = storage_.end_offset();
      Send(std::move(r));
      return;
    }
    if (!AcceptLeader(m)) return;
    // Entries must follow prev_offset one by one, in terms no later than the leader's.
    for (size_t i = 0; i < m.entries.size(); ++i) {
      const Entry& e = m.entries[i];
      if (e.offset != m.prev_offset + 1 + static_cast<int64_t>(i) || e.term > m.term ||
          e.term <= 0) {
        return;
      }
    }
    if (m.prev_offset < -1) return;
    const int64_t end = storage_.end_offset();
    if (m.prev_offset >= end) {
      r.hint_offset = end;
      Send(std::move(r));
      return;
    }
    // Committed entries match the leader's (leader completeness): no need to look.
    if (m.prev_offset > commit_) {
      std::optional<int64_t> t = TermAt(m.prev_offset);
      if (fatal_) return;
      if (!t) return;  // cannot happen: prev_offset in (commit_, end) is in the log
      if (*t != m.prev_term) {
        // Skip back over the whole conflicting term at once.
        int64_t hint = m.prev_offset;
        const int64_t floor = std::max(commit_ + 1, storage_.start_offset());
        while (hint - 1 >= floor) {
          std::optional<int64_t> tt = TermAt(hint - 1);
          if (fatal_) return;
          if (!tt || *tt != *t) break;
          --hint;
        }
        r.hint_offset = hint;
        Send(std::move(r));
        return;
      }
    }
    // Skip what we already hold; truncate at the first conflict; append the rest.
    size_t i = 0;
    bool changed = false;
    for (; i < m.entries.size(); ++i) {
      const Entry& e = m.entries[i];
      if (e.offset <= commit_) continue;
      if (e.offset >= storage_.end_offset()) break;
      std::optional<int64_t> t = TermAt(e.offset);
      if (fatal_) return;
      if (t && *t == e.term) continue;
      if (!Ok(storage_.TruncateFrom(e.offset))) return;
      changed = true;
      break;
    }
    if (i < m.entries.size()) {
      if (!Ok(storage_.Append(std::span<const Entry>(m.entries).subspan(i)))) return;
      changed = true;
    }
    if (changed && !Ok(storage_.Sync())) return;
    const int64_t matched = m.prev_offset + static_cast<int64_t>(m.entries.size());
    r.success = true;
    r.match_offset = matched;
    r.hint_offset = storage_.end_offset();
    const int64_t new_commit = std::min(m.commit, matched);
    Send(std::move(r));
    if (new_commit > commit_) {
      commit_ = new_commit;
      Apply();
    }
  }

  void HandleSnapshot(const Message& m, bool from_voter) {
    if (!from_voter) return;
    Message r = Msg(MessageType::kSnapshotResponse, m.from);
    r.seq = m.seq;
    r.snapshot = m.snapshot;
    if (m.term < term_) {
      Send(std::move(r));
      return;
    }
    if (!AcceptLeader(m)) return;
    if (m.snapshot.end_offset <= 0) return;
    if (m.snapshot.end_offset - 1 <= commit_) {
      // We already hold (or held) everything it covers.
      r.success = true;
      r.chunk_offset = m.chunk_offset + m.chunk.size();
      Send(std::move(r));
      return;
    }
    // Chunks are only joined from one leader in one term: another leader's bytes for the same
    // id need not be identical.
    if (pending_snapshot_ != m.snapshot || pending_from_ != m.from || pending_term_ != term_) {
      if (m.chunk_offset != 0) {
        Send(std::move(r));  // chunk_offset 0: start this snapshot over
        return;
      }
      pending_snapshot_ = m.snapshot;
      pending_from_ = m.from;
      pending_term_ = term_;
      pending_data_.clear();
    }
    if (m.chunk_offset == pending_data_.size()) {
      pending_data_.append(m.chunk);
      if (m.done) {
        SnapshotId id = pending_snapshot_;
        std::string data = std::move(pending_data_);
        pending_data_.clear();
        pending_snapshot_ = SnapshotId{};
        if (!Ok(storage_.InstallSnapshot(id, data))) return;
        commit_ = id.end_offset - 1;
        applied_ = commit_;
        listener_.OnSnapshot(id, data);
        if (fatal_) return;
        r.success = true;
        r.chunk_offset = data.size();
        Send(std::move(r));
        return;
      }
    }
    r.chunk_offset = pending_data_.size();
    Send(std::move(r));
  }

  // Gives every committed entry not yet applied to the listener, in order.
  void Apply() {
    while (applied_ < commit_ && !fatal_) {
      if (applied_ + 1 < storage_.start_offset()) {
        Ok(absl::InternalError(
            fmt::format("entry {} to apply is no longer in the log", applied_ + 1)));
        return;
      }
      StatusOr<std::vector<Entry>> batch =
          storage_.Read(applied_ + 1, commit_ + 1, options_.max_append_bytes);
      if (!Ok(batch.status())) return;
      if (batch->empty()) {
        Ok(absl::InternalError(fmt::format("storage read at {} returned nothing", applied_ + 1)));
        return;
      }
      for (const Entry& e : *batch) {
        if (e.offset != applied_ + 1) {
          Ok(absl::InternalError(
              fmt::format("storage read gave offset {}, expected {}", e.offset, applied_ + 1)));
          return;
        }
        if (e.offset > commit_) break;
        // applied_ first: the listener may CompactTo(e.offset + 1) from inside OnCommit.
        applied_ = e.offset;
        listener_.OnCommit(e);
        if (fatal_) return;
      }
    }
  }

  Options options_;
  Storage& storage_;
  Clock& clock_;
  Transport& transport_;
  Listener& listener_;
  std::mt19937_64 rng_;
  std::set<NodeId> voters_;
  bool is_voter_ = false;

  bool fatal_ = false;
  Status fatal_status_;

  Role role_ = Role::kFollower;
  int64_t term_ = 0;
  NodeId voted_for_ = kNoNode;
  NodeId leader_ = kNoNode;
  int64_t commit_ = -1;
  int64_t applied_ = -1;
  int64_t election_deadline_ms_ = 0;
  int64_t last_leader_contact_ms_ = -1;

  Role notified_role_ = Role::kFollower;
  int64_t notified_term_ = 0;
  NodeId notified_leader_ = kNoNode;

  // Pre-candidate / candidate: who granted.
  std::set<NodeId> votes_;

  // Leader. std::map: iteration in id order keeps a seeded run reproducible.
  std::map<NodeId, Progress> progress_;
  int64_t noop_offset_ = 0;
  uint64_t seq_ = 0;
  int64_t next_heartbeat_ms_ = 0;
  bool read_round_pending_ = false;
  std::deque<PendingRead> reads_;
  NodeId transfer_target_ = kNoNode;
  int64_t transfer_deadline_ms_ = 0;
  std::shared_ptr<std::string> snapshot_cache_;
  SnapshotId snapshot_cache_id_;

  // Follower: the snapshot being received.
  SnapshotId pending_snapshot_;
  NodeId pending_from_ = kNoNode;
  int64_t pending_term_ = 0;
  std::string pending_data_;
};

StatusOr<std::unique_ptr<Node>> Node::Open(const Options& options, Storage& storage, Clock& clock,
                                           Transport& transport, Listener& listener) {
  if (options.id == kNoNode) return absl::InvalidArgumentError("raft node id is not set");
  if (options.election_timeout_ms <= 0 || options.heartbeat_interval_ms <= 0) {
    return absl::InvalidArgumentError("raft timeouts must be positive");
  }
  auto impl = std::make_unique<Impl>(options, storage, clock, transport, listener);
  RUNNEL_RETURN_IF_ERROR(impl->Load());
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

Node::Node(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Node::~Node() = default;

void Node::Receive(const Message& message) { impl_->Receive(message); }
void Node::Tick() { impl_->Tick(); }
int64_t Node::NextTickMs() const { return impl_->NextTickMs(); }
StatusOr<int64_t> Node::Propose(std::vector<std::string> data) {
  return impl_->Propose(std::move(data));
}
void Node::ReadIndex(uint64_t read_id) { impl_->ReadIndex(read_id); }
Status Node::CompactTo(SnapshotId id, std::string data) {
  return impl_->CompactTo(id, std::move(data));
}
Status Node::TransferLeadership(NodeId target) { return impl_->TransferLeadership(target); }
Role Node::role() const { return impl_->role(); }
int64_t Node::term() const { return impl_->term(); }
NodeId Node::leader() const { return impl_->leader(); }
int64_t Node::commit_offset() const { return impl_->commit_offset(); }
int64_t Node::applied_offset() const { return impl_->applied_offset(); }
std::vector<ReplicaState> Node::Replicas() const { return impl_->Replicas(); }

}  // namespace runnel::controllerd::raft
