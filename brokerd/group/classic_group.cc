#include "brokerd/group/classic_group.h"

#include <fmt/format.h>

#include <algorithm>

#include "brokerd/error_mapping.h"
#include "common/log/log.h"
#include "common/protocol/error_code.h"
#include "common/protocol/uuid.h"

namespace runnel::brokerd::group {
namespace {

using protocol::ErrorCode;
using protocol::JoinGroupResponse;
using protocol::SyncGroupResponse;

const log::ModuleLogger kLog("brokerd.group");

// Java's UUID.toString(): 8-4-4-4-12 lowercase hex digits.
std::string JavaUuidString(const protocol::Uuid& uuid) {
  std::string hex;
  hex.reserve(36);
  for (size_t i = 0; i < uuid.bytes.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) hex.push_back('-');
    hex += fmt::format("{:02x}", uuid.bytes[i]);
  }
  return hex;
}

JoinGroupResponse JoinError(std::string member_id, ErrorCode error) {
  JoinGroupResponse r;
  r.error_code = error;
  r.member_id = std::move(member_id);
  return r;
}

SyncGroupResponse SyncError(ErrorCode error) {
  SyncGroupResponse r;
  r.error_code = error;
  return r;
}

std::optional<std::string> OrNull(const std::string& s) {
  if (s.empty()) return std::nullopt;
  return s;
}

}  // namespace

const std::vector<uint8_t>* ClassicGroup::Member::Metadata(const std::string& protocol) const {
  for (const Protocol& p : protocols) {
    if (p.name == protocol) return &p.metadata;
  }
  return nullptr;
}

ClassicGroup::ClassicGroup(std::string group_id, GroupEnv& env)
    : group_id_(std::move(group_id)), env_(env) {}

ClassicGroup::~ClassicGroup() {
  CancelJoinTimer();
  CancelSyncTimer();
  for (auto& [id, m] : members_) env_.CancelTimer(m.heartbeat_timer);
  for (auto& [id, t] : pending_member_timers_) env_.CancelTimer(t);
}

std::string_view ClassicGroup::StateName() const {
  switch (state_) {
    case State::kEmpty:
      return "Empty";
    case State::kPreparingRebalance:
      return "PreparingRebalance";
    case State::kCompletingRebalance:
      return "CompletingRebalance";
    case State::kStable:
      return "Stable";
    case State::kDead:
      return "Dead";
  }
  return "Dead";
}

// ---- Small helpers ---------------------------------------------------------------------

void ClassicGroup::TransitionTo(State state) {
  previous_state_ = state_;
  state_ = state;
  state_timestamp_ms_ = env_.NowMs();
}

bool ClassicGroup::CanRebalance() const {
  return state_ == State::kStable || state_ == State::kCompletingRebalance ||
         state_ == State::kEmpty;
}

std::set<std::string> ClassicGroup::CandidateProtocols() const {
  std::map<std::string, size_t> counts;
  for (const auto& [id, m] : members_) {
    std::set<std::string> names;
    for (const Protocol& p : m.protocols) names.insert(p.name);
    for (const std::string& n : names) ++counts[n];
  }
  std::set<std::string> out;
  for (const auto& [name, count] : counts) {
    if (count == members_.size()) out.insert(name);
  }
  return out;
}

bool ClassicGroup::SupportsProtocols(const std::string& type,
                                     const std::vector<Protocol>& protocols) const {
  if (state_ == State::kEmpty) return !type.empty() && !protocols.empty();
  if (protocol_type_ != type) return false;
  if (members_.empty()) return !protocols.empty();
  std::set<std::string> candidates = CandidateProtocols();
  for (const Protocol& p : protocols) {
    if (candidates.count(p.name) > 0) return true;
  }
  return false;
}

// Kafka's vote: each member votes for its most preferred protocol that every member supports;
// the most votes wins (ties go to the smallest name, so the choice is deterministic).
std::string ClassicGroup::SelectProtocol() const {
  std::set<std::string> candidates = CandidateProtocols();
  std::map<std::string, int> votes;
  for (const auto& [id, m] : members_) {
    for (const Protocol& p : m.protocols) {
      if (candidates.count(p.name) > 0) {
        ++votes[p.name];
        break;
      }
    }
  }
  std::string best;
  int best_votes = -1;
  for (const auto& [name, n] : votes) {
    if (n > best_votes) {
      best = name;
      best_votes = n;
    }
  }
  return best;
}

int ClassicGroup::NumAwaitingJoin() const {
  int n = 0;
  for (const auto& [id, m] : members_) n += m.awaiting_join ? 1 : 0;
  return n;
}

bool ClassicGroup::HasAllMembersJoined() const {
  return static_cast<size_t>(NumAwaitingJoin()) == members_.size() && pending_members_.empty();
}

int32_t ClassicGroup::RebalanceTimeoutMs() const {
  int32_t max_ms = 0;
  for (const auto& [id, m] : members_) max_ms = std::max(max_ms, m.rebalance_timeout_ms);
  return max_ms;
}

bool ClassicGroup::AcceptJoiningMember(const std::string& member_id) const {
  const int32_t max_size = env_.config().max_size;
  auto it = members_.find(member_id);
  switch (state_) {
    case State::kEmpty:
    case State::kDead:
      return true;
    case State::kPreparingRebalance:
      // Counting the members already rejoined (not the group size, which may be above a
      // lowered max) lets the last members to rejoin be the ones turned away.
      return (it != members_.end() && it->second.awaiting_join) || NumAwaitingJoin() < max_size;
    case State::kCompletingRebalance:
    case State::kStable:
      return it != members_.end() || members_.size() < static_cast<size_t>(max_size);
  }
  return false;
}

