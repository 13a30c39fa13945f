#include "brokerd/group/classic_group.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "brokerd/group/records.h"
#include "common/protocol/error_code.h"

namespace runnel::brokerd::group {
namespace {

using protocol::ErrorCode;
using protocol::JoinGroupResponse;
using protocol::SyncGroupResponse;
using Bytes = std::vector<uint8_t>;

constexpr ErrorCode kNone = ErrorCode::kNone;
constexpr ErrorCode kUnknownMember = ErrorCode::kUnknownMemberId;
constexpr ErrorCode kIllegalGeneration = ErrorCode::kIllegalGeneration;
constexpr ErrorCode kRebalanceInProgress = ErrorCode::kRebalanceInProgress;
constexpr ErrorCode kMemberIdRequired = ErrorCode::kMemberIdRequired;
constexpr ErrorCode kFenced = ErrorCode::kFencedInstanceId;
constexpr ErrorCode kInconsistent = ErrorCode::kInconsistentGroupProtocol;

// A shard stand-in: a virtual clock whose timers run only when the test advances time, and
// writes that stay pending until the test completes them.
class FakeEnv : public GroupEnv {
 public:
  FakeEnv() {
    config_.min_session_timeout_ms = 1000;
    config_.initial_rebalance_delay_ms = 3000;
  }

  int64_t NowMs() override { return now_; }
  TimerId StartTimer(int64_t delay_ms, std::function<void()> fn) override {
    TimerId id = next_timer_++;
    timers_[id] = Timer{now_ + delay_ms, std::move(fn)};
    return id;
  }
  void CancelTimer(TimerId id) override { timers_.erase(id); }
  void Write(std::vector<LogRecord> records, std::function<void(ErrorCode)> done) override {
    writes_.push_back(records);
    pending_.push_back(std::move(done));
  }
  const GroupConfig& config() const override { return config_; }

  // Runs the timers due within `ms`, in time order, then sets the clock to now + ms.
  void Advance(int64_t ms) {
    const int64_t target = now_ + ms;
    for (int i = 0; i < 100000; ++i) {
      auto next = timers_.end();
      for (auto it = timers_.begin(); it != timers_.end(); ++it) {
        if (it->second.at <= target && (next == timers_.end() || it->second.at < next->second.at)) {
          next = it;
        }
      }
      if (next == timers_.end()) break;
      now_ = next->second.at;
      std::function<void()> fn = std::move(next->second.fn);
      timers_.erase(next);
      fn();
    }
    now_ = target;
  }

  // Completes the oldest pending write with `error`.
  void CompleteWrite(ErrorCode error = ErrorCode::kNone) {
    ASSERT_FALSE(pending_.empty());
    auto done = std::move(pending_.front());
    pending_.pop_front();
    done(error);
  }
  size_t pending_writes() const { return pending_.size(); }
  const std::vector<std::vector<LogRecord>>& writes() const { return writes_; }
  GroupConfig& mutable_config() { return config_; }

 private:
  struct Timer {
    int64_t at;
    std::function<void()> fn;
  };
  int64_t now_ = 1'700'000'000'000;
  GroupConfig config_;
  TimerId next_timer_ = 1;
  std::map<TimerId, Timer> timers_;
  std::vector<std::vector<LogRecord>> writes_;
  std::deque<std::function<void(ErrorCode)>> pending_;
};

struct JoinResult {
  bool done = false;
  JoinGroupResponse response;
};
struct SyncResult {
  bool done = false;
  SyncGroupResponse response;
};

ClassicGroup::Protocol P(const std::string& name, const std::string& metadata = "") {
  ClassicGroup::Protocol p;
  p.name = name;
  p.metadata = Bytes(metadata.begin(), metadata.end());
  if (p.metadata.empty()) p.metadata = Bytes(name.begin(), name.end());
  return p;
}

Bytes B(const std::string& s) { return Bytes(s.begin(), s.end()); }

using Protos = std::vector<ClassicGroup::Protocol>;

// JoinGroup settings of a test member; the setters chain: JoinOptions().Instance("a").
struct JoinOptions {
  int16_t version = 9;
  std::optional<std::string> instance;
  std::vector<ClassicGroup::Protocol> protocols = {P("range", "sub")};
  std::string protocol_type = "consumer";
  int32_t session_timeout_ms = 10000;
  int32_t rebalance_timeout_ms = 30000;
  std::string client_id = "client";

