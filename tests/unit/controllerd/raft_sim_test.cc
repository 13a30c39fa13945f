// The deterministic Raft simulator (controllerd/raft/sim/): thousands of seeds for 3 and 5
// voters, determinism, and planted bugs the checks must catch (so they cannot pass vacuously).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "controllerd/raft/sim/checker.h"
#include "controllerd/raft/sim/mem_storage.h"
#include "controllerd/raft/sim/simulation.h"

namespace runnel::controllerd::raft::sim {
namespace {

// Steps of the fault phase per seed: sized so all shards together take a few minutes in the
// sanitized Debug build on two cores.
constexpr int64_t kFaultSteps = 1200;
constexpr uint64_t kSeedsPerShard = 500;
constexpr int kMaxReportedFailures = 3;

void RunSeeds(int voters, uint64_t first, uint64_t last) {
  int failures = 0;
  for (uint64_t seed = first; seed <= last && failures < kMaxReportedFailures; ++seed) {
    SimConfig config;
    config.seed = seed;
    config.voters = voters;
    config.fault_steps = kFaultSteps;
    SimResult result = RunSimulation(config);
    if (!result.ok) {
      ++failures;
      ADD_FAILURE() << result.report;
    }
  }
}

TEST(RaftSimThreeVoters, Seeds1To500) { RunSeeds(3, 1, kSeedsPerShard); }
TEST(RaftSimThreeVoters, Seeds501To1000) { RunSeeds(3, 501, 2 * kSeedsPerShard); }
TEST(RaftSimThreeVoters, Seeds1001To1500) { RunSeeds(3, 1001, 3 * kSeedsPerShard); }
TEST(RaftSimThreeVoters, Seeds1501To2000) { RunSeeds(3, 1501, 4 * kSeedsPerShard); }
TEST(RaftSimFiveVoters, Seeds1To500) { RunSeeds(5, 1, kSeedsPerShard); }
TEST(RaftSimFiveVoters, Seeds501To1000) { RunSeeds(5, 501, 2 * kSeedsPerShard); }
TEST(RaftSimFiveVoters, Seeds1001To1500) { RunSeeds(5, 1001, 3 * kSeedsPerShard); }
TEST(RaftSimFiveVoters, Seeds1501To2000) { RunSeeds(5, 1501, 4 * kSeedsPerShard); }

TEST(RaftSim, SingleVoterElectsItselfAndCommits) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SimConfig config;
    config.seed = seed;
    config.voters = 1;
    config.observers = 0;
    config.fault_steps = 300;
    SimResult result = RunSimulation(config);
    ASSERT_TRUE(result.ok) << result.report;
    EXPECT_GT(result.stats.committed, 0) << "seed " << seed;
  }
}

TEST(RaftSim, RunsDoRealWork) {
  // Guards against a simulator that passes because nothing happens.
  SimStats total;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SimConfig config;
    config.seed = seed;
    config.voters = seed % 2 == 0 ? 3 : 5;
    config.fault_steps = kFaultSteps;
    SimResult result = RunSimulation(config);
    ASSERT_TRUE(result.ok) << result.report;
    total.committed += result.stats.committed;
    total.leaders += result.stats.leaders;
    total.crashes += result.stats.crashes;
    total.partitions += result.stats.partitions;
    total.snapshots_saved += result.stats.snapshots_saved;
    total.reads_ok += result.stats.reads_ok;
    total.dropped += result.stats.dropped;
  }
  EXPECT_GT(total.committed, 20 * 20);
  EXPECT_GT(total.leaders, 20);
  EXPECT_GT(total.crashes, 10);
  EXPECT_GT(total.partitions, 10);
  EXPECT_GT(total.snapshots_saved, 20);
  EXPECT_GT(total.reads_ok, 20);
  EXPECT_GT(total.dropped, 100);
}

