// Kafka client benchmarks with librdkafka's C API, in the spirit of Kafka's
// kafka-producer-perf-test, kafka-consumer-perf-test and EndToEndLatency tools.
//
//   kafka_perf produce --bootstrap B --topic T --records N --record-size BYTES
//                      [--acks 0|1|all] [--linger-ms MS] [--batch-size BYTES]
//                      [--compression none|gzip|snappy|lz4|zstd] [--partitions P]
//                      [--transactional-id ID [--txn-interval-ms MS]]
//   kafka_perf consume --bootstrap B --topic T [--records N] [--passes K] [--fetch-wait-ms MS]
//   kafka_perf latency --bootstrap B --topic T[,T2...] [--rate R] [--duration-s S] [--warmup-s S]
//                      [--record-size BYTES] [--acks 0|1|all] [--linger-ms MS]
//                      [--fetch-wait-ms MS] [--partitions P]
//   kafka_perf create-topic --bootstrap B --topic T --partitions P [--if-not-exists]
//   kafka_perf delete-topic --bootstrap B --topic T
//
// Every command also takes `-X key=value` (any librdkafka property, applied to every client
// it makes). Human-readable results go to stderr; stdout gets exactly one JSON line, so a
// driver can read it with json.loads. The exit code is 0 only when the run was complete:
// every delivery report a success, every expected record read, no gap and no duplicate.
//
// produce: N records of BYTES each, record i to partition i % P (P = all the topic's
//   partitions unless --partitions), null keys, one random-but-fixed payload (seeded, the
//   same bytes every run) handed to librdkafka without a copy. The clock runs from the first
//   produce call to the last delivery report. With --transactional-id the records go in
//   transactions of --txn-interval-ms (100) each: at the end of each, rd_kafka_flush, then
//   rd_kafka_commit_transaction, whose time alone (EndTxn) gives the commit percentiles.
// consume: reads the topic from each partition's log start offset to the high watermark
//   found at start (or the first N records), with rd_kafka_assign (no group membership),
//   K times over (one pass = one assign from the start), checking that each partition's
//   offsets arrive in order with no gap or duplicate. The clock runs from the first assign
//   to the last record, after the connection and the watermark queries. --fetch-wait-ms
//   sets fetch.wait.max.ms (librdkafka's default, 500, unless given): a pass's first Fetch
//   goes out only when the previous pass's last one is answered, which waits that long on
//   partitions already read to their end.
// latency: one producer sends at a fixed rate and a consumer in the same process, assigned
//   at the log end (every partition's end offset asked first, in one request), reads the
//   records back; each record carries its send time
//   (CLOCK_MONOTONIC), so end-to-end latency is receive time minus send time. Records are
//   sent on a fixed schedule (not after the previous one returns), so a stall shows up in
//   the tail instead of being hidden. --topic may list several topics (comma-separated):
//   record i then goes to the i-th of all their partitions taken round-robin (topic by
//   topic, partition by partition). Besides the percentiles it reports the rates achieved
//   over the measured records (sent: records over first to last send; consumed: records
//   over first send to last receive) and the client's CPU over that time (whole process
//   and its busiest thread), so a driver can tell whether the rate was held and whether the
//   client was near its limit.
#include <dirent.h>
#include <fmt/format.h>
#include <librdkafka/rdkafka.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kMetadataTimeoutMs = 30000;
// Bounds every wait for progress: a run whose records stop arriving fails instead of hanging.
constexpr int64_t kStallTimeoutNs = 30'000'000'000;

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

double ClientCpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// CPU seconds of each thread of this process by thread id, with the thread's name
// (librdkafka names its threads rdk:main, rdk:broker<N>, ...), from /proc/self/task.
struct ThreadCpu {
  std::string name;
  double cpu_s = 0;
};
std::map<int64_t, ThreadCpu> ThreadCpuSeconds() {
  static const double kTicks = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::map<int64_t, ThreadCpu> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string base = fmt::format("/proc/self/task/{}/", e->d_name);
    char buf[1024];
    FILE* f = fopen((base + "stat").c_str(), "r");
    if (f == nullptr) continue;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    // utime and stime are fields 14 and 15 of stat(5), counted after the ")" of the name.
    const char* rest = strrchr(buf, ')');
    unsigned long long utime = 0, stime = 0;
    if (rest == nullptr ||
        sscanf(rest + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
               &stime) != 2) {
      continue;
    }
    ThreadCpu& t = out[strtoll(e->d_name, nullptr, 10)];
    t.cpu_s = static_cast<double>(utime + stime) / kTicks;
    if ((f = fopen((base + "comm").c_str(), "r")) != nullptr) {
      n = fread(buf, 1, sizeof(buf) - 1, f);
      fclose(f);
      while (n > 0 && buf[n - 1] == '\n') --n;
      t.name.assign(buf, n);
    }
  }
  closedir(dir);
  return out;
}

// The thread that used the most CPU between two ThreadCpuSeconds() snapshots.
ThreadCpu BusiestThread(const std::map<int64_t, ThreadCpu>& before,
                        const std::map<int64_t, ThreadCpu>& after) {
  ThreadCpu busiest;
  for (const auto& [tid, t] : after) {
    auto it = before.find(tid);
    double used = t.cpu_s - (it != before.end() ? it->second.cpu_s : 0.0);
    if (used > busiest.cpu_s) busiest = ThreadCpu{t.name, used};
  }
  return busiest;
}

// Command-line options: `--name value`, `--flag`, and repeated `-X key=value`.
class Options {
 public:
  // Parses argv[first..]; `flags` are the options that take no value.
  bool Parse(int argc, char** argv, int first, const std::vector<std::string>& flags) {
    for (int i = first; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "-X") {
        if (i + 1 >= argc) return Error("-X needs key=value");
        std::string kv = argv[++i];
        size_t eq = kv.find('=');
        if (eq == std::string::npos || eq == 0) return Error("-X needs key=value, got " + kv);
        props_.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
      } else if (arg.rfind("--", 0) == 0) {
        std::string name = arg.substr(2);
        if (std::find(flags.begin(), flags.end(), name) != flags.end()) {
          values_[name].assign(1, '1');  // not = "1": GCC 12 -Wrestrict false positive
        } else {
          if (i + 1 >= argc) return Error("--" + name + " needs a value");
          values_[name] = argv[++i];
        }
      } else {
        return Error("unexpected argument " + arg);
      }
    }
    return true;
  }

  // False (with a message) when an option outside `known` was given.
  bool CheckKnown(const std::vector<std::string>& known) {
    for (const auto& [name, value] : values_) {
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        return Error("unknown option --" + name);
      }
    }
    return true;
  }

  bool Has(const std::string& name) const { return values_.count(name) != 0; }
  std::string Str(const std::string& name, const std::string& def = "") const {
    auto it = values_.find(name);
    return it == values_.end() ? def : it->second;
  }
  // An integer option in [min, max]; records an error and returns `def` when it is not one.
  int64_t Int(const std::string& name, int64_t def, int64_t min, int64_t max) {
    auto it = values_.find(name);
    if (it == values_.end()) return def;
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || it->second.empty() || v < min || v > max) {
      Error(
          fmt::format("--{} must be an integer in [{}, {}], got '{}'", name, min, max, it->second));
      return def;
    }
    return v;
  }
  const std::vector<std::pair<std::string, std::string>>& props() const { return props_; }
  bool ok() const { return ok_; }

 private:
  bool Error(const std::string& message) {
    fmt::print(stderr, "kafka_perf: {}\n", message);
    ok_ = false;
    return false;
  }

  std::map<std::string, std::string> values_;
  std::vector<std::pair<std::string, std::string>> props_;
  bool ok_ = true;
};