ErrorCode ClassicGroup::ValidateMember(const std::string& member_id,
                                       const std::optional<std::string>& group_instance_id) const {
  if (group_instance_id.has_value()) {
    auto it = static_members_.find(*group_instance_id);
    if (it == static_members_.end()) return ErrorCode::kUnknownMemberId;
    if (it->second != member_id) return ErrorCode::kFencedInstanceId;
  }
  if (members_.count(member_id) == 0) return ErrorCode::kUnknownMemberId;
  return ErrorCode::kNone;
}

std::string ClassicGroup::GenerateMemberId(const JoinParams& params) const {
  const std::string& prefix =
      params.group_instance_id ? *params.group_instance_id : params.client_id;
  return fmt::format("{}-{}", prefix, JavaUuidString(protocol::Uuid::Random()));
}

std::vector<JoinGroupResponse::JoinGroupResponseMember> ClassicGroup::CurrentMembers() const {
  std::vector<JoinGroupResponse::JoinGroupResponseMember> out;
  out.reserve(members_.size());
  for (const auto& [id, m] : members_) {
    JoinGroupResponse::JoinGroupResponseMember r;
    r.member_id = id;
    r.group_instance_id = m.group_instance_id;
    if (protocol_) {
      if (const auto* md = m.Metadata(*protocol_)) r.metadata = *md;
    }
    out.push_back(std::move(r));
  }
  return out;
}

JoinGroupResponse ClassicGroup::JoinResponseFor(const Member& member, bool with_members) const {
  JoinGroupResponse r;
  if (with_members) r.members = CurrentMembers();
  r.member_id = member.member_id;
  r.generation_id = generation_;
  r.protocol_name = protocol_;
  r.protocol_type = OrNull(protocol_type_);
  r.leader = leader_.value_or("");
  return r;
}

void ClassicGroup::CompleteJoinWith(Member& member, JoinGroupResponse response) {
  if (!member.awaiting_join) return;
  JoinDone done = std::move(member.awaiting_join);
  member.awaiting_join = nullptr;
  done(std::move(response));
}

void ClassicGroup::CompleteSyncWith(Member& member, SyncGroupResponse response) {
  if (!member.awaiting_sync) return;
  SyncDone done = std::move(member.awaiting_sync);
  member.awaiting_sync = nullptr;
  done(std::move(response));
}

void ClassicGroup::StartJoinTimer(int64_t delay_ms, std::function<void()> fn) {
  CancelJoinTimer();
  std::weak_ptr<bool> alive = alive_;
  join_timer_ = env_.StartTimer(delay_ms, [this, alive, fn = std::move(fn)] {
    if (alive.expired()) return;
    join_timer_ = 0;
    fn();
  });
}

void ClassicGroup::CancelJoinTimer() {
  if (join_timer_ != 0) env_.CancelTimer(join_timer_);
  join_timer_ = 0;
}

void ClassicGroup::CancelSyncTimer() {
  if (sync_timer_ != 0) env_.CancelTimer(sync_timer_);
  sync_timer_ = 0;
}

// ---- Load / persistence ----------------------------------------------------------------

ClassicGroupValue ClassicGroup::ToValue() const {
  ClassicGroupValue v;
  v.protocol_type = protocol_type_;
  v.generation = generation_;
  v.protocol = protocol_;
  v.leader = leader_;
  v.current_state_timestamp_ms = state_timestamp_ms_;
  for (const auto& [id, m] : members_) {
    ClassicMemberValue mv;
    mv.member_id = id;
    mv.group_instance_id = m.group_instance_id;
    mv.client_id = m.client_id;
    mv.client_host = m.client_host;
    mv.rebalance_timeout_ms = m.rebalance_timeout_ms;
    mv.session_timeout_ms = m.session_timeout_ms;
    if (protocol_) {
      if (const auto* md = m.Metadata(*protocol_)) mv.subscription = *md;
    }
    mv.assignment = m.assignment;
    v.members.push_back(std::move(mv));
  }
  return v;
}

void ClassicGroup::Load(const ClassicGroupValue& value) {
  CancelJoinTimer();
  CancelSyncTimer();
  for (auto& [id, m] : members_) env_.CancelTimer(m.heartbeat_timer);
  for (auto& [id, t] : pending_member_timers_) env_.CancelTimer(t);
  members_.clear();
  static_members_.clear();
  pending_members_.clear();
  pending_member_timers_.clear();
  pending_sync_members_.clear();

  protocol_type_ = value.protocol_type;
  generation_ = value.generation;
  protocol_ = value.protocol;
  for (const ClassicMemberValue& mv : value.members) {
    Member m;
    m.member_id = mv.member_id;
    m.group_instance_id = mv.group_instance_id;
    m.client_id = mv.client_id;
    m.client_host = mv.client_host;
    m.rebalance_timeout_ms = mv.rebalance_timeout_ms;
    m.session_timeout_ms = mv.session_timeout_ms;
    m.protocol_type = value.protocol_type;
    // Only the chosen protocol's metadata is stored; a member rejoining with its full list
    // therefore "changes" its protocols and triggers a rebalance, as in Kafka.
    m.protocols.push_back(Protocol{value.protocol.value_or(""), mv.subscription});
    m.assignment = mv.assignment;
    if (m.group_instance_id) static_members_[*m.group_instance_id] = m.member_id;
    members_.emplace(m.member_id, std::move(m));
  }
  leader_ = value.leader;
  if (leader_ && members_.count(*leader_) == 0) leader_.reset();
  if (!leader_ && !members_.empty()) leader_ = members_.begin()->first;
  state_ = members_.empty() ? State::kEmpty : State::kStable;
  previous_state_ = state_;
  state_timestamp_ms_ = value.current_state_timestamp_ms;
  for (auto& [id, m] : members_) RescheduleHeartbeat(m, m.session_timeout_ms);
  if (members_.size() > static_cast<size_t>(env_.config().max_size)) {
    kLog()->info("group {}: {} members loaded, above group.max.size {}; rebalancing", group_id_,
                 members_.size(), env_.config().max_size);
    PrepareRebalance();
  }
}

