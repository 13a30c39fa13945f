// A KIP-848 consumer group: the server-side rebalance protocol driven by
// ConsumerGroupHeartbeat.
//
// Three epochs move the group forward:
//   group epoch        bumped when a member joins, leaves or changes its subscription, or the
//                      subscribed topics change (new partitions, a topic created or deleted);
//   assignment epoch   the group epoch the target assignment was computed for: at each new
//                      group epoch the assignor (uniform or range) computes a target
//                      assignment for every member;
//   member epoch       each member's own: it reaches the assignment epoch once the member holds
//                      exactly its target partitions.
// A member reconciles in steps, one per heartbeat: first it revokes what it owns that is no
// longer its target (it must ack by heartbeating without those partitions; until then it
// stays at its epoch, "unrevoked partitions"), then it gets its new target partitions, except
// those another member still owns ("unreleased partitions"), which it gets once they are
// released. So no partition is ever owned by two members at once.
//
// State changes are made only by records (records.h, key versions 3-8): the heartbeat builds
// the records of a change, applies them with Replay() (the very code that rebuilds the group
// at load) and writes them; the response goes out once they are durable. So the group a
// coordinator loads is the group its predecessor had.
//
// Runs on the broker's loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "brokerd/group/assignors.h"
#include "brokerd/group/group_env.h"
#include "brokerd/group/records.h"
#include "common/protocol/messages.h"
#include "common/protocol/uuid.h"

namespace runnel::brokerd::group {

// A topic as the group coordinator sees it in the cluster metadata.
struct TopicInfo {
  protocol::Uuid id;
  std::string name;
  int32_t partitions = 0;
  bool operator==(const TopicInfo&) const = default;
};

// The cluster's topics. The coordinator implements it over the broker's MetadataCache; tests
// fake it.
class TopicLookup {
 public:
  virtual ~TopicLookup() = default;
  virtual std::optional<TopicInfo> FindByName(const std::string& name) const = 0;
  virtual std::optional<TopicInfo> FindById(const protocol::Uuid& id) const = 0;
  virtual std::vector<std::string> AllNames() const = 0;
};

class ConsumerGroup {
 public:
  // Kafka's MemberState, as stored in ConsumerGroupCurrentMemberAssignmentValue.
  enum class MemberState : int8_t {
    kStable = 0,
    kUnrevokedPartitions = 1,
    kUnreleasedPartitions = 2,
    kUnknown = 3,
  };

  struct Member {
    std::string member_id;
    int32_t member_epoch = 0;
    int32_t previous_member_epoch = 0;
    MemberState state = MemberState::kStable;
    std::optional<std::string> instance_id;
    std::optional<std::string> rack_id;
    std::string client_id;
    std::string client_host;
    std::set<std::string> subscribed_topic_names;
    std::optional<std::string> subscribed_topic_regex;
    int32_t rebalance_timeout_ms = -1;
    std::optional<std::string> server_assignor;
    Assignment assigned;            // owned now
    Assignment pending_revocation;  // owned now, to give up
  };

  ConsumerGroup(std::string group_id, GroupEnv& env, TopicLookup& topics);
  ~ConsumerGroup();  // cancels timers
  ConsumerGroup(const ConsumerGroup&) = delete;
  ConsumerGroup& operator=(const ConsumerGroup&) = delete;

  const std::string& id() const { return group_id_; }
  // Kafka's state names: "Empty", "Assigning", "Reconciling", "Stable", "Dead".
  std::string_view StateName() const;
  bool empty() const { return members_.empty(); }
  size_t member_count() const { return members_.size(); }
  int32_t group_epoch() const { return group_epoch_; }
  int32_t assignment_epoch() const { return assignment_epoch_; }
  const std::map<std::string, Member>& members() const { return members_; }
  const std::map<std::string, Assignment>& target_assignment() const { return target_; }
  // Subscribed topics by name, as last written (ConsumerGroupPartitionMetadata).
  const std::map<std::string, TopicInfo>& subscription_metadata() const {
    return subscription_metadata_;
  }
  // True until the first record of this group was applied: a join that failed validation
  // leaves the group pristine, and the handler drops it.
  bool pristine() const { return pristine_; }
  // True once a ConsumerGroupMetadata tombstone was replayed: the group was deleted.
  bool deleted() const { return deleted_; }
  // The name of the assignor the group uses now: the one most members asked for, else the
  // first of group.consumer.assignors.
  std::string AssignorName() const;

