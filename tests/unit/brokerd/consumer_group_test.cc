#include "brokerd/group/consumer_group.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/protocol/error_code.h"

namespace runnel::brokerd::group {
namespace {

using protocol::ConsumerGroupHeartbeatRequest;
using protocol::ConsumerGroupHeartbeatResponse;
using protocol::ErrorCode;
using protocol::Uuid;

// A shard with a virtual clock and an in-memory log. Writes complete when the test calls
// Flush() (never inside Write, as the real shard).
class FakeEnv : public GroupEnv {
 public:
  int64_t NowMs() override { return now_; }
  TimerId StartTimer(int64_t delay_ms, std::function<void()> fn) override {
    TimerId id = next_timer_++;
    timers_[id] = {now_ + delay_ms, std::move(fn)};
    return id;
  }
  void CancelTimer(TimerId id) override { timers_.erase(id); }
  void Write(std::vector<LogRecord> records, std::function<void(ErrorCode)> done) override {
    for (auto& r : records) log.push_back(std::move(r));
    pending_.push_back(std::move(done));
  }
  const GroupConfig& config() const override { return config_; }

  void Flush() {
    for (int i = 0; i < 1000 && !pending_.empty(); ++i) {
      auto done = std::move(pending_.front());
      pending_.pop_front();
      done(write_error);
    }
  }
  // Moves the clock, running timers that come due in order.
  void Advance(int64_t ms) {
    int64_t until = now_ + ms;
    for (int i = 0; i < 10000; ++i) {
      auto next = timers_.end();
      for (auto it = timers_.begin(); it != timers_.end(); ++it) {
        if (it->second.first <= until &&
            (next == timers_.end() || it->second.first < next->second.first)) {
          next = it;
        }
      }
      if (next == timers_.end()) break;
      now_ = next->second.first;
      auto fn = std::move(next->second.second);
      timers_.erase(next);
      fn();
      Flush();
    }
    now_ = until;
  }
  size_t timer_count() const { return timers_.size(); }

  GroupConfig config_;
  std::vector<LogRecord> log;
  ErrorCode write_error = ErrorCode::kNone;

 private:
  int64_t now_ = 1'000'000;
  TimerId next_timer_ = 1;
  std::map<TimerId, std::pair<int64_t, std::function<void()>>> timers_;
  std::deque<std::function<void(ErrorCode)>> pending_;
};

class FakeTopics : public TopicLookup {
 public:
  void Add(const std::string& name, int32_t partitions) {
    auto it = by_name_.find(name);
    Uuid id = it != by_name_.end() ? it->second.id : Uuid::FromBits(by_name_.size() + 1, 42);
    by_name_[name] = {id, name, partitions};
  }
  void Remove(const std::string& name) { by_name_.erase(name); }
  Uuid Id(const std::string& name) const { return by_name_.at(name).id; }

  std::optional<TopicInfo> FindByName(const std::string& name) const override {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<TopicInfo> FindById(const Uuid& id) const override {
    for (const auto& [n, t] : by_name_) {
      if (t.id == id) return t;
    }
    return std::nullopt;
  }
  std::vector<std::string> AllNames() const override {
    std::vector<std::string> out;
    for (const auto& [n, t] : by_name_) out.push_back(n);
    return out;
  }

 private:
  std::map<std::string, TopicInfo> by_name_;
};

using Owned = std::set<std::pair<Uuid, int32_t>>;

// A KIP-848 consumer as a test drives it: it reports what it owns and takes what the
// coordinator answers (revoking first, as the protocol asks).
struct Client {
  Client() = default;
  explicit Client(std::string id) : member_id(std::move(id)) {}
  std::string member_id;
  int32_t epoch = 0;
  std::optional<std::string> instance_id;
  std::vector<std::string> topics = {"t"};
  Owned owned;
  ErrorCode last_error = ErrorCode::kNone;
  std::optional<std::string> assignor;
};

class ConsumerGroupTest : public ::testing::Test {
 protected:
  ConsumerGroupTest() {
    env_.config_.consumer_session_timeout_ms = 45000;
    env_.config_.consumer_heartbeat_interval_ms = 5000;
    topics_.Add("t", 6);
    group_ = std::make_unique<ConsumerGroup>("g", env_, topics_);
  }