void ClassicGroup::WriteGroup(const ClassicGroupValue& value,
                              std::function<void(ErrorCode error)> done) {
  std::weak_ptr<bool> alive = alive_;
  std::vector<LogRecord> records;
  records.push_back(ClassicGroupRecord(group_id_, value));
  env_.Write(std::move(records), [alive, done = std::move(done)](ErrorCode error) {
    if (alive.expired()) return;
    done(GroupMetadataWriteError(error));
  });
}

// The group became Empty after having had a generation: written so a restarted coordinator
// loads it Empty rather than with the last members. A failure only logs, as in Kafka: the
// stale generation that would come back has no live members and times out.
void ClassicGroup::PersistEmpty() {
  ++empty_writes_in_flight_;
  WriteGroup(ToValue(), [this](ErrorCode error) {
    if (error != ErrorCode::kNone) {
      kLog()->warn("group {}: writing the Empty state failed with error {}", group_id_,
                   protocol::ErrorName(error));
    }
    if (--empty_writes_in_flight_ == 0) {
      auto waiters = std::move(after_empty_write_);
      after_empty_write_.clear();
      for (auto& fn : waiters) fn();
    }
  });
}

// ---- Members and timers ----------------------------------------------------------------

void ClassicGroup::RescheduleHeartbeat(Member& member, int64_t timeout_ms) {
  if (member.heartbeat_timer != 0) env_.CancelTimer(member.heartbeat_timer);
  std::weak_ptr<bool> alive = alive_;
  member.heartbeat_timer = env_.StartTimer(timeout_ms, [this, alive, id = member.member_id] {
    if (alive.expired()) return;
    ExpireHeartbeat(id);
  });
}

void ClassicGroup::ExpireHeartbeat(const std::string& member_id) {
  if (state_ == State::kDead) return;
  if (pending_members_.count(member_id) > 0) {
    kLog()->info("group {}: pending member {} expired", group_id_, member_id);
    pending_member_timers_.erase(member_id);
    pending_members_.erase(member_id);
    if (state_ == State::kPreparingRebalance && HasAllMembersJoined()) CompleteJoin();
    return;
  }
  auto it = members_.find(member_id);
  if (it == members_.end()) return;
  Member& m = it->second;
  m.heartbeat_timer = 0;
  // A member parked in JoinGroup or SyncGroup is not expected to heartbeat: its timer
  // restarts when that request is answered. A new member can expire while parked.
  const bool satisfied = !m.is_new && (m.awaiting_join || m.awaiting_sync);
  if (satisfied) return;
  kLog()->info("group {}: member {} session expired; removing it", group_id_, member_id);
  RemoveMemberAndUpdateGroup(member_id);
}

void ClassicGroup::RemoveMember(const std::string& member_id) {
  JoinDone join;
  SyncDone sync;
  auto it = members_.find(member_id);
  if (it != members_.end()) {
    Member& m = it->second;
    if (m.heartbeat_timer != 0) env_.CancelTimer(m.heartbeat_timer);
    join = std::move(m.awaiting_join);
    sync = std::move(m.awaiting_sync);
    if (m.group_instance_id) {
      auto s = static_members_.find(*m.group_instance_id);
      if (s != static_members_.end() && s->second == member_id) static_members_.erase(s);
    }
    members_.erase(it);
  }
  if (leader_ == member_id) {
    leader_.reset();
    if (!members_.empty()) leader_ = members_.begin()->first;
  }
  if (auto t = pending_member_timers_.find(member_id); t != pending_member_timers_.end()) {
    env_.CancelTimer(t->second);
    pending_member_timers_.erase(t);
  }
  pending_members_.erase(member_id);
  pending_sync_members_.erase(member_id);
  // A removed member's parked requests are answered so its connection's later responses are
  // not held back; the client rejoins as a new member.
  if (join) join(JoinError("", ErrorCode::kUnknownMemberId));
  if (sync) sync(SyncError(ErrorCode::kUnknownMemberId));
}

void ClassicGroup::RemoveMemberAndUpdateGroup(const std::string& member_id) {
  RemoveMember(member_id);
  if (state_ == State::kStable || state_ == State::kCompletingRebalance) {
    MaybePrepareRebalanceOrCompleteJoin();
  } else if (state_ == State::kPreparingRebalance && HasAllMembersJoined()) {
    CompleteJoin();
  }
}

void ClassicGroup::RemovePendingSyncMember(const std::string& member_id) {
  pending_sync_members_.erase(member_id);
  if (pending_sync_members_.empty()) CancelSyncTimer();
}

// ---- Rebalance -------------------------------------------------------------------------

void ClassicGroup::MaybePrepareRebalanceOrCompleteJoin() {
  if (CanRebalance()) {
    PrepareRebalance();
  } else {
    MaybeCompleteJoinPhase();
  }
}

