// The metrics registry, its series and the text exposition format.
#include "common/metrics/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ctime>
#include <thread>

namespace runnel::metrics {
namespace {

std::string Text(const Registry& r, const Labels& extra = {}) {
  return WriteText(r.Collect(extra));
}

TEST(MetricsTest, CounterWithLabelsIsOneSeriesPerValues) {
  Registry r;
  CounterFamily& f = r.AddCounter("runnel_test_requests_total", "Requests.", {"api"});
  Counter* produce = f.WithLabels({"Produce"});
  EXPECT_EQ(produce, f.WithLabels({"Produce"}));
  produce->Inc();
  produce->Inc(4);
  f.WithLabels({"Fetch"})->Inc();
  EXPECT_EQ(produce->Value(), 5u);
  EXPECT_EQ(Text(r, {{"role", "brokerd"}}),
            "# HELP runnel_test_requests_total Requests.\n"
            "# TYPE runnel_test_requests_total counter\n"
            "runnel_test_requests_total{role=\"brokerd\",api=\"Fetch\"} 1\n"
            "runnel_test_requests_total{role=\"brokerd\",api=\"Produce\"} 5\n");
}

TEST(MetricsTest, RemovedSeriesIsGone) {
  Registry r;
  GaugeFamily& f = r.AddGauge("runnel_test_size_bytes", "Size.", {"topic"});
  f.WithLabels({"a"})->Set(10);
  f.WithLabels({"b"})->Add(-3);
  f.Remove({"a"});
  EXPECT_EQ(Text(r),
            "# HELP runnel_test_size_bytes Size.\n"
            "# TYPE runnel_test_size_bytes gauge\n"
            "runnel_test_size_bytes{topic=\"b\"} -3\n");
}

TEST(MetricsTest, AcquiredSeriesLastsUntilItsLastRelease) {
  Registry r;
  CounterFamily& f = r.AddCounter("runnel_test_bytes_total", "Bytes.", {"topic"});
  Counter* old_owner = f.Acquire({"t"});  // a deleted topic's, still held by a call in flight
  Counter* new_owner = f.Acquire({"t"});  // the topic created again under the same name
  EXPECT_EQ(old_owner, new_owner);
  new_owner->Inc(3);
  f.Release({"t"});
  EXPECT_EQ(Text(r),
            "# HELP runnel_test_bytes_total Bytes.\n"
            "# TYPE runnel_test_bytes_total counter\n"
            "runnel_test_bytes_total{topic=\"t\"} 3\n");
  f.Release({"t"});
  EXPECT_EQ(Text(r), "");  // a family without series is not written
}

TEST(MetricsTest, SameNameAndTypeIsTheSameFamily) {
  Registry r;
  CounterFamily& a = r.AddCounter("runnel_x_total", "X.");
  CounterFamily& b = r.AddCounter("runnel_x_total", "X.");
  EXPECT_EQ(&a, &b);
  EXPECT_DEATH(r.AddGauge("runnel_x_total", "X."), "different types");
}

TEST(MetricsTest, WrongNumberOfLabelValuesAborts) {
  Registry r;
  CounterFamily& f = r.AddCounter("runnel_y_total", "Y.", {"a", "b"});
  EXPECT_DEATH(f.WithLabels({"only one"}), "label values");
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Registry r;
  HistogramFamily& f = r.AddHistogram("runnel_test_seconds", "Latency.", {"api"}, {0.1, 1});
  Histogram* h = f.WithLabels({"Produce"});
  h->Observe(0.05);
  h->Observe(0.1);  // on the bound: le is inclusive
  h->Observe(0.5);
  h->Observe(7);
  EXPECT_EQ(Text(r),
            "# HELP runnel_test_seconds Latency.\n"
            "# TYPE runnel_test_seconds histogram\n"
            "runnel_test_seconds_bucket{api=\"Produce\",le=\"0.1\"} 2\n"
            "runnel_test_seconds_bucket{api=\"Produce\",le=\"1\"} 3\n"
            "runnel_test_seconds_bucket{api=\"Produce\",le=\"+Inf\"} 4\n"
            "runnel_test_seconds_sum{api=\"Produce\"} 7.65\n"
            "runnel_test_seconds_count{api=\"Produce\"} 4\n");
}

TEST(MetricsTest, CallbackValuesAreReadAtCollect) {
  Registry r;
  int64_t term = 3;
  r.AddCallback("runnel_test_term", "Term.", Type::kGauge, {}, [&term](std::vector<Sample>* out) {
    out->push_back({{}, static_cast<double>(term)});
  });
  EXPECT_NE(Text(r).find("runnel_test_term 3\n"), std::string::npos);
  term = 4;
  EXPECT_NE(Text(r).find("runnel_test_term 4\n"), std::string::npos);
  r.RemoveCallback("runnel_test_term");
  EXPECT_EQ(Text(r), "");
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  Registry r;
  r.AddCounter("runnel_e_total", "A \\ back\nslash.", {"v"}).WithLabels({"a\"b\\c\nd"})->Inc();
  EXPECT_EQ(Text(r),
            "# HELP runnel_e_total A \\\\ back\\nslash.\n"
            "# TYPE runnel_e_total counter\n"
            "runnel_e_total{v=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST(MetricsTest, ValuesFormat) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-12), "-12");
  EXPECT_EQ(FormatValue(0.25), "0.25");
  EXPECT_EQ(FormatValue(1e20), "1e+20");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
}

TEST(MetricsTest, SameFamilyFromSeveralRolesIsWrittenOnce) {
  Registry a;
  Registry b;
  a.AddGauge("process_open_fds", "Open fds.").WithLabels({})->Set(7);
  b.AddGauge("process_open_fds", "Open fds.").WithLabels({})->Set(9);
  std::vector<FamilyText> all = a.Collect({{"role", "storaged"}});
  for (FamilyText& f : b.Collect({{"role", "brokerd"}})) all.push_back(std::move(f));
  EXPECT_EQ(WriteText(all),
            "# HELP process_open_fds Open fds.\n"
            "# TYPE process_open_fds gauge\n"
            "process_open_fds{role=\"storaged\"} 7\n"
            "process_open_fds{role=\"brokerd\"} 9\n");
}

TEST(MetricsTest, ConcurrentIncrementsAreAllCounted) {
  Registry r;
  Counter* c = r.AddCounter("runnel_c_total", "C.").WithLabels({});
  Histogram* h = r.AddHistogram("runnel_h_seconds", "H.", {}).WithLabels({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([c, h] {
      for (int i = 0; i < 10000; ++i) {
        c->Inc();
        h->Observe(0.001);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->Value(), 40000u);
  EXPECT_EQ(h->Take().cumulative.back(), 40000u);
  EXPECT_NEAR(h->Take().sum, 40.0, 1e-6);
}

TEST(MetricsTest, ProcessMetricsHavePlausibleValues) {
  Registry r;
  RegisterProcessMetrics(r);
  std::string text = Text(r);
  for (const char* name :
       {"process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ",
        "process_max_fds ", "process_start_time_seconds ", "process_virtual_memory_bytes "}) {
    size_t at = text.find(std::string("\n") + name);
    ASSERT_NE(at, std::string::npos) << name << " in\n" << text;
    double v = std::strtod(text.c_str() + at + 1 + std::strlen(name), nullptr);
    EXPECT_GT(v, std::string(name) == "process_cpu_seconds_total " ? -1 : 0) << name;
  }
  size_t at = text.find("\nprocess_start_time_seconds ");
  double start = std::strtod(text.c_str() + at + 28, nullptr);
  EXPECT_NEAR(start, static_cast<double>(std::time(nullptr)), 600);
}

}  // namespace
}  // namespace runnel::metrics