// Builds a client configuration; `ok()` is false if any property was rejected.
class Conf {
 public:
  Conf() : conf_(rd_kafka_conf_new()) {}
  ~Conf() {
    if (conf_ != nullptr) rd_kafka_conf_destroy(conf_);
  }
  Conf(const Conf&) = delete;
  Conf& operator=(const Conf&) = delete;

  void Set(const std::string& key, const std::string& value) {
    char errstr[512];
    if (rd_kafka_conf_set(conf_, key.c_str(), value.c_str(), errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
      fmt::print(stderr, "kafka_perf: config {}={}: {}\n", key, value, errstr);
      ok_ = false;
    }
  }
  void SetAll(const std::vector<std::pair<std::string, std::string>>& props) {
    for (const auto& [k, v] : props) Set(k, v);
  }
  bool ok() const { return ok_; }
  rd_kafka_conf_t* get() { return conf_; }
  // rd_kafka_new takes ownership on success.
  rd_kafka_t* NewClient(rd_kafka_type_t type) {
    char errstr[512];
    rd_kafka_t* rk = rd_kafka_new(type, conf_, errstr, sizeof(errstr));
    if (rk == nullptr) {
      fmt::print(stderr, "kafka_perf: rd_kafka_new: {}\n", errstr);
      return nullptr;
    }
    conf_ = nullptr;
    return rk;
  }

 private:
  rd_kafka_conf_t* conf_;
  bool ok_ = true;
};

// Waits (bounded) until the broker's metadata lists `topic` with every partition led, and
// returns its partition count, or -1.
int TopicPartitions(rd_kafka_t* rk, const std::string& topic, int want_partitions = 0) {
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  int64_t deadline = NowNs() + int64_t{kMetadataTimeoutMs} * 1'000'000;
  std::string last_error = "no answer";
  int result = -1;
  while (NowNs() < deadline) {
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      bool ready = md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
                   md->topics[0].partition_cnt > 0 &&
                   (want_partitions == 0 || md->topics[0].partition_cnt == want_partitions);
      if (ready) {
        for (int i = 0; i < md->topics[0].partition_cnt; ++i) {
          if (md->topics[0].partitions[i].leader < 0) ready = false;
        }
      }
      if (ready) result = md->topics[0].partition_cnt;
      if (md->topic_cnt == 1) last_error = rd_kafka_err2str(md->topics[0].err);
      rd_kafka_metadata_destroy(md);
      if (result > 0) break;
    } else {
      last_error = rd_kafka_err2str(err);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  rd_kafka_topic_destroy(rkt);
  if (result < 0) {
    fmt::print(stderr, "kafka_perf: topic {} not ready within {} ms: {}\n", topic,
               kMetadataTimeoutMs, last_error);
  }
  return result;
}

// The payload every produce run sends: pseudo-random so compression cannot shrink it,
// and from a fixed seed so every run, against every target, sends the same bytes.
std::vector<char> FixedRandomPayload(size_t size) {
  std::vector<char> payload(size);
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    payload[i] = static_cast<char>(x >> 56);
  }
  return payload;
}

std::string AcksValue(const std::string& acks) { return acks == "all" ? "-1" : acks; }

bool ValidAcks(const std::string& acks) {
  return acks == "0" || acks == "1" || acks == "all" || acks == "-1";
}

// Delivery accounting, updated by the delivery report callback (served by rd_kafka_poll /
// rd_kafka_flush on the thread that produces).
struct Deliveries {
  int64_t ok = 0;
  int64_t failed = 0;
  int64_t bytes = 0;
  std::string first_error;
};

void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* msg, void* opaque) {
  auto* d = static_cast<Deliveries*>(opaque);
  if (msg->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    if (d->failed++ == 0) d->first_error = rd_kafka_err2str(msg->err);
  } else {
    d->ok++;
    d->bytes += static_cast<int64_t>(msg->len);
  }
}

// Serves delivery reports until every produced record has one or the producer stalls.
bool Flush(rd_kafka_t* rk, const Deliveries& d, int64_t produced) {
  int64_t last_progress = NowNs();
  int64_t last_done = -1;
  while (d.ok + d.failed < produced) {
    rd_kafka_flush(rk, 100);
    int64_t done = d.ok + d.failed;
    if (done != last_done) {
      last_done = done;
      last_progress = NowNs();
    } else if (NowNs() - last_progress > kStallTimeoutNs) {
      fmt::print(stderr, "kafka_perf: {} delivery reports missing after a 30 s stall\n",
                 produced - done);
      return false;
    }
  }
  return true;
}

// The q-quantile of sorted nanoseconds, in milliseconds.
double Percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(q * static_cast<double>(sorted.size()));
  if (rank >= sorted.size()) rank = sorted.size() - 1;
  return static_cast<double>(sorted[rank]) / 1e6;
}

