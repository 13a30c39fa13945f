#include "brokerd/group/consumer_group.h"

#include <fmt/format.h>
#include <re2/re2.h>

#include <algorithm>
#include <memory>
#include <type_traits>
#include <utility>
#include <variant>

#include "common/log/log.h"
#include "common/protocol/error_code.h"

namespace runnel::brokerd::group {
namespace {

using protocol::ErrorCode;
using protocol::Uuid;
using OwnedPartitions = std::vector<protocol::ConsumerGroupHeartbeatRequest::TopicPartitions>;

constexpr int32_t kLeaveEpoch = -1;
constexpr int32_t kStaticLeaveEpoch = -2;
// The version from which the client, not the coordinator, makes the member id (KIP-1082).
constexpr int16_t kClientMemberIdVersion = 1;

const log::ModuleLogger kLog("brokerd.group");

// Java's String.trim().isEmpty(): only characters <= U+0020.
bool IsBlank(const std::string& s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) <= 0x20; });
}

std::vector<TopicPartitions> ToRecord(const Assignment& a) {
  std::vector<TopicPartitions> out;
  for (const auto& [topic, partitions] : a) {
    if (partitions.empty()) continue;
    out.push_back({topic, std::vector<int32_t>(partitions.begin(), partitions.end())});
  }
  return out;
}

Assignment FromRecord(const std::vector<TopicPartitions>& v) {
  Assignment out;
  for (const TopicPartitions& tp : v) {
    if (tp.partitions.empty()) continue;
    out[tp.topic_id].insert(tp.partitions.begin(), tp.partitions.end());
  }
  return out;
}

// Whether the member still reports owning any of `partitions`; a member that did not say
// (null) is taken to own them all.
bool OwnsAny(const std::optional<OwnedPartitions>& owned, const Assignment& partitions) {
  if (!owned) return true;
  for (const auto& tp : *owned) {
    auto it = partitions.find(tp.topic_id);
    if (it == partitions.end()) continue;
    for (int32_t p : tp.partitions) {
      if (it->second.contains(p)) return true;
    }
  }
  return false;
}

// Whether every reported partition is in `assigned` (false when nothing was reported).
bool IsSubset(const std::optional<OwnedPartitions>& owned, const Assignment& assigned) {
  if (!owned) return false;
  for (const auto& tp : *owned) {
    auto it = assigned.find(tp.topic_id);
    if (it == assigned.end()) {
      if (tp.partitions.empty()) continue;
      return false;
    }
    for (int32_t p : tp.partitions) {
      if (!it->second.contains(p)) return false;
    }
  }
  return true;
}

LogRecord ToLogRecord(const ParsedRecord& record) {
  return std::visit(
      [](const auto& r) -> LogRecord {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, ParsedGroupRecord<ConsumerGroupMetadata>>) {
          return r.value ? ConsumerGroupMetadataRecord(r.group, *r.value)
                         : ConsumerGroupMetadataTombstone(r.group);
        } else if constexpr (std::is_same_v<T, ParsedGroupRecord<ConsumerGroupPartitionMetadata>>) {
          return r.value ? ConsumerGroupPartitionMetadataRecord(r.group, *r.value)
                         : ConsumerGroupPartitionMetadataTombstone(r.group);
        } else if constexpr (std::is_same_v<T, ParsedMemberRecord<ConsumerGroupMemberMetadata>>) {
          return r.value ? ConsumerGroupMemberMetadataRecord(r.group, r.member_id, *r.value)
                         : ConsumerGroupMemberMetadataTombstone(r.group, r.member_id);
        } else if constexpr (std::is_same_v<
                                 T, ParsedGroupRecord<ConsumerGroupTargetAssignmentMetadata>>) {
          return r.value ? ConsumerGroupTargetAssignmentMetadataRecord(r.group, *r.value)
                         : ConsumerGroupTargetAssignmentMetadataTombstone(r.group);
        } else if constexpr (std::is_same_v<
                                 T, ParsedMemberRecord<ConsumerGroupTargetAssignmentMember>>) {
          return r.value ? ConsumerGroupTargetAssignmentMemberRecord(r.group, r.member_id, *r.value)
                         : ConsumerGroupTargetAssignmentMemberTombstone(r.group, r.member_id);
        } else if constexpr (std::is_same_v<
                                 T, ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>>) {
          return r.value
                     ? ConsumerGroupCurrentMemberAssignmentRecord(r.group, r.member_id, *r.value)
                     : ConsumerGroupCurrentMemberAssignmentTombstone(r.group, r.member_id);
        } else {
          return LogRecord{};  // offsets and classic groups are not this class's records
        }
      },
      record);
}

ConsumerGroupMemberMetadata MetadataOf(const ConsumerGroup::Member& m) {
  ConsumerGroupMemberMetadata v;
  v.instance_id = m.instance_id;
  v.rack_id = m.rack_id;
  v.client_id = m.client_id;
  v.client_host = m.client_host;
  v.subscribed_topic_names.assign(m.subscribed_topic_names.begin(), m.subscribed_topic_names.end());
  v.subscribed_topic_regex = m.subscribed_topic_regex;
  v.rebalance_timeout_ms = m.rebalance_timeout_ms;
  v.server_assignor = m.server_assignor;
  return v;
}

ConsumerGroupCurrentMemberAssignment AssignmentOf(const ConsumerGroup::Member& m) {
  ConsumerGroupCurrentMemberAssignment v;
  v.member_epoch = m.member_epoch;
  v.previous_member_epoch = m.previous_member_epoch;
  v.state = static_cast<int8_t>(m.state);
  v.assigned_partitions = ToRecord(m.assigned);
  v.partitions_pending_revocation = ToRecord(m.pending_revocation);
  return v;
}