TEST(RaftSim, SameSeedSameTrace) {
  for (int voters : {3, 5}) {
    SimConfig config;
    config.seed = 4242 + voters;
    config.voters = voters;
    config.fault_steps = 600;
    config.keep_trace = true;
    SimResult a = RunSimulation(config);
    SimResult b = RunSimulation(config);
    ASSERT_TRUE(a.ok) << a.report;
    ASSERT_GT(a.trace.size(), 600u);
    EXPECT_EQ(a.trace, b.trace);
    EXPECT_EQ(a.trace_hash, b.trace_hash);
    EXPECT_EQ(a.stats.steps, b.stats.steps);
    // And the hash tells runs apart (else equal hashes above would prove nothing).
    config.seed += 1000;
    SimResult c = RunSimulation(config);
    EXPECT_NE(a.trace_hash, c.trace_hash);
    EXPECT_NE(a.trace, c.trace);
  }
}

TEST(RaftSim, ReplayCommandNamesSeedAndNodes) {
  SimConfig config;
  config.seed = 77;
  config.voters = 5;
  config.fault_steps = 900;
  EXPECT_EQ(ReplayCommand(config), "runnel-raft-soak --nodes 5 --seed 77 --steps 900 --trace");
}

TEST(RaftSim, LivenessBoundAllowsForTheBacklogToSend) {
  // Seed 11399 ends its fault phase with a minority leader's ~400 uncommitted entries, which
  // win the election after healing; with 8-byte appends and one in flight, the followers
  // need ~1.6 s (13 election timeouts) to receive them. A bound of election timeouts alone
  // failed this run; the catch-up part of the bound must cover it, and scale with the work
  // (seed 1 heals with little to send).
  SimConfig config;
  config.seed = 11399;
  config.voters = 3;
  config.fault_steps = 5000;
  SimResult result = RunSimulation(config);
  ASSERT_TRUE(result.ok) << result.report;
  const SimStats& st = result.stats;
  const int64_t elections_ms = st.liveness_bound_ms - st.catch_up_round_trips * 10;
  EXPECT_GT(st.catch_up_round_trips, 200);
  EXPECT_GT(st.liveness_ms, elections_ms);
  EXPECT_LE(st.liveness_ms, st.liveness_bound_ms);

  config.seed = 1;
  config.fault_steps = kFaultSteps;
  SimResult small = RunSimulation(config);
  ASSERT_TRUE(small.ok) << small.report;
  EXPECT_LT(small.stats.catch_up_round_trips * 4, st.catch_up_round_trips);
}

// Runs seeds with a planted bug; returns the violations found (the bug must be caught).
std::vector<std::string> PlantedViolations(const SimConfig& base, int seeds) {
  std::vector<std::string> found;
  for (int seed = 1; seed <= seeds; ++seed) {
    SimConfig config = base;
    config.seed = static_cast<uint64_t>(seed);
    SimResult result = RunSimulation(config);
    if (!result.ok) found.push_back(result.violation);
  }
  return found;
}

bool AnyContains(const std::vector<std::string>& found, const std::vector<std::string>& needles) {
  for (const std::string& f : found) {
    for (const std::string& n : needles) {
      if (f.find(n) != std::string::npos) return true;
    }
  }
  return false;
}

TEST(RaftSimPlanted, StorageThatForgetsASyncedEntryIsCaught) {
  SimConfig config;
  config.voters = 3;
  config.fault_steps = kFaultSteps;
  config.bugs.forget_synced_entry = true;
  std::vector<std::string> found = PlantedViolations(config, 30);
  EXPECT_GE(found.size(), 10u);
  EXPECT_TRUE(AnyContains(found, {"is durable on only"})) << testing::PrintToString(found);
}

TEST(RaftSimPlanted, StorageThatForgetsTheVoteIsCaught) {
  // With pre-vote, a forgotten vote rarely meets a second candidate of the same term in a run,
  // so this plays the dangerous sequence directly: the checker's own record of votes catches
  // what the storage forgot.
  std::mt19937_64 rng(1);
  Checker checker({1, 2, 3});
  StorageBugs bugs;
  bugs.forget_vote = true;
  MemStorage storage(1, &checker, bugs);
  ASSERT_TRUE(storage.SetHardState({4, 2}).ok());
  storage.Crash(CrashMode::kKeepUnsynced, rng);
  EXPECT_EQ(storage.hard_state(), (HardState{4, kNoNode}));
  EXPECT_FALSE(checker.failed());
  ASSERT_TRUE(storage.SetHardState({4, 3}).ok());
  ASSERT_TRUE(checker.failed());
  EXPECT_NE(checker.failure().find("voted twice in term 4"), std::string::npos);
}