// Ends the ongoing transaction: delivers what is in flight (rd_kafka_flush), then commits;
// the commit's own time (EndTxn and the coordinator's answer) is added to `commit_ns`.
bool CommitTransaction(rd_kafka_t* rk, std::vector<int64_t>& commit_ns) {
  if (rd_kafka_flush(rk, 60000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    fmt::print(stderr, "kafka_perf: flush before the commit timed out\n");
    return false;
  }
  const int64_t t0 = NowNs();
  rd_kafka_error_t* error = rd_kafka_commit_transaction(rk, 60000);
  if (error != nullptr) {
    fmt::print(stderr, "kafka_perf: commit_transaction: {}\n", rd_kafka_error_string(error));
    rd_kafka_error_destroy(error);
    return false;
  }
  commit_ns.push_back(NowNs() - t0);
  return true;
}

bool TxnCall(rd_kafka_error_t* error, const char* what) {
  if (error == nullptr) return true;
  fmt::print(stderr, "kafka_perf: {}: {}\n", what, rd_kafka_error_string(error));
  rd_kafka_error_destroy(error);
  return false;
}

int Produce(Options& opt) {
  if (!opt.CheckKnown({"bootstrap", "topic", "records", "record-size", "acks", "linger-ms",
                       "batch-size", "compression", "partitions", "transactional-id",
                       "txn-interval-ms"})) {
    return kExitUsage;
  }
  const std::string bootstrap = opt.Str("bootstrap");
  const std::string topic = opt.Str("topic");
  const int64_t records = opt.Int("records", 0, 1, int64_t{1} << 40);
  const int64_t record_size = opt.Int("record-size", 0, 0, 100 << 20);
  const std::string acks = opt.Str("acks", "all");
  const int64_t linger_ms = opt.Int("linger-ms", 5, 0, 900000);
  const int64_t batch_size = opt.Int("batch-size", 1000000, 1, 2147483647);
  const std::string compression = opt.Str("compression", "none");
  const int64_t want_partitions = opt.Int("partitions", 0, 0, 1 << 20);
  const std::string transactional_id = opt.Str("transactional-id");
  const int64_t txn_interval_ms = opt.Int("txn-interval-ms", 100, 1, 3600000);
  if (!opt.ok()) return kExitUsage;
  if (bootstrap.empty() || topic.empty() || !opt.Has("records") || !opt.Has("record-size") ||
      !ValidAcks(acks) || (!transactional_id.empty() && acks != "all")) {
    fmt::print(stderr,
               "kafka_perf produce: --bootstrap, --topic, --records and --record-size are "
               "required; --acks is 0, 1 or all (all with --transactional-id)\n");
    return kExitUsage;
  }

  Deliveries deliveries;
  Conf conf;
  conf.Set("bootstrap.servers", bootstrap);
  conf.Set("acks", AcksValue(acks));
  conf.Set("linger.ms", std::to_string(linger_ms));
  conf.Set("batch.size", std::to_string(batch_size));
  conf.Set("compression.codec", compression);
  if (!transactional_id.empty()) conf.Set("transactional.id", transactional_id);
  conf.SetAll(opt.props());
  if (!conf.ok()) return kExitUsage;
  rd_kafka_conf_set_dr_msg_cb(conf.get(), OnDelivery);
  rd_kafka_conf_set_opaque(conf.get(), &deliveries);
  rd_kafka_t* rk = conf.NewClient(RD_KAFKA_PRODUCER);
  if (rk == nullptr) return kExitFailed;

  // Metadata first: it opens the connection, so the clock below measures only the data.
  int topic_partitions = TopicPartitions(rk, topic);
  if (topic_partitions < 0) {
    rd_kafka_destroy(rk);
    return kExitFailed;
  }
  const int partitions =
      want_partitions == 0 ? topic_partitions : static_cast<int>(want_partitions);
  if (partitions > topic_partitions) {
    fmt::print(stderr, "kafka_perf: --partitions {} but {} has {}\n", partitions, topic,
               topic_partitions);
    rd_kafka_destroy(rk);
    return kExitUsage;
  }

  // Transactions: the producer id first (outside the clock), then one transaction per
  // --txn-interval-ms, each ended by a commit.
  const bool transactional = !transactional_id.empty();
  std::vector<int64_t> commit_ns;
  if (transactional && !TxnCall(rd_kafka_init_transactions(rk, 30000), "init_transactions")) {
    rd_kafka_destroy(rk);
    return kExitFailed;
  }
  std::vector<char> payload = FixedRandomPayload(static_cast<size_t>(record_size));
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  const double cpu0 = ClientCpuSeconds();
  const int64_t t0 = NowNs();
  int64_t produced = 0;
  bool produce_error = false;
  int64_t txn_started = t0;
  if (transactional && !TxnCall(rd_kafka_begin_transaction(rk), "begin_transaction")) {
    produce_error = true;
  }
  for (int64_t i = 0; i < records && !produce_error; ++i) {
    if (transactional && (i & 63) == 0 && NowNs() - txn_started >= txn_interval_ms * 1'000'000) {
      if (!CommitTransaction(rk, commit_ns) ||
          !TxnCall(rd_kafka_begin_transaction(rk), "begin_transaction")) {
        produce_error = true;
        break;
      }
      txn_started = NowNs();
    }
    const int32_t partition = static_cast<int32_t>(i % partitions);
    // msgflags 0: librdkafka keeps a pointer to `payload` (alive until the end), no copy.
    while (rd_kafka_produce(rkt, partition, 0, payload.data(), payload.size(), nullptr, 0,
                            nullptr) == -1) {
      rd_kafka_resp_err_t err = rd_kafka_last_error();
      if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        fmt::print(stderr, "kafka_perf: produce: {}\n", rd_kafka_err2str(err));
        produce_error = true;
        break;
      }
      rd_kafka_poll(rk, 1);
    }
    if (!produce_error) ++produced;
    if ((i & 1023) == 0) rd_kafka_poll(rk, 0);
  }
  if (transactional && !produce_error && !CommitTransaction(rk, commit_ns)) produce_error = true;
  const bool flushed = Flush(rk, deliveries, produced);
  const int64_t t1 = NowNs();
  std::sort(commit_ns.begin(), commit_ns.end());
  const double client_cpu = ClientCpuSeconds() - cpu0;
  rd_kafka_topic_destroy(rkt);
  rd_kafka_destroy(rk);

  const double elapsed = static_cast<double>(t1 - t0) / 1e9;
  const double rate = static_cast<double>(deliveries.ok) / elapsed;
  const double mib = static_cast<double>(deliveries.bytes) / (1024.0 * 1024.0);
  const bool complete =
      !produce_error && flushed && deliveries.failed == 0 && deliveries.ok == records;
  fmt::print(stderr,
             "produce {}: {} records of {} B to {} partitions, acks={}, linger.ms={}, "
             "batch.size={}, compression={}\n"
             "  {:.0f} records/s, {:.1f} MiB/s, {:.3f} s, client CPU {:.2f} s, "
             "{} delivered, {} failed{}\n",
             topic, records, record_size, partitions, acks, linger_ms, batch_size, compression,
             rate, mib / elapsed, elapsed, client_cpu, deliveries.ok, deliveries.failed,
             deliveries.failed ? " (first error: " + deliveries.first_error + ")" : "");
  if (transactional) {
    fmt::print(stderr, "  {} transactions committed, commit p50 {:.2f} ms, p99 {:.2f} ms\n",
               commit_ns.size(), Percentile(commit_ns, 0.5), Percentile(commit_ns, 0.99));
  }
  fmt::print(
      "{{\"bench\":\"produce\",\"transactions\":{},\"commit_p50_ms\":{:.3f},"
      "\"commit_p99_ms\":{:.3f},",
      commit_ns.size(), Percentile(commit_ns, 0.5), Percentile(commit_ns, 0.99));
  fmt::print(
      "\"topic\":\"{}\",\"records\":{},\"record_size\":{},"
      "\"partitions\":{},\"acks\":\"{}\",\"linger_ms\":{},\"batch_size\":{},"
      "\"compression\":\"{}\",\"delivered\":{},\"failed\":{},\"bytes\":{},\"elapsed_s\":{:.6f},"
      "\"records_per_s\":{:.1f},\"mib_per_s\":{:.3f},\"client_cpu_s\":{:.3f},\"ok\":{}}}\n",
      topic, records, record_size, partitions, acks, linger_ms, batch_size, compression,
      deliveries.ok, deliveries.failed, deliveries.bytes, elapsed, rate, mib / elapsed, client_cpu,
      complete ? "true" : "false");
  if (!complete) {
    fmt::print(stderr, "kafka_perf: produce run incomplete: {} of {} delivered, {} failed\n",
               deliveries.ok, records, deliveries.failed);
    return kExitFailed;
  }
  return kExitOk;
}