  JoinOptions& Version(int16_t v) {
    version = v;
    return *this;
  }
  JoinOptions& Instance(std::string i) {
    instance = std::move(i);
    return *this;
  }
  JoinOptions& Protocols(std::vector<ClassicGroup::Protocol> p) {
    protocols = std::move(p);
    return *this;
  }
  JoinOptions& Type(std::string t) {
    protocol_type = std::move(t);
    return *this;
  }
  JoinOptions& Session(int32_t ms) {
    session_timeout_ms = ms;
    return *this;
  }
  JoinOptions& Rebalance(int32_t ms) {
    rebalance_timeout_ms = ms;
    return *this;
  }
};

class ClassicGroupTest : public ::testing::Test {
 protected:
  std::shared_ptr<JoinResult> Join(const std::string& member_id, JoinOptions o = {}) {
    auto result = std::make_shared<JoinResult>();
    ClassicGroup::JoinParams p;
    p.api_version = o.version;
    p.member_id = member_id;
    p.group_instance_id = o.instance;
    p.client_id = o.client_id;
    p.client_host = "/127.0.0.1";
    p.session_timeout_ms = o.session_timeout_ms;
    p.rebalance_timeout_ms = o.rebalance_timeout_ms;
    p.protocol_type = o.protocol_type;
    p.protocols = o.protocols;
    group_.Join(std::move(p), [result](JoinGroupResponse r) {
      EXPECT_FALSE(result->done) << "JoinGroup answered twice";
      result->done = true;
      result->response = std::move(r);
    });
    return result;
  }

  // A dynamic member's two-step join (MEMBER_ID_REQUIRED, then with the id): the parked join.
  std::shared_ptr<JoinResult> JoinNew(JoinOptions o = {}) {
    auto first = Join("", o);
    EXPECT_TRUE(first->done);
    EXPECT_EQ(first->response.error_code, kMemberIdRequired);
    return Join(first->response.member_id, o);
  }

  std::shared_ptr<SyncResult> Sync(const std::string& member_id, int32_t generation,
                                   std::vector<std::pair<std::string, Bytes>> assignments = {},
                                   std::optional<std::string> instance = std::nullopt) {
    auto result = std::make_shared<SyncResult>();
    ClassicGroup::SyncParams p;
    p.member_id = member_id;
    p.group_instance_id = std::move(instance);
    p.generation_id = generation;
    p.assignments = std::move(assignments);
    group_.Sync(std::move(p), [result](SyncGroupResponse r) {
      EXPECT_FALSE(result->done) << "SyncGroup answered twice";
      result->done = true;
      result->response = std::move(r);
    });
    return result;
  }

  struct LeaveOutcome {
    bool done = false;
    ErrorCode error = static_cast<ErrorCode>(-2);  // not answered
    std::vector<ClassicGroup::LeaveResult> members;
  };
  std::shared_ptr<LeaveOutcome> Leave(std::vector<ClassicGroup::LeaveMember> members) {
    auto out = std::make_shared<LeaveOutcome>();
    group_.Leave(std::move(members),
                 [out](ErrorCode error, std::vector<ClassicGroup::LeaveResult> r) {
                   out->done = true;
                   out->error = error;
                   out->members = std::move(r);
                 });
    return out;
  }

  // Brings `n` dynamic members to Stable generation 1; returns their member ids (leader first).
  std::vector<std::string> FormStableGroup(int n, JoinOptions o = {}) {
    std::vector<std::shared_ptr<JoinResult>> joins;
    for (int i = 0; i < n; ++i) joins.push_back(JoinNew(o));
    // The initial delay (3s), extended once by the members that joined after the first.
    env_.Advance(6000);
    std::vector<std::string> ids;
    std::string leader;
    for (auto& j : joins) {
      EXPECT_TRUE(j->done);
      EXPECT_EQ(j->response.error_code, kNone);
      leader = j->response.leader;
      if (j->response.member_id == leader) {
        ids.insert(ids.begin(), j->response.member_id);
      } else {
        ids.push_back(j->response.member_id);
      }
    }
    EXPECT_EQ(group_.StateName(), "CompletingRebalance");
    const int32_t gen = group_.generation();
    std::vector<std::shared_ptr<SyncResult>> syncs;
    for (size_t i = 1; i < ids.size(); ++i) syncs.push_back(Sync(ids[i], gen));
    std::vector<std::pair<std::string, Bytes>> assignments;
    for (const auto& id : ids) assignments.emplace_back(id, B("assign-" + id));
    syncs.insert(syncs.begin(), Sync(ids[0], gen, assignments));
    env_.CompleteWrite(ErrorCode::kNone);
    for (auto& s : syncs) {
      EXPECT_TRUE(s->done);
      EXPECT_EQ(s->response.error_code, kNone);
    }
    EXPECT_EQ(group_.StateName(), "Stable");
    return ids;
  }