TEST(RaftSimPlanted, SyncThatDoesNothingIsCaught) {
  SimConfig config;
  config.voters = 5;
  config.fault_steps = kFaultSteps;
  config.bugs.sync_does_nothing = true;
  std::vector<std::string> found = PlantedViolations(config, 10);
  EXPECT_EQ(found.size(), 10u);
  EXPECT_TRUE(AnyContains(found, {"before syncing it", "is durable on only"}))
      << testing::PrintToString(found);
}

TEST(RaftSimPlanted, GrantingEveryVoteMakesTwoLeadersInATerm) {
  SimConfig config;
  config.voters = 5;
  config.fault_steps = kFaultSteps;
  config.plant = Plant::kGrantEveryVote;
  // It takes two candidates in one term, which pre-vote makes rare: about a quarter of runs.
  std::vector<std::string> found = PlantedViolations(config, 30);
  EXPECT_GE(found.size(), 3u);
  EXPECT_TRUE(AnyContains(found, {"two leaders in term"})) << testing::PrintToString(found);
}

TEST(RaftSimPlanted, ReadsWithoutReadIndexAreStale) {
  SimConfig config;
  config.voters = 5;
  config.fault_steps = kFaultSteps;
  config.plant = Plant::kReadLocalCommit;
  std::vector<std::string> found = PlantedViolations(config, 20);
  EXPECT_GE(found.size(), 5u);
  EXPECT_TRUE(AnyContains(found, {"stale read"})) << testing::PrintToString(found);
}

TEST(RaftSimPlanted, CorruptedEntriesBreakLogMatching) {
  SimConfig config;
  config.voters = 3;
  config.fault_steps = kFaultSteps;
  config.plant = Plant::kCorruptEntries;
  std::vector<std::string> found = PlantedViolations(config, 10);
  EXPECT_GE(found.size(), 5u);
  EXPECT_TRUE(AnyContains(found, {"log matching"})) << testing::PrintToString(found);
}

TEST(RaftSimPlanted, CorruptedSnapshotsDifferFromTheReplay) {
  SimConfig config;
  config.voters = 5;
  config.fault_steps = kFaultSteps;
  config.plant = Plant::kCorruptSnapshots;
  std::vector<std::string> found = PlantedViolations(config, 20);
  EXPECT_GE(found.size(), 5u);
  EXPECT_TRUE(AnyContains(found, {"differs from the replay", "does not parse", "holds the state"}))
      << testing::PrintToString(found);
}

TEST(RaftSimPlanted, ANodeThatStopsCatchingUpMissesTheLivenessBound) {
  // The observer (the last node) gets no Append or Snapshot after healing, so it never
  // applies the heal proposal: the bound, however much catch-up it allows for, must end.
  SimConfig config;
  config.voters = 3;
  config.observers = 1;
  config.fault_steps = kFaultSteps;
  config.plant = Plant::kStarveAfterHeal;
  std::vector<std::string> found = PlantedViolations(config, 10);
  EXPECT_EQ(found.size(), 10u);
  for (const std::string& f : found) {
    EXPECT_NE(f.find("liveness: "), std::string::npos) << f;
    EXPECT_NE(f.find(" n4:"), std::string::npos) << f;
  }
}

// --- The checker on its own ---

Entry E(int64_t offset, int64_t term, std::string data) { return Entry{offset, term, data}; }

