// runnel-raft-soak: runs the deterministic Raft simulator (controllerd/raft/sim/) over many
// seeds, or replays one seed exactly with its trace.
//
//   runnel-raft-soak --nodes 5 --seeds 100000 --from 1 --steps 5000
//   runnel-raft-soak --nodes 3 --seed 1234 --trace
//
// Prints seeds/s and every failing seed with its report; exits 1 if any seed failed.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "controllerd/raft/sim/simulation.h"

namespace {

using runnel::controllerd::raft::sim::RunSimulation;
using runnel::controllerd::raft::sim::SimConfig;
using runnel::controllerd::raft::sim::SimResult;

constexpr int kExitUsage = 2;

struct Flags {
  int nodes = 3;
  int observers = -1;
  uint64_t seeds = 1000;
  uint64_t from = 1;
  int64_t steps = 1500;
  bool trace = false;
  bool one_seed = false;
  uint64_t seed = 0;
  int max_failures = 10;
};

int Usage() {
  std::fputs(
      "usage: runnel-raft-soak [--nodes 1-7] [--observers 0-2 (default: the seed chooses)]\n"
      "                        [--seeds N] [--from S] [--steps K (fault-phase steps per seed)]\n"
      "                        [--max-failures F] [--seed N [--trace]]\n",
      stderr);
  return kExitUsage;
}

template <typename T>
bool ParseNumber(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

bool Parse(int argc, char** argv, Flags& flags) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string_view value;
    if (size_t eq = arg.find('='); eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (arg != "--trace" && i + 1 < argc) {
      value = argv[++i];
    }
    bool ok = true;
    if (arg == "--trace") {
      flags.trace = true;
    } else if (arg == "--nodes") {
      ok = ParseNumber(value, flags.nodes) && flags.nodes >= 1 && flags.nodes <= 7;
    } else if (arg == "--observers") {
      ok = ParseNumber(value, flags.observers) && flags.observers >= 0 && flags.observers <= 2;
    } else if (arg == "--seeds") {
      ok = ParseNumber(value, flags.seeds);
    } else if (arg == "--from") {
      ok = ParseNumber(value, flags.from);
    } else if (arg == "--steps") {
      ok = ParseNumber(value, flags.steps) && flags.steps > 0;
    } else if (arg == "--seed") {
      ok = ParseNumber(value, flags.seed);
      flags.one_seed = true;
    } else if (arg == "--max-failures") {
      ok = ParseNumber(value, flags.max_failures);
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr, "bad flag %s\n", argv[i]);
      return false;
    }
  }
  return true;
}

SimConfig ConfigFor(const Flags& flags, uint64_t seed) {
  SimConfig config;
  config.seed = seed;
  config.voters = flags.nodes;
  config.observers = flags.observers;
  config.fault_steps = flags.steps;
  return config;
}

int ReplayOne(const Flags& flags) {
  SimConfig config = ConfigFor(flags, flags.seed);
  if (flags.trace) {
    config.trace_sink = [](const std::string& line) { std::puts(line.c_str()); };
  }
  SimResult r = RunSimulation(config);
  const auto& st = r.stats;
  std::printf(
      "seed=%llu nodes=%d observers=%d: %s, %lld steps, %lld virtual ms, %lld delivered, "
      "%lld dropped, %lld committed, %lld leaders, %lld crashes, %lld partitions, "
      "%lld snapshots saved, %lld installed, %lld reads, %lld transfers, liveness %lld ms "
      "(bound %lld ms, %lld catch-up round trips), trace hash %016llx\n",
      static_cast<unsigned long long>(flags.seed), r.voters, r.observers, r.ok ? "ok" : "FAILED",
      static_cast<long long>(st.steps), static_cast<long long>(st.virtual_ms),
      static_cast<long long>(st.delivered), static_cast<long long>(st.dropped),
      static_cast<long long>(st.committed), static_cast<long long>(st.leaders),
      static_cast<long long>(st.crashes), static_cast<long long>(st.partitions),
      static_cast<long long>(st.snapshots_saved), static_cast<long long>(st.snapshots_installed),
      static_cast<long long>(st.reads_ok), static_cast<long long>(st.transfers),
      static_cast<long long>(st.liveness_ms), static_cast<long long>(st.liveness_bound_ms),
      static_cast<long long>(st.catch_up_round_trips),
      static_cast<unsigned long long>(r.trace_hash));
  if (!r.ok) std::fputs(r.report.c_str(), stdout);
  return r.ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!Parse(argc, argv, flags)) return Usage();
  if (flags.one_seed) return ReplayOne(flags);

  auto start = std::chrono::steady_clock::now();
  uint64_t failures = 0, done = 0;
  int64_t steps = 0, virtual_ms = 0, committed = 0;
  for (uint64_t seed = flags.from; seed < flags.from + flags.seeds; ++seed) {
    SimResult r = RunSimulation(ConfigFor(flags, seed));
    ++done;
    steps += r.stats.steps;
    virtual_ms += r.stats.virtual_ms;
    committed += r.stats.committed;
    if (!r.ok) {
      ++failures;
      std::fputs(r.report.c_str(), stdout);
      std::fflush(stdout);
      if (failures >= static_cast<uint64_t>(flags.max_failures)) break;
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "%llu seeds (%d voters, from %llu, %lld fault steps): %llu failed, %.1f s, "
      "%.1f seeds/s, %.0f steps/seed, %.0f virtual ms/seed, %.0f committed/seed\n",
      static_cast<unsigned long long>(done), flags.nodes,
      static_cast<unsigned long long>(flags.from), static_cast<long long>(flags.steps),
      static_cast<unsigned long long>(failures), seconds,
      seconds > 0 ? static_cast<double>(done) / seconds : 0.0,
      static_cast<double>(steps) / static_cast<double>(done ? done : 1),
      static_cast<double>(virtual_ms) / static_cast<double>(done ? done : 1),
      static_cast<double>(committed) / static_cast<double>(done ? done : 1));
  return failures == 0 ? 0 : 1;
}