bool SameMetadata(const ConsumerGroup::Member& a, const ConsumerGroup::Member& b) {
  return a.instance_id == b.instance_id && a.rack_id == b.rack_id && a.client_id == b.client_id &&
         a.client_host == b.client_host && a.subscribed_topic_names == b.subscribed_topic_names &&
         a.subscribed_topic_regex == b.subscribed_topic_regex &&
         a.rebalance_timeout_ms == b.rebalance_timeout_ms && a.server_assignor == b.server_assignor;
}

bool SameAssignmentState(const ConsumerGroup::Member& a, const ConsumerGroup::Member& b) {
  return a.member_epoch == b.member_epoch && a.previous_member_epoch == b.previous_member_epoch &&
         a.state == b.state && a.assigned == b.assigned &&
         a.pending_revocation == b.pending_revocation;
}

// A subscription pattern, in RE2 syntax as Kafka's (RE2/J); null when it does not compile.
std::unique_ptr<re2::RE2> CompileRegex(const std::string& pattern) {
  auto re = std::make_unique<re2::RE2>(pattern, re2::RE2::Quiet);
  if (!re->ok()) return nullptr;
  return re;
}

// A static member's heartbeat or leave other than its join: its instance id must be held
// (by `holder`), and by this member. Returns 0, or the error and its message.
std::pair<ErrorCode, std::string> CheckStaticMember(const ConsumerGroup::Member* holder,
                                                    const std::string& member_id,
                                                    const std::string& instance_id) {
  if (holder == nullptr) {
    return {ErrorCode::kUnknownMemberId, fmt::format("Instance id {} is unknown.", instance_id)};
  }
  if (holder->member_id != member_id) {
    return {ErrorCode::kFencedInstanceId,
            fmt::format("Static member {} with instance id {} was fenced by member {}.", member_id,
                        instance_id, holder->member_id)};
  }
  return {ErrorCode::kNone, ""};
}

// The Commit callback of a heartbeat: answers `resp` once the change is written, or only the
// write's error.
std::function<void(ErrorCode)> AnswerOnceWritten(ConsumerGroup::HeartbeatDone done,
                                                 protocol::ConsumerGroupHeartbeatResponse resp) {
  return [done = std::move(done), resp = std::move(resp)](ErrorCode error) mutable {
    if (error != ErrorCode::kNone) {
      protocol::ConsumerGroupHeartbeatResponse failed;
      failed.error_code = error;
      done(std::move(failed));
      return;
    }
    done(std::move(resp));
  };
}

// The member as a heartbeat leaves it: `old` with what the request sets.
ConsumerGroup::Member UpdatedMember(const ConsumerGroup::Member& old,
                                    const protocol::ConsumerGroupHeartbeatRequest& req,
                                    const std::string& client_id, const std::string& client_host) {
  ConsumerGroup::Member updated = old;
  if (req.instance_id) updated.instance_id = req.instance_id;
  if (req.rack_id) updated.rack_id = req.rack_id;
  if (req.rebalance_timeout_ms != -1) updated.rebalance_timeout_ms = req.rebalance_timeout_ms;
  if (req.server_assignor) updated.server_assignor = req.server_assignor;
  if (req.subscribed_topic_names) {
    updated.subscribed_topic_names = std::set<std::string>(req.subscribed_topic_names->begin(),
                                                           req.subscribed_topic_names->end());
  }
  if (req.subscribed_topic_regex) {
    if (req.subscribed_topic_regex->empty()) {
      updated.subscribed_topic_regex.reset();
    } else {
      updated.subscribed_topic_regex = req.subscribed_topic_regex;
    }
  }
  updated.client_id = client_id;
  updated.client_host = client_host;
  return updated;
}

}  // namespace

struct ConsumerGroup::Change {
  std::vector<LogRecord> records;
};

ConsumerGroup::ConsumerGroup(std::string group_id, GroupEnv& env, TopicLookup& topics)
    : group_id_(std::move(group_id)), env_(env), topics_(topics) {}

ConsumerGroup::~ConsumerGroup() {
  for (const auto& [id, t] : session_timers_) env_.CancelTimer(t);
  for (const auto& [id, t] : rebalance_timers_) env_.CancelTimer(t);
}

std::string_view ConsumerGroup::StateName() const {
  if (dead_) return "Dead";
  if (members_.empty()) return "Empty";
  if (group_epoch_ > assignment_epoch_) return "Assigning";
  for (const auto& [id, m] : members_) {
    if (m.member_epoch != assignment_epoch_ || m.state != MemberState::kStable) {
      return "Reconciling";
    }
  }
  return "Stable";
}

std::string ConsumerGroup::AssignorName() const {
  std::map<std::string, int> counts;
  for (const auto& [id, m] : members_) {
    if (m.server_assignor && FindAssignor(*m.server_assignor)) ++counts[*m.server_assignor];
  }
  const std::string* best = nullptr;
  int best_count = 0;
  for (const auto& [name, n] : counts) {
    if (n > best_count) {
      best = &name;
      best_count = n;
    }
  }
  if (best) return *best;
  for (const std::string& name : env_.config().consumer_assignors) {
    if (FindAssignor(name)) return name;
  }
  return "uniform";
}

ConsumerGroup::Member* ConsumerGroup::FindMember(const std::string& member_id) {
  auto it = members_.find(member_id);
  return it == members_.end() ? nullptr : &it->second;
}

ConsumerGroup::Member* ConsumerGroup::FindStaticMember(const std::string& instance_id) {
  auto it = static_members_.find(instance_id);
  return it == static_members_.end() ? nullptr : FindMember(it->second);
}

// ---- Replay ------------------------------------------------------------------------------

