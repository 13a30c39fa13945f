// LeaderState: follower fetch answers, catch-up times, the high watermark over the maximal
// ISR, ISR proposals and the controller's answers, acks=all and min.insync.replicas.
#include "storaged/replication/leader_state.h"

#include <gtest/gtest.h>

namespace runnel::storaged::replication {
namespace {

using protocol::ErrorCode;
using Entries = std::vector<EpochEntry>;

constexpr int64_t kLag = 1000;

PartitionRegistration Record(std::vector<int32_t> isr) {
  PartitionRegistration p;
  p.replicas = {1, 2, 3};
  p.isr = std::move(isr);
  p.leader = 1;
  p.leader_epoch = 4;
  p.partition_epoch = 10;
  return p;
}

LeaderState Leader(std::vector<int32_t> isr, int64_t end = 100, int64_t hw = 80,
                   int32_t min_isr = 2) {
  return LeaderState(1, Record(std::move(isr)), end, end, hw, 0, {kLag, min_isr});
}

FollowerFetch Fetch(int32_t replica, int64_t offset, int32_t last_epoch = 4, int32_t current = 4) {
  return FollowerFetch{replica, current, offset, last_epoch};
}

// The leader's epochs: 2 from 0, 4 from 100 (where this leader started).
const EpochHistory kEpochs(Entries{{2, 0}, {4, 100}});

TEST(LeaderState, NewLeaderWaitsForEveryIsrMemberToFetch) {
  LeaderState l = Leader({1, 2, 3});
  EXPECT_EQ(l.high_watermark(), 80);
  EXPECT_EQ(l.epoch_start_offset(), 100);
  l.OnFollowerFetch(Fetch(2, 100), kEpochs, 0, 1);
  EXPECT_EQ(l.high_watermark(), 80);  // 3 has not fetched in this epoch
  l.OnFollowerFetch(Fetch(3, 90, 2), kEpochs, 0, 1);
  EXPECT_EQ(l.high_watermark(), 90);
  l.OnFollowerFetch(Fetch(3, 100, 2), kEpochs, 0, 2);
  EXPECT_EQ(l.high_watermark(), 100);
}

TEST(LeaderState, AloneInTheIsrTheHighWatermarkIsTheDurableEnd) {
  LeaderState l(1, Record({1}), 100, 95, 80, 0, {kLag, 1});
  EXPECT_EQ(l.high_watermark(), 95);
  EXPECT_TRUE(l.OnLocalEnd(120, 120, 5));
  EXPECT_EQ(l.high_watermark(), 120);
}

TEST(LeaderState, HighWatermarkNeverMovesBack) {
  LeaderState l = Leader({1, 2});
  l.OnFollowerFetch(Fetch(2, 100), kEpochs, 0, 1);
  EXPECT_EQ(l.high_watermark(), 100);
  // A record whose ISR adds a replica that is behind: the HW stays.
  PartitionRegistration p = Record({1, 2, 3});
  p.partition_epoch = 11;
  EXPECT_EQ(l.OnPartitionRecord(p, 2), LeaderState::RecordUpdate::kApplied);
  EXPECT_EQ(l.high_watermark(), 100);
}

TEST(LeaderState, FetchErrorsAndDivergence) {
  LeaderState l = Leader({1, 2, 3});
  EXPECT_EQ(l.OnFollowerFetch(Fetch(2, 100, 4, 3), kEpochs, 0, 1).error,
            ErrorCode::kFencedLeaderEpoch);
  EXPECT_EQ(l.OnFollowerFetch(Fetch(2, 100, 4, 5), kEpochs, 0, 1).error,
            ErrorCode::kUnknownLeaderEpoch);
  EXPECT_EQ(l.OnFollowerFetch(Fetch(9, 100), kEpochs, 0, 1).error, ErrorCode::kNotLeaderOrFollower);
  EXPECT_EQ(l.OnFollowerFetch(Fetch(2, 101, -1), kEpochs, 0, 1).error,
            ErrorCode::kOffsetOutOfRange);
  EXPECT_EQ(l.OnFollowerFetch(Fetch(2, 5), kEpochs, 10, 1).error, ErrorCode::kOffsetOutOfRange);
  // Epoch 3 is unknown to us: it diverges at the end of our epoch 2.
  FetchAnswer a = l.OnFollowerFetch(Fetch(2, 104, 3), kEpochs, 0, 1);
  EXPECT_EQ(a.error, ErrorCode::kNone);
  EXPECT_FALSE(a.serve_records);
  EXPECT_EQ(a.diverging_epoch, (EpochEndOffset{2, 100}));
  // Epoch 2 known, but the follower is past its end.
  a = l.OnFollowerFetch(Fetch(3, 102, 2), kEpochs, 0, 1);
  EXPECT_EQ(a.diverging_epoch, (EpochEndOffset{2, 100}));
  // A diverging fetch does not count as the follower's log end.
  EXPECT_EQ(l.follower(2)->log_end_offset, -1);
  a = l.OnFollowerFetch(Fetch(2, 97, 2), kEpochs, 0, 1);
  EXPECT_TRUE(a.serve_records);
  EXPECT_FALSE(a.diverging_epoch);
  EXPECT_EQ(l.follower(2)->log_end_offset, 97);
}

TEST(LeaderState, AReplicaReassignedAwayIsNoLongerAFollower) {
  LeaderState l = Leader({1, 2, 3});
  PartitionRegistration p = Record({1, 2});
  p.replicas = {1, 2};
  p.partition_epoch = 11;
  EXPECT_EQ(l.OnPartitionRecord(p, 1), LeaderState::RecordUpdate::kApplied);
  EXPECT_EQ(l.follower(3), nullptr);
  EXPECT_EQ(l.OnFollowerFetch(Fetch(3, 100), kEpochs, 0, 2).error, ErrorCode::kNotLeaderOrFollower);
  l.OnFollowerFetch(Fetch(2, 100), kEpochs, 0, 3);
  EXPECT_EQ(l.high_watermark(), 100);
}

TEST(LeaderState, LastCaughtUpTimeFollowsKafkasRule) {
  LeaderState l = Leader({1, 2});
  l.OnFollowerFetch(Fetch(2, 100), kEpochs, 0, 10);  // at our end: caught up at 10
  EXPECT_EQ(l.follower(2)->last_caught_up_time_ms, 10);
  l.OnLocalEnd(110, 110, 20);
  l.OnFollowerFetch(Fetch(2, 105), kEpochs, 0, 30);      // past our end of the last fetch (100)
  EXPECT_EQ(l.follower(2)->last_caught_up_time_ms, 10);  // as of that fetch, at 10
  l.OnFollowerFetch(Fetch(2, 108), kEpochs, 0, 40);      // reached 110? no: 108 < 110 of last time
  EXPECT_EQ(l.follower(2)->last_caught_up_time_ms, 10);
  l.OnFollowerFetch(Fetch(2, 110), kEpochs, 0, 50);
  EXPECT_EQ(l.follower(2)->last_caught_up_time_ms, 50);
}

TEST(LeaderState, ShrinkIsAProposalUntilTheControllerAnswers) {
  LeaderState l = Leader({1, 2, 3});
  l.OnFollowerFetch(Fetch(2, 100), kEpochs, 0, 10);
  EXPECT_FALSE(l.MaybeShrinkIsr(500));
  std::optional<IsrProposal> p = l.MaybeShrinkIsr(kLag + 1);  // 3 never fetched
  ASSERT_TRUE(p);
  EXPECT_EQ(p->new_isr, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(p->partition_epoch, 10);
  EXPECT_EQ(p->leader_epoch, 4);
  // Pending: the ISR and the HW still count 3; no second proposal.
  EXPECT_EQ(l.isr(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(l.high_watermark(), 80);
  EXPECT_FALSE(l.MaybeShrinkIsr(kLag + 2));
  PartitionRegistration r = Record({1, 2});
  r.partition_epoch = 11;
  EXPECT_EQ(l.OnPartitionRecord(r, kLag + 3), LeaderState::RecordUpdate::kApplied);
  EXPECT_FALSE(l.pending());
  EXPECT_EQ(l.high_watermark(), 100);
  EXPECT_EQ(l.OnPartitionRecord(r, kLag + 4), LeaderState::RecordUpdate::kStale);
  r.leader_epoch = 5;
  r.leader = 2;
  EXPECT_EQ(l.OnPartitionRecord(r, kLag + 5), LeaderState::RecordUpdate::kResigned);
}

TEST(LeaderState, ExpandNeedsTheHighWatermarkAndTheEpochStart) {
  LeaderState l = Leader({1, 2}, 100, 80);
  l.OnFollowerFetch(Fetch(2, 100), kEpochs, 0, 1);  // HW -> 100
  FetchAnswer a = l.OnFollowerFetch(Fetch(3, 90, 2), kEpochs, 0, 2);
  EXPECT_FALSE(a.proposal);  // below the HW and this epoch's start
  a = l.OnFollowerFetch(Fetch(3, 100, 2), kEpochs, 0, 3);
  ASSERT_TRUE(a.proposal);
  EXPECT_EQ(a.proposal->new_isr, (std::vector<int32_t>{1, 2, 3}));
  // While in flight the maximal ISR counts 3.
  EXPECT_EQ(l.MaximalIsr().size(), 3u);
  l.OnLocalEnd(110, 110, 4);
  l.OnFollowerFetch(Fetch(2, 110), kEpochs, 0, 5);
  EXPECT_EQ(l.high_watermark(), 100);  // 3 is at 100
  // Refused as stale: kept (the controller may have applied an earlier send).
  l.OnAlterPartitionError(ErrorCode::kInvalidUpdateVersion, *a.proposal);
  EXPECT_TRUE(l.pending());
  // Refused as ineligible: dropped.
  l.OnAlterPartitionError(ErrorCode::kIneligibleReplica, *a.proposal);
  EXPECT_FALSE(l.pending());
}

TEST(LeaderState, AcksAllAndMinInsyncReplicas) {
  LeaderState l = Leader({1, 2}, 100, 80, 2);
  EXPECT_EQ(l.CheckAppend(true), ErrorCode::kNone);
  l.OnLocalEnd(101, 101, 1);
  EXPECT_FALSE(l.CheckAcksAll(100).done);
  l.OnFollowerFetch(Fetch(2, 101), kEpochs, 0, 2);
  LeaderState::AckCheck ack = l.CheckAcksAll(100);
  EXPECT_TRUE(ack.done);
  EXPECT_EQ(ack.error, ErrorCode::kNone);
  // The ISR shrank to the leader alone.
  l.OnLocalEnd(102, 102, 3);
  PartitionRegistration r = Record({1});
  r.partition_epoch = 11;
  l.OnPartitionRecord(r, 4);
  // 2 is still caught up, so (Kafka) the HW waits for it until it lags.
  EXPECT_FALSE(l.CheckAcksAll(101).done);
  l.OnLocalEnd(102, 102, 4 + kLag + 1);
  EXPECT_EQ(l.CheckAppend(true), ErrorCode::kNotEnoughReplicas);
  EXPECT_EQ(l.CheckAppend(false), ErrorCode::kNone);
  ack = l.CheckAcksAll(101);
  EXPECT_TRUE(ack.done);
  EXPECT_EQ(ack.error, ErrorCode::kNotEnoughReplicasAfterAppend);
}

}  // namespace
}  // namespace runnel::storaged::replication
