// Prometheus metrics: counters, gauges and histograms with labels, a registry of them, and
// the text exposition format (0.0.4).
//
// Hot paths keep a pointer to their series: `family.WithLabels({"produce"})` takes the
// family's lock and a map lookup once, and the returned Counter/Gauge/Histogram stays valid
// until `Remove` of those labels (or the family's end). Inc/Set/Observe are relaxed atomic
// operations: no lock, no allocation. Scrape-time values (a log's size, the Raft term) come
// from callbacks that the registry calls on each Collect.
//
// Threads: everything here is thread-safe. Collect runs on the scraper's thread; callbacks
// must be safe to run there.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/util/mutex.h"

namespace runnel::metrics {

enum class Type { kCounter, kGauge, kHistogram };
std::string_view TypeName(Type type);  // "counter", "gauge", "histogram"

// Label names and values, in order.
using Labels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  void Inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void Set(int64_t v) { value_.store(v, std::memory_order_relaxed); }
  void Add(int64_t n) { value_.fetch_add(n, std::memory_order_relaxed); }
  int64_t Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// Cumulative buckets with fixed upper bounds (ascending; +Inf is implicit).
class Histogram {
 public:
  explicit Histogram(const std::vector<double>& bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf (= count)
    double sum = 0;
  };
  Snapshot Take() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1, not cumulative
  std::atomic<double> sum_{0};
};

// Latency buckets in seconds, 100 us to 10 s.
const std::vector<double>& LatencyBuckets();

// One sample of a callback family: label values (in the family's label order) and a value.
struct Sample {
  std::vector<std::string> label_values;
  double value = 0;
};

// A family's text lines, ready to write: the registry's Collect result, and what a role
// sends the supervisor (proto/runnel/metrics.proto mirrors it).
struct FamilyText {
  std::string name;
  std::string help;
  Type type = Type::kGauge;
  std::vector<std::string> samples;  // whole sample lines without the newline
};

class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, Type type, std::vector<std::string> label_names)
      : name_(std::move(name)),
        help_(std::move(help)),
        type_(type),
        label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  Type type() const { return type_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Appends this family's samples, each with `extra` labels first.
  virtual void Collect(const Labels& extra, FamilyText* out) const = 0;

 protected:
  const std::string name_;
  const std::string help_;
  const Type type_;
  const std::vector<std::string> label_names_;
};

// The series of one metric, one per set of label values.
template <typename T>
class Family final : public FamilyBase {
 public:
  Family(std::string name, std::string help, Type type, std::vector<std::string> label_names,
         std::vector<double> bounds = {})
      : FamilyBase(std::move(name), std::move(help), type, std::move(label_names)),
        bounds_(std::move(bounds)) {}

  // The series for `values` (as many as label names), created on first use. The pointer
  // stays valid until Remove(values).
  T* WithLabels(const std::vector<std::string>& values);
  void Remove(const std::vector<std::string>& values);
  // For series with owners that come and go (a topic's, where a deleted topic's owner may
  // outlive a new one of the same name): Acquire is WithLabels plus a reference, Release
  // drops it and removes the series with the last one.
  T* Acquire(const std::vector<std::string>& values);
  void Release(const std::vector<std::string>& values);
  void Collect(const Labels& extra, FamilyText* out) const override;

 private:
  struct Entry {
    std::unique_ptr<T> series;
    int refs = 0;
  };
  std::unique_ptr<T> Make() const;
  Entry& Find(const std::vector<std::string>& values) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<double> bounds_;  // histograms only
  mutable Mutex mu_;
  std::map<std::vector<std::string>, Entry> series_ ABSL_GUARDED_BY(mu_);
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// Values computed at scrape time.
class CallbackFamily final : public FamilyBase {
 public:
  using Fn = std::function<void(std::vector<Sample>*)>;
  CallbackFamily(std::string name, std::string help, Type type,
                 std::vector<std::string> label_names, Fn fn)
      : FamilyBase(std::move(name), std::move(help), type, std::move(label_names)),
        fn_(std::move(fn)) {}
  void Collect(const Labels& extra, FamilyText* out) const override;

 private:
  Fn fn_;
};

// The metric families of one process. A family's name is registered once; asking again
// for the same name and type (and labels) returns the same family, so two owners of the
// same metric in one process (tests) share it. Names and types are checked: a clash is a
// programming error and aborts.
class Registry {
 public:
  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> label_names = {});
  GaugeFamily& AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names = {});
  HistogramFamily& AddHistogram(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names,
                                std::vector<double> bounds = LatencyBuckets());
  // Registers (or replaces) a callback family. The callback must stay valid until
  // RemoveCallback(name) or the registry's end.
  void AddCallback(const std::string& name, const std::string& help, Type type,
                   std::vector<std::string> label_names, CallbackFamily::Fn fn);
  void RemoveCallback(const std::string& name);

  // Every family's samples, each labelled with `extra` first (the role), sorted by name.
  std::vector<FamilyText> Collect(const Labels& extra = {}) const;

 private:
  template <typename F, typename... Args>
  F& Add(const std::string& name, Type type, Args&&... args);

  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
};

// The registry of this process (one role per process).
Registry& ProcessRegistry();

// The text exposition format of `families`. Families of the same name (from several roles)
// are merged under one HELP and TYPE, the first one's; a family without samples is left out.
std::string WriteText(const std::vector<FamilyText>& families);

// A sample value as the text format writes it ("+Inf", "NaN", integers without a point).
std::string FormatValue(double value);
// `value` escaped for a label value (backslash, double quote, newline).
std::string EscapeLabelValue(std::string_view value);

// Registers process_cpu_seconds_total, process_resident_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds and
// process_virtual_memory_bytes (read from /proc/self at each scrape) in `registry`.
void RegisterProcessMetrics(Registry& registry);

}  // namespace runnel::metrics