  ConsumerGroupHeartbeatRequest Request(const Client& c) {
    ConsumerGroupHeartbeatRequest req;
    req.group_id = "g";
    req.member_id = c.member_id;
    req.member_epoch = c.epoch;
    req.instance_id = c.instance_id;
    if (c.epoch == 0) {
      req.rebalance_timeout_ms = 30000;
      req.subscribed_topic_names = c.topics;
      req.server_assignor = c.assignor;
    }
    std::vector<ConsumerGroupHeartbeatRequest::TopicPartitions> owned;
    std::map<Uuid, std::vector<int32_t>> by_topic;
    for (const auto& [t, p] : c.owned) by_topic[t].push_back(p);
    for (auto& [t, ps] : by_topic) owned.push_back({t, ps, {}});
    req.topic_partitions = owned;
    return req;
  }

  // Sends `req` and returns the answer (after the write completed).
  ConsumerGroupHeartbeatResponse Send(const ConsumerGroupHeartbeatRequest& req,
                                      int16_t version = 1) {
    std::string message;
    ErrorCode invalid = ConsumerGroup::ValidateHeartbeat(req, version, env_.config_, &message);
    if (invalid != ErrorCode::kNone) {
      ConsumerGroupHeartbeatResponse r;
      r.error_code = invalid;
      r.error_message = message;
      return r;
    }
    std::optional<ConsumerGroupHeartbeatResponse> out;
    group_->Heartbeat(req, "client", "/127.0.0.1",
                      [&out](ConsumerGroupHeartbeatResponse r) { out = std::move(r); });
    env_.Flush();
    EXPECT_TRUE(out.has_value()) << "no answer";
    return out.value_or(ConsumerGroupHeartbeatResponse{});
  }

  // One heartbeat of `c`; applies the answer as a client does.
  ConsumerGroupHeartbeatResponse Beat(Client& c) {
    ConsumerGroupHeartbeatResponse r = Send(Request(c));
    c.last_error = r.error_code;
    if (r.error_code != ErrorCode::kNone) return r;
    if (r.member_id) c.member_id = *r.member_id;
    c.epoch = r.member_epoch;
    if (r.assignment) {
      Owned next;
      for (const auto& tp : r.assignment->topic_partitions) {
        for (int32_t p : tp.partitions) next.insert({tp.topic_id, p});
      }
      c.owned = next;
    }
    EXPECT_EQ(r.heartbeat_interval_ms, 5000);
    return r;
  }

  Client Join(const std::string& id, std::vector<std::string> topics = {"t"}) {
    Client c;
    c.member_id = id;
    c.topics = std::move(topics);
    Beat(c);
    EXPECT_EQ(c.last_error, ErrorCode::kNone);
    return c;
  }

  // No partition owned by two clients, or by two members on the coordinator's side.
  void CheckExclusive(const std::vector<Client*>& clients) {
    Owned seen;
    for (const Client* c : clients) {
      for (const auto& tp : c->owned) {
        EXPECT_TRUE(seen.insert(tp).second) << "partition " << tp.second << " owned twice";
      }
    }
    Owned server;
    for (const auto& [id, m] : group_->members()) {
      for (const Assignment* a : {&m.assigned, &m.pending_revocation}) {
        for (const auto& [t, ps] : *a) {
          for (int32_t p : ps) {
            EXPECT_TRUE(server.insert({t, p}).second) << "server: " << p << " owned twice";
          }
        }
      }
    }
  }

  // Heartbeats every client in turn until the group is Stable; false after `max_rounds`.
  bool Converge(std::vector<Client*> clients, int max_rounds = 20) {
    for (int round = 0; round < max_rounds; ++round) {
      for (Client* c : clients) {
        Beat(*c);
        EXPECT_EQ(c->last_error, ErrorCode::kNone) << c->member_id;
        CheckExclusive(clients);
      }
      if (group_->StateName() == "Stable") {
        // Stable on the server; one more round so that every client heard its last change.
        for (Client* c : clients) Beat(*c);
        return true;
      }
    }
    return false;
  }