  ClassicGroupValue LastWritten() {
    EXPECT_FALSE(env_.writes().empty());
    const LogRecord& r = env_.writes().back().at(0);
    std::optional<std::span<const uint8_t>> value;
    if (r.value) value = std::span<const uint8_t>(*r.value);
    auto parsed = ParseRecord(r.key, value);
    EXPECT_TRUE(parsed.ok()) << parsed.status().message();
    if (!parsed.ok() || !std::holds_alternative<ParsedClassicGroup>(*parsed)) return {};
    const auto& g = std::get<ParsedClassicGroup>(*parsed);
    EXPECT_EQ(g.group, "grp");
    EXPECT_TRUE(g.value.has_value());
    return g.value.value_or(ClassicGroupValue{});
  }

  FakeEnv env_;
  ClassicGroup group_{"grp", env_};
};

TEST_F(ClassicGroupTest, ThreeMembersJoinSyncAndLeaderGetsMetadata) {
  JoinOptions o;
  o.protocols = {P("range", "sub-a")};
  auto j1 = JoinNew(o);
  o.protocols = {P("range", "sub-b")};
  auto j2 = JoinNew(o);
  o.protocols = {P("range", "sub-c")};
  auto j3 = JoinNew(o);
  EXPECT_EQ(group_.StateName(), "PreparingRebalance");
  // The initial delay is extended by each newly joined member.
  env_.Advance(3000);
  EXPECT_FALSE(j1->done);
  env_.Advance(2999);
  EXPECT_FALSE(j1->done);
  env_.Advance(1);
  ASSERT_TRUE(j1->done && j2->done && j3->done);
  EXPECT_EQ(group_.StateName(), "CompletingRebalance");
  EXPECT_EQ(group_.generation(), 1);
  EXPECT_EQ(group_.protocol(), "range");

  std::map<std::string, std::shared_ptr<JoinResult>> by_id;
  for (auto& j : {j1, j2, j3}) {
    EXPECT_EQ(j->response.error_code, kNone);
    EXPECT_EQ(j->response.generation_id, 1);
    EXPECT_EQ(j->response.protocol_name, "range");
    EXPECT_EQ(j->response.protocol_type, "consumer");
    EXPECT_EQ(j->response.leader, j1->response.leader);
    EXPECT_EQ(j->response.member_id.rfind("client-", 0), 0u);
    EXPECT_EQ(j->response.member_id.size(), std::string("client-").size() + 36);
    by_id[j->response.member_id] = j;
  }
  ASSERT_EQ(by_id.size(), 3u);
  const std::string leader = j1->response.leader;
  ASSERT_EQ(by_id.count(leader), 1u);
  std::map<std::string, Bytes> metadata;
  for (const auto& m : by_id[leader]->response.members) metadata[m.member_id] = m.metadata;
  EXPECT_EQ(metadata.size(), 3u);
  EXPECT_EQ(metadata[j2->response.member_id], B("sub-b"));
  for (auto& [id, j] : by_id) {
    if (id != leader) {
      EXPECT_TRUE(j->response.members.empty());
    }
  }

  // Followers park in SyncGroup until the leader's assignment is written.
  std::vector<std::shared_ptr<SyncResult>> syncs;
  std::vector<std::pair<std::string, Bytes>> assignments;
  for (auto& [id, j] : by_id) {
    assignments.emplace_back(id, B("as-" + id));
    if (id != leader) syncs.push_back(Sync(id, 1));
  }
  for (auto& s : syncs) EXPECT_FALSE(s->done);
  auto leader_sync = Sync(leader, 1, assignments);
  EXPECT_FALSE(leader_sync->done);
  ASSERT_EQ(env_.pending_writes(), 1u);

  ClassicGroupValue written = LastWritten();
  EXPECT_EQ(written.generation, 1);
  EXPECT_EQ(written.protocol, "range");
  EXPECT_EQ(written.protocol_type, "consumer");
  EXPECT_EQ(written.leader, leader);
  ASSERT_EQ(written.members.size(), 3u);
  for (const auto& m : written.members) {
    EXPECT_EQ(m.assignment, B("as-" + m.member_id));
    EXPECT_EQ(m.client_host, "/127.0.0.1");
    EXPECT_EQ(m.session_timeout_ms, 10000);
    EXPECT_EQ(m.rebalance_timeout_ms, 30000);
    EXPECT_FALSE(m.subscription.empty());
  }

  env_.CompleteWrite(ErrorCode::kNone);
  EXPECT_EQ(group_.StateName(), "Stable");
  syncs.push_back(leader_sync);
  for (auto& s : syncs) {
    ASSERT_TRUE(s->done);
    EXPECT_EQ(s->response.error_code, kNone);
    EXPECT_EQ(s->response.protocol_name, "range");
  }
  EXPECT_EQ(leader_sync->response.assignment, B("as-" + leader));
  for (auto& [id, j] : by_id) EXPECT_EQ(group_.Heartbeat(id, std::nullopt, 1), kNone);

  // A follower rejoining unchanged gets the current generation without a rebalance.
  const std::string follower =
      j2->response.member_id != leader ? j2->response.member_id : j3->response.member_id;
  const std::string follower_sub = follower == j2->response.member_id ? "sub-b" : "sub-c";
  auto again = Join(follower, JoinOptions().Protocols(Protos{P("range", follower_sub)}));
  ASSERT_TRUE(again->done);
  EXPECT_EQ(again->response.error_code, kNone);
  EXPECT_EQ(again->response.generation_id, 1);
  EXPECT_TRUE(again->response.members.empty());
  EXPECT_EQ(group_.StateName(), "Stable");
  EXPECT_EQ(Sync(follower, 1)->response.assignment, B("as-" + follower));
  // With other metadata it forces a rebalance.
  auto changed = Join(follower, JoinOptions().Protocols(Protos{P("range", "new-sub")}));
  EXPECT_FALSE(changed->done);
  EXPECT_EQ(group_.StateName(), "PreparingRebalance");
}

TEST_F(ClassicGroupTest, MemberIdRequiredOldVersionsAndUnknownMembers) {
  auto first = Join("");
  ASSERT_TRUE(first->done);
  EXPECT_EQ(first->response.error_code, kMemberIdRequired);
  EXPECT_FALSE(first->response.member_id.empty());
  EXPECT_EQ(group_.member_count(), 0u);
  EXPECT_EQ(group_.pending_member_count(), 1u);
  // The pending id expires after the session timeout when the member does not come back.
  env_.Advance(10001);
  EXPECT_EQ(group_.pending_member_count(), 0u);
  auto late = Join(first->response.member_id);
  ASSERT_TRUE(late->done);
  EXPECT_EQ(late->response.error_code, kUnknownMember);

  // v3 and older join directly with an empty member id.
  auto old = Join("", JoinOptions().Version(3));
  EXPECT_FALSE(old->done);
  EXPECT_EQ(group_.member_count(), 1u);
  env_.Advance(3000);
  ASSERT_TRUE(old->done);
  EXPECT_EQ(old->response.error_code, kNone);
  EXPECT_EQ(old->response.leader, old->response.member_id);

  auto unknown = Join("nobody");
  ASSERT_TRUE(unknown->done);
  EXPECT_EQ(unknown->response.error_code, kUnknownMember);
  EXPECT_EQ(group_.Heartbeat("nobody", std::nullopt, 1), kUnknownMember);
  EXPECT_EQ(Sync("nobody", 1)->response.error_code, kUnknownMember);

  auto bad_timeout = Join("", JoinOptions().Session(10));
  ASSERT_TRUE(bad_timeout->done);
  EXPECT_EQ(bad_timeout->response.error_code, ErrorCode::kInvalidSessionTimeout);
}

TEST_F(ClassicGroupTest, IllegalGeneration) {
  auto ids = FormStableGroup(2);
  EXPECT_EQ(group_.Heartbeat(ids[1], std::nullopt, 0), kIllegalGeneration);
  EXPECT_EQ(group_.Heartbeat(ids[1], std::nullopt, 2), kIllegalGeneration);
  EXPECT_EQ(Sync(ids[1], 7)->response.error_code, kIllegalGeneration);
  EXPECT_EQ(group_.ValidateOffsetCommit(ids[1], std::nullopt, 0), kIllegalGeneration);
  EXPECT_EQ(group_.ValidateOffsetCommit(ids[1], std::nullopt, 1), kNone);
  // Admin commits (no member, generation -1) only while the group is Empty.
  EXPECT_EQ(group_.ValidateOffsetCommit("", std::nullopt, -1), kUnknownMember);
  EXPECT_EQ(group_.Heartbeat(ids[0], std::nullopt, 1), kNone);
}

TEST_F(ClassicGroupTest, LeaveTriggersRebalanceThenEmptyIsPersisted) {
  auto ids = FormStableGroup(2);
  auto left = Leave({{ids[1], std::nullopt}});
  ASSERT_TRUE(left->done);
  EXPECT_EQ(left->error, kNone);
  ASSERT_EQ(left->members.size(), 1u);
  EXPECT_EQ(left->members[0].error, kNone);
  EXPECT_EQ(group_.StateName(), "PreparingRebalance");
  EXPECT_EQ(group_.Heartbeat(ids[0], std::nullopt, 1), kRebalanceInProgress);
  EXPECT_EQ(group_.Heartbeat(ids[1], std::nullopt, 1), kUnknownMember);

  // The remaining member rejoins: every known member is back, so the join completes now.
  auto rejoin = Join(ids[0]);
  ASSERT_TRUE(rejoin->done);
  EXPECT_EQ(rejoin->response.generation_id, 2);
  EXPECT_EQ(rejoin->response.leader, ids[0]);
  EXPECT_EQ(rejoin->response.members.size(), 1u);

  // Unknown member in a batch gets its own error; the valid one still leaves.
  const size_t writes_before = env_.writes().size();
  auto last = Leave({{ids[0], std::nullopt}, {"ghost", std::nullopt}});
  ASSERT_EQ(group_.StateName(), "Empty");
  EXPECT_EQ(group_.generation(), 3);
  // The answer waits for the Empty state's write.
  EXPECT_FALSE(last->done);
  ASSERT_EQ(env_.writes().size(), writes_before + 1);
  ClassicGroupValue empty = LastWritten();
  EXPECT_TRUE(empty.members.empty());
  EXPECT_EQ(empty.generation, 3);
  EXPECT_EQ(empty.protocol_type, "consumer");
  EXPECT_FALSE(empty.protocol.has_value());
  env_.CompleteWrite(ErrorCode::kNone);
  ASSERT_TRUE(last->done);
  ASSERT_EQ(last->members.size(), 2u);
  EXPECT_EQ(last->members[0].error, kNone);
  EXPECT_EQ(last->members[1].error, kUnknownMember);
  // Admin commits are allowed now.
  EXPECT_EQ(group_.ValidateOffsetCommit("", std::nullopt, -1), kNone);
}

TEST_F(ClassicGroupTest, SessionExpiryRemovesSilentMember) {
  auto ids = FormStableGroup(2);
  for (int i = 0; i < 3; ++i) {
    env_.Advance(3000);
    EXPECT_EQ(group_.Heartbeat(ids[0], std::nullopt, 1), kNone);
  }
  EXPECT_TRUE(group_.HasMember(ids[1]));
  env_.Advance(1001);
  // ids[1] has been silent for more than its 10s session timeout.
  EXPECT_FALSE(group_.HasMember(ids[1]));
  EXPECT_EQ(group_.StateName(), "PreparingRebalance");
  EXPECT_EQ(group_.Heartbeat(ids[0], std::nullopt, 1), kRebalanceInProgress);
  auto rejoin = Join(ids[0]);
  ASSERT_TRUE(rejoin->done);
  EXPECT_EQ(rejoin->response.generation_id, 2);
  EXPECT_EQ(group_.member_count(), 1u);
}

TEST_F(ClassicGroupTest, RebalanceTimeoutDropsMemberThatDidNotRejoin) {
  auto ids = FormStableGroup(2);
  // The leader rejoining forces a rebalance.
  auto rejoin = Join(ids[0]);
  EXPECT_FALSE(rejoin->done);
  EXPECT_EQ(group_.StateName(), "PreparingRebalance");
  // ids[1] keeps heartbeating but never rejoins. The leader waits in JoinGroup longer than
  // its session timeout: its session timer is paused meanwhile.
  for (int i = 0; i < 9; ++i) {
    env_.Advance(3000);
    EXPECT_EQ(group_.Heartbeat(ids[1], std::nullopt, 1), kRebalanceInProgress);
  }
  EXPECT_FALSE(rejoin->done);
  env_.Advance(3001);  // 30s rebalance timeout
  ASSERT_TRUE(rejoin->done);
  EXPECT_EQ(rejoin->response.error_code, kNone);
  EXPECT_EQ(rejoin->response.generation_id, 2);
  EXPECT_EQ(rejoin->response.members.size(), 1u);
  EXPECT_TRUE(group_.HasMember(ids[0]));
  EXPECT_FALSE(group_.HasMember(ids[1]));
  EXPECT_EQ(group_.Heartbeat(ids[1], std::nullopt, 1), kUnknownMember);
}

TEST_F(ClassicGroupTest, PendingSyncExpiryRemovesMember) {
  // Sessions outlast the rebalance timeout, so only the missing SyncGroup can remove it.
  JoinOptions o = JoinOptions().Session(60000).Rebalance(20000);
  auto j1 = JoinNew(o);
  auto j2 = JoinNew(o);
  env_.Advance(6000);
  ASSERT_TRUE(j1->done && j2->done);
  const std::string leader = j1->response.leader;
  const std::string follower =
      j1->response.member_id == leader ? j2->response.member_id : j1->response.member_id;
  auto s = Sync(leader, 1, {{leader, B("x")}, {follower, B("y")}});
  env_.CompleteWrite(ErrorCode::kNone);
  ASSERT_TRUE(s->done);
  EXPECT_EQ(group_.StateName(), "Stable");
  // The follower never sends SyncGroup: it is dropped after the rebalance timeout and the
  // group rebalances.
  env_.Advance(19999);
  EXPECT_TRUE(group_.HasMember(follower));
  env_.Advance(2);
  EXPECT_FALSE(group_.HasMember(follower));
  EXPECT_TRUE(group_.HasMember(leader));
  EXPECT_EQ(group_.StateName(), "PreparingRebalance");
}

TEST_F(ClassicGroupTest, StaticMemberRejoinsWithoutRebalanceAndOldIdIsFenced) {
  JoinOptions a = JoinOptions().Instance("inst-a");
  JoinOptions b = JoinOptions().Instance("inst-b");
  // Static members join directly, without MEMBER_ID_REQUIRED.
  auto ja = Join("", a);
  auto jb = Join("", b);
  EXPECT_FALSE(ja->done);
  env_.Advance(6000);
  ASSERT_TRUE(ja->done && jb->done);
  EXPECT_EQ(ja->response.member_id.rfind("inst-a-", 0), 0u);
  const std::string leader = ja->response.leader;
  const std::string old_b = jb->response.member_id;
  const std::string id_a = ja->response.member_id;
  const std::vector<std::pair<std::string, Bytes>> plan = {{id_a, B("pa")}, {old_b, B("pb")}};
  if (leader == id_a) {
    Sync(old_b, 1, {}, "inst-b");
    Sync(id_a, 1, plan, "inst-a");
  } else {
    Sync(id_a, 1, {}, "inst-a");
    Sync(old_b, 1, plan, "inst-b");
  }
  env_.CompleteWrite(ErrorCode::kNone);
  ASSERT_EQ(group_.StateName(), "Stable");
  const int32_t generation = group_.generation();
  const size_t writes_before = env_.writes().size();

  // inst-b restarts: joins with an empty member id and the same protocols.
  auto jb2 = Join("", b);
  EXPECT_EQ(group_.StateName(), "Stable");
  ASSERT_EQ(env_.writes().size(), writes_before + 1);
  EXPECT_FALSE(jb2->done);  // answered once the new member id is written
  env_.CompleteWrite(ErrorCode::kNone);
  ASSERT_TRUE(jb2->done);
  EXPECT_EQ(jb2->response.error_code, kNone);
  const std::string new_b = jb2->response.member_id;
  EXPECT_NE(new_b, old_b);
  EXPECT_EQ(jb2->response.generation_id, generation);
  EXPECT_EQ(group_.generation(), generation);
  EXPECT_EQ(group_.StateName(), "Stable");

  ClassicGroupValue written = LastWritten();
  bool found_new = false;
  for (const auto& m : written.members) {
    EXPECT_NE(m.member_id, old_b);
    if (m.member_id == new_b) {
      found_new = true;
      EXPECT_EQ(m.group_instance_id, "inst-b");
      EXPECT_EQ(m.assignment, B("pb"));
    }
  }
  EXPECT_TRUE(found_new);

  // The new id gets the old one's assignment; the other member sees no rebalance.
  EXPECT_EQ(Sync(new_b, generation, {}, "inst-b")->response.assignment, B("pb"));
  EXPECT_EQ(group_.Heartbeat(id_a, "inst-a", generation), kNone);
  EXPECT_EQ(group_.Heartbeat(new_b, "inst-b", generation), kNone);
  // The old member id is fenced.
  EXPECT_EQ(group_.Heartbeat(old_b, "inst-b", generation), kFenced);
  EXPECT_EQ(Sync(old_b, generation, {}, "inst-b")->response.error_code, kFenced);
  auto old_join = Join(old_b, b);
  ASSERT_TRUE(old_join->done);
  EXPECT_EQ(old_join->response.error_code, kFenced);
  EXPECT_EQ(group_.ValidateOffsetCommit(old_b, "inst-b", generation), kFenced);
  auto leave = Leave({{old_b, "inst-b"}});
  ASSERT_EQ(leave->members.size(), 1u);
  EXPECT_EQ(leave->members[0].error, kFenced);
  EXPECT_EQ(group_.member_count(), 2u);
}

TEST_F(ClassicGroupTest, SilentStaticMembersExpireBySessionTimeout) {
  auto ja = Join("", JoinOptions().Instance("a"));
  auto jb = Join("", JoinOptions().Instance("b"));
  env_.Advance(6000);
  ASSERT_TRUE(ja->done && jb->done);
  EXPECT_EQ(group_.member_count(), 2u);
  // Nobody syncs or heartbeats: after the session timeout both expire; the group ends Empty
  // and that is written.
  env_.Advance(10001);
  EXPECT_EQ(group_.member_count(), 0u);
  EXPECT_EQ(group_.StateName(), "Empty");
  EXPECT_TRUE(LastWritten().members.empty());
}

TEST_F(ClassicGroupTest, ProtocolSelectionByVoteAndInconsistentProtocol) {
  auto j1 = JoinNew(JoinOptions().Protocols(Protos{P("a"), P("b")}));
  auto j2 = JoinNew(JoinOptions().Protocols(Protos{P("a"), P("b"), P("c")}));
  auto j3 = JoinNew(JoinOptions().Protocols(Protos{P("b"), P("a")}));
  // No protocol in common with the members already in: refused.
  auto bad = Join("", JoinOptions().Protocols(Protos{P("c")}));
  ASSERT_TRUE(bad->done);
  EXPECT_EQ(bad->response.error_code, kInconsistent);
  auto bad_type = Join("", JoinOptions().Protocols(Protos{P("a")}).Type("connect"));
  ASSERT_TRUE(bad_type->done);
  EXPECT_EQ(bad_type->response.error_code, kInconsistent);
  env_.Advance(6000);
  ASSERT_TRUE(j1->done && j2->done && j3->done);
  // "a" and "b" are supported by all; "a" is first choice of two members.
  EXPECT_EQ(group_.protocol(), "a");
  EXPECT_EQ(j3->response.protocol_name, "a");
  // The leader's member list carries each member's metadata for the chosen protocol.
  for (auto& j : {j1, j2, j3}) {
    if (j->response.member_id != j->response.leader) continue;
    ASSERT_EQ(j->response.members.size(), 3u);
    for (const auto& m : j->response.members) EXPECT_EQ(m.metadata, B("a"));
  }
  // An empty protocol type or list is refused for a new group.
  ClassicGroup other("other", env_);
  bool done = false;
  ClassicGroup::JoinParams p;
  p.api_version = 9;
  p.session_timeout_ms = 10000;
  p.rebalance_timeout_ms = 10000;
  p.protocol_type = "consumer";
  other.Join(p, [&](JoinGroupResponse r) {
    done = true;
    EXPECT_EQ(r.error_code, kInconsistent);
  });
  EXPECT_TRUE(done);
}

TEST_F(ClassicGroupTest, SyncChecksProtocolTypeAndName) {
  auto ids = FormStableGroup(1);
  ClassicGroup::SyncParams p;
  p.member_id = ids[0];
  p.generation_id = 1;
  p.protocol_type = "consumer";
  p.protocol_name = "roundrobin";
  ErrorCode error = static_cast<ErrorCode>(-2);  // not answered
  group_.Sync(p, [&](SyncGroupResponse r) { error = r.error_code; });
  EXPECT_EQ(error, kInconsistent);
  p.protocol_name = "range";
  SyncGroupResponse ok;
  group_.Sync(p, [&](SyncGroupResponse r) { ok = r; });
  EXPECT_EQ(ok.error_code, kNone);
  EXPECT_EQ(ok.protocol_type, "consumer");
  EXPECT_EQ(ok.protocol_name, "range");
}

TEST_F(ClassicGroupTest, MaxSize) {
  env_.mutable_config().max_size = 2;
  auto ids = FormStableGroup(2);
  auto third = Join("");
  ASSERT_TRUE(third->done);
  EXPECT_EQ(third->response.error_code, ErrorCode::kGroupMaxSizeReached);
  EXPECT_EQ(group_.member_count(), 2u);
  EXPECT_EQ(group_.StateName(), "Stable");
}

TEST_F(ClassicGroupTest, SyncWriteFailureAnswersErrorAndRebalances) {
  auto j1 = JoinNew();
  auto j2 = JoinNew();
  env_.Advance(6000);
  ASSERT_TRUE(j1->done && j2->done);
  const std::string leader = j1->response.leader;
  const std::string follower =
      j1->response.member_id == leader ? j2->response.member_id : j1->response.member_id;
  auto sf = Sync(follower, 1);
  auto sl = Sync(leader, 1, {{leader, B("x")}, {follower, B("y")}});
  env_.CompleteWrite(ErrorCode::kRequestTimedOut);
  ASSERT_TRUE(sf->done && sl->done);
  EXPECT_EQ(sf->response.error_code, ErrorCode::kCoordinatorNotAvailable);
  EXPECT_EQ(sl->response.error_code, ErrorCode::kCoordinatorNotAvailable);
  EXPECT_TRUE(sl->response.assignment.empty());
  EXPECT_EQ(group_.StateName(), "PreparingRebalance");
  EXPECT_EQ(group_.Heartbeat(follower, std::nullopt, 1), kRebalanceInProgress);
}

TEST_F(ClassicGroupTest, RejoinDuringRebalanceKeepsMemberAndNewMemberWaits) {
  auto ids = FormStableGroup(2);
  // A third member joins: the group rebalances; existing members rejoin with their ids.
  auto j3 = JoinNew();
  EXPECT_EQ(group_.StateName(), "PreparingRebalance");
  auto r0 = Join(ids[0]);
  EXPECT_FALSE(r0->done);
  auto r1 = Join(ids[1]);
  ASSERT_TRUE(r0->done && r1->done && j3->done);
  EXPECT_EQ(r0->response.member_id, ids[0]);
  EXPECT_EQ(r1->response.member_id, ids[1]);
  EXPECT_EQ(r1->response.generation_id, 2);
  EXPECT_EQ(group_.member_count(), 3u);
  // Still in CompletingRebalance: commits are told to finish the rebalance.
  EXPECT_EQ(group_.ValidateOffsetCommit(ids[1], std::nullopt, 2), kRebalanceInProgress);
  // Not transactional ones (TxnOffsetCommit): Kafka does not check the state for them, and
  // takes one without member and generation (v0-v2) from a group with members too.
  EXPECT_EQ(group_.ValidateOffsetCommit(ids[1], std::nullopt, 2, /*transactional=*/true), kNone);
  EXPECT_EQ(group_.ValidateOffsetCommit("", std::nullopt, -1, /*transactional=*/true), kNone);
  EXPECT_EQ(group_.ValidateOffsetCommit(ids[1], std::nullopt, 1, /*transactional=*/true),
            kIllegalGeneration);
  EXPECT_EQ(group_.ValidateOffsetCommit("nobody", std::nullopt, 2, /*transactional=*/true),
            kUnknownMember);
}

TEST_F(ClassicGroupTest, LoadRestoresGroupAndStartsSessionTimers) {
  ClassicGroupValue v;
  v.protocol_type = "consumer";
  v.generation = 5;
  v.protocol = "range";
  v.leader = "m1";
  v.current_state_timestamp_ms = 123;
  for (std::string id : {"m1", "m2"}) {
    ClassicMemberValue m;
    m.member_id = id;
    m.client_id = "c";
    m.client_host = "/10.0.0.1";
    m.rebalance_timeout_ms = 30000;
    m.session_timeout_ms = 10000;
    m.subscription = B("sub");
    m.assignment = B("as-" + id);
    v.members.push_back(m);
  }
  group_.Load(v);
  EXPECT_EQ(group_.StateName(), "Stable");
  EXPECT_EQ(group_.generation(), 5);
  EXPECT_EQ(group_.Heartbeat("m2", std::nullopt, 5), kNone);
  EXPECT_EQ(Sync("m2", 5)->response.assignment, B("as-m2"));

  protocol::DescribeGroupsResponse::DescribedGroup d;
  group_.Describe(&d);
  EXPECT_EQ(d.group_state, "Stable");
  EXPECT_EQ(d.protocol_data, "range");
  ASSERT_EQ(d.members.size(), 2u);
  EXPECT_EQ(d.members[0].member_metadata, B("sub"));
  EXPECT_EQ(d.members[1].member_assignment, B("as-m2"));

  // Only m2 heartbeats: m1 expires after its session timeout.
  env_.Advance(6000);
  EXPECT_EQ(group_.Heartbeat("m2", std::nullopt, 5), kNone);
  env_.Advance(6000);
  EXPECT_FALSE(group_.HasMember("m1"));
  EXPECT_EQ(group_.StateName(), "PreparingRebalance");

  ClassicGroup empty("grp2", env_);
  ClassicGroupValue ev;
  ev.protocol_type = "consumer";
  ev.generation = 9;
  empty.Load(ev);
  EXPECT_EQ(empty.StateName(), "Empty");
  EXPECT_EQ(empty.generation(), 9);
  // A parse of what Runnel writes for an Empty group loads as Empty.
  EXPECT_TRUE(empty.empty());
}

TEST_F(ClassicGroupTest, ShutdownAnswersParkedRequests) {
  auto j1 = JoinNew();
  EXPECT_FALSE(j1->done);
  group_.Shutdown(ErrorCode::kNotCoordinator);
  ASSERT_TRUE(j1->done);
  EXPECT_EQ(j1->response.error_code, ErrorCode::kNotCoordinator);
  EXPECT_EQ(group_.StateName(), "Dead");
  env_.Advance(99999);  // no timer fires into the dead group
  EXPECT_EQ(group_.Heartbeat(j1->response.member_id, std::nullopt, 0),
            ErrorCode::kCoordinatorNotAvailable);
}

}  // namespace
}  // namespace runnel::brokerd::group