void ConsumerGroup::Replay(const ParsedRecord& record) {
  pristine_ = false;
  std::visit(
      [this](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, ParsedGroupRecord<ConsumerGroupMetadata>>) {
          if (r.value) {
            group_epoch_ = r.value->epoch;
            deleted_ = false;
          } else {
            deleted_ = true;
          }
        } else if constexpr (std::is_same_v<T, ParsedGroupRecord<ConsumerGroupPartitionMetadata>>) {
          subscription_metadata_.clear();
          if (r.value) {
            for (const auto& t : r.value->topics) {
              subscription_metadata_[t.topic_name] = {t.topic_id, t.topic_name, t.num_partitions};
            }
          }
        } else if constexpr (std::is_same_v<T, ParsedMemberRecord<ConsumerGroupMemberMetadata>>) {
          if (r.value) {
            Member& m = members_[r.member_id];
            m.member_id = r.member_id;
            if (m.instance_id && *m.instance_id != r.value->instance_id.value_or("")) {
              auto it = static_members_.find(*m.instance_id);
              if (it != static_members_.end() && it->second == r.member_id) {
                static_members_.erase(it);
              }
            }
            m.instance_id = r.value->instance_id;
            m.rack_id = r.value->rack_id;
            m.client_id = r.value->client_id;
            m.client_host = r.value->client_host;
            m.subscribed_topic_names = std::set<std::string>(
                r.value->subscribed_topic_names.begin(), r.value->subscribed_topic_names.end());
            m.subscribed_topic_regex = r.value->subscribed_topic_regex;
            m.rebalance_timeout_ms = r.value->rebalance_timeout_ms;
            m.server_assignor = r.value->server_assignor;
            if (m.instance_id) static_members_[*m.instance_id] = r.member_id;
          } else {
            auto it = members_.find(r.member_id);
            if (it == members_.end()) return;
            if (it->second.instance_id) {
              auto s = static_members_.find(*it->second.instance_id);
              if (s != static_members_.end() && s->second == r.member_id) static_members_.erase(s);
            }
            members_.erase(it);
            CancelTimers(r.member_id);
          }
        } else if constexpr (std::is_same_v<
                                 T, ParsedGroupRecord<ConsumerGroupTargetAssignmentMetadata>>) {
          // Kafka marks a deleted target assignment with epoch -1.
          assignment_epoch_ = r.value ? r.value->assignment_epoch : -1;
        } else if constexpr (std::is_same_v<
                                 T, ParsedMemberRecord<ConsumerGroupTargetAssignmentMember>>) {
          if (r.value) {
            target_[r.member_id] = FromRecord(r.value->topic_partitions);
          } else {
            target_.erase(r.member_id);
          }
        } else if constexpr (std::is_same_v<
                                 T, ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>>) {
          if (r.value) {
            Member& m = members_[r.member_id];
            m.member_id = r.member_id;
            m.member_epoch = r.value->member_epoch;
            m.previous_member_epoch = r.value->previous_member_epoch;
            m.state = (r.value->state >= 0 && r.value->state <= 2)
                          ? static_cast<MemberState>(r.value->state)
                          : MemberState::kUnknown;
            m.assigned = FromRecord(r.value->assigned_partitions);
            m.pending_revocation = FromRecord(r.value->partitions_pending_revocation);
          } else {
            // As Kafka: the member stays until its metadata tombstone, owning nothing.
            Member* m = FindMember(r.member_id);
            if (m == nullptr) return;
            m->member_epoch = kLeaveEpoch;
            m->previous_member_epoch = kLeaveEpoch;
            m->assigned.clear();
            m->pending_revocation.clear();
          }
        }
      },
      record);
}

void ConsumerGroup::OnLoaded() {
  for (const auto& [id, m] : members_) {
    ScheduleSessionTimeout(id);
    if (m.state == MemberState::kUnrevokedPartitions) {
      ScheduleRebalanceTimeout(id, m.member_epoch, m.rebalance_timeout_ms);
    }
  }
}

// ---- Heartbeat ---------------------------------------------------------------------------

ErrorCode ConsumerGroup::ValidateHeartbeat(const protocol::ConsumerGroupHeartbeatRequest& req,
                                           int16_t api_version, const GroupConfig& config,
                                           std::string* message) {
  auto invalid = [&](std::string m) {
    *message = std::move(m);
    return ErrorCode::kInvalidRequest;
  };
  if ((api_version >= kClientMemberIdVersion || req.member_epoch > 0 ||
       req.member_epoch == kLeaveEpoch) &&
      IsBlank(req.member_id)) {
    return invalid("MemberId can't be empty.");
  }
  if (IsBlank(req.group_id)) return invalid("GroupId can't be empty.");
  if (req.instance_id && IsBlank(*req.instance_id)) return invalid("InstanceId can't be empty.");
  if (req.rack_id && IsBlank(*req.rack_id)) return invalid("RackId can't be empty.");
  if (req.member_epoch == 0) {
    if (req.rebalance_timeout_ms == -1) {
      return invalid("RebalanceTimeoutMs must be provided in first request.");
    }
    if (!req.topic_partitions || !req.topic_partitions->empty()) {
      return invalid("TopicPartitions must be empty when (re-)joining.");
    }
    if (!req.subscribed_topic_names && !req.subscribed_topic_regex) {
      return invalid(
          "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
          "(re-)joining.");
    }
  } else if (req.member_epoch == kStaticLeaveEpoch) {
    if (!req.instance_id) return invalid("InstanceId can't be null.");
  } else if (req.member_epoch < kStaticLeaveEpoch) {
    return invalid("MemberEpoch is invalid.");
  }
  if (req.subscribed_topic_regex && !req.subscribed_topic_regex->empty() &&
      !CompileRegex(*req.subscribed_topic_regex)) {
    return invalid(fmt::format("SubscribedTopicRegex `{}` is not a valid regular expression.",
                               *req.subscribed_topic_regex));
  }
  if (req.server_assignor) {
    bool known = FindAssignor(*req.server_assignor) != nullptr &&
                 std::find(config.consumer_assignors.begin(), config.consumer_assignors.end(),
                           *req.server_assignor) != config.consumer_assignors.end();
    if (!known) {
      std::string supported;
      for (const std::string& a : config.consumer_assignors) {
        supported += supported.empty() ? a : ", " + a;
      }
      *message = fmt::format("ServerAssignor {} is not supported. Supported assignors: {}.",
                             *req.server_assignor, supported);
      return ErrorCode::kUnsupportedAssignor;
    }
  }
  return ErrorCode::kNone;
}