// A consumer that only ever uses rd_kafka_assign. librdkafka's assign API needs a group.id
// to exist, but without subscribe() the client never joins the group; offsets are never
// committed.
rd_kafka_t* NewAssignConsumer(Options& opt, const std::string& bootstrap,
                              const std::vector<std::pair<std::string, std::string>>& extra) {
  Conf conf;
  conf.Set("bootstrap.servers", bootstrap);
  conf.Set("group.id", "kafka-perf");
  conf.Set("enable.auto.commit", "false");
  conf.Set("enable.auto.offset.store", "false");
  conf.Set("enable.partition.eof", "false");
  for (const auto& [k, v] : extra) conf.Set(k, v);
  conf.SetAll(opt.props());
  if (!conf.ok()) return nullptr;
  rd_kafka_t* rk = conf.NewClient(RD_KAFKA_CONSUMER);
  if (rk != nullptr) rd_kafka_poll_set_consumer(rk);
  return rk;
}

// Waits up to `timeout_ms` for one record, then takes whatever else is already queued.
// rd_kafka_consume_batch_queue alone waits until the whole batch is full or the timeout
// passes, which would add up to that timeout to a record's latency and to the end of a pass.
ssize_t NextBatch(rd_kafka_t* rk, rd_kafka_queue_t* queue, int timeout_ms,
                  std::vector<rd_kafka_message_t*>& batch) {
  rd_kafka_message_t* first = rd_kafka_consumer_poll(rk, timeout_ms);
  if (first == nullptr) return 0;
  batch[0] = first;
  ssize_t more = rd_kafka_consume_batch_queue(queue, 0, batch.data() + 1, batch.size() - 1);
  return 1 + std::max<ssize_t>(more, 0);
}

void CloseConsumer(rd_kafka_t* rk) {
  rd_kafka_assign(rk, nullptr);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
}

