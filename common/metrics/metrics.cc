#include "common/metrics/metrics.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace runnel::metrics {

std::string_view TypeName(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

Histogram::Histogram(const std::vector<double>& bounds)
    : bounds_(bounds), counts_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  s.cumulative.resize(bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = total;
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                               0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                               1,      2.5,     5,      10};
  return kBuckets;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return fmt::format("{}", static_cast<int64_t>(value));
  }
  return fmt::format("{}", value);  // shortest text that reads back the same double
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `name{extra...,names=values...,more}` (no braces when there are no labels at all).
std::string SeriesName(std::string_view name, const Labels& extra,
                       const std::vector<std::string>& names,
                       const std::vector<std::string>& values,
                       const std::pair<std::string, std::string>* more = nullptr) {
  std::string out(name);
  if (extra.empty() && names.empty() && more == nullptr) return out;
  out += '{';
  bool first = true;
  auto add = [&](std::string_view n, std::string_view v) {
    if (!first) out += ',';
    first = false;
    out += n;
    out += "=\"";
    out += EscapeLabelValue(v);
    out += '"';
  };
  for (const auto& [n, v] : extra) add(n, v);
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) add(names[i], values[i]);
  if (more != nullptr) add(more->first, more->second);
  out += '}';
  return out;
}

void AppendSample(const std::string& name, const Labels& extra,
                  const std::vector<std::string>& names, const std::vector<std::string>& values,
                  double value, FamilyText* out) {
  out->samples.push_back(SeriesName(name, extra, names, values) + " " + FormatValue(value));
}

}  // namespace

template <typename T>
std::unique_ptr<T> Family<T>::Make() const {
  if constexpr (std::is_same_v<T, Histogram>) {
    return std::make_unique<Histogram>(bounds_);
  } else {
    return std::make_unique<T>();
  }
}

template <typename T>
typename Family<T>::Entry& Family<T>::Find(const std::vector<std::string>& values) {
  if (values.size() != label_names_.size()) {
    fmt::print(stderr, "metric {}: {} label values for {} labels\n", name_, values.size(),
               label_names_.size());
    std::abort();
  }
  Entry& e = series_[values];
  if (!e.series) e.series = Make();
  return e;
}

template <typename T>
T* Family<T>::WithLabels(const std::vector<std::string>& values) {
  MutexLock lock(&mu_);
  return Find(values).series.get();
}

template <typename T>
void Family<T>::Remove(const std::vector<std::string>& values) {
  MutexLock lock(&mu_);
  series_.erase(values);
}

template <typename T>
T* Family<T>::Acquire(const std::vector<std::string>& values) {
  MutexLock lock(&mu_);
  Entry& e = Find(values);
  ++e.refs;
  return e.series.get();
}

template <typename T>
void Family<T>::Release(const std::vector<std::string>& values) {
  MutexLock lock(&mu_);
  auto it = series_.find(values);
  if (it != series_.end() && --it->second.refs <= 0) series_.erase(it);
}

template <typename T>
void Family<T>::Collect(const Labels& extra, FamilyText* out) const {
  MutexLock lock(&mu_);
  for (const auto& [values, entry] : series_) {
    const T* series = entry.series.get();
    if constexpr (std::is_same_v<T, Histogram>) {
      Histogram::Snapshot s = series->Take();
      const std::vector<double>& bounds = series->bounds();
      for (size_t i = 0; i <= bounds.size(); ++i) {
        std::pair<std::string, std::string> le{"le",
                                               i < bounds.size() ? FormatValue(bounds[i]) : "+Inf"};
        out->samples.push_back(SeriesName(name_ + "_bucket", extra, label_names_, values, &le) +
                               " " + FormatValue(static_cast<double>(s.cumulative[i])));
      }
      AppendSample(name_ + "_sum", extra, label_names_, values, s.sum, out);
      AppendSample(name_ + "_count", extra, label_names_, values,
                   static_cast<double>(s.cumulative.back()), out);
    } else {
      AppendSample(name_, extra, label_names_, values, static_cast<double>(series->Value()), out);
    }
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

void CallbackFamily::Collect(const Labels& extra, FamilyText* out) const {
  std::vector<Sample> samples;
  fn_(&samples);
  for (const Sample& s : samples) {
    AppendSample(name_, extra, label_names_, s.label_values, s.value, out);
  }
}

template <typename F, typename... Args>
F& Registry::Add(const std::string& name, Type type, Args&&... args) {
  MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it != families_.end()) {
    auto* existing = dynamic_cast<F*>(it->second.get());
    if (existing == nullptr || existing->type() != type) {
      fmt::print(stderr, "metric {} registered twice with different types\n", name);
      std::abort();
    }
    return *existing;
  }
  auto family = std::make_shared<F>(name, std::forward<Args>(args)...);
  F& ref = *family;
  families_.emplace(name, std::move(family));
  return ref;
}

CounterFamily& Registry::AddCounter(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names) {
  return Add<CounterFamily>(name, Type::kCounter, help, Type::kCounter, std::move(label_names));
}

GaugeFamily& Registry::AddGauge(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names) {
  return Add<GaugeFamily>(name, Type::kGauge, help, Type::kGauge, std::move(label_names));
}

HistogramFamily& Registry::AddHistogram(const std::string& name, const std::string& help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> bounds) {
  return Add<HistogramFamily>(name, Type::kHistogram, help, Type::kHistogram,
                              std::move(label_names), std::move(bounds));
}

void Registry::AddCallback(const std::string& name, const std::string& help, Type type,
                           std::vector<std::string> label_names, CallbackFamily::Fn fn) {
  MutexLock lock(&mu_);
  families_[name] =
      std::make_shared<CallbackFamily>(name, help, type, std::move(label_names), std::move(fn));
}

void Registry::RemoveCallback(const std::string& name) {
  MutexLock lock(&mu_);
  auto it = families_.find(name);
  if (it != families_.end() && dynamic_cast<CallbackFamily*>(it->second.get()) != nullptr) {
    families_.erase(it);
  }
}

std::vector<FamilyText> Registry::Collect(const Labels& extra) const {
  std::vector<std::shared_ptr<FamilyBase>> families;
  {
    MutexLock lock(&mu_);
    for (const auto& [name, f] : families_) families.push_back(f);
  }
  // Collected outside the registry's lock: a callback may take its owner's locks.
  std::vector<FamilyText> out;
  out.reserve(families.size());
  for (const auto& f : families) {
    FamilyText& text = out.emplace_back();
    text.name = f->name();
    text.help = f->help();
    text.type = f->type();
    f->Collect(extra, &text);
  }
  return out;
}

Registry& ProcessRegistry() {
  static Registry* registry = new Registry();  // never destroyed: used until exit
  return *registry;
}

std::string WriteText(const std::vector<FamilyText>& families) {
  std::vector<const FamilyText*> order;
  std::map<std::string, std::vector<const FamilyText*>> by_name;
  for (const FamilyText& f : families) {
    auto& same = by_name[f.name];
    if (same.empty()) order.push_back(&f);
    same.push_back(&f);
  }
  std::string out;
  for (const FamilyText* first : order) {
    const std::vector<const FamilyText*>& same = by_name[first->name];
    if (std::all_of(same.begin(), same.end(),
                    [](const FamilyText* f) { return f->samples.empty(); })) {
      continue;  // a family without series (no topic yet) is left out
    }
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", first->name, EscapeHelp(first->help),
                       first->name, TypeName(first->type));
    for (const FamilyText* f : same) {
      for (const std::string& line : f->samples) {
        out += line;
        out += '\n';
      }
    }
  }
  return out;
}