ErrorCode ConsumerGroup::FailHeartbeat(const HeartbeatDone& done, ErrorCode error,
                                       std::string message) {
  protocol::ConsumerGroupHeartbeatResponse resp;
  resp.error_code = error;
  resp.error_message = std::move(message);
  done(std::move(resp));
  return error;
}

void ConsumerGroup::Heartbeat(const protocol::ConsumerGroupHeartbeatRequest& req,
                              const std::string& client_id, const std::string& client_host,
                              HeartbeatDone done, std::vector<LogRecord> prefix) {
  if (dead_) {
    FailHeartbeat(done, ErrorCode::kCoordinatorNotAvailable, "The group is unloading.");
    return;
  }
  if (req.member_epoch == kLeaveEpoch || req.member_epoch == kStaticLeaveEpoch) {
    Leave(req, std::move(done), std::move(prefix));
    return;
  }

  // 1. Checks: nothing changes before all pass.
  std::optional<HeartbeatMember> m = CheckHeartbeat(req, done);
  if (!m) return;

  // 2. The member and the group epoch.
  Change change;
  if (m->replaced) TakeOverStaticMember(change, *m, *req.instance_id);
  UpdateMemberAndGroupEpoch(change, *m, UpdatedMember(m->old, req, client_id, client_host));

  // 3. A new target assignment for a new group epoch.
  if (group_epoch_ > assignment_epoch_) ComputeTargetAssignment(change);

  // 4. The member's next step towards its target.
  Reconcile(change, m->member_id, req.topic_partitions);
  ScheduleSessionTimeout(m->member_id);

  protocol::ConsumerGroupHeartbeatResponse resp = HeartbeatResponse(req, m->member_id, m->old);
  change.records.insert(change.records.begin(), std::make_move_iterator(prefix.begin()),
                        std::make_move_iterator(prefix.end()));
  Commit(change, AnswerOnceWritten(std::move(done), std::move(resp)));
}

std::optional<ConsumerGroup::HeartbeatMember> ConsumerGroup::CheckHeartbeat(
    const protocol::ConsumerGroupHeartbeatRequest& req, const HeartbeatDone& done) {
  const GroupConfig& config = env_.config();
  std::string member_id = req.member_id;
  if (members_.size() >= static_cast<size_t>(std::max(config.consumer_max_size, 0)) &&
      (member_id.empty() || !members_.contains(member_id))) {
    FailHeartbeat(done, ErrorCode::kGroupMaxSizeReached,
                  fmt::format("The consumer group has reached its maximum capacity of {} members.",
                              config.consumer_max_size));
    return std::nullopt;
  }
  if (member_id.empty()) member_id = Uuid::Random().ToString();

  std::optional<HeartbeatMember> m = FindHeartbeatMember(req, member_id, done);
  if (!m) return std::nullopt;
  // A static member's join is not checked against a member epoch.
  const bool check_epoch = !(req.instance_id && req.member_epoch == 0);
  if (check_epoch && !CheckMemberEpoch(req, m->old, done)) return std::nullopt;
  if (m->old.state == MemberState::kUnknown &&
      (!req.topic_partitions || !req.topic_partitions->empty())) {
    FailHeartbeat(done, ErrorCode::kFencedMemberEpoch,
                  "The consumer group member is in a unknown state. The member must abandon all "
                  "its partitions and rejoin.");
    return std::nullopt;
  }
  return m;
}

std::optional<ConsumerGroup::HeartbeatMember> ConsumerGroup::FindHeartbeatMember(
    const protocol::ConsumerGroupHeartbeatRequest& req, const std::string& member_id,
    const HeartbeatDone& done) {
  const bool joining = req.member_epoch == 0;
  const Member* existing = FindMember(member_id);
  std::optional<std::string> replaced;
  if (req.instance_id) {
    const Member* holder = FindStaticMember(*req.instance_id);
    if (joining) {
      if (holder != nullptr) {
        if (holder->member_epoch != kStaticLeaveEpoch) {
          FailHeartbeat(done, ErrorCode::kUnreleasedInstanceId,
                        fmt::format("Static member {} with instance id {} cannot join the group "
                                    "because the instance id is owned by {} member.",
                                    member_id, *req.instance_id, holder->member_id));
          return std::nullopt;
        }
        replaced = holder->member_id;
        existing = holder;
      }
    } else {
      auto [error, message] = CheckStaticMember(holder, member_id, *req.instance_id);
      if (error != ErrorCode::kNone) {
        FailHeartbeat(done, error, std::move(message));
        return std::nullopt;
      }
      existing = holder;
    }
  } else if (existing == nullptr && !joining) {
    FailHeartbeat(done, ErrorCode::kUnknownMemberId,
                  fmt::format("Member {} is not a member of group {}.", member_id, group_id_));
    return std::nullopt;
  }

  HeartbeatMember m;
  m.member_id = member_id;
  m.is_new = existing == nullptr;
  m.replaced = replaced;
  m.old.member_id = member_id;
  if (existing != nullptr) {
    m.old = *existing;
    if (replaced) {
      m.old.member_id = member_id;
      m.old.member_epoch = 0;
      m.old.previous_member_epoch = 0;
    }
  }
  return m;
}