int Consume(Options& opt) {
  if (!opt.CheckKnown({"bootstrap", "topic", "records", "passes", "fetch-wait-ms"})) {
    return kExitUsage;
  }
  const std::string bootstrap = opt.Str("bootstrap");
  const std::string topic = opt.Str("topic");
  const int64_t want_records = opt.Int("records", 0, 0, int64_t{1} << 40);
  const int64_t passes = opt.Int("passes", 1, 1, 1000);
  const int64_t fetch_wait_ms = opt.Int("fetch-wait-ms", 500, 0, 900000);
  if (!opt.ok()) return kExitUsage;
  if (bootstrap.empty() || topic.empty()) {
    fmt::print(stderr, "kafka_perf consume: --bootstrap and --topic are required\n");
    return kExitUsage;
  }
  rd_kafka_t* rk = NewAssignConsumer(
      opt, bootstrap,
      {{"auto.offset.reset", "error"}, {"fetch.wait.max.ms", std::to_string(fetch_wait_ms)}});
  if (rk == nullptr) return kExitFailed;
  const int partitions = TopicPartitions(rk, topic);
  if (partitions < 0) {
    CloseConsumer(rk);
    return kExitFailed;
  }
  std::vector<int64_t> low(partitions), high(partitions);
  int64_t available = 0;
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_resp_err_t err =
        rd_kafka_query_watermark_offsets(rk, topic.c_str(), p, &low[p], &high[p], 10000);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      fmt::print(stderr, "kafka_perf: watermarks of {}-{}: {}\n", topic, p, rd_kafka_err2str(err));
      CloseConsumer(rk);
      return kExitFailed;
    }
    available += high[p] - low[p];
  }
  const int64_t target = want_records == 0 ? available : want_records;
  if (target > available || target == 0) {
    fmt::print(stderr, "kafka_perf: {} records wanted, {} has {}\n", target, topic, available);
    CloseConsumer(rk);
    return kExitFailed;
  }

  rd_kafka_queue_t* queue = rd_kafka_queue_get_consumer(rk);
  std::vector<rd_kafka_message_t*> batch(4096);
  std::vector<int64_t> next(partitions);
  int64_t total_records = 0;
  int64_t total_bytes = 0;
  int64_t order_errors = 0;
  int64_t consume_errors = 0;
  bool stalled = false;
  // Per pass: from the assign to the first record (librdkafka sends the new pass's Fetch
  // only once the previous one is answered, and that one waits fetch.wait.max.ms on
  // partitions already read to their end), and from the first record to the last.
  int64_t first_wait_ns = 0;
  int64_t streaming_ns = 0;
  const double cpu0 = ClientCpuSeconds();
  const auto threads0 = ThreadCpuSeconds();
  const int64_t t0 = NowNs();
  for (int64_t pass = 0; pass < passes && !stalled; ++pass) {
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(partitions);
    for (int p = 0; p < partitions; ++p) {
      rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = low[p];
      next[p] = low[p];
    }
    // A new assign starts a new fetch version: records still queued from the previous
    // pass are dropped by librdkafka, so each pass counts from the start.
    rd_kafka_resp_err_t err = rd_kafka_assign(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      fmt::print(stderr, "kafka_perf: assign: {}\n", rd_kafka_err2str(err));
      stalled = true;
      break;
    }
    int64_t got = 0;
    const int64_t pass_start = NowNs();
    int64_t first_record = 0;
    int64_t last_progress = pass_start;
    while (got < target) {
      ssize_t n = NextBatch(rk, queue, 200, batch);
      if (n > 0) last_progress = NowNs();
      if (n > 0 && first_record == 0) first_record = last_progress;
      for (ssize_t i = 0; i < n; ++i) {
        rd_kafka_message_t* m = batch[i];
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && got < target) {
          const int32_t p = m->partition;
          if (p < 0 || p >= partitions || m->offset != next[p] || m->offset >= high[p]) {
            if (order_errors++ < 5) {
              fmt::print(stderr, "kafka_perf: {}-{} offset {} where {} was expected\n", topic, p,
                         m->offset, p >= 0 && p < partitions ? next[p] : -1);
            }
          } else {
            next[p] = m->offset + 1;
          }
          ++got;
          total_bytes += static_cast<int64_t>(m->len);
        } else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
          if (consume_errors++ < 5) {
            fmt::print(stderr, "kafka_perf: consume: {}\n", rd_kafka_message_errstr(m));
          }
        }
        rd_kafka_message_destroy(m);
      }
      if (NowNs() - last_progress > kStallTimeoutNs) {
        fmt::print(stderr, "kafka_perf: pass {}: {} of {} records after a 30 s stall\n", pass, got,
                   target);
        stalled = true;
        break;
      }
    }
    total_records += got;
    if (first_record != 0) {
      first_wait_ns += first_record - pass_start;
      streaming_ns += last_progress - first_record;
    }
    if (want_records == 0 && !stalled) {
      for (int p = 0; p < partitions; ++p) {
        if (next[p] != high[p]) {
          fmt::print(stderr, "kafka_perf: pass {}: {}-{} ended at {}, high watermark {}\n", pass,
                     topic, p, next[p], high[p]);
          ++order_errors;
        }
      }
    }
  }
  const int64_t t1 = NowNs();
  const double client_cpu = ClientCpuSeconds() - cpu0;
  const ThreadCpu busiest = BusiestThread(threads0, ThreadCpuSeconds());
  rd_kafka_queue_destroy(queue);
  CloseConsumer(rk);

  const double elapsed = static_cast<double>(t1 - t0) / 1e9;
  const double rate = static_cast<double>(total_records) / elapsed;
  const double mib = static_cast<double>(total_bytes) / (1024.0 * 1024.0);
  const double streaming_mib_per_s =
      streaming_ns > 0 ? mib / (static_cast<double>(streaming_ns) / 1e9) : 0.0;
  const bool complete = !stalled && order_errors == 0 && total_records == target * passes;
  fmt::print(stderr,
             "consume {}: {} partitions, {} records x {} passes, fetch.wait.max.ms={}\n"
             "  {:.0f} records/s, {:.1f} MiB/s, {:.3f} s, client CPU {:.2f} s, "
             "{} order errors, {} consume errors\n"
             "  waiting for each pass's first record {:.3f} s in all; first to last record "
             "{:.3f} s in all, {:.1f} MiB/s\n"
             "  busiest client thread {} used {:.2f} s of CPU\n",
             topic, partitions, target, passes, fetch_wait_ms, rate, mib / elapsed, elapsed,
             client_cpu, order_errors, consume_errors, static_cast<double>(first_wait_ns) / 1e9,
             static_cast<double>(streaming_ns) / 1e9, streaming_mib_per_s, busiest.name,
             busiest.cpu_s);
  fmt::print(
      "{{\"bench\":\"consume\",\"topic\":\"{}\",\"partitions\":{},\"records\":{},\"passes\":{},"
      "\"fetch_wait_ms\":{},"
      "\"consumed\":{},\"bytes\":{},\"elapsed_s\":{:.6f},\"records_per_s\":{:.1f},"
      "\"mib_per_s\":{:.3f},\"client_cpu_s\":{:.3f},\"order_errors\":{},"
      "\"consume_errors\":{},\"first_record_wait_s\":{:.6f},\"streaming_s\":{:.6f},"
      "\"streaming_mib_per_s\":{:.3f},\"busiest_thread\":\"{}\",\"busiest_thread_cpu_s\":{:.3f},"
      "\"ok\":{}}}\n",
      topic, partitions, target, passes, fetch_wait_ms, total_records, total_bytes, elapsed, rate,
      mib / elapsed, client_cpu, order_errors, consume_errors,
      static_cast<double>(first_wait_ns) / 1e9, static_cast<double>(streaming_ns) / 1e9,
      streaming_mib_per_s, busiest.name, busiest.cpu_s, complete ? "true" : "false");
  return complete ? kExitOk : kExitFailed;
}

// The latency run's record header: magic, sequence number, send time. Warm-up records
// carry kWarmupSeq and are not measured.
constexpr uint32_t kLatencyMagic = 0x524e4c31;  // "RNL1"
constexpr uint64_t kWarmupSeq = ~uint64_t{0};
constexpr size_t kLatencyHeader = 4 + 8 + 8;

void PutHeader(char* p, uint64_t seq, int64_t send_ns) {
  std::memcpy(p, &kLatencyMagic, 4);
  std::memcpy(p + 4, &seq, 8);
  std::memcpy(p + 12, &send_ns, 8);
}

// Reads records back and records each one's latency; runs on its own thread.
class LatencyConsumer {
 public:
  LatencyConsumer(rd_kafka_t* rk, int64_t expected)
      : rk_(rk), latency_ns_(static_cast<size_t>(expected), -1) {}

  void Run() {
    rd_kafka_queue_t* queue = rd_kafka_queue_get_consumer(rk_);
    std::vector<rd_kafka_message_t*> batch(1024);
    while (!stop_.load(std::memory_order_acquire)) {
      ssize_t n = NextBatch(rk_, queue, 50, batch);
      const int64_t now = NowNs();
      for (ssize_t i = 0; i < n; ++i) {
        Record(batch[i], now);
        rd_kafka_message_destroy(batch[i]);
      }
    }
    rd_kafka_queue_destroy(queue);
  }

  void Stop() { stop_.store(true, std::memory_order_release); }
  bool seen_warmup() const { return seen_warmup_.load(std::memory_order_acquire); }
  int64_t received() const { return received_.load(std::memory_order_acquire); }
  // Valid after the thread is joined.
  const std::vector<int64_t>& latency_ns() const { return latency_ns_; }
  int64_t duplicates() const { return duplicates_; }
  int64_t errors() const { return errors_; }
  int64_t last_receive_ns() const { return last_receive_ns_; }