void ClassicGroup::PrepareRebalance() {
  if (state_ == State::kCompletingRebalance) {
    ResetAndPropagateAssignmentWithError(ErrorCode::kRebalanceInProgress);
  }
  pending_sync_members_.clear();
  CancelSyncTimer();

  const bool initial = state_ == State::kEmpty;
  if (initial) {
    // A new group waits a little for more members, so a starting fleet forms one generation.
    const int32_t delay_ms = env_.config().initial_rebalance_delay_ms;
    const int32_t remaining_ms = std::max(RebalanceTimeoutMs() - delay_ms, 0);
    new_member_added_ = false;
    StartJoinTimer(delay_ms,
                   [this, delay_ms, remaining_ms] { InitialDelayExpired(delay_ms, remaining_ms); });
  }
  TransitionTo(State::kPreparingRebalance);
  kLog()->info("group {}: preparing to rebalance (generation {})", group_id_, generation_);
  if (initial) return;
  if (HasAllMembersJoined()) {
    CompleteJoin();
  } else {
    StartJoinTimer(RebalanceTimeoutMs(), [this] { CompleteJoin(); });
  }
}

void ClassicGroup::InitialDelayExpired(int32_t delay_ms, int32_t remaining_ms) {
  if (state_ != State::kPreparingRebalance) return;
  if (new_member_added_ && remaining_ms != 0) {
    new_member_added_ = false;
    const int32_t next_delay = std::min(env_.config().initial_rebalance_delay_ms, remaining_ms);
    const int32_t next_remaining = std::max(remaining_ms - delay_ms, 0);
    StartJoinTimer(next_delay, [this, next_delay, next_remaining] {
      InitialDelayExpired(next_delay, next_remaining);
    });
    return;
  }
  CompleteJoin();
}

void ClassicGroup::MaybeCompleteJoinPhase() {
  if (state_ != State::kPreparingRebalance) return;
  if (previous_state_ == State::kEmpty) return;  // the initial delay decides
  if (!HasAllMembersJoined()) return;
  CompleteJoin();
}

void ClassicGroup::CompleteJoin() {
  CancelJoinTimer();
  if (state_ == State::kDead) return;

  std::vector<std::string> not_rejoined;
  for (const auto& [id, m] : members_) {
    if (!m.awaiting_join && !m.group_instance_id) not_rejoined.push_back(id);
  }
  if (!not_rejoined.empty()) {
    kLog()->info("group {}: removing {} dynamic members that did not rejoin", group_id_,
                 not_rejoined.size());
    for (const std::string& id : not_rejoined) RemoveMember(id);
  }

  // The leader must be among the rejoined members; static members that did not rejoin are
  // waited for until their session expires.
  bool have_leader = false;
  if (leader_) {
    auto it = members_.find(*leader_);
    if (it != members_.end() && it->second.awaiting_join) {
      have_leader = true;
    } else {
      for (const auto& [id, m] : members_) {
        if (m.awaiting_join) {
          leader_ = id;
          have_leader = true;
          break;
        }
      }
    }
  }
  if (!have_leader && !members_.empty()) {
    kLog()->warn("group {}: no member rejoined; waiting another rebalance timeout", group_id_);
    StartJoinTimer(RebalanceTimeoutMs(), [this] { CompleteJoin(); });
    return;
  }

  ++generation_;
  pending_sync_members_.clear();
  if (members_.empty()) {
    protocol_.reset();
    TransitionTo(State::kEmpty);
    kLog()->info("group {}: generation {} is empty", group_id_, generation_);
    PersistEmpty();
    return;
  }
  protocol_ = SelectProtocol();
  TransitionTo(State::kCompletingRebalance);
  kLog()->info("group {}: generation {} with {} members, protocol {}", group_id_, generation_,
               members_.size(), *protocol_);

  // Answer every parked JoinGroup (the leader's with all members' metadata). Answers are
  // built first: a callback must not see the group half-updated.
  std::vector<std::pair<JoinDone, JoinGroupResponse>> answers;
  for (auto& [id, m] : members_) {
    if (m.awaiting_join) {
      answers.emplace_back(std::move(m.awaiting_join), JoinResponseFor(m, leader_ == id));
      m.awaiting_join = nullptr;
    }
    RescheduleHeartbeat(m, m.session_timeout_ms);
    m.is_new = false;
    pending_sync_members_.insert(id);
  }
  const int32_t generation = generation_;
  std::weak_ptr<bool> alive = alive_;
  sync_timer_ = env_.StartTimer(RebalanceTimeoutMs(), [this, alive, generation] {
    if (alive.expired()) return;
    sync_timer_ = 0;
    ExpirePendingSync(generation);
  });
  for (auto& [done, response] : answers) done(std::move(response));
}

void ClassicGroup::ExpirePendingSync(int32_t generation) {
  if (generation != generation_) return;
  if (state_ != State::kCompletingRebalance && state_ != State::kStable) return;
  if (pending_sync_members_.empty()) return;
  std::vector<std::string> late(pending_sync_members_.begin(), pending_sync_members_.end());
  kLog()->info("group {}: removing {} members that did not send SyncGroup", group_id_, late.size());
  for (const std::string& id : late) RemoveMember(id);
  PrepareRebalance();
}

void ClassicGroup::ResetAndPropagateAssignmentWithError(ErrorCode error) {
  for (auto& [id, m] : members_) m.assignment.clear();
  PropagateAssignment(error);
}