bool ConsumerGroup::CheckMemberEpoch(const protocol::ConsumerGroupHeartbeatRequest& req,
                                     const Member& old, const HeartbeatDone& done) {
  bool fenced = false;
  if (req.member_epoch > old.member_epoch) {
    fenced = true;
  } else if (req.member_epoch < old.member_epoch) {
    // The previous epoch with a subset of the assignment: the answer that bumped the epoch
    // was lost, which is fine.
    fenced = req.member_epoch != old.previous_member_epoch ||
             !IsSubset(req.topic_partitions, old.assigned);
  }
  if (fenced) {
    FailHeartbeat(done, ErrorCode::kFencedMemberEpoch,
                  fmt::format("The consumer group member has a {} member epoch ({}) than the "
                              "one known by the group coordinator ({}). The member must "
                              "abandon all its partitions and rejoin.",
                              req.member_epoch > old.member_epoch ? "greater" : "smaller",
                              req.member_epoch, old.member_epoch));
    return false;
  }
  return true;
}

void ConsumerGroup::TakeOverStaticMember(Change& change, const HeartbeatMember& m,
                                         const std::string& instance_id) {
  const std::string& replaced = *m.replaced;
  const std::string& member_id = m.member_id;
  // The new instance takes the departed one's place with its target assignment.
  Assignment target;
  if (auto it = target_.find(replaced); it != target_.end()) target = it->second;
  Apply(change, ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>{group_id_, replaced,
                                                                         std::nullopt});
  Apply(change,
        ParsedMemberRecord<ConsumerGroupTargetAssignmentMember>{group_id_, replaced, std::nullopt});
  Apply(change, ParsedMemberRecord<ConsumerGroupMemberMetadata>{group_id_, replaced, std::nullopt});
  Apply(change,
        ParsedMemberRecord<ConsumerGroupMemberMetadata>{group_id_, member_id, MetadataOf(m.old)});
  Apply(change, ParsedMemberRecord<ConsumerGroupTargetAssignmentMember>{
                    group_id_, member_id, ConsumerGroupTargetAssignmentMember{ToRecord(target)}});
  Apply(change, ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>{group_id_, member_id,
                                                                         AssignmentOf(m.old)});
  kLog()->info("[GroupId {}] static member with instance id {} rejoins as {}, replacing {}",
               group_id_, instance_id, member_id, replaced);
}

void ConsumerGroup::UpdateMemberAndGroupEpoch(Change& change, const HeartbeatMember& m,
                                              const Member& updated) {
  const std::string& member_id = m.member_id;
  // A new group moves off epoch 0 at once.
  bool bump = group_epoch_ == 0;
  if (FindMember(member_id) == nullptr || !SameMetadata(m.old, updated)) {
    Apply(change, ParsedMemberRecord<ConsumerGroupMemberMetadata>{group_id_, member_id,
                                                                  MetadataOf(updated)});
    if (m.old.subscribed_topic_names != updated.subscribed_topic_names ||
        m.old.subscribed_topic_regex != updated.subscribed_topic_regex) {
      bump = true;
    }
    if (m.is_new) {
      kLog()->info("[GroupId {}] member {} joins the consumer group", group_id_, member_id);
    }
  }
  // The subscribed topics as the cluster has them now: a topic created, deleted or grown
  // since the last heartbeat bumps the epoch too.
  std::map<std::string, TopicInfo> metadata = ComputeSubscriptionMetadata();
  if (metadata != subscription_metadata_) {
    ConsumerGroupPartitionMetadata v;
    for (const auto& [name, t] : metadata) v.topics.push_back({t.id, t.name, t.partitions});
    Apply(change, ParsedGroupRecord<ConsumerGroupPartitionMetadata>{group_id_, std::move(v)});
    bump = true;
  }
  if (bump) {
    Apply(change, ParsedGroupRecord<ConsumerGroupMetadata>{
                      group_id_, ConsumerGroupMetadata{group_epoch_ + 1}});
    kLog()->info("[GroupId {}] bumped group epoch to {}", group_id_, group_epoch_);
  }
}

protocol::ConsumerGroupHeartbeatResponse ConsumerGroup::HeartbeatResponse(
    const protocol::ConsumerGroupHeartbeatRequest& req, const std::string& member_id,
    const Member& old) const {
  const Member& now = members_.at(member_id);
  protocol::ConsumerGroupHeartbeatResponse resp;
  resp.member_id = member_id;
  resp.member_epoch = now.member_epoch;
  resp.heartbeat_interval_ms = env_.config().consumer_heartbeat_interval_ms;
  // The assignment goes out when the member sent a full request (join, or a rejoin after an
  // error) or when it changed.
  bool full_request = req.member_epoch == 0 || (req.rebalance_timeout_ms != -1 &&
                                                req.subscribed_topic_names && req.topic_partitions);
  if (full_request || now.assigned != old.assigned) {
    protocol::ConsumerGroupHeartbeatResponse::Assignment a;
    for (const auto& [topic, partitions] : now.assigned) {
      a.topic_partitions.push_back(
          {topic, std::vector<int32_t>(partitions.begin(), partitions.end()), {}});
    }
    resp.assignment = std::move(a);
  }
  return resp;
}