  // ---- Load ---------------------------------------------------------------------------
  // Replays one KIP-848 record of this group (key versions 3-8; others are ignored).
  void Replay(const ParsedRecord& record);
  // After load finished: starts session timers of the loaded members (and rebalance timers
  // of those still revoking).
  void OnLoaded();

  // ---- ConsumerGroupHeartbeat -----------------------------------------------------------
  // Checks done before the request reaches a group (Kafka's request validation): 0, or
  // INVALID_REQUEST / UNSUPPORTED_ASSIGNOR with `message` set.
  static ErrorCode ValidateHeartbeat(const protocol::ConsumerGroupHeartbeatRequest& req,
                                     int16_t api_version, const GroupConfig& config,
                                     std::string* message);
  using HeartbeatDone = std::function<void(protocol::ConsumerGroupHeartbeatResponse)>;
  // Join (epoch 0), heartbeat (current epoch) or leave (-1; -2 for a static member that will
  // come back). `done` runs once: at once for an error found before any change, else after
  // the change's records (preceded by `prefix`, e.g. the tombstone of an empty classic group
  // this group replaces) are durable, or with the write's error.
  void Heartbeat(const protocol::ConsumerGroupHeartbeatRequest& req, const std::string& client_id,
                 const std::string& client_host, HeartbeatDone done,
                 std::vector<LogRecord> prefix = {});

  // ---- ConsumerGroupDescribe ------------------------------------------------------------
  void Describe(protocol::ConsumerGroupDescribeResponse::DescribedGroup* out) const;

  // ---- Offsets --------------------------------------------------------------------------
  // OffsetCommit v9+/OffsetFetch v9 (member id + member epoch) checks: 0, UNKNOWN_MEMBER_ID,
  // STALE_MEMBER_EPOCH. A commit with a negative epoch to a group with no members is an
  // admin commit and is allowed.
  ErrorCode ValidateOffsetCommit(const std::string& member_id, int32_t member_epoch);
  // The same, knowing the OffsetCommit version: members of this group must use v9+
  // (UNSUPPORTED_VERSION otherwise, as Kafka), except for transactional commits.
  ErrorCode ValidateOffsetCommit(const std::string& member_id, int32_t member_epoch,
                                 int16_t api_version, bool transactional);
  // Empty member id with a negative epoch: the admin client, always allowed.
  ErrorCode ValidateOffsetFetch(const std::string& member_id, int32_t member_epoch);

  // ---- Deletion and shutdown ------------------------------------------------------------
  // The tombstones that delete the group (DeleteGroups of an empty group), in Kafka's order.
  std::vector<LogRecord> TombstoneRecords() const;
  // The shard unloads or the group is deleted: cancel timers, go Dead. Heartbeats waiting on
  // a write get that write's error from the shard; nothing here holds a request.
  void Shutdown(ErrorCode error);

 private:
  struct Change;  // records being built by one operation

  // Applies `record` to the group (Replay) and adds it to the records `change` writes.
  void Apply(Change& change, const ParsedRecord& record);
  Member* FindMember(const std::string& member_id);
  Member* FindStaticMember(const std::string& instance_id);
  ErrorCode FailHeartbeat(const HeartbeatDone& done, ErrorCode error, std::string message);

