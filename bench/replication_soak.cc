// runnel-replication-soak: runs the deterministic replication simulator
// (storaged/replication/sim/) over many seeds, or replays one seed exactly with its trace.
//
//   runnel-replication-soak --replicas 5 --seeds 100000 --from 1 --steps 20000
//   runnel-replication-soak --replicas 3 --seed 1234 --trace
//
// Prints seeds/s and every failing seed with its report; exits 1 if any seed failed.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include "storaged/replication/sim/simulation.h"

namespace {

using runnel::storaged::replication::sim::RunSimulation;
using runnel::storaged::replication::sim::SimConfig;
using runnel::storaged::replication::sim::SimResult;

constexpr int kExitUsage = 2;

struct Flags {
  int replicas = 3;
  int min_insync = 2;
  uint64_t seeds = 1000;
  uint64_t from = 1;
  int64_t steps = 1000;
  bool trace = false;
  bool one_seed = false;
  uint64_t seed = 0;
  int max_failures = 10;
};

int Usage() {
  std::fputs(
      "usage: runnel-replication-soak [--replicas 1-7] [--min-insync N] [--seeds N] [--from S]\n"
      "                               [--steps K (events per seed)] [--max-failures F]\n"
      "                               [--seed N [--trace]]\n",
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
    } else if (arg == "--replicas") {
      ok = ParseNumber(value, flags.replicas) && flags.replicas >= 1 && flags.replicas <= 7;
    } else if (arg == "--min-insync") {
      ok = ParseNumber(value, flags.min_insync) && flags.min_insync >= 1;
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
  config.replicas = flags.replicas;
  config.min_insync_replicas = flags.min_insync;
  config.steps = flags.steps;
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
      "seed=%llu replicas=%d: %s, %lld steps, %lld virtual ms, %lld produced, %lld acked, "
      "%lld not enough replicas, %lld after append, %lld consumed, %lld committed, "
      "%lld leaders, %lld crashes, %lld partitions, %lld truncations, %lld isr changes, "
      "%lld dropped, trace hash %016llx\n",
      static_cast<unsigned long long>(flags.seed), flags.replicas, r.ok ? "ok" : "FAILED",
      static_cast<long long>(st.steps), static_cast<long long>(st.virtual_ms),
      static_cast<long long>(st.produced), static_cast<long long>(st.acked),
      static_cast<long long>(st.not_enough_replicas),
      static_cast<long long>(st.not_enough_after_append), static_cast<long long>(st.consumed),
      static_cast<long long>(st.committed), static_cast<long long>(st.leaders),
      static_cast<long long>(st.crashes), static_cast<long long>(st.partitions),
      static_cast<long long>(st.truncations), static_cast<long long>(st.isr_changes),
      static_cast<long long>(st.dropped), static_cast<unsigned long long>(r.trace_hash));
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
  int64_t steps = 0, virtual_ms = 0, acked = 0;
  for (uint64_t seed = flags.from; seed < flags.from + flags.seeds; ++seed) {
    SimResult r = RunSimulation(ConfigFor(flags, seed));
    ++done;
    steps += r.stats.steps;
    virtual_ms += r.stats.virtual_ms;
    acked += r.stats.acked;
    if (!r.ok) {
      ++failures;
      std::fputs(r.report.c_str(), stdout);
      std::fflush(stdout);
      if (failures >= static_cast<uint64_t>(flags.max_failures)) break;
    }
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "%llu seeds (%d replicas, min.insync %d, from %llu, %lld steps): %llu failed, %.1f s, "
      "%.1f seeds/s, %.0f steps/seed, %.0f virtual ms/seed, %.0f acked/seed\n",
      static_cast<unsigned long long>(done), flags.replicas, flags.min_insync,
      static_cast<unsigned long long>(flags.from), static_cast<long long>(flags.steps),
      static_cast<unsigned long long>(failures), seconds,
      seconds > 0 ? static_cast<double>(done) / seconds : 0.0,
      static_cast<double>(steps) / static_cast<double>(done ? done : 1),
      static_cast<double>(virtual_ms) / static_cast<double>(done ? done : 1),
      static_cast<double>(acked) / static_cast<double>(done ? done : 1));
  return failures == 0 ? 0 : 1;
}