void ConsumerGroup::Leave(const protocol::ConsumerGroupHeartbeatRequest& req, HeartbeatDone done,
                          std::vector<LogRecord> prefix) {
  const std::string& member_id = req.member_id;
  Change change;
  int32_t epoch = kLeaveEpoch;
  if (!req.instance_id) {
    if (FindMember(member_id) == nullptr) {
      FailHeartbeat(done, ErrorCode::kUnknownMemberId,
                    fmt::format("Member {} is not a member of group {}.", member_id, group_id_));
      return;
    }
    kLog()->info("[GroupId {}] member {} left the consumer group", group_id_, member_id);
    FenceMember(change, member_id);
  } else {
    const Member* holder = FindStaticMember(*req.instance_id);
    auto [error, message] = CheckStaticMember(holder, member_id, *req.instance_id);
    if (error != ErrorCode::kNone) {
      FailHeartbeat(done, error, std::move(message));
      return;
    }
    if (req.member_epoch == kStaticLeaveEpoch) {
      // A static member restarting: it keeps its place (and target) for a session timeout,
      // so that its successor with the same instance id takes over without a rebalance.
      Member next = *holder;
      next.member_epoch = kStaticLeaveEpoch;
      next.pending_revocation.clear();
      Apply(change, ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>{group_id_, member_id,
                                                                             AssignmentOf(next)});
      epoch = kStaticLeaveEpoch;
      kLog()->info("[GroupId {}] static member {} with instance id {} temporarily left", group_id_,
                   member_id, *req.instance_id);
    } else {
      kLog()->info("[GroupId {}] static member {} with instance id {} left", group_id_, member_id,
                   *req.instance_id);
      FenceMember(change, member_id);
    }
  }
  protocol::ConsumerGroupHeartbeatResponse resp;
  resp.member_id = member_id;
  resp.member_epoch = epoch;
  resp.heartbeat_interval_ms = env_.config().consumer_heartbeat_interval_ms;
  change.records.insert(change.records.begin(), std::make_move_iterator(prefix.begin()),
                        std::make_move_iterator(prefix.end()));
  Commit(change, AnswerOnceWritten(std::move(done), std::move(resp)));
}

void ConsumerGroup::Apply(Change& change, const ParsedRecord& record) {
  Replay(record);
  change.records.push_back(ToLogRecord(record));
}

void ConsumerGroup::FenceMember(Change& change, const std::string& member_id) {
  // Kafka's order: current assignment, target assignment, then the member itself.
  Apply(change, ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>{group_id_, member_id,
                                                                         std::nullopt});
  Apply(change, ParsedMemberRecord<ConsumerGroupTargetAssignmentMember>{group_id_, member_id,
                                                                        std::nullopt});
  Apply(change,
        ParsedMemberRecord<ConsumerGroupMemberMetadata>{group_id_, member_id, std::nullopt});
  std::map<std::string, TopicInfo> metadata = ComputeSubscriptionMetadata();
  if (metadata != subscription_metadata_) {
    ConsumerGroupPartitionMetadata v;
    for (const auto& [name, t] : metadata) v.topics.push_back({t.id, t.name, t.partitions});
    Apply(change, ParsedGroupRecord<ConsumerGroupPartitionMetadata>{group_id_, std::move(v)});
  }
  Apply(change, ParsedGroupRecord<ConsumerGroupMetadata>{group_id_,
                                                         ConsumerGroupMetadata{group_epoch_ + 1}});
  CancelTimers(member_id);
}

std::set<std::string> ConsumerGroup::ResolveSubscription(const Member& m) const {
  std::set<std::string> names = m.subscribed_topic_names;
  if (m.subscribed_topic_regex && !m.subscribed_topic_regex->empty()) {
    if (auto re = CompileRegex(*m.subscribed_topic_regex)) {
      for (const std::string& name : topics_.AllNames()) {
        // Internal topics are never matched by a pattern, as in Kafka.
        if (name.starts_with("__")) continue;
        if (re2::RE2::FullMatch(name, *re)) names.insert(name);
      }
    }
  }
  return names;
}

std::map<std::string, TopicInfo> ConsumerGroup::ComputeSubscriptionMetadata() const {
  std::set<std::string> names;
  for (const auto& [id, m] : members_) names.merge(ResolveSubscription(m));
  std::map<std::string, TopicInfo> out;
  for (const std::string& name : names) {
    if (auto t = topics_.FindByName(name)) out[name] = *t;
  }
  return out;
}

void ConsumerGroup::ComputeTargetAssignment(Change& change) {
  AssignmentSpec spec;
  for (const auto& [name, t] : subscription_metadata_)
    spec.partitions_per_topic[t.id] = t.partitions;
  for (const auto& [id, m] : members_) {
    AssignmentSpec::Member& sm = spec.members[id];
    sm.instance_id = m.instance_id;
    sm.rack_id = m.rack_id;
    for (const std::string& name : ResolveSubscription(m)) {
      auto it = subscription_metadata_.find(name);
      if (it != subscription_metadata_.end()) sm.topics.insert(it->second.id);
    }
    if (auto t = target_.find(id); t != target_.end()) sm.current = t->second;
  }
  std::string name = AssignorName();
  const Assignor* assignor = FindAssignor(name);
  if (assignor == nullptr) assignor = FindAssignor("uniform");
  std::map<std::string, Assignment> result = assignor->Assign(spec);
  for (const auto& [id, a] : result) {
    auto it = target_.find(id);
    if (it != target_.end() && it->second == a) continue;
    Apply(change, ParsedMemberRecord<ConsumerGroupTargetAssignmentMember>{
                      group_id_, id, ConsumerGroupTargetAssignmentMember{ToRecord(a)}});
  }
  Apply(change, ParsedGroupRecord<ConsumerGroupTargetAssignmentMetadata>{
                    group_id_, ConsumerGroupTargetAssignmentMetadata{group_epoch_}});
  kLog()->info("[GroupId {}] computed a new target assignment for epoch {} with the {} assignor",
               group_id_, group_epoch_, assignor->name());
}

