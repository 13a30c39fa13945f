// The controller's pure partition rules: election from the ISR, fencing, AlterPartition
// validation (Kafka's error codes and order).
#include "storaged/replication/partition_election.h"

#include <gtest/gtest.h>

#include <set>

namespace runnel::storaged::replication {
namespace {

using protocol::ErrorCode;

PartitionRegistration Record() {
  PartitionRegistration p;
  p.replicas = {1, 2, 3};
  p.isr = {1, 2, 3};
  p.leader = 1;
  p.leader_epoch = 5;
  p.partition_epoch = 9;
  return p;
}

EligibleFn AllBut(std::set<int32_t> out) {
  return [out](int32_t b) { return !out.contains(b); };
}

TEST(PartitionElection, ElectsTheFirstEligibleIsrMemberInReplicaOrder) {
  PartitionRegistration p = Record();
  p.isr = {3, 2};
  EXPECT_EQ(ChooseLeader(p, AllBut({}), {}), 2);
  EXPECT_EQ(ChooseLeader(p, AllBut({2}), {}), 3);
  EXPECT_EQ(ChooseLeader(p, AllBut({2, 3}), {}), kNoLeader);  // 1 is out of the ISR
  EXPECT_EQ(ChooseLeader(p, AllBut({2, 3}), {.unclean_leader_election = true}), 1);
}

TEST(PartitionElection, FencingTheLeaderMovesLeadershipAndShrinksTheIsr) {
  std::optional<PartitionRegistration> p = OnBrokerFenced(Record(), 1, AllBut({1}), {});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->leader, 2);
  EXPECT_EQ(p->isr, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(p->leader_epoch, 6);
  EXPECT_EQ(p->partition_epoch, 10);
  // A follower: the ISR shrinks, the leader epoch stays.
  p = OnBrokerFenced(Record(), 3, AllBut({3}), {});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->leader, 1);
  EXPECT_EQ(p->leader_epoch, 5);
  EXPECT_EQ(p->isr, (std::vector<int32_t>{1, 2}));
  // Not a member, not the leader: nothing changes.
  PartitionRegistration r = Record();
  r.isr = {1, 2};
  EXPECT_FALSE(OnBrokerFenced(r, 3, AllBut({3}), {}));
}

TEST(PartitionElection, TheLastIsrMemberStaysAndLeadsAgainWhenBack) {
  PartitionRegistration r = Record();
  r.isr = {1};
  std::optional<PartitionRegistration> p = OnBrokerFenced(r, 1, AllBut({1}), {});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->leader, kNoLeader);
  EXPECT_EQ(p->isr, (std::vector<int32_t>{1}));
  EXPECT_EQ(p->leader_epoch, 6);
  EXPECT_FALSE(OnBrokerUnfenced(*p, AllBut({1}), {}));  // 2 and 3 are not in the ISR
  std::optional<PartitionRegistration> q = OnBrokerUnfenced(*p, AllBut({}), {});
  ASSERT_TRUE(q);
  EXPECT_EQ(q->leader, 1);
  EXPECT_EQ(q->leader_epoch, 7);
  // Unclean election: an out-of-ISR replica, which becomes the whole ISR.
  q = OnBrokerUnfenced(*p, AllBut({1}), {.unclean_leader_election = true});
  ASSERT_TRUE(q);
  EXPECT_EQ(q->leader, 2);
  EXPECT_EQ(q->isr, (std::vector<int32_t>{2}));
}

TEST(PartitionElection, AlterPartitionValidatesInKafkasOrder) {
  PartitionRegistration p = Record();
  auto req = [](int32_t broker, int32_t le, int32_t pe, std::vector<int32_t> isr) {
    return AlterPartitionRequest{broker, le, pe, std::move(isr)};
  };
  EXPECT_EQ(AlterPartition(p, req(1, 4, 9, {1, 2}), AllBut({})).error,
            ErrorCode::kFencedLeaderEpoch);
  EXPECT_EQ(AlterPartition(p, req(1, 6, 9, {1, 2}), AllBut({})).error, ErrorCode::kNotController);
  EXPECT_EQ(AlterPartition(p, req(2, 5, 9, {1, 2}), AllBut({})).error, ErrorCode::kInvalidRequest);
  EXPECT_EQ(AlterPartition(p, req(1, 5, 8, {1, 2}), AllBut({})).error,
            ErrorCode::kInvalidUpdateVersion);
  EXPECT_EQ(AlterPartition(p, req(1, 5, 9, {1, 4}), AllBut({})).error, ErrorCode::kInvalidRequest);
  EXPECT_EQ(AlterPartition(p, req(1, 5, 9, {1, 1}), AllBut({})).error, ErrorCode::kInvalidRequest);
  EXPECT_EQ(AlterPartition(p, req(1, 5, 9, {2, 3}), AllBut({})).error, ErrorCode::kInvalidRequest);
  EXPECT_EQ(AlterPartition(p, req(1, 5, 9, {1, 3}), AllBut({3})).error,
            ErrorCode::kIneligibleReplica);
  AlterPartitionResult ok = AlterPartition(p, req(1, 5, 9, {3, 1}), AllBut({}));
  EXPECT_EQ(ok.error, ErrorCode::kNone);
  EXPECT_EQ(ok.partition.isr, (std::vector<int32_t>{1, 3}));  // replica order
  EXPECT_EQ(ok.partition.partition_epoch, 10);
  EXPECT_EQ(ok.partition.leader_epoch, 5);
  // The same ISR again: the current record, unchanged.
  AlterPartitionResult same = AlterPartition(p, req(1, 5, 9, {1, 2, 3}), AllBut({}));
  EXPECT_EQ(same.error, ErrorCode::kNone);
  EXPECT_EQ(same.partition, p);
}

}  // namespace
}  // namespace runnel::storaged::replication