  Owned Union(const std::vector<Client*>& clients) {
    Owned all;
    for (const Client* c : clients) all.insert(c->owned.begin(), c->owned.end());
    return all;
  }

  FakeEnv env_;
  FakeTopics topics_;
  std::unique_ptr<ConsumerGroup> group_;
};

TEST_F(ConsumerGroupTest, OneMemberGetsEverything) {
  Client a = Join("a");
  EXPECT_EQ(a.epoch, 1);
  EXPECT_EQ(a.owned.size(), 6u);
  EXPECT_EQ(group_->StateName(), "Stable");
  EXPECT_EQ(group_->group_epoch(), 1);
  EXPECT_EQ(group_->assignment_epoch(), 1);
}

TEST_F(ConsumerGroupTest, ThreeMembersConvergeAndLeaveReassigns) {
  Client a = Join("a");
  Client b = Join("b");
  Client c = Join("c");
  ASSERT_TRUE(Converge({&a, &b, &c}));
  for (Client* x : {&a, &b, &c}) EXPECT_EQ(x->owned.size(), 2u) << x->member_id;
  EXPECT_EQ(Union({&a, &b, &c}).size(), 6u);
  EXPECT_EQ(group_->group_epoch(), 3);

  // c leaves: a and b take its partitions.
  c.epoch = -1;
  auto r = Beat(c);
  EXPECT_EQ(r.error_code, ErrorCode::kNone);
  EXPECT_EQ(r.member_epoch, -1);
  EXPECT_EQ(group_->member_count(), 2u);
  c.owned.clear();
  ASSERT_TRUE(Converge({&a, &b}));
  EXPECT_EQ(a.owned.size(), 3u);
  EXPECT_EQ(b.owned.size(), 3u);
  EXPECT_EQ(Union({&a, &b}).size(), 6u);
}

TEST_F(ConsumerGroupTest, RevocationComesBeforeReassignment) {
  Client a = Join("a");
  ASSERT_EQ(a.owned.size(), 6u);
  Client b = Join("b");
  // b's target is 3 partitions a still owns: b gets nothing yet, at the new epoch.
  EXPECT_TRUE(b.owned.empty());
  EXPECT_EQ(group_->members().at("b").state, ConsumerGroup::MemberState::kUnreleasedPartitions);
  // a is asked to revoke 3 and keeps its epoch until it acks.
  Beat(a);
  EXPECT_EQ(a.owned.size(), 3u);
  EXPECT_EQ(a.epoch, 1);
  EXPECT_EQ(group_->members().at("a").state, ConsumerGroup::MemberState::kUnrevokedPartitions);
  // b still waits: a has not acked yet.
  Beat(b);
  EXPECT_TRUE(b.owned.empty());
  CheckExclusive({&a, &b});
  // a acks (its heartbeat no longer lists them) and moves to epoch 2; then b gets them.
  Beat(a);
  EXPECT_EQ(a.epoch, 2);
  Beat(b);
  EXPECT_EQ(b.owned.size(), 3u);
  CheckExclusive({&a, &b});
  EXPECT_EQ(group_->StateName(), "Stable");
}

TEST_F(ConsumerGroupTest, UnackedRevocationHoldsEvenWithoutOwnedList) {
  Client a = Join("a");
  Client b = Join("b");
  Beat(a);  // asked to revoke
  // A heartbeat that omits the owned list does not ack anything.
  ConsumerGroupHeartbeatRequest req = Request(a);
  req.topic_partitions.reset();
  auto r = Send(req);
  EXPECT_EQ(r.error_code, ErrorCode::kNone);
  EXPECT_EQ(r.member_epoch, 1);
  EXPECT_EQ(group_->members().at("a").state, ConsumerGroup::MemberState::kUnrevokedPartitions);
}

TEST_F(ConsumerGroupTest, SessionExpiryRemovesMember) {
  Client a = Join("a");
  Client b = Join("b");
  ASSERT_TRUE(Converge({&a, &b}));
  // b keeps heartbeating, a goes silent.
  for (int i = 0; i < 10; ++i) {
    env_.Advance(5000);
    Beat(b);
  }
  EXPECT_EQ(group_->member_count(), 1u);
  EXPECT_FALSE(group_->members().contains("a"));
  ASSERT_TRUE(Converge({&b}));
  EXPECT_EQ(b.owned.size(), 6u);
  // a's next heartbeat: it is no longer known.
  Beat(a);
  EXPECT_EQ(a.last_error, ErrorCode::kUnknownMemberId);
}

TEST_F(ConsumerGroupTest, RebalanceTimeoutFencesAMemberThatDoesNotRevoke) {
  Client a = Join("a");
  Client b = Join("b");
  Beat(a);  // asked to revoke 3; a never acks
  ASSERT_EQ(group_->members().at("a").state, ConsumerGroup::MemberState::kUnrevokedPartitions);
  for (int i = 0; i < 8; ++i) {
    env_.Advance(5000);
    Beat(b);
  }
  EXPECT_FALSE(group_->members().contains("a"));
  ASSERT_TRUE(Converge({&b}));
  EXPECT_EQ(b.owned.size(), 6u);
}

TEST_F(ConsumerGroupTest, FencingAndValidationErrors) {
  Client a = Join("a");
  // Epoch ahead of the coordinator's.
  Client ahead = a;
  ahead.epoch = 7;
  Beat(ahead);
  EXPECT_EQ(ahead.last_error, ErrorCode::kFencedMemberEpoch);
  // An old epoch that is not the previous one: a rejoin (epoch 0) under a known member id.
  Client b = Join("b");
  ASSERT_TRUE(Converge({&a, &b}));
  ASSERT_EQ(a.epoch, 2);
  Client behind = a;
  behind.epoch = 0;
  behind.owned.clear();
  Beat(behind);
  EXPECT_EQ(behind.last_error, ErrorCode::kFencedMemberEpoch);
  // The previous epoch with a subset of the assignment is fine (a lost answer).
  Client prev = a;
  prev.epoch = group_->members().at("a").previous_member_epoch;
  Beat(prev);
  EXPECT_EQ(prev.last_error, ErrorCode::kNone);
  // Unknown member.
  Client ghost;
  ghost.member_id = "ghost";
  ghost.epoch = 3;
  Beat(ghost);
  EXPECT_EQ(ghost.last_error, ErrorCode::kUnknownMemberId);

  // Join without a rebalance timeout, with owned partitions, without subscription.
  ConsumerGroupHeartbeatRequest req = Request(Client{"n"});
  req.rebalance_timeout_ms = -1;
  EXPECT_EQ(Send(req).error_code, ErrorCode::kInvalidRequest);
  req = Request(Client{"n"});
  req.topic_partitions = {{topics_.Id("t"), {0}, {}}};
  EXPECT_EQ(Send(req).error_code, ErrorCode::kInvalidRequest);
  req = Request(Client{"n"});
  req.subscribed_topic_names.reset();
  EXPECT_EQ(Send(req).error_code, ErrorCode::kInvalidRequest);
  // v1 needs a client-made member id; v0 makes one.
  req = Request(Client{""});
  EXPECT_EQ(Send(req, 1).error_code, ErrorCode::kInvalidRequest);
  auto made = Send(req, 0);
  EXPECT_EQ(made.error_code, ErrorCode::kNone);
  ASSERT_TRUE(made.member_id.has_value());
  EXPECT_EQ(made.member_id->size(), 22u);
  // Unknown assignor.
  req = Request(Client{"n2"});
  req.server_assignor = "sticky";
  EXPECT_EQ(Send(req).error_code, ErrorCode::kUnsupportedAssignor);
  // Epoch below -2.
  req = Request(a);
  req.member_epoch = -3;
  EXPECT_EQ(Send(req).error_code, ErrorCode::kInvalidRequest);
  // Bad regex.
  req = Request(Client{"n3"});
  req.subscribed_topic_regex = "([";
  EXPECT_EQ(Send(req).error_code, ErrorCode::kInvalidRequest);
}

TEST_F(ConsumerGroupTest, GroupMaxSize) {
  env_.config_.consumer_max_size = 2;
  Client a = Join("a");
  Client b = Join("b");
  Client c;
  c.member_id = "c";
  Beat(c);
  EXPECT_EQ(c.last_error, ErrorCode::kGroupMaxSizeReached);
  // Members already in keep heartbeating.
  Beat(a);
  EXPECT_EQ(a.last_error, ErrorCode::kNone);
}

TEST_F(ConsumerGroupTest, StaticMemberRejoinsWithoutRebalance) {
  Client a = Join("a");
  Client s;
  s.member_id = "s1";
  s.instance_id = "instance-1";
  Beat(s);
  ASSERT_EQ(s.last_error, ErrorCode::kNone);
  ASSERT_TRUE(Converge({&a, &s}));
  Owned s_owned = s.owned;
  int32_t group_epoch = group_->group_epoch();
  int32_t a_epoch = a.epoch;

  // A second instance with the same instance id while s is there: refused.
  Client dup;
  dup.member_id = "s2";
  dup.instance_id = "instance-1";
  Beat(dup);
  EXPECT_EQ(dup.last_error, ErrorCode::kUnreleasedInstanceId);
  // A heartbeat naming the instance with another member id: fenced.
  Client wrong = s;
  wrong.member_id = "s2";
  Beat(wrong);
  EXPECT_EQ(wrong.last_error, ErrorCode::kFencedInstanceId);

  // s restarts: temporary leave (-2), then the new process joins with a new member id.
  s.epoch = -2;
  auto r = Beat(s);
  EXPECT_EQ(r.error_code, ErrorCode::kNone);
  EXPECT_EQ(r.member_epoch, -2);
  Client s2;
  s2.member_id = "s2";
  s2.instance_id = "instance-1";
  Beat(s2);
  ASSERT_EQ(s2.last_error, ErrorCode::kNone);
  EXPECT_EQ(s2.owned, s_owned);
  EXPECT_EQ(group_->group_epoch(), group_epoch);
  EXPECT_FALSE(group_->members().contains("s1"));
  Beat(a);
  EXPECT_EQ(a.epoch, a_epoch);
  EXPECT_EQ(group_->StateName(), "Stable");

  // A static member that does not come back within the session timeout is removed.
  s2.epoch = -2;
  Beat(s2);
  for (int i = 0; i < 10; ++i) {
    env_.Advance(5000);
    Beat(a);
  }
  EXPECT_EQ(group_->member_count(), 1u);
}

TEST_F(ConsumerGroupTest, StaticMemberLeavesForGood) {
  Client s;
  s.member_id = "s1";
  s.instance_id = "i";
  Beat(s);
  s.epoch = -1;
  auto r = Beat(s);
  EXPECT_EQ(r.error_code, ErrorCode::kNone);
  EXPECT_EQ(r.member_epoch, -1);
  EXPECT_TRUE(group_->empty());
  EXPECT_EQ(group_->StateName(), "Empty");
}

TEST_F(ConsumerGroupTest, NewPartitionsBumpTheEpoch) {
  Client a = Join("a");
  Client b = Join("b");
  ASSERT_TRUE(Converge({&a, &b}));
  int32_t epoch = group_->group_epoch();
  topics_.Add("t", 8);
  ASSERT_TRUE(Converge({&a, &b}));
  EXPECT_EQ(group_->group_epoch(), epoch + 1);
  EXPECT_EQ(a.owned.size(), 4u);
  EXPECT_EQ(b.owned.size(), 4u);
}

TEST_F(ConsumerGroupTest, RegexSubscription) {
  topics_.Add("orders-eu", 2);
  topics_.Add("orders-us", 2);
  topics_.Add("__internal", 2);
  Client c;
  c.member_id = "r";
  c.topics.clear();
  ConsumerGroupHeartbeatRequest req = Request(c);
  req.subscribed_topic_names.reset();
  req.subscribed_topic_regex = "orders-.*";
  auto r = Send(req);
  ASSERT_EQ(r.error_code, ErrorCode::kNone);
  ASSERT_TRUE(r.assignment.has_value());
  size_t n = 0;
  for (const auto& tp : r.assignment->topic_partitions) {
    EXPECT_TRUE(tp.topic_id == topics_.Id("orders-eu") || tp.topic_id == topics_.Id("orders-us"));
    n += tp.partitions.size();
  }
  EXPECT_EQ(n, 4u);
}

TEST_F(ConsumerGroupTest, RangeAssignorChosenByMembers) {
  Client a;
  a.member_id = "a";
  a.assignor = "range";
  Beat(a);
  ASSERT_EQ(a.last_error, ErrorCode::kNone);
  EXPECT_EQ(group_->AssignorName(), "range");
  Client b;
  b.member_id = "b";
  b.assignor = "range";
  Beat(b);
  ASSERT_EQ(b.last_error, ErrorCode::kNone);
  ASSERT_TRUE(Converge({&a, &b}));
  Uuid t = topics_.Id("t");
  EXPECT_EQ(a.owned, (Owned{{t, 0}, {t, 1}, {t, 2}}));
  EXPECT_EQ(b.owned, (Owned{{t, 3}, {t, 4}, {t, 5}}));
}

TEST_F(ConsumerGroupTest, OffsetValidation) {
  // Empty group: admin commits (negative epoch) are fine.
  EXPECT_EQ(group_->ValidateOffsetCommit("", -1), ErrorCode::kNone);
  EXPECT_EQ(group_->ValidateOffsetFetch("", -1), ErrorCode::kNone);
  Client a = Join("a");
  EXPECT_EQ(group_->ValidateOffsetCommit("", -1), ErrorCode::kUnknownMemberId);
  EXPECT_EQ(group_->ValidateOffsetCommit("a", a.epoch), ErrorCode::kNone);
  EXPECT_EQ(group_->ValidateOffsetCommit("a", a.epoch + 1), ErrorCode::kStaleMemberEpoch);
  EXPECT_EQ(group_->ValidateOffsetCommit("x", a.epoch), ErrorCode::kUnknownMemberId);
  EXPECT_EQ(group_->ValidateOffsetCommit("a", a.epoch, 8, false), ErrorCode::kUnsupportedVersion);
  EXPECT_EQ(group_->ValidateOffsetCommit("a", a.epoch, 8, true), ErrorCode::kNone);
  EXPECT_EQ(group_->ValidateOffsetFetch("", -1), ErrorCode::kNone);
  EXPECT_EQ(group_->ValidateOffsetFetch("a", a.epoch), ErrorCode::kNone);
  EXPECT_EQ(group_->ValidateOffsetFetch("a", 0), ErrorCode::kStaleMemberEpoch);
  EXPECT_EQ(group_->ValidateOffsetFetch("x", 1), ErrorCode::kUnknownMemberId);
}

TEST_F(ConsumerGroupTest, Describe) {
  Client a = Join("a");
  Client b = Join("b");
  protocol::ConsumerGroupDescribeResponse::DescribedGroup d;
  group_->Describe(&d);
  EXPECT_EQ(d.group_id, "g");
  EXPECT_EQ(d.group_state, "Reconciling");
  EXPECT_EQ(d.group_epoch, 2);
  EXPECT_EQ(d.assignment_epoch, 2);
  EXPECT_EQ(d.assignor_name, "uniform");
  ASSERT_EQ(d.members.size(), 2u);
  const auto& ma = d.members[0];
  EXPECT_EQ(ma.member_id, "a");
  EXPECT_EQ(ma.client_id, "client");
  EXPECT_EQ(ma.client_host, "/127.0.0.1");
  EXPECT_EQ(ma.member_type, 1) << "a consumer-protocol member (KIP-1099)";
  EXPECT_EQ(d.members[1].member_type, 1);
  EXPECT_EQ(ma.subscribed_topic_names, std::vector<std::string>{"t"});
  ASSERT_EQ(ma.assignment.topic_partitions.size(), 1u);
  EXPECT_EQ(ma.assignment.topic_partitions[0].topic_name, "t");
  EXPECT_EQ(ma.assignment.topic_partitions[0].partitions.size(), 6u);  // not revoked yet
  ASSERT_EQ(ma.target_assignment.topic_partitions.size(), 1u);
  EXPECT_EQ(ma.target_assignment.topic_partitions[0].partitions.size(), 3u);
}

TEST_F(ConsumerGroupTest, WriteErrorIsAnswered) {
  env_.write_error = ErrorCode::kNotCoordinator;
  Client a;
  a.member_id = "a";
  Beat(a);
  EXPECT_EQ(a.last_error, ErrorCode::kNotCoordinator);
}

TEST_F(ConsumerGroupTest, ShutdownStopsTimersAndGoesDead) {
  Client a = Join("a");
  ASSERT_GT(env_.timer_count(), 0u);
  group_->Shutdown(ErrorCode::kNotCoordinator);
  EXPECT_EQ(env_.timer_count(), 0u);
  EXPECT_EQ(group_->StateName(), "Dead");
  Beat(a);
  EXPECT_NE(a.last_error, ErrorCode::kNone);
}

// Replaying every record the group wrote rebuilds the same group.
TEST_F(ConsumerGroupTest, ReplayRebuildsTheSameState) {
  topics_.Add("u", 3);
  Client a = Join("a", {"t", "u"});
  Client b = Join("b", {"t"});
  Client s;
  s.member_id = "s";
  s.instance_id = "inst";
  s.topics = {"u"};
  Beat(s);
  Beat(a);  // a revoking
  Converge({&a, &b, &s});
  s.epoch = -2;
  Beat(s);  // static temporary leave
  Client s2;
  s2.member_id = "s2";
  s2.instance_id = "inst";
  s2.topics = {"u"};
  Beat(s2);
  b.epoch = -1;
  Beat(b);
  Beat(a);  // mid-reconciliation after b left

  FakeEnv env2;
  ConsumerGroup replayed("g", env2, topics_);
  for (const LogRecord& r : env_.log) {
    std::optional<std::span<const uint8_t>> value;
    if (r.value) value = std::span<const uint8_t>(*r.value);
    auto parsed = ParseRecord(r.key, value);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    replayed.Replay(*parsed);
  }
  EXPECT_EQ(replayed.group_epoch(), group_->group_epoch());
  EXPECT_EQ(replayed.assignment_epoch(), group_->assignment_epoch());
  EXPECT_EQ(replayed.StateName(), group_->StateName());
  EXPECT_EQ(replayed.target_assignment(), group_->target_assignment());
  EXPECT_EQ(replayed.subscription_metadata(), group_->subscription_metadata());
  ASSERT_EQ(replayed.members().size(), group_->members().size());
  for (const auto& [id, m] : group_->members()) {
    ASSERT_TRUE(replayed.members().contains(id)) << id;
    const auto& r = replayed.members().at(id);
    EXPECT_EQ(r.member_epoch, m.member_epoch) << id;
    EXPECT_EQ(r.previous_member_epoch, m.previous_member_epoch) << id;
    EXPECT_EQ(r.state, m.state) << id;
    EXPECT_EQ(r.instance_id, m.instance_id) << id;
    EXPECT_EQ(r.client_id, m.client_id) << id;
    EXPECT_EQ(r.client_host, m.client_host) << id;
    EXPECT_EQ(r.subscribed_topic_names, m.subscribed_topic_names) << id;
    EXPECT_EQ(r.rebalance_timeout_ms, m.rebalance_timeout_ms) << id;
    EXPECT_EQ(r.assigned, m.assigned) << id;
    EXPECT_EQ(r.pending_revocation, m.pending_revocation) << id;
  }
  EXPECT_GE(replayed.member_count(), 2u);

  // The loaded group carries on: session timers run, the members can heartbeat.
  replayed.OnLoaded();
  EXPECT_GE(env2.timer_count(), replayed.member_count());

  // Deleting: tombstones replayed mark the group deleted.
  for (const LogRecord& r : group_->TombstoneRecords()) {
    auto parsed = ParseRecord(r.key, std::nullopt);
    ASSERT_TRUE(parsed.ok());
    replayed.Replay(*parsed);
  }
  EXPECT_TRUE(replayed.deleted());
  EXPECT_TRUE(replayed.empty());
}

}  // namespace
}  // namespace runnel::brokerd::group