bool ConsumerGroup::OwnedByOther(const std::string& member_id, const Uuid& topic,
                                 int32_t partition) const {
  // The member's own pending revocations count too: a partition it was asked to give up
  // and that came back to its target is held until it acked the revocation.
  for (const auto& [id, m] : members_) {
    auto a = m.assigned.find(topic);
    if (id != member_id && a != m.assigned.end() && a->second.contains(partition)) return true;
    auto r = m.pending_revocation.find(topic);
    if (r != m.pending_revocation.end() && r->second.contains(partition)) return true;
  }
  return false;
}

void ConsumerGroup::Reconcile(Change& change, const std::string& member_id,
                              const std::optional<OwnedPartitions>& owned) {
  const Member& m = members_.at(member_id);
  const int32_t target_epoch = assignment_epoch_;
  if (m.member_epoch == target_epoch && m.state == MemberState::kStable) return;
  Assignment target;
  if (auto it = target_.find(member_id); it != target_.end()) target = it->second;

  int32_t epoch = m.member_epoch;
  switch (m.state) {
    case MemberState::kStable:
      break;
    case MemberState::kUnrevokedPartitions:
      // Nothing moves until the member stops reporting the partitions it must give up.
      if (OwnsAny(owned, m.pending_revocation)) return;
      epoch = m.member_epoch + 1;
      break;
    case MemberState::kUnreleasedPartitions:
      break;
    case MemberState::kUnknown:
      epoch = target_epoch;
      break;
  }

  // Kept = assigned ∩ target; to revoke = assigned - kept; to assign = target - kept, minus
  // what another member still owns (unreleased).
  Assignment kept, revoke, grant;
  bool unreleased = false;
  std::set<Uuid> topics;
  for (const auto& [t, p] : target) topics.insert(t);
  for (const auto& [t, p] : m.assigned) topics.insert(t);
  for (const Uuid& t : topics) {
    static const std::set<int32_t> kNone;
    auto ti = target.find(t);
    auto ai = m.assigned.find(t);
    const std::set<int32_t>& tgt = ti == target.end() ? kNone : ti->second;
    const std::set<int32_t>& cur = ai == m.assigned.end() ? kNone : ai->second;
    for (int32_t p : cur) (tgt.contains(p) ? kept : revoke)[t].insert(p);
    for (int32_t p : tgt) {
      if (cur.contains(p)) continue;
      if (OwnedByOther(member_id, t, p)) {
        unreleased = true;
      } else {
        grant[t].insert(p);
      }
    }
  }

  Member next = m;
  if (!revoke.empty() && OwnsAny(owned, revoke)) {
    // Stay at this epoch and ask the member to revoke first.
    next.state = MemberState::kUnrevokedPartitions;
    next.previous_member_epoch = m.member_epoch;
    next.member_epoch = epoch;
    next.assigned = kept;
    next.pending_revocation = revoke;
  } else {
    for (auto& [t, p] : grant) kept[t].insert(p.begin(), p.end());
    next.state = unreleased ? MemberState::kUnreleasedPartitions : MemberState::kStable;
    next.previous_member_epoch = m.member_epoch;
    next.member_epoch = target_epoch;
    next.assigned = kept;
    next.pending_revocation.clear();
  }
  if (SameAssignmentState(next, m)) return;
  Apply(change, ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>{group_id_, member_id,
                                                                         AssignmentOf(next)});
  if (next.state == MemberState::kUnrevokedPartitions) {
    ScheduleRebalanceTimeout(member_id, next.member_epoch, next.rebalance_timeout_ms);
  } else {
    CancelRebalanceTimeout(member_id);
  }
}

void ConsumerGroup::Commit(Change& change, std::function<void(ErrorCode)> done) {
  if (change.records.empty()) {
    done(ErrorCode::kNone);
    return;
  }
  env_.Write(std::move(change.records), std::move(done));
}

void ConsumerGroup::WriteBackground(Change& change, std::string why) {
  if (change.records.empty()) return;
  env_.Write(std::move(change.records), [group = group_id_, why = std::move(why)](ErrorCode error) {
    if (error != ErrorCode::kNone) {
      kLog()->warn("[GroupId {}] writing the records of {} failed: {}", group, why,
                   protocol::ErrorName(static_cast<ErrorCode>(error)));
    }
  });
}

// ---- Timers ------------------------------------------------------------------------------

void ConsumerGroup::ScheduleSessionTimeout(const std::string& member_id) {
  if (auto it = session_timers_.find(member_id); it != session_timers_.end()) {
    env_.CancelTimer(it->second);
  }
  session_timers_[member_id] = env_.StartTimer(env_.config().consumer_session_timeout_ms,
                                               [this, member_id] { OnSessionTimeout(member_id); });
}

void ConsumerGroup::ScheduleRebalanceTimeout(const std::string& member_id, int32_t member_epoch,
                                             int32_t timeout_ms) {
  CancelRebalanceTimeout(member_id);
  if (timeout_ms <= 0) timeout_ms = env_.config().consumer_session_timeout_ms;
  rebalance_timers_[member_id] = env_.StartTimer(
      timeout_ms, [this, member_id, member_epoch] { OnRebalanceTimeout(member_id, member_epoch); });
}

void ConsumerGroup::CancelRebalanceTimeout(const std::string& member_id) {
  if (auto it = rebalance_timers_.find(member_id); it != rebalance_timers_.end()) {
    env_.CancelTimer(it->second);
    rebalance_timers_.erase(it);
  }
}

void ConsumerGroup::CancelTimers(const std::string& member_id) {
  if (auto it = session_timers_.find(member_id); it != session_timers_.end()) {
    env_.CancelTimer(it->second);
    session_timers_.erase(it);
  }
  CancelRebalanceTimeout(member_id);
}