void ClassicGroup::PropagateAssignment(ErrorCode error) {
  std::vector<std::pair<SyncDone, SyncGroupResponse>> answers;
  for (auto& [id, m] : members_) {
    if (!m.awaiting_sync) continue;
    SyncGroupResponse r;
    r.error_code = error;
    if (error == ErrorCode::kNone) {
      r.protocol_type = OrNull(protocol_type_);
      r.protocol_name = protocol_;
    }
    r.assignment = m.assignment;
    answers.emplace_back(std::move(m.awaiting_sync), std::move(r));
    m.awaiting_sync = nullptr;
    // The session timer was paused while the SyncGroup was parked.
    RescheduleHeartbeat(m, m.session_timeout_ms);
  }
  for (auto& [done, response] : answers) done(std::move(response));
}

void ClassicGroup::OnSyncWritten(int32_t generation,
                                 std::map<std::string, std::vector<uint8_t>> assignment,
                                 ErrorCode error) {
  // The group may have moved on (a member joined or left) while the write was in flight.
  if (state_ != State::kCompletingRebalance || generation != generation_) return;
  if (error != ErrorCode::kNone) {
    kLog()->warn("group {}: writing the assignment of generation {} failed with error {}",
                 group_id_, generation, protocol::ErrorName(error));
    ResetAndPropagateAssignmentWithError(error);
    MaybePrepareRebalanceOrCompleteJoin();
    return;
  }
  for (auto& [id, m] : members_) {
    auto it = assignment.find(id);
    m.assignment = it == assignment.end() ? std::vector<uint8_t>{} : std::move(it->second);
  }
  TransitionTo(State::kStable);
  PropagateAssignment(ErrorCode::kNone);
}

// ---- JoinGroup -------------------------------------------------------------------------

void ClassicGroup::Join(JoinParams params, JoinDone done) {
  const GroupConfig& config = env_.config();
  if (params.session_timeout_ms < config.min_session_timeout_ms ||
      params.session_timeout_ms > config.max_session_timeout_ms) {
    return done(JoinError(params.member_id, ErrorCode::kInvalidSessionTimeout));
  }
  if (!AcceptJoiningMember(params.member_id)) {
    RemoveMember(params.member_id);
    return done(JoinError("", ErrorCode::kGroupMaxSizeReached));
  }
  if (params.member_id.empty()) {
    JoinNewMember(std::move(params), std::move(done));
  } else {
    JoinExistingMember(std::move(params), std::move(done));
  }
}

void ClassicGroup::JoinNewMember(JoinParams params, JoinDone done) {
  if (state_ == State::kDead) {
    return done(JoinError("", ErrorCode::kCoordinatorNotAvailable));
  }
  if (!SupportsProtocols(params.protocol_type, params.protocols)) {
    return done(JoinError("", ErrorCode::kInconsistentGroupProtocol));
  }
  std::string new_id = GenerateMemberId(params);
  if (params.group_instance_id) {
    auto it = static_members_.find(*params.group_instance_id);
    if (it != static_members_.end()) {
      kLog()->info("group {}: static member {} rejoins; replacing member id {} with {}", group_id_,
                   *params.group_instance_id, it->second, new_id);
      std::string old_id = it->second;
      return ReplaceStaticMemberThenRebalance(old_id, new_id, std::move(params), std::move(done));
    }
    return AddMemberThenRebalance(new_id, std::move(params), std::move(done));
  }
  if (params.api_version >= 4) {
    // The member must come back with this id, so a client that retries a timed-out JoinGroup
    // does not leave a defunct member behind. It is pending until then.
    pending_members_.insert(new_id);
    std::weak_ptr<bool> alive = alive_;
    pending_member_timers_[new_id] =
        env_.StartTimer(params.session_timeout_ms, [this, alive, new_id] {
          if (alive.expired()) return;
          ExpireHeartbeat(new_id);
        });
    return done(JoinError(new_id, ErrorCode::kMemberIdRequired));
  }
  AddMemberThenRebalance(new_id, std::move(params), std::move(done));
}

void ClassicGroup::JoinExistingMember(JoinParams params, JoinDone done) {
  const std::string member_id = params.member_id;
  if (state_ == State::kDead) {
    return done(JoinError(member_id, ErrorCode::kCoordinatorNotAvailable));
  }
  if (!SupportsProtocols(params.protocol_type, params.protocols)) {
    return done(JoinError(member_id, ErrorCode::kInconsistentGroupProtocol));
  }
  if (pending_members_.count(member_id) > 0) {
    return AddMemberThenRebalance(member_id, std::move(params), std::move(done));
  }
  if (ErrorCode error = ValidateMember(member_id, params.group_instance_id);
      error != ErrorCode::kNone) {
    JoinGroupResponse r = JoinError(member_id, error);
    r.protocol_name.reset();
    return done(std::move(r));
  }
  Member& member = members_.at(member_id);
  switch (state_) {
    case State::kPreparingRebalance:
      return UpdateMemberThenRebalance(member, std::move(params), std::move(done));
    case State::kCompletingRebalance:
      if (member.protocols == params.protocols) {
        // Same metadata: it probably missed the JoinGroup answer; give it again.
        return done(JoinResponseFor(member, leader_ == member_id));
      }
      return UpdateMemberThenRebalance(member, std::move(params), std::move(done));
    case State::kStable:
      // The leader rejoining forces a rebalance (it may have seen a metadata change that
      // affects the assignment but not its own subscription).
      if (leader_ == member_id || member.protocols != params.protocols) {
        return UpdateMemberThenRebalance(member, std::move(params), std::move(done));
      }
      return done(JoinResponseFor(member, false));
    case State::kEmpty:
    case State::kDead:
      break;
  }
  done(JoinError(member_id, ErrorCode::kUnknownMemberId));
}

