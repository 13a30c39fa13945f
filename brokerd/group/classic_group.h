// A classic consumer group: the JoinGroup/SyncGroup/Heartbeat/LeaveGroup rebalance protocol,
// with Kafka's rules (its ClassicGroup state machine and GroupMetadataManager classic* paths).
//
//   Empty ──join──> PreparingRebalance ──all joined or timeout──> CompletingRebalance
//     ^                  ^        |                                  |        |
//     |                  |        +── no member left ──> Empty      leader's  |
//     |                  +───────── member change, leave, expiry ────┘  SyncGroup
//     |                                                                 written
//     |                                                                  v
//     └──────────── (through PreparingRebalance) ─────────────────── Stable
//   any state ── Shutdown ──> Dead
//
// - A rebalance starts when a member joins, changes its protocols, leaves or times out, or the
//   leader rejoins. It completes when every known member has rejoined, or after the largest
//   rebalance timeout of the members, dropping the dynamic members that did not rejoin. The
//   first rebalance of an Empty group waits group.initial.rebalance.delay.ms more, extended by
//   each newly joined member up to the rebalance timeout, so a starting fleet lands in one
//   generation.
// - The leader gets every member's metadata for the chosen protocol (the one all members
//   support with the most first-choice votes), computes the assignment and sends it with its
//   SyncGroup; the group is written to __consumer_offsets (GroupMetadataValue) and only then
//   does each member get its assignment and the group become Stable.
// - A member's session timer is paused while its JoinGroup or SyncGroup is parked, as in
//   Kafka: an expiry found while the member waits does nothing, and the timer restarts when
//   the request is answered.
// - Static members (group.instance.id) keep their place across restarts: a known instance
//   joining with a new member id replaces the old id (which is fenced from then on), without
//   a rebalance when the group is Stable and the chosen protocol stays.
//
// Runs on the shard's loop thread only. Pending callbacks are answered exactly once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "brokerd/group/group_env.h"
#include "brokerd/group/records.h"
#include "common/protocol/messages.h"

namespace runnel::brokerd::group {

class ClassicGroup {
 public:
  enum class State { kEmpty, kPreparingRebalance, kCompletingRebalance, kStable, kDead };

  // Kafka's classicGroupNewMemberJoinTimeoutMs: a new member parked in JoinGroup is dropped
  // after this long (it cannot heartbeat yet; a client that gave up would otherwise linger).
  static constexpr int64_t kNewMemberJoinTimeoutMs = int64_t{5} * 60 * 1000;

  struct Protocol {
    std::string name;
    std::vector<uint8_t> metadata;
    bool operator==(const Protocol&) const = default;
  };

  struct JoinParams {
    int16_t api_version = 0;
    std::string member_id;  // "" for a new member
    std::optional<std::string> group_instance_id;
    std::string client_id;
    std::string client_host;  // Kafka's form: "/ip"
    int32_t session_timeout_ms = 0;
    int32_t rebalance_timeout_ms = 0;  // the session timeout for JoinGroup v0
    std::string protocol_type;
    std::vector<Protocol> protocols;
  };
  using JoinDone = std::function<void(protocol::JoinGroupResponse)>;

  struct SyncParams {
    std::string member_id;
    std::optional<std::string> group_instance_id;
    int32_t generation_id = -1;
    std::optional<std::string> protocol_type;  // v5+; null skips the check
    std::optional<std::string> protocol_name;
    std::vector<std::pair<std::string, std::vector<uint8_t>>> assignments;  // leader only
  };
  using SyncDone = std::function<void(protocol::SyncGroupResponse)>;

  struct LeaveMember {
    std::string member_id;  // "" with an instance id: admin removal of a static member
    std::optional<std::string> group_instance_id;
  };
  struct LeaveResult {
    std::string member_id;
    std::optional<std::string> group_instance_id;
    ErrorCode error = ErrorCode::kNone;
  };
  // `error` is the whole request's error (COORDINATOR_NOT_AVAILABLE for a Dead group).
  using LeaveDone = std::function<void(ErrorCode error, std::vector<LeaveResult> members)>;

  ClassicGroup(std::string group_id, GroupEnv& env);
  ~ClassicGroup();  // cancels its timers; does not answer pending requests (call Shutdown first)
  ClassicGroup(const ClassicGroup&) = delete;
  ClassicGroup& operator=(const ClassicGroup&) = delete;