void ConsumerGroup::OnSessionTimeout(const std::string& member_id) {
  session_timers_.erase(member_id);
  if (dead_ || FindMember(member_id) == nullptr) return;
  kLog()->info("[GroupId {}] member {} fenced from the group because its session expired",
               group_id_, member_id);
  Change change;
  FenceMember(change, member_id);
  WriteBackground(change, "a session expiry");
}

void ConsumerGroup::OnRebalanceTimeout(const std::string& member_id, int32_t member_epoch) {
  rebalance_timers_.erase(member_id);
  const Member* m = FindMember(member_id);
  if (dead_ || m == nullptr || m->member_epoch != member_epoch) return;
  kLog()->info(
      "[GroupId {}] member {} fenced from the group because it failed to revoke its "
      "partitions of epoch {} within {}ms",
      group_id_, member_id, member_epoch, m->rebalance_timeout_ms);
  Change change;
  FenceMember(change, member_id);
  WriteBackground(change, "a rebalance timeout");
}

// ---- Describe, offsets, deletion ---------------------------------------------------------

void ConsumerGroup::Describe(protocol::ConsumerGroupDescribeResponse::DescribedGroup* out) const {
  using Resp = protocol::ConsumerGroupDescribeResponse;
  auto to_wire = [this](const Assignment& a) {
    Resp::Assignment w;
    for (const auto& [topic, partitions] : a) {
      auto t = topics_.FindById(topic);
      if (!t) continue;  // deleted since: Kafka leaves it out too
      w.topic_partitions.push_back(
          {topic, t->name, std::vector<int32_t>(partitions.begin(), partitions.end()), {}});
    }
    return w;
  };
  out->group_id = group_id_;
  out->group_state = std::string(StateName());
  out->group_epoch = group_epoch_;
  out->assignment_epoch = assignment_epoch_;
  out->assignor_name = AssignorName();
  for (const auto& [id, m] : members_) {
    Resp::Member w;
    w.member_id = id;
    w.instance_id = m.instance_id;
    w.rack_id = m.rack_id;
    w.member_epoch = m.member_epoch;
    w.client_id = m.client_id;
    w.client_host = m.client_host;
    w.subscribed_topic_names.assign(m.subscribed_topic_names.begin(),
                                    m.subscribed_topic_names.end());
    w.subscribed_topic_regex = m.subscribed_topic_regex;
    w.assignment = to_wire(m.assigned);
    auto t = target_.find(id);
    w.target_assignment = to_wire(t == target_.end() ? Assignment{} : t->second);
    // KIP-1099's member type (v1+): 1, a consumer-protocol member. Every member here joined
    // with ConsumerGroupHeartbeat (a classic member never joins a consumer group here; Kafka
    // answers 0 for those).
    w.member_type = 1;
    out->members.push_back(std::move(w));
  }
}

ErrorCode ConsumerGroup::ValidateOffsetCommit(const std::string& member_id, int32_t member_epoch) {
  // A negative epoch is the admin client or a consumer with assign(): fine while no member
  // holds the partitions.
  if (member_epoch < 0 && members_.empty()) return ErrorCode::kNone;
  const Member* m = FindMember(member_id);
  if (m == nullptr) return ErrorCode::kUnknownMemberId;
  if (member_epoch != m->member_epoch) return ErrorCode::kStaleMemberEpoch;
  return ErrorCode::kNone;
}

ErrorCode ConsumerGroup::ValidateOffsetCommit(const std::string& member_id, int32_t member_epoch,
                                              int16_t api_version, bool transactional) {
  if (member_epoch < 0 && members_.empty()) return ErrorCode::kNone;
  const Member* m = FindMember(member_id);
  if (m == nullptr) return ErrorCode::kUnknownMemberId;
  if (!transactional && api_version < 9) return ErrorCode::kUnsupportedVersion;
  if (member_epoch != m->member_epoch) return ErrorCode::kStaleMemberEpoch;
  return ErrorCode::kNone;
}

ErrorCode ConsumerGroup::ValidateOffsetFetch(const std::string& member_id, int32_t member_epoch) {
  if (member_id.empty() && member_epoch < 0) return ErrorCode::kNone;
  const Member* m = FindMember(member_id);
  if (m == nullptr) return ErrorCode::kUnknownMemberId;
  if (member_epoch != m->member_epoch) return ErrorCode::kStaleMemberEpoch;
  return ErrorCode::kNone;
}

std::vector<LogRecord> ConsumerGroup::TombstoneRecords() const {
  std::vector<LogRecord> out;
  for (const auto& [id, m] : members_) {
    out.push_back(ConsumerGroupCurrentMemberAssignmentTombstone(group_id_, id));
  }
  for (const auto& [id, m] : members_) {
    out.push_back(ConsumerGroupTargetAssignmentMemberTombstone(group_id_, id));
  }
  out.push_back(ConsumerGroupTargetAssignmentMetadataTombstone(group_id_));
  for (const auto& [id, m] : members_) {
    out.push_back(ConsumerGroupMemberMetadataTombstone(group_id_, id));
  }
  out.push_back(ConsumerGroupPartitionMetadataTombstone(group_id_));
  out.push_back(ConsumerGroupMetadataTombstone(group_id_));
  return out;
}

void ConsumerGroup::Shutdown(ErrorCode error) {
  (void)error;  // no request waits inside the group; the shard answers pending writes
  for (const auto& [id, t] : session_timers_) env_.CancelTimer(t);
  for (const auto& [id, t] : rebalance_timers_) env_.CancelTimer(t);
  session_timers_.clear();
  rebalance_timers_.clear();
  dead_ = true;
}

}  // namespace runnel::brokerd::group