 private:
  void Record(const rd_kafka_message_t* m, int64_t now) {
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (errors_++ < 5)
        fmt::print(stderr, "kafka_perf: consume: {}\n", rd_kafka_message_errstr(m));
      return;
    }
    uint32_t magic = 0;
    uint64_t seq = 0;
    int64_t send_ns = 0;
    if (m->len < kLatencyHeader) return;
    const char* p = static_cast<const char*>(m->payload);
    std::memcpy(&magic, p, 4);
    std::memcpy(&seq, p + 4, 8);
    std::memcpy(&send_ns, p + 12, 8);
    if (magic != kLatencyMagic) return;
    if (seq == kWarmupSeq) {
      seen_warmup_.store(true, std::memory_order_release);
      return;
    }
    if (seq >= latency_ns_.size()) return;
    if (latency_ns_[seq] >= 0) {
      ++duplicates_;
      return;
    }
    latency_ns_[seq] = now - send_ns;
    last_receive_ns_ = now;
    received_.fetch_add(1, std::memory_order_acq_rel);
  }

  rd_kafka_t* rk_;
  std::vector<int64_t> latency_ns_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> seen_warmup_{false};
  std::atomic<int64_t> received_{0};
  int64_t duplicates_ = 0;
  int64_t errors_ = 0;
  int64_t last_receive_ns_ = 0;
};