  const std::string& id() const { return group_id_; }
  State state() const { return state_; }
  // Kafka's state names: "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead".
  std::string_view StateName() const;
  const std::string& protocol_type() const { return protocol_type_; }  // "" when none
  const std::optional<std::string>& protocol() const { return protocol_; }
  int32_t generation() const { return generation_; }
  const std::optional<std::string>& leader() const { return leader_; }
  bool empty() const { return members_.empty(); }
  size_t member_count() const { return members_.size(); }
  bool HasMember(const std::string& member_id) const { return members_.count(member_id) > 0; }
  // Member ids handed out with MEMBER_ID_REQUIRED that have not joined yet.
  size_t pending_member_count() const { return pending_members_.size(); }
  int64_t current_state_timestamp_ms() const { return state_timestamp_ms_; }

  // Restores the group from its last GroupMetadataValue at shard load (Empty if no members,
  // else Stable with those members; session timers start now).
  void Load(const ClassicGroupValue& value);

  // JoinGroup. `done` runs once: now for an immediate answer, or when the rebalance's join
  // phase completes (or a write finishes). The caller checked the group id is not empty.
  void Join(JoinParams params, JoinDone done);
  // SyncGroup. `done` runs once: now, or when the leader's assignment is written.
  void Sync(SyncParams params, SyncDone done);
  // Heartbeat: 0 or the Kafka error. Restarts the member's session timer when valid.
  ErrorCode Heartbeat(const std::string& member_id,
                      const std::optional<std::string>& group_instance_id, int32_t generation_id);
  // LeaveGroup (v0-v2 callers pass their one member). `done` runs once; when the leave made
  // the group Empty it runs after that state is written.
  void Leave(std::vector<LeaveMember> members, LeaveDone done);

  // OffsetCommit check, Kafka's rules: returns 0 or the error (UNKNOWN_MEMBER_ID,
  // ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID, COORDINATOR_NOT_AVAILABLE
  // for Dead). generation -1 with empty member id is the admin/simple-consumer commit: allowed
  // only when the group is Empty. A valid commit counts as a heartbeat of the member.
  // `transactional` (TxnOffsetCommit): v0-v2 requests carry no member, so a commit without
  // member and generation is allowed in any state, and the group state is not checked (no
  // REBALANCE_IN_PROGRESS); no heartbeat either.
  ErrorCode ValidateOffsetCommit(const std::string& member_id,
                                 const std::optional<std::string>& group_instance_id,
                                 int32_t generation_id, bool transactional = false);
  // OffsetFetch v9 (member_id, member_epoch) check. Kafka's classic group accepts any member
  // id and epoch (only a Dead group fails, with GROUP_ID_NOT_FOUND).
  ErrorCode ValidateOffsetFetch(const std::string& member_id, int32_t member_epoch);
  // DescribeGroups entry: members with the chosen protocol's metadata and their assignment
  // when Stable; without metadata otherwise (Kafka's describeNoMetadata).
  void Describe(protocol::DescribeGroupsResponse::DescribedGroup* out) const;
  // The group is being removed (DeleteGroups) or its shard unloaded: answer every pending
  // JoinGroup/SyncGroup with `error`, cancel timers, go Dead.
  void Shutdown(ErrorCode error);

  // The record of the group as it is now with the members' current assignments (tests, and
  // what a Stable group writes).
  ClassicGroupValue ToValue() const;

 private:
  struct Member {
    std::string member_id;
    std::optional<std::string> group_instance_id;
    std::string client_id;
    std::string client_host;
    int32_t rebalance_timeout_ms = 0;
    int32_t session_timeout_ms = 0;
    std::string protocol_type;
    std::vector<Protocol> protocols;
    std::vector<uint8_t> assignment;
    JoinDone awaiting_join;  // set while its JoinGroup is parked
    SyncDone awaiting_sync;  // set while its SyncGroup is parked
    bool is_new = false;     // joined as new and not yet through a completed join phase
    GroupEnv::TimerId heartbeat_timer = 0;

    const std::vector<uint8_t>* Metadata(const std::string& protocol) const;
  };