TEST(RaftSimChecker, CommittedSequenceCatchesChangeGapAndDuplicates) {
  Checker c({1, 2, 3});
  c.Proposed("a");
  c.Proposed("b");
  c.Committed(1, E(0, 1, ""), "applied");
  c.Committed(2, E(1, 1, "a"), "applied");
  c.Committed(3, E(1, 1, "a"), "applied");
  EXPECT_FALSE(c.failed());
  EXPECT_EQ(c.committed_end(), 2);
  EXPECT_EQ(c.OffsetOfPayload("a"), 1);

  Checker changed = c;
  changed.Committed(2, E(1, 2, "a"), "applied");
  ASSERT_TRUE(changed.failed());
  EXPECT_NE(changed.failure().find("committed entry changed"), std::string::npos);

  Checker gap = c;
  gap.Committed(2, E(3, 1, "b"), "applied");
  EXPECT_TRUE(gap.failed());

  Checker twice = c;
  twice.Committed(2, E(2, 1, "a"), "applied");
  ASSERT_TRUE(twice.failed());
  EXPECT_NE(twice.failure().find("committed twice"), std::string::npos);

  Checker invented = c;
  invented.Committed(2, E(2, 1, "zzz"), "applied");
  EXPECT_TRUE(invented.failed());

  Checker term_back = c;
  term_back.Committed(2, E(2, 0, "b"), "applied");
  EXPECT_TRUE(term_back.failed());
}

TEST(RaftSimChecker, OneLeaderPerTermAndNoObserverLeaders) {
  Checker c({1, 2, 3});
  c.Leader(1, 1);
  c.Leader(2, 2);
  c.Leader(1, 1);
  EXPECT_FALSE(c.failed());
  c.Leader(3, 2);
  ASSERT_TRUE(c.failed());
  EXPECT_NE(c.failure().find("two leaders in term 2"), std::string::npos);

  Checker o({1, 2, 3});
  o.Leader(4, 7);
  EXPECT_TRUE(o.failed());
}

TEST(RaftSimChecker, LogMatching) {
  Checker c({1, 2, 3});
  c.Appended(1, E(0, 1, "a"), 0);
  c.Appended(2, E(0, 1, "a"), 0);
  c.Appended(1, E(1, 2, "b"), 1);
  EXPECT_FALSE(c.failed());
  Checker data = c;
  data.Appended(3, E(1, 2, "x"), 1);
  EXPECT_TRUE(data.failed());
  Checker prev = c;
  prev.Appended(3, E(1, 2, "b"), 0);
  EXPECT_TRUE(prev.failed());
  Checker down = c;
  down.Appended(3, E(2, 1, "c"), 2);
  EXPECT_TRUE(down.failed());
}

TEST(RaftSimChecker, TermsAndVotes) {
  Checker c({1, 2, 3});
  c.HardStateStored(1, {0, kNoNode}, {1, kNoNode});
  c.HardStateStored(1, {1, kNoNode}, {1, 2});
  c.HardStateStored(1, {1, 2}, {2, 3});
  EXPECT_FALSE(c.failed());

  Checker back = c;
  back.HardStateStored(1, {2, 3}, {1, 3});
  EXPECT_TRUE(back.failed());

  Checker change = c;
  change.HardStateStored(1, {2, 3}, {2, 1});
  EXPECT_TRUE(change.failed());

  // A storage that forgot the vote across a crash: the checker remembers it.
  Checker forgot = c;
  forgot.HardStateStored(1, {2, kNoNode}, {2, 1});
  ASSERT_TRUE(forgot.failed());
  EXPECT_NE(forgot.failure().find("voted twice in term 2"), std::string::npos);

  Checker lost_term = c;
  lost_term.HardStateStored(1, {0, kNoNode}, {1, kNoNode});
  EXPECT_TRUE(lost_term.failed());

  Checker observer = c;
  observer.HardStateStored(4, {0, kNoNode}, {1, 2});
  EXPECT_TRUE(observer.failed());
}