void ClassicGroup::AddMemberThenRebalance(const std::string& member_id, JoinParams params,
                                          JoinDone done) {
  if (auto t = pending_member_timers_.find(member_id); t != pending_member_timers_.end()) {
    env_.CancelTimer(t->second);
    pending_member_timers_.erase(t);
  }
  pending_members_.erase(member_id);

  Member m;
  m.member_id = member_id;
  m.group_instance_id = params.group_instance_id;
  m.client_id = std::move(params.client_id);
  m.client_host = std::move(params.client_host);
  m.rebalance_timeout_ms = params.rebalance_timeout_ms;
  m.session_timeout_ms = params.session_timeout_ms;
  m.protocol_type = params.protocol_type;
  m.protocols = std::move(params.protocols);
  m.awaiting_join = std::move(done);
  m.is_new = true;

  if (state_ == State::kPreparingRebalance && previous_state_ == State::kEmpty) {
    new_member_added_ = true;
  }
  if (m.group_instance_id) static_members_[*m.group_instance_id] = member_id;
  if (members_.empty()) protocol_type_ = params.protocol_type;
  if (!leader_) leader_ = member_id;
  Member& added = members_.insert_or_assign(member_id, std::move(m)).first->second;
  // A new member cannot heartbeat while parked, so it gets a long join timeout instead of
  // its session timeout: a client that gave up on this request does not linger forever.
  RescheduleHeartbeat(added, kNewMemberJoinTimeoutMs);
  MaybePrepareRebalanceOrCompleteJoin();
}

void ClassicGroup::UpdateMember(Member& member, std::vector<Protocol> protocols,
                                int32_t rebalance_timeout_ms, int32_t session_timeout_ms,
                                JoinDone done) {
  member.protocols = std::move(protocols);
  member.rebalance_timeout_ms = rebalance_timeout_ms;
  member.session_timeout_ms = session_timeout_ms;
  JoinDone previous = std::move(member.awaiting_join);
  member.awaiting_join = std::move(done);
  // A JoinGroup already parked for this member (the client gave up on it and retried) is
  // answered, so the connection's later responses are not held behind it.
  if (previous) previous(JoinError(member.member_id, ErrorCode::kRebalanceInProgress));
}

void ClassicGroup::UpdateMemberThenRebalance(Member& member, JoinParams params, JoinDone done) {
  UpdateMember(member, std::move(params.protocols), params.rebalance_timeout_ms,
               params.session_timeout_ms, std::move(done));
  MaybePrepareRebalanceOrCompleteJoin();
}

ClassicGroup::Member& ClassicGroup::ReplaceStaticMember(const std::string& instance_id,
                                                        const std::string& old_id,
                                                        const std::string& new_id) {
  auto node = members_.extract(old_id);
  Member m = std::move(node.mapped());
  JoinDone join = std::move(m.awaiting_join);
  SyncDone sync = std::move(m.awaiting_sync);
  m.awaiting_join = nullptr;
  m.awaiting_sync = nullptr;
  if (m.heartbeat_timer != 0) env_.CancelTimer(m.heartbeat_timer);
  m.heartbeat_timer = 0;
  m.member_id = new_id;
  Member& placed = members_.insert_or_assign(new_id, std::move(m)).first->second;
  if (leader_ == old_id) leader_ = new_id;
  static_members_[instance_id] = new_id;
  if (pending_sync_members_.erase(old_id) > 0) pending_sync_members_.insert(new_id);

  // The old member id is fenced from now on, including its parked requests.
  if (join) {
    JoinGroupResponse r = JoinError(old_id, ErrorCode::kFencedInstanceId);
    r.protocol_name.reset();
    join(std::move(r));
  }
  if (sync) sync(SyncError(ErrorCode::kFencedInstanceId));
  return placed;
}

void ClassicGroup::ReplaceStaticMemberThenRebalance(const std::string& old_id,
                                                    const std::string& new_id, JoinParams params,
                                                    JoinDone done) {
  const std::string instance_id = *params.group_instance_id;
  const std::optional<std::string> previous_leader = leader_;
  Member& member = ReplaceStaticMember(instance_id, old_id, new_id);
  RescheduleHeartbeat(member, member.session_timeout_ms);
  const int32_t old_rebalance_timeout = member.rebalance_timeout_ms;
  const int32_t old_session_timeout = member.session_timeout_ms;
  std::vector<Protocol> old_protocols = member.protocols;
  UpdateMember(member, std::move(params.protocols), params.rebalance_timeout_ms,
               params.session_timeout_ms, std::move(done));

  switch (state_) {
    case State::kStable: {
      if (protocol_.value_or("") != SelectProtocol()) {
        // The chosen protocol would change: everyone must rejoin.
        return MaybePrepareRebalanceOrCompleteJoin();
      }
      // Same protocol: the member takes over the old id's assignment without a rebalance.
      // The new member id is written first, so a restarted coordinator fences the old one.
      const int16_t api_version = params.api_version;
      WriteGroup(ToValue(), [this, instance_id, old_id, new_id, previous_leader, api_version,
                             old_rebalance_timeout, old_session_timeout,
                             old_protocols](ErrorCode error) mutable {
        auto it = members_.find(new_id);
        if (it == members_.end() || !it->second.awaiting_join) return;  // answered since
        Member& m = it->second;
        if (error != ErrorCode::kNone) {
          kLog()->warn("group {}: writing static member {} as {} failed ({}); reverting to {}",
                       group_id_, instance_id, new_id, protocol::ErrorName(error), old_id);
          JoinDone cb = std::move(m.awaiting_join);
          m.awaiting_join = nullptr;
          UpdateMember(m, std::move(old_protocols), old_rebalance_timeout, old_session_timeout,
                       nullptr);
          Member& restored = ReplaceStaticMember(instance_id, new_id, old_id);
          RescheduleHeartbeat(restored, restored.session_timeout_ms);
          JoinGroupResponse r;
          r.error_code = error;
          r.generation_id = generation_;
          r.protocol_name = protocol_;
          r.protocol_type = OrNull(protocol_type_);
          r.leader = previous_leader.value_or("");
          cb(std::move(r));
          return;
        }
        JoinGroupResponse r;
        r.member_id = new_id;
        r.generation_id = generation_;
        r.protocol_name = protocol_;
        r.protocol_type = OrNull(protocol_type_);
        if (api_version >= 9) {
          // v9 tells a static leader to skip the assignment it already did (KIP-814).
          const bool is_leader = leader_ == new_id;
          if (is_leader) r.members = CurrentMembers();
          r.leader = leader_.value_or("");
          r.skip_assignment = is_leader;
        } else {
          // Older clients would reassign if told they lead; the old leader id keeps them a
          // follower that just syncs.
          r.leader = previous_leader.value_or("");
        }
        CompleteJoinWith(m, std::move(r));
      });
      return;
    }
    case State::kCompletingRebalance:
      // The leader may already be assigning with the old member id: start over.
      return PrepareRebalance();
    case State::kPreparingRebalance:
      return MaybeCompleteJoinPhase();
    case State::kEmpty:
    case State::kDead:
      return;
  }
}