  void TransitionTo(State state);
  bool CanRebalance() const;
  bool SupportsProtocols(const std::string& type, const std::vector<Protocol>& protocols) const;
  std::set<std::string> CandidateProtocols() const;
  std::string SelectProtocol() const;
  bool HasAllMembersJoined() const;
  int32_t RebalanceTimeoutMs() const;
  int NumAwaitingJoin() const;
  bool AcceptJoiningMember(const std::string& member_id) const;
  ErrorCode ValidateMember(const std::string& member_id,
                           const std::optional<std::string>& group_instance_id) const;
  std::string GenerateMemberId(const JoinParams& params) const;
  std::vector<protocol::JoinGroupResponse::JoinGroupResponseMember> CurrentMembers() const;
  protocol::JoinGroupResponse JoinResponseFor(const Member& member, bool with_members) const;

  void JoinNewMember(JoinParams params, JoinDone done);
  void JoinExistingMember(JoinParams params, JoinDone done);
  void AddMemberThenRebalance(const std::string& member_id, JoinParams params, JoinDone done);
  void UpdateMemberThenRebalance(Member& member, JoinParams params, JoinDone done);
  void UpdateMember(Member& member, std::vector<Protocol> protocols, int32_t rebalance_timeout_ms,
                    int32_t session_timeout_ms, JoinDone done);
  void ReplaceStaticMemberThenRebalance(const std::string& old_id, const std::string& new_id,
                                        JoinParams params, JoinDone done);
  // Moves the member to a new id; fences the old id's parked requests with FENCED_INSTANCE_ID.
  Member& ReplaceStaticMember(const std::string& instance_id, const std::string& old_id,
                              const std::string& new_id);

  void MaybePrepareRebalanceOrCompleteJoin();
  void PrepareRebalance();
  void MaybeCompleteJoinPhase();
  void CompleteJoin();
  void InitialDelayExpired(int32_t delay_ms, int32_t remaining_ms);
  void ExpirePendingSync(int32_t generation);
  void ResetAndPropagateAssignmentWithError(ErrorCode error);
  void PropagateAssignment(ErrorCode error);
  void OnSyncWritten(int32_t generation, std::map<std::string, std::vector<uint8_t>> assignment,
                     ErrorCode error);

  void RemoveMember(const std::string& member_id);
  void RemoveMemberAndUpdateGroup(const std::string& member_id);
  void RemovePendingSyncMember(const std::string& member_id);
  void RescheduleHeartbeat(Member& member, int64_t timeout_ms);
  void ExpireHeartbeat(const std::string& member_id);
  void CompleteJoinWith(Member& member, protocol::JoinGroupResponse response);
  void CompleteSyncWith(Member& member, protocol::SyncGroupResponse response);

  // Writes the group (members with `assignment`, or none) and runs `done` with the write's
  // error mapped as Kafka maps append errors, if the group still exists then.
  void WriteGroup(const ClassicGroupValue& value, std::function<void(ErrorCode error)> done);
  void PersistEmpty();

  void StartJoinTimer(int64_t delay_ms, std::function<void()> fn);
  void CancelJoinTimer();
  void CancelSyncTimer();

  const std::string group_id_;
  GroupEnv& env_;
  State state_ = State::kEmpty;
  State previous_state_ = State::kEmpty;
  int64_t state_timestamp_ms_ = -1;
  std::string protocol_type_;
  std::optional<std::string> protocol_;
  int32_t generation_ = 0;
  std::optional<std::string> leader_;
  std::map<std::string, Member> members_;
  std::map<std::string, std::string> static_members_;  // instance id -> member id
  std::set<std::string> pending_members_;              // MEMBER_ID_REQUIRED handed out
  std::map<std::string, GroupEnv::TimerId> pending_member_timers_;
  std::set<std::string> pending_sync_members_;
  bool new_member_added_ = false;  // during the initial delayed join
  GroupEnv::TimerId join_timer_ = 0;
  GroupEnv::TimerId sync_timer_ = 0;
  // Leave answers waiting for the write of the Empty state.
  int empty_writes_in_flight_ = 0;
  std::vector<std::function<void()>> after_empty_write_;
  // Write callbacks hold a weak reference: the group may be gone when storage answers.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace runnel::brokerd::group