void SleepUntil(int64_t when_ns) {
  timespec ts{static_cast<time_t>(when_ns / 1'000'000'000),
              static_cast<long>(when_ns % 1'000'000'000)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

int Latency(Options& opt) {
  if (!opt.CheckKnown({"bootstrap", "topic", "rate", "duration-s", "warmup-s", "record-size",
                       "acks", "linger-ms", "fetch-wait-ms", "partitions"})) {
    return kExitUsage;
  }
  const std::string bootstrap = opt.Str("bootstrap");
  const std::string topic = opt.Str("topic");
  std::vector<std::string> topics;
  for (size_t begin = 0; begin <= topic.size();) {
    size_t end = topic.find(',', begin);
    if (end == std::string::npos) end = topic.size();
    if (end > begin) topics.push_back(topic.substr(begin, end - begin));
    begin = end + 1;
  }
  const int64_t rate = opt.Int("rate", 1000, 1, 1000000);
  const int64_t duration_s = opt.Int("duration-s", 10, 1, 3600);
  const int64_t warmup_s = opt.Int("warmup-s", 1, 0, 3600);
  const int64_t record_size = opt.Int("record-size", 1024, kLatencyHeader, 10 << 20);
  const std::string acks = opt.Str("acks", "all");
  const int64_t linger_ms = opt.Int("linger-ms", 0, 0, 900000);
  const int64_t fetch_wait_ms = opt.Int("fetch-wait-ms", 100, 0, 900000);
  const int64_t want_partitions = opt.Int("partitions", 0, 0, 1 << 20);
  if (!opt.ok()) return kExitUsage;
  if (bootstrap.empty() || topics.empty() || !ValidAcks(acks)) {
    fmt::print(stderr,
               "kafka_perf latency: --bootstrap and --topic are required; --acks is 0, 1 or "
               "all\n");
    return kExitUsage;
  }

  Deliveries deliveries;
  Conf pconf;
  pconf.Set("bootstrap.servers", bootstrap);
  pconf.Set("acks", AcksValue(acks));
  pconf.Set("linger.ms", std::to_string(linger_ms));
  pconf.SetAll(opt.props());
  if (!pconf.ok()) return kExitUsage;
  rd_kafka_conf_set_dr_msg_cb(pconf.get(), OnDelivery);
  rd_kafka_conf_set_opaque(pconf.get(), &deliveries);
  rd_kafka_t* producer = pconf.NewClient(RD_KAFKA_PRODUCER);
  if (producer == nullptr) return kExitFailed;
  // (topic index, partition) of every partition written, in round-robin order; --partitions
  // bounds the partitions taken from each topic.
  std::vector<std::pair<size_t, int32_t>> targets;
  for (size_t t = 0; t < topics.size(); ++t) {
    const int topic_partitions = TopicPartitions(producer, topics[t]);
    if (topic_partitions < 0) {
      rd_kafka_destroy(producer);
      return kExitFailed;
    }
    const int n =
        want_partitions == 0 ? topic_partitions : std::min<int>(want_partitions, topic_partitions);
    for (int p = 0; p < n; ++p) targets.emplace_back(t, p);
  }
  const int64_t partitions = static_cast<int64_t>(targets.size());

  rd_kafka_t* consumer =
      NewAssignConsumer(opt, bootstrap, {{"fetch.wait.max.ms", std::to_string(fetch_wait_ms)}});
  if (consumer == nullptr) {
    rd_kafka_destroy(producer);
    return kExitFailed;
  }
  rd_kafka_topic_partition_list_t* list =
      rd_kafka_topic_partition_list_new(static_cast<int>(partitions));
  for (const auto& [t, p] : targets) {
    rd_kafka_topic_partition_list_add(list, topics[t].c_str(), p)->offset = RD_KAFKA_OFFSET_END;
  }
  // Every partition's end offset, asked in one ListOffsets (timestamp -1: the latest) before
  // the assign: with OFFSET_END the consumer resolves each partition's start on its own, and
  // a record sent to a partition before that would be skipped (seen missing with 1,000
  // partitions). A partition whose answer has an error keeps OFFSET_END.
  rd_kafka_resp_err_t offsets_err = rd_kafka_offsets_for_times(consumer, list, kMetadataTimeoutMs);
  if (offsets_err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    fmt::print(stderr, "kafka_perf: latency: end offsets: {}\n", rd_kafka_err2str(offsets_err));
  }
  for (int i = 0; i < list->cnt; ++i) {
    if (list->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR || list->elems[i].offset < 0) {
      list->elems[i].offset = RD_KAFKA_OFFSET_END;
    }
  }
  rd_kafka_assign(consumer, list);
  rd_kafka_topic_partition_list_destroy(list);

  const int64_t measured = rate * duration_s;
  LatencyConsumer reader(consumer, measured);
  std::thread reader_thread([&reader] { reader.Run(); });

  std::vector<rd_kafka_topic_t*> rkts;
  rkts.reserve(topics.size());
  for (const std::string& t : topics) {
    rkts.push_back(rd_kafka_topic_new(producer, t.c_str(), nullptr));
  }
  std::vector<char> payload = FixedRandomPayload(static_cast<size_t>(record_size));
  int64_t produced = 0;
  int64_t queue_full = 0;
  bool produce_error = false;
  auto send = [&](uint64_t seq, int64_t i) {
    const auto& [t, partition] = targets[static_cast<size_t>(i % partitions)];
    const int64_t sent_ns = NowNs();
    PutHeader(payload.data(), seq, sent_ns);
    // A full local queue (the server acknowledges slower than the rate) is backpressure, not
    // an error: serve delivery reports and try again (bounded), the record keeping its first
    // send time, so the wait shows in its latency and in the send lag.
    int rc;
    while ((rc = rd_kafka_produce(rkts[t], partition, RD_KAFKA_MSG_F_COPY, payload.data(),
                                  payload.size(), nullptr, 0, nullptr)) == -1 &&
           rd_kafka_last_error() == RD_KAFKA_RESP_ERR__QUEUE_FULL &&
           NowNs() - sent_ns < kStallTimeoutNs) {
      ++queue_full;
      rd_kafka_poll(producer, 10);
    }
    if (rc == -1) {
      if (!produce_error) {
        fmt::print(stderr, "kafka_perf: produce: {}\n", rd_kafka_err2str(rd_kafka_last_error()));
      }
      produce_error = true;
      return;
    }
    ++produced;
    rd_kafka_poll(producer, 0);
  };

  // The consumer's start offset (log end) is resolved asynchronously: send warm-up records
  // until one comes back, so no measured record is sent before the consumer is in place.
  int64_t warm_deadline = NowNs() + kStallTimeoutNs;
  int64_t seq_partition = 0;
  while (!reader.seen_warmup() && NowNs() < warm_deadline && !produce_error) {
    send(kWarmupSeq, seq_partition++);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  bool ok = reader.seen_warmup() && !produce_error;
  if (!reader.seen_warmup()) fmt::print(stderr, "kafka_perf: no warm-up record came back\n");

  const int64_t period_ns = 1'000'000'000 / rate;
  int64_t max_send_lag_ns = 0;
  int64_t measured_start = 0, last_send = 0, measured_sent = 0;
  double cpu0 = 0;
  std::map<int64_t, ThreadCpu> threads0;
  if (ok) {
    // Warm-up at the measured rate, then the measured records on a fixed schedule.
    const int64_t warm_records = rate * warmup_s;
    int64_t start = NowNs();
    for (int64_t i = 0; i < warm_records && !produce_error; ++i) {
      SleepUntil(start + i * period_ns);
      send(kWarmupSeq, i);
    }
    threads0 = ThreadCpuSeconds();
    cpu0 = ClientCpuSeconds();
    start = NowNs();
    measured_start = start;
    for (int64_t i = 0; i < measured && !produce_error; ++i) {
      const int64_t due = start + i * period_ns;
      SleepUntil(due);
      max_send_lag_ns = std::max(max_send_lag_ns, NowNs() - due);
      send(static_cast<uint64_t>(i), i);
      if (!produce_error) ++measured_sent;
    }
    last_send = NowNs();
  }
  ok = ok && !produce_error && Flush(producer, deliveries, produced) && deliveries.failed == 0;
  // Wait (bounded) for the last records to come back.
  int64_t last_progress = NowNs();
  int64_t last_received = -1;
  while (ok && reader.received() < measured) {
    int64_t r = reader.received();
    if (r != last_received) {
      last_received = r;
      last_progress = NowNs();
    } else if (NowNs() - last_progress > kStallTimeoutNs) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double client_cpu = ClientCpuSeconds() - cpu0;
  const ThreadCpu busiest = BusiestThread(threads0, ThreadCpuSeconds());
  reader.Stop();
  reader_thread.join();
  for (rd_kafka_topic_t* rkt : rkts) rd_kafka_topic_destroy(rkt);
  rd_kafka_destroy(producer);
  CloseConsumer(consumer);

  std::vector<int64_t> sorted;
  sorted.reserve(static_cast<size_t>(measured));
  for (int64_t v : reader.latency_ns()) {
    if (v >= 0) sorted.push_back(v);
  }
  std::sort(sorted.begin(), sorted.end());
  const int64_t missing = measured - static_cast<int64_t>(sorted.size());
  double mean = 0;
  for (int64_t v : sorted) mean += static_cast<double>(v);
  mean = sorted.empty() ? 0 : mean / static_cast<double>(sorted.size()) / 1e6;
  const double p50 = Percentile(sorted, 0.50), p99 = Percentile(sorted, 0.99),
               p999 = Percentile(sorted, 0.999);
  const double max = sorted.empty() ? 0 : static_cast<double>(sorted.back()) / 1e6;
  // Rates over the measured records: sent over first to last send, received over first send
  // to last receive (0 when nothing was measured).
  const double send_s = static_cast<double>(last_send - measured_start) / 1e9;
  const double receive_s =
      reader.last_receive_ns() > measured_start
          ? static_cast<double>(reader.last_receive_ns() - measured_start) / 1e9
          : 0;
  const double produce_rate = send_s > 0 ? static_cast<double>(measured_sent) / send_s : 0;
  const double consume_rate = receive_s > 0 ? static_cast<double>(sorted.size()) / receive_s : 0;
  const bool complete = ok && missing == 0 && reader.duplicates() == 0;
  fmt::print(stderr,
             "latency {}: {} records at {}/s to {} partitions, {} B, acks={}, linger.ms={}, "
             "fetch.wait.max.ms={}\n"
             "  p50 {:.3f} ms, p99 {:.3f} ms, p99.9 {:.3f} ms, max {:.3f} ms, mean {:.3f} ms; "
             "{} missing, {} duplicates, {} failed deliveries, max send lag {:.3f} ms\n"
             "  sent {:.0f}/s, received {:.0f}/s; client CPU {:.2f} s over {:.2f} s, busiest "
             "thread {} {:.2f} s\n",
             topic, measured, rate, partitions, record_size, acks, linger_ms, fetch_wait_ms, p50,
             p99, p999, max, mean, missing, reader.duplicates(), deliveries.failed,
             static_cast<double>(max_send_lag_ns) / 1e6, produce_rate, consume_rate, client_cpu,
             receive_s, busiest.name, busiest.cpu_s);
  fmt::print(
      "{{\"bench\":\"latency\",\"topic\":\"{}\",\"records\":{},\"rate\":{},\"partitions\":{},"
      "\"record_size\":{},\"acks\":\"{}\",\"linger_ms\":{},\"fetch_wait_ms\":{},"
      "\"p50_ms\":{:.4f},\"p99_ms\":{:.4f},\"p999_ms\":{:.4f},\"max_ms\":{:.4f},"
      "\"mean_ms\":{:.4f},\"missing\":{},\"duplicates\":{},\"failed\":{},"
      "\"max_send_lag_ms\":{:.4f},\"topics\":{},\"send_s\":{:.4f},\"receive_s\":{:.4f},"
      "\"produce_rate\":{:.1f},\"consume_rate\":{:.1f},\"client_cpu_s\":{:.3f},"
      "\"busiest_thread\":\"{}\",\"busiest_thread_cpu_s\":{:.3f},\"queue_full_waits\":{},"
      "\"ok\":{}}}\n",
      topic, measured, rate, partitions, record_size, acks, linger_ms, fetch_wait_ms, p50, p99,
      p999, max, mean, missing, reader.duplicates(), deliveries.failed,
      static_cast<double>(max_send_lag_ns) / 1e6, topics.size(), send_s, receive_s, produce_rate,
      consume_rate, client_cpu, busiest.name, busiest.cpu_s, queue_full,
      complete ? "true" : "false");
  return complete ? kExitOk : kExitFailed;
}

// Runs one admin request and waits (bounded) for its result event.
rd_kafka_event_t* AdminWait(rd_kafka_queue_t* queue) {
  rd_kafka_event_t* ev = rd_kafka_queue_poll(queue, kMetadataTimeoutMs + 5000);
  if (ev == nullptr) fmt::print(stderr, "kafka_perf: no admin result\n");
  return ev;
}

// The error of the single topic in a Create/DeleteTopics result, or the request's error.
rd_kafka_resp_err_t AdminTopicError(rd_kafka_event_t* ev, std::string* message) {
  if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    *message = rd_kafka_event_error_string(ev);
    return rd_kafka_event_error(ev);
  }
  const rd_kafka_topic_result_t** results = nullptr;
  size_t count = 0;
  if (rd_kafka_event_type(ev) == RD_KAFKA_EVENT_CREATETOPICS_RESULT) {
    results = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &count);
  } else {
    results = rd_kafka_DeleteTopics_result_topics(rd_kafka_event_DeleteTopics_result(ev), &count);
  }
  if (count != 1) {
    *message = fmt::format("{} topic results", count);
    return RD_KAFKA_RESP_ERR__BAD_MSG;
  }
  rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[0]);
  const char* msg = rd_kafka_topic_result_error_string(results[0]);
  *message = msg != nullptr ? msg : rd_kafka_err2str(err);
  return err;
}

int AdminTopic(Options& opt, bool create) {
  if (!opt.CheckKnown(create ? std::vector<std::string>{"bootstrap", "topic", "partitions",
                                                        "replication-factor", "if-not-exists"}
                             : std::vector<std::string>{"bootstrap", "topic"})) {
    return kExitUsage;
  }
  const std::string bootstrap = opt.Str("bootstrap");
  const std::string topic = opt.Str("topic");
  const int64_t partitions = opt.Int("partitions", 1, 1, 1 << 20);
  const int64_t replication = opt.Int("replication-factor", 1, 1, 1000);
  if (!opt.ok()) return kExitUsage;
  if (bootstrap.empty() || topic.empty() || (create && !opt.Has("partitions"))) {
    fmt::print(stderr,
               "kafka_perf: --bootstrap, --topic (and --partitions to create) are "
               "required\n");
    return kExitUsage;
  }
  Conf conf;
  conf.Set("bootstrap.servers", bootstrap);
  conf.SetAll(opt.props());
  if (!conf.ok()) return kExitUsage;
  rd_kafka_t* rk = conf.NewClient(RD_KAFKA_PRODUCER);
  if (rk == nullptr) return kExitFailed;
  rd_kafka_queue_t* queue = rd_kafka_queue_new(rk);
  char errstr[512];
  if (create) {
    rd_kafka_NewTopic_t* nt =
        rd_kafka_NewTopic_new(topic.c_str(), static_cast<int>(partitions),
                              static_cast<int>(replication), errstr, sizeof(errstr));
    if (nt == nullptr) {
      fmt::print(stderr, "kafka_perf: {}\n", errstr);
      rd_kafka_queue_destroy(queue);
      rd_kafka_destroy(rk);
      return kExitUsage;
    }
    rd_kafka_CreateTopics(rk, &nt, 1, nullptr, queue);
    rd_kafka_NewTopic_destroy(nt);
  } else {
    rd_kafka_DeleteTopic_t* dt = rd_kafka_DeleteTopic_new(topic.c_str());
    rd_kafka_DeleteTopics(rk, &dt, 1, nullptr, queue);
    rd_kafka_DeleteTopic_destroy(dt);
  }
  int rc = kExitFailed;
  if (rd_kafka_event_t* ev = AdminWait(queue)) {
    std::string message;
    rd_kafka_resp_err_t err = AdminTopicError(ev, &message);
    rd_kafka_event_destroy(ev);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR ||
        (create && opt.Has("if-not-exists") && err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)) {
      rc = kExitOk;
    } else {
      fmt::print(stderr, "kafka_perf: {} {}: {} ({})\n", create ? "create" : "delete", topic,
                 rd_kafka_err2name(err), message);
    }
  }
  // A created topic is usable once every partition has a leader in the metadata.
  if (rc == kExitOk && create &&
      TopicPartitions(rk, topic, opt.Has("if-not-exists") ? 0 : static_cast<int>(partitions)) < 0) {
    rc = kExitFailed;
  }
  rd_kafka_queue_destroy(queue);
  rd_kafka_destroy(rk);
  if (rc == kExitOk) {
    fmt::print("{{\"bench\":\"{}\",\"topic\":\"{}\",\"ok\":true}}\n",
               create ? "create-topic" : "delete-topic", topic);
  }
  return rc;
}

int Usage() {
  fmt::print(stderr,
             "usage: kafka_perf produce|consume|latency|create-topic|delete-topic "
             "--bootstrap HOST:PORT --topic T [options] [-X key=value ...]\n"
             "(the options of each command are listed at the top of bench/kafka_perf.cc)\n");
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage();
  const std::string command = argv[1];
  Options opt;
  if (!opt.Parse(argc, argv, 2, {"if-not-exists"})) return kExitUsage;
  if (command == "produce") return Produce(opt);
  if (command == "consume") return Consume(opt);
  if (command == "latency") return Latency(opt);
  if (command == "create-topic") return AdminTopic(opt, /*create=*/true);
  if (command == "delete-topic") return AdminTopic(opt, /*create=*/false);
  return Usage();
}