// ---- SyncGroup -------------------------------------------------------------------------

// clang-tidy 14 misses that the assignments are moved out of `params` (through a structured
// binding) and would have it a const reference, which would copy them.
// NOLINTNEXTLINE(performance-unnecessary-value-param)
void ClassicGroup::Sync(SyncParams params, SyncDone done) {
  if (state_ == State::kEmpty) return done(SyncError(ErrorCode::kUnknownMemberId));
  if (state_ == State::kDead) return done(SyncError(ErrorCode::kCoordinatorNotAvailable));
  if (ErrorCode error = ValidateMember(params.member_id, params.group_instance_id);
      error != ErrorCode::kNone) {
    return done(SyncError(error));
  }
  if (params.generation_id != generation_) {
    return done(SyncError(ErrorCode::kIllegalGeneration));
  }
  const auto inconsistent = [](const std::optional<std::string>& asked,
                               const std::optional<std::string>& actual) {
    return asked && actual && *asked != *actual;
  };
  if (inconsistent(params.protocol_type, OrNull(protocol_type_)) ||
      inconsistent(params.protocol_name, protocol_)) {
    return done(SyncError(ErrorCode::kInconsistentGroupProtocol));
  }

  Member& member = members_.at(params.member_id);
  switch (state_) {
    case State::kPreparingRebalance:
      return done(SyncError(ErrorCode::kRebalanceInProgress));
    case State::kCompletingRebalance: {
      SyncDone previous = std::move(member.awaiting_sync);
      member.awaiting_sync = std::move(done);
      if (previous) previous(SyncError(ErrorCode::kRebalanceInProgress));
      RemovePendingSyncMember(params.member_id);
      if (leader_ != params.member_id) return;  // parked until the leader's assignment lands

      std::map<std::string, std::vector<uint8_t>> assignment;
      for (auto& [id, bytes] : params.assignments) assignment[id] = std::move(bytes);
      for (const auto& [id, m] : members_) assignment.try_emplace(id);
      ClassicGroupValue value = ToValue();
      for (ClassicMemberValue& mv : value.members) mv.assignment = assignment[mv.member_id];
      // Members not in the group get nothing; keep only the group's.
      for (auto it = assignment.begin(); it != assignment.end();) {
        it = members_.count(it->first) > 0 ? std::next(it) : assignment.erase(it);
      }
      const int32_t generation = generation_;
      WriteGroup(value,
                 [this, generation, assignment = std::move(assignment)](ErrorCode error) mutable {
                   OnSyncWritten(generation, std::move(assignment), error);
                 });
      return;
    }
    case State::kStable: {
      RemovePendingSyncMember(params.member_id);
      SyncGroupResponse r;
      r.protocol_type = OrNull(protocol_type_);
      r.protocol_name = protocol_;
      r.assignment = member.assignment;
      return done(std::move(r));
    }
    case State::kEmpty:
    case State::kDead:
      break;
  }
  done(SyncError(ErrorCode::kUnknownMemberId));
}

// ---- Heartbeat / LeaveGroup ------------------------------------------------------------

ErrorCode ClassicGroup::Heartbeat(const std::string& member_id,
                                  const std::optional<std::string>& group_instance_id,
                                  int32_t generation_id) {
  if (state_ == State::kDead) return ErrorCode::kCoordinatorNotAvailable;
  if (ErrorCode error = ValidateMember(member_id, group_instance_id); error != ErrorCode::kNone)
    return error;
  if (generation_id != generation_) return ErrorCode::kIllegalGeneration;
  Member& member = members_.at(member_id);
  switch (state_) {
    case State::kEmpty:
    case State::kDead:
      return ErrorCode::kUnknownMemberId;
    case State::kPreparingRebalance:
      RescheduleHeartbeat(member, member.session_timeout_ms);
      return ErrorCode::kRebalanceInProgress;
    case State::kCompletingRebalance:
    case State::kStable:
      RescheduleHeartbeat(member, member.session_timeout_ms);
      return ErrorCode::kNone;
  }
  return ErrorCode::kNone;
}

