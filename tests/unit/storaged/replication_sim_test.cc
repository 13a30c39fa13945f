// The deterministic replication simulator (storaged/replication/sim/): thousands of seeds for
// 3 and 5 replicas, determinism, exact replay of one seed from the environment, and planted
// wrong rules the invariants must catch (so they cannot pass vacuously).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "storaged/replication/sim/simulation.h"

namespace runnel::storaged::replication::sim {
namespace {

// Events per seed: sized so the shards together stay near a minute in the sanitized Debug
// build on one core of the shared machine.
constexpr int64_t kSteps = 1000;
constexpr int kMaxReportedFailures = 3;

SimConfig Config(int replicas, uint64_t seed) {
  SimConfig config;
  config.seed = seed;
  config.replicas = replicas;
  config.min_insync_replicas = 2;
  config.steps = kSteps;
  return config;
}

void RunSeeds(int replicas, uint64_t first, uint64_t last) {
  int failures = 0;
  for (uint64_t seed = first; seed <= last && failures < kMaxReportedFailures; ++seed) {
    SimResult result = RunSimulation(Config(replicas, seed));
    if (!result.ok) {
      ++failures;
      ADD_FAILURE() << result.report;
    }
  }
}

TEST(ReplicationSimThreeReplicas, Seeds1To1000) { RunSeeds(3, 1, 1000); }
TEST(ReplicationSimThreeReplicas, Seeds1001To2000) { RunSeeds(3, 1001, 2000); }
TEST(ReplicationSimFiveReplicas, Seeds1To1000) { RunSeeds(5, 1, 1000); }
TEST(ReplicationSimFiveReplicas, Seeds1001To2000) { RunSeeds(5, 1001, 2000); }

TEST(ReplicationSim, RunsDoRealWork) {
  // Guards against a simulator that passes because nothing happens.
  SimStats total;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SimResult result = RunSimulation(Config(seed % 2 == 0 ? 3 : 5, seed));
    ASSERT_TRUE(result.ok) << result.report;
    total.acked += result.stats.acked;
    total.consumed += result.stats.consumed;
    total.leaders += result.stats.leaders;
    total.crashes += result.stats.crashes;
    total.partitions += result.stats.partitions;
    total.truncations += result.stats.truncations;
    total.isr_changes += result.stats.isr_changes;
    total.not_enough_replicas += result.stats.not_enough_replicas;
    total.dropped += result.stats.dropped;
  }
  EXPECT_GT(total.acked, 20 * 20);
  EXPECT_GT(total.consumed, 20 * 20);
  EXPECT_GT(total.leaders, 20 * 2);
  EXPECT_GT(total.crashes, 20);
  EXPECT_GT(total.partitions, 10);
  EXPECT_GT(total.truncations, 10);
  EXPECT_GT(total.isr_changes, 20);
  EXPECT_GT(total.not_enough_replicas, 0);
  EXPECT_GT(total.dropped, 100);
}

TEST(ReplicationSim, SameSeedSameTrace) {
  for (int replicas : {3, 5}) {
    SimConfig config = Config(replicas, 4242 + static_cast<uint64_t>(replicas));
    config.keep_trace = true;
    SimResult a = RunSimulation(config);
    SimResult b = RunSimulation(config);
    ASSERT_TRUE(a.ok) << a.report;
    ASSERT_GT(a.trace.size(), 100u);
    EXPECT_EQ(a.trace, b.trace);
    EXPECT_EQ(a.trace_hash, b.trace_hash);
    // And the hash tells runs apart (else equal hashes above would prove nothing).
    config.seed += 1000;
    SimResult c = RunSimulation(config);
    EXPECT_NE(a.trace_hash, c.trace_hash);
  }
}

// A failing seed's report names this: RUNNEL_REPLICATION_SIM_SEED (and _REPLICAS, _STEPS)
// replay that seed exactly, printing its whole trace. Without them it replays seed 7 twice
// and checks that both runs agree.
TEST(ReplicationSim, ReplayFromEnvironment) {
  auto env = [](const char* name, uint64_t fallback) {
    const char* v = std::getenv(name);
    return v ? std::strtoull(v, nullptr, 10) : fallback;
  };
  SimConfig config = Config(static_cast<int>(env("RUNNEL_REPLICATION_SIM_REPLICAS", 3)),
                            env("RUNNEL_REPLICATION_SIM_SEED", 7));
  config.steps = static_cast<int64_t>(env("RUNNEL_REPLICATION_SIM_STEPS", kSteps));
  bool replaying = std::getenv("RUNNEL_REPLICATION_SIM_SEED") != nullptr;
  if (replaying) config.trace_sink = [](const std::string& line) { std::puts(line.c_str()); };
  SimResult a = RunSimulation(config);
  EXPECT_TRUE(a.ok) << a.report;
  config.trace_sink = nullptr;
  SimResult b = RunSimulation(config);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.ok, b.ok);
}

TEST(ReplicationSim, ReplayCommandNamesSeed) {
  SimConfig config = Config(5, 77);
  std::string cmd = ReplayCommand(config);
  EXPECT_NE(cmd.find("RUNNEL_REPLICATION_SIM_SEED=77"), std::string::npos) << cmd;
  EXPECT_NE(cmd.find("RUNNEL_REPLICATION_SIM_REPLICAS=5"), std::string::npos) << cmd;
}

// Each planted wrong rule must break an invariant within the first seeds.
void ExpectCaught(Plant plant, int replicas, const std::string& what_breaks) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SimConfig config = Config(replicas, seed);
    config.plant = plant;
    SimResult result = RunSimulation(config);
    if (!result.ok) {
      EXPECT_NE(result.report.find(what_breaks), std::string::npos) << result.report;
      return;
    }
  }
  ADD_FAILURE() << "the planted rule was not caught in 300 seeds";
}

TEST(ReplicationSimPlanted, HighWatermarkAtTheLeadersLogEndIsCaught) {
  ExpectCaught(Plant::kHighWatermarkIsLogEnd, 3, "committed");
}

TEST(ReplicationSimPlanted, ElectingOutsideTheIsrIsCaught) {
  ExpectCaught(Plant::kElectOutsideIsr, 3, "committed");
}

TEST(ReplicationSimPlanted, FetchingWithoutTheLastEpochIsCaught) {
  ExpectCaught(Plant::kNoDivergenceCheck, 3, "committed");
}

TEST(ReplicationSimPlanted, AckingBeforeReplicationIsCaught) {
  ExpectCaught(Plant::kAckBeforeReplicated, 5, "committed");
}

}  // namespace
}  // namespace runnel::storaged::replication::sim