TEST(RaftSimChecker, SnapshotMustEqualReplay) {
  Checker c({1, 2, 3});
  c.Proposed("a");
  c.Proposed("b");
  SmState sm;
  for (const Entry& e : {E(0, 1, ""), E(1, 1, "a"), E(2, 2, "b")}) {
    c.Committed(1, e, "applied");
    sm.Apply(e);
  }
  ASSERT_FALSE(c.failed());
  auto decoded = DecodeSnapshot(EncodeSnapshot(sm));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, sm);
  c.CheckSnapshot(1, {3, 2}, EncodeSnapshot(sm), "test");
  EXPECT_FALSE(c.failed()) << c.failure();

  Checker epoch = c;
  epoch.CheckSnapshot(1, {3, 1}, EncodeSnapshot(sm), "test");
  EXPECT_TRUE(epoch.failed());

  Checker end = c;
  end.CheckSnapshot(1, {2, 1}, EncodeSnapshot(sm), "test");
  EXPECT_TRUE(end.failed());

  SmState wrong = sm;
  wrong.hash ^= 1;
  Checker hash = c;
  hash.CheckSnapshot(1, {3, 2}, EncodeSnapshot(wrong), "test");
  ASSERT_TRUE(hash.failed());
  EXPECT_NE(hash.failure().find("differs from the replay"), std::string::npos);

  SmState ahead;
  for (int64_t i = 0; i < 5; ++i) ahead.Apply(E(i, 1, ""));
  Checker beyond = c;
  beyond.CheckSnapshot(1, {5, 1}, EncodeSnapshot(ahead), "test");
  EXPECT_TRUE(beyond.failed());

  Checker garbage = c;
  garbage.CheckSnapshot(1, {3, 2}, "not a snapshot", "test");
  EXPECT_TRUE(garbage.failed());
}

TEST(RaftSimChecker, DurableQuorum) {
  Checker c({1, 2, 3, 4, 5});
  for (int64_t i = 0; i < 4; ++i) c.Committed(1, E(i, 1, ""), "applied");
  c.CheckDurableQuorum({4, 4, 4, 0, 0});
  EXPECT_FALSE(c.failed());
  c.CheckDurableQuorum({4, 4, 3, 9, 0});
  EXPECT_FALSE(c.failed());
  c.CheckDurableQuorum({4, 4, 3, 3, 0});
  ASSERT_TRUE(c.failed());
  EXPECT_NE(c.failure().find("committed offset 3"), std::string::npos);
}

// --- MemStorage ---

std::vector<Entry> Entries(int64_t from, int64_t to, int64_t term) {
  std::vector<Entry> out;
  for (int64_t o = from; o < to; ++o) out.push_back(E(o, term, ""));
  return out;
}

TEST(RaftSimMemStorage, CrashModes) {
  std::mt19937_64 rng(1);
  for (CrashMode mode : {CrashMode::kKeepUnsynced, CrashMode::kLoseUnsynced}) {
    MemStorage s(1, nullptr);
    ASSERT_TRUE(s.Append(Entries(0, 3, 1)).ok());
    ASSERT_TRUE(s.Sync().ok());
    ASSERT_TRUE(s.TruncateFrom(2).ok());
    ASSERT_TRUE(s.Append(Entries(2, 5, 2)).ok());
    EXPECT_EQ(s.unsynced_ops(), 2u);
    s.Crash(mode, rng);
    if (mode == CrashMode::kKeepUnsynced) {
      EXPECT_EQ(s.end_offset(), 5);
      EXPECT_EQ(*s.TermAt(4), 2);
    } else {
      EXPECT_EQ(s.end_offset(), 3);
      EXPECT_EQ(*s.TermAt(2), 1);
    }
  }
  // A torn crash keeps a prefix of the writes: some run must end between the two extremes.
  std::vector<int64_t> ends;
  for (int i = 0; i < 50; ++i) {
    MemStorage s(1, nullptr);
    ASSERT_TRUE(s.Append(Entries(0, 2, 1)).ok());
    ASSERT_TRUE(s.Sync().ok());
    ASSERT_TRUE(s.Append(Entries(2, 6, 1)).ok());
    ASSERT_TRUE(s.Append(Entries(6, 8, 1)).ok());
    s.Crash(CrashMode::kTorn, rng);
    ASSERT_GE(s.end_offset(), 2);
    ASSERT_LE(s.end_offset(), 8);
    ends.push_back(s.end_offset());
  }
  EXPECT_NE(std::find_if(ends.begin(), ends.end(), [](int64_t e) { return e > 2 && e < 8; }),
            ends.end());
}