  // Heartbeat's steps. A check that fails answers `done` with its error (FailHeartbeat).
  // The member a heartbeat is for, as its checks found it.
  struct HeartbeatMember {
    std::string member_id;                // a new id when the request had none
    bool is_new = false;                  // no member has this id, and it replaces no static member
    std::optional<std::string> replaced;  // a departed static member this one takes over
    Member old;  // the member as it is before this heartbeat (a new one has nothing)
  };
  // Step 1, before anything changes: the group's size, the member, its epoch and state.
  std::optional<HeartbeatMember> CheckHeartbeat(const protocol::ConsumerGroupHeartbeatRequest& req,
                                                const HeartbeatDone& done);
  // The member by its static instance id or its member id.
  std::optional<HeartbeatMember> FindHeartbeatMember(
      const protocol::ConsumerGroupHeartbeatRequest& req, const std::string& member_id,
      const HeartbeatDone& done);
  // FENCED_MEMBER_EPOCH unless the request's epoch is the member's (or its previous one with
  // a subset of its assignment); false when fenced.
  bool CheckMemberEpoch(const protocol::ConsumerGroupHeartbeatRequest& req, const Member& old,
                        const HeartbeatDone& done);
  // Step 2: a joining static member takes over the departed `m.replaced`'s place and target.
  void TakeOverStaticMember(Change& change, const HeartbeatMember& m,
                            const std::string& instance_id);
  // Step 2: the member's metadata record when it changed, the subscription metadata when the
  // subscribed topics changed in the cluster, and a new group epoch when either requires it.
  void UpdateMemberAndGroupEpoch(Change& change, const HeartbeatMember& m, const Member& updated);
  // The answer once the change is applied; the assignment goes out when the request was
  // full or it changed from `old`'s.
  protocol::ConsumerGroupHeartbeatResponse HeartbeatResponse(
      const protocol::ConsumerGroupHeartbeatRequest& req, const std::string& member_id,
      const Member& old) const;

  void Leave(const protocol::ConsumerGroupHeartbeatRequest& req, HeartbeatDone done,
             std::vector<LogRecord> prefix);
  // Adds to `change` the records that remove `member_id` and bump the group epoch.
  void FenceMember(Change& change, const std::string& member_id);
  // The topics `members_` subscribe to, resolved against the cluster metadata.
  std::map<std::string, TopicInfo> ComputeSubscriptionMetadata() const;
  std::set<std::string> ResolveSubscription(const Member& m) const;
  // New target assignment at the current group epoch, as records.
  void ComputeTargetAssignment(Change& change);
  // The member's next step towards its target; `owned` is what the member reported owning
  // (null when it did not say).
  void Reconcile(
      Change& change, const std::string& member_id,
      const std::optional<std::vector<protocol::ConsumerGroupHeartbeatRequest::TopicPartitions>>&
          owned);
  bool OwnedByOther(const std::string& member_id, const protocol::Uuid& topic,
                    int32_t partition) const;
  void Commit(Change& change, std::function<void(ErrorCode)> done);

  void ScheduleSessionTimeout(const std::string& member_id);
  void ScheduleRebalanceTimeout(const std::string& member_id, int32_t member_epoch,
                                int32_t timeout_ms);
  void CancelRebalanceTimeout(const std::string& member_id);
  void CancelTimers(const std::string& member_id);
  void OnSessionTimeout(const std::string& member_id);
  void OnRebalanceTimeout(const std::string& member_id, int32_t member_epoch);
  void WriteBackground(Change& change, std::string why);

  std::string group_id_;
  GroupEnv& env_;
  TopicLookup& topics_;
  bool pristine_ = true;
  bool deleted_ = false;
  bool dead_ = false;
  int32_t group_epoch_ = 0;
  int32_t assignment_epoch_ = 0;
  std::map<std::string, TopicInfo> subscription_metadata_;
  std::map<std::string, Member> members_;
  std::map<std::string, Assignment> target_;
  std::map<std::string, std::string> static_members_;  // instance id -> member id
  std::map<std::string, GroupEnv::TimerId> session_timers_;
  std::map<std::string, GroupEnv::TimerId> rebalance_timers_;
};

}  // namespace runnel::brokerd::group