void ClassicGroup::Leave(std::vector<LeaveMember> members, LeaveDone done) {
  if (state_ == State::kDead) return done(ErrorCode::kCoordinatorNotAvailable, {});
  std::vector<LeaveResult> results;
  bool any_left = false;
  for (LeaveMember& lm : members) {
    LeaveResult r{lm.member_id, lm.group_instance_id, ErrorCode::kNone};
    if (lm.member_id.empty()) {
      // Admin removal of a static member by instance id.
      auto it = lm.group_instance_id ? static_members_.find(*lm.group_instance_id)
                                     : static_members_.end();
      if (it == static_members_.end()) {
        r.error = ErrorCode::kUnknownMemberId;
      } else {
        std::string id = it->second;
        kLog()->info("group {}: static member {} ({}) removed by LeaveGroup", group_id_,
                     *lm.group_instance_id, id);
        RemoveMember(id);
      }
    } else if (pending_members_.count(lm.member_id) > 0) {
      RemoveMember(lm.member_id);
    } else if (ErrorCode error = ValidateMember(lm.member_id, lm.group_instance_id);
               error != ErrorCode::kNone) {
      r.error = error;
    } else {
      kLog()->info("group {}: member {} left", group_id_, lm.member_id);
      RemoveMember(lm.member_id);
    }
    any_left = any_left || r.error == ErrorCode::kNone;
    results.push_back(std::move(r));
  }
  if (any_left) {
    if (state_ == State::kStable || state_ == State::kCompletingRebalance) {
      MaybePrepareRebalanceOrCompleteJoin();
    } else if (state_ == State::kPreparingRebalance) {
      MaybeCompleteJoinPhase();
    }
  }
  if (empty_writes_in_flight_ > 0) {
    after_empty_write_.push_back([done = std::move(done), results = std::move(results)]() mutable {
      done(ErrorCode::kNone, std::move(results));
    });
    return;
  }
  done(ErrorCode::kNone, std::move(results));
}

// ---- Offsets, describe, shutdown -------------------------------------------------------

ErrorCode ClassicGroup::ValidateOffsetCommit(const std::string& member_id,
                                             const std::optional<std::string>& group_instance_id,
                                             int32_t generation_id, bool transactional) {
  if (state_ == State::kDead) return ErrorCode::kCoordinatorNotAvailable;
  // Generation -1: the admin client or a consumer not using group management.
  if (generation_id < 0 && state_ == State::kEmpty) return ErrorCode::kNone;
  if (generation_id >= 0 || !member_id.empty() || group_instance_id) {
    if (ErrorCode error = ValidateMember(member_id, group_instance_id); error != ErrorCode::kNone)
      return error;
    if (generation_id != generation_) return ErrorCode::kIllegalGeneration;
  } else if (!transactional && state_ != State::kEmpty) {
    return ErrorCode::kUnknownMemberId;
  }
  if (transactional) return ErrorCode::kNone;
  // The member has the new generation but not its assignment yet: let it finish the sync.
  if (state_ == State::kCompletingRebalance) return ErrorCode::kRebalanceInProgress;
  if (auto it = members_.find(member_id); it != members_.end()) {
    RescheduleHeartbeat(it->second, it->second.session_timeout_ms);
  }
  return ErrorCode::kNone;
}

ErrorCode ClassicGroup::ValidateOffsetFetch(const std::string& /*member_id*/,
                                            int32_t /*member_epoch*/) {
  if (state_ == State::kDead) return ErrorCode::kGroupIdNotFound;
  return ErrorCode::kNone;
}

void ClassicGroup::Describe(protocol::DescribeGroupsResponse::DescribedGroup* out) const {
  out->error_code = ErrorCode::kNone;
  out->group_id = group_id_;
  out->group_state = std::string(StateName());
  out->protocol_type = protocol_type_;
  const bool stable = state_ == State::kStable && protocol_.has_value();
  out->protocol_data = stable ? *protocol_ : "";
  out->members.clear();
  for (const auto& [id, m] : members_) {
    protocol::DescribeGroupsResponse::DescribedGroupMember dm;
    dm.member_id = id;
    dm.group_instance_id = m.group_instance_id;
    dm.client_id = m.client_id;
    dm.client_host = m.client_host;
    if (stable) {
      if (const auto* md = m.Metadata(*protocol_)) dm.member_metadata = *md;
    }
    dm.member_assignment = m.assignment;
    out->members.push_back(std::move(dm));
  }
}

void ClassicGroup::Shutdown(ErrorCode error) {
  CancelJoinTimer();
  CancelSyncTimer();
  std::vector<std::function<void()>> answers;
  for (auto& [id, m] : members_) {
    if (m.heartbeat_timer != 0) env_.CancelTimer(m.heartbeat_timer);
    m.heartbeat_timer = 0;
    if (m.awaiting_join) {
      answers.push_back(
          [done = std::move(m.awaiting_join), id = id, error] { done(JoinError(id, error)); });
      m.awaiting_join = nullptr;
    }
    if (m.awaiting_sync) {
      answers.push_back([done = std::move(m.awaiting_sync), error] { done(SyncError(error)); });
      m.awaiting_sync = nullptr;
    }
  }
  for (auto& [id, t] : pending_member_timers_) env_.CancelTimer(t);
  pending_member_timers_.clear();
  pending_members_.clear();
  pending_sync_members_.clear();
  if (state_ != State::kDead) TransitionTo(State::kDead);
  // Leave answers waiting for the Empty write: the members did leave.
  for (auto& fn : after_empty_write_) answers.push_back(std::move(fn));
  after_empty_write_.clear();
  empty_writes_in_flight_ = 0;
  // Writes still in flight must not touch a Dead group's state.
  alive_ = std::make_shared<bool>(true);
  for (auto& fn : answers) fn();
}

}  // namespace runnel::brokerd::group