TEST(RaftSimMemStorage, HardStateAndSnapshotsAreDurable) {
  std::mt19937_64 rng(1);
  Checker c({1});
  c.Proposed("x");
  SmState sm;
  for (int64_t o = 0; o < 4; ++o) {
    Entry e = E(o, 1, o == 2 ? "x" : "");
    c.Committed(1, e, "applied");
    sm.Apply(e);
  }
  MemStorage s(1, &c);
  ASSERT_TRUE(s.SetHardState({1, 1}).ok());
  ASSERT_TRUE(
      s.Append(std::vector<Entry>{E(0, 1, ""), E(1, 1, ""), E(2, 1, "x"), E(3, 1, "")}).ok());
  ASSERT_TRUE(s.SaveSnapshot({4, 1}, EncodeSnapshot(sm)).ok());
  EXPECT_EQ(s.start_offset(), 4);
  s.Crash(CrashMode::kLoseUnsynced, rng);  // nothing was synced: the snapshot is what remains
  EXPECT_FALSE(c.failed()) << c.failure();
  EXPECT_EQ(s.hard_state(), (HardState{1, 1}));
  EXPECT_EQ(s.snapshot_id(), (SnapshotId{4, 1}));
  EXPECT_EQ(s.start_offset(), 4);
  EXPECT_EQ(s.end_offset(), 4);
  EXPECT_EQ(*s.TermAt(3), 1);
  EXPECT_TRUE(s.DurablyHolds(E(2, 1, "x")));
}

TEST(RaftSimMemStorage, InstallSnapshotKeepsAMatchingSuffixOnly) {
  Checker c({1, 2});
  SmState sm;
  for (int64_t o = 0; o < 3; ++o) {
    c.Committed(1, E(o, 1, ""), "applied");
    sm.Apply(E(o, 1, ""));
  }
  MemStorage keep(2, &c);
  ASSERT_TRUE(keep.Append(Entries(0, 5, 1)).ok());
  ASSERT_TRUE(keep.InstallSnapshot({3, 1}, EncodeSnapshot(sm)).ok());
  EXPECT_EQ(keep.start_offset(), 3);
  EXPECT_EQ(keep.end_offset(), 5);

  MemStorage discard(2, &c);
  ASSERT_TRUE(discard.Append(Entries(0, 5, 2)).ok());
  ASSERT_TRUE(discard.InstallSnapshot({3, 1}, EncodeSnapshot(sm)).ok());
  EXPECT_EQ(discard.start_offset(), 3);
  EXPECT_EQ(discard.end_offset(), 3);
  EXPECT_FALSE(c.failed()) << c.failure();
}

TEST(RaftSimMemStorage, ContractViolationsAreReported) {
  Checker c({1});
  MemStorage s(1, &c);
  ASSERT_TRUE(s.Append(Entries(0, 3, 1)).ok());
  EXPECT_FALSE(s.TermAt(7).ok());
  EXPECT_TRUE(c.failed());

  Checker c2({1});
  MemStorage s2(1, &c2);
  ASSERT_TRUE(s2.Append(Entries(0, 3, 1)).ok());
  s2.set_commit_probe([] { return std::optional<int64_t>(1); });
  EXPECT_FALSE(s2.TruncateFrom(1).ok());
  ASSERT_TRUE(c2.failed());
  EXPECT_NE(c2.failure().find("commit offset"), std::string::npos);

  Checker c3({1});
  MemStorage s3(1, &c3);
  EXPECT_FALSE(s3.Append(Entries(1, 2, 1)).ok());
  EXPECT_TRUE(c3.failed());

  MemStorage s4(1, nullptr);
  s4.FailNextWrite();
  EXPECT_FALSE(s4.Append(Entries(0, 1, 1)).ok());
  EXPECT_EQ(s4.end_offset(), 0);
  EXPECT_TRUE(s4.Append(Entries(0, 1, 1)).ok());
}

}  // namespace
}  // namespace runnel::controllerd::raft::sim