namespace {

// Fields of /proc/self/stat after the command (which may hold spaces), 0-based from the
// state field (field 3 of proc(5)).
std::vector<std::string> ProcStatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  size_t close = line.rfind(')');
  std::vector<std::string> fields;
  if (close == std::string::npos) return fields;
  std::istringstream rest(line.substr(close + 1));
  std::string f;
  while (rest >> f) fields.push_back(f);
  return fields;
}

double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  while (in >> key) {
    if (key == "btime") {
      double v = 0;
      in >> v;
      return v;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

double OpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory's own descriptor
}

}  // namespace

void RegisterProcessMetrics(Registry& registry) {
  // proc(5): utime 14, stime 15, starttime 22, vsize 23, rss 24 (1-based); fields[0] is 3.
  registry.AddCallback("process_cpu_seconds_total", "User and system CPU time spent, seconds.",
                       Type::kCounter, {}, [](std::vector<Sample>* out) {
                         std::vector<std::string> f = ProcStatFields();
                         if (f.size() < 22) return;
                         double ticks = std::strtod(f[11].c_str(), nullptr) +
                                        std::strtod(f[12].c_str(), nullptr);
                         out->push_back({{}, ticks / static_cast<double>(::sysconf(_SC_CLK_TCK))});
                       });
  registry.AddCallback(
      "process_resident_memory_bytes", "Resident memory size, bytes.", Type::kGauge, {},
      [](std::vector<Sample>* out) {
        std::vector<std::string> f = ProcStatFields();
        if (f.size() < 22) return;
        out->push_back(
            {{}, std::strtod(f[21].c_str(), nullptr) * static_cast<double>(::getpagesize())});
      });
  registry.AddCallback("process_virtual_memory_bytes", "Virtual memory size, bytes.", Type::kGauge,
                       {}, [](std::vector<Sample>* out) {
                         std::vector<std::string> f = ProcStatFields();
                         if (f.size() < 22) return;
                         out->push_back({{}, std::strtod(f[20].c_str(), nullptr)});
                       });
  registry.AddCallback(
      "process_start_time_seconds", "Start time of the process since the epoch, seconds.",
      Type::kGauge, {}, [](std::vector<Sample>* out) {
        static const double kStart = [] {
          std::vector<std::string> f = ProcStatFields();
          if (f.size() < 22) return 0.0;
          return BootTimeSeconds() +
                 std::strtod(f[19].c_str(), nullptr) / static_cast<double>(::sysconf(_SC_CLK_TCK));
        }();
        out->push_back({{}, kStart});
      });
  registry.AddCallback("process_open_fds", "Open file descriptors.", Type::kGauge, {},
                       [](std::vector<Sample>* out) {
                         out->push_back({{}, OpenFds()});
                       });
  registry.AddCallback("process_max_fds", "Limit of open file descriptors.", Type::kGauge, {},
                       [](std::vector<Sample>* out) {
                         rlimit lim{};
                         if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
                         out->push_back({{}, static_cast<double>(lim.rlim_cur)});
                       });
}

}  // namespace runnel::metrics
