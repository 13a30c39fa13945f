// Drives a controller quorum through ControllerService over TCP, for bench/quorum-bench.
//
//   quorum_load create --targets H:P[,H:P...] --topics N --partitions P [--concurrency C]
//       Registers a stand-in broker (id 9999, so replicas can be placed; it never heartbeats,
//       so the controllers need a long broker.session.timeout.ms), then creates N topics
//       of P partitions each from C threads, one topic per CreateTopics call. Prints one JSON
//       line: topics/s, partitions/s, call latency p50/p99 (ms), errors.
//   quorum_load await-leader --targets ... --above-epoch E [--timeout-ms T]
//       Polls DescribeQuorum on every target until one names a leader in an epoch > E.
//       Prints {"leader":..,"epoch":..,"ms":..} (ms since this tool started).
//   quorum_load watch --targets H:P --from OFFSET
//       Follows WatchMetadata from OFFSET until the stream reaches the quorum's high
//       watermark. Prints the time, the updates and records received, whether it began with a
//       snapshot.
//
// Every wait is bounded; a failure exits 1 with one line on stderr.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "proto/runnel/controller.grpc.pb.h"

namespace {

namespace ctl = runnel::controller;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string mode;
  std::vector<std::string> targets;
  int topics = 1000;
  int partitions = 1;
  int concurrency = 8;
  int64_t above_epoch = 0;
  int64_t timeout_ms = 30000;
  int64_t from = 0;
};

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "quorum_load: %s\n", why.c_str());
  std::exit(1);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

Args Parse(int argc, char** argv) {
  if (argc < 2) Fail("usage: quorum_load create|await-leader|watch --targets H:P,... [...]");
  Args a;
  a.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--targets")
      a.targets = Split(v);
    else if (k == "--topics")
      a.topics = std::stoi(v);
    else if (k == "--partitions")
      a.partitions = std::stoi(v);
    else if (k == "--concurrency")
      a.concurrency = std::stoi(v);
    else if (k == "--above-epoch")
      a.above_epoch = std::stoll(v);
    else if (k == "--timeout-ms")
      a.timeout_ms = std::stoll(v);
    else if (k == "--from")
      a.from = std::stoll(v);
    else
      Fail("unknown flag " + k);
  }
  if (a.targets.empty()) Fail("--targets is required");
  return a;
}

std::unique_ptr<ctl::ControllerService::Stub> Stub(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  return ctl::ControllerService::NewStub(
      grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args));
}

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

int Create(const Args& a) {
  auto stub = Stub(a.targets[0]);
  {
    ctl::RegisterBrokerRequest req;
    req.set_broker_id(9999);
    auto* ep = req.add_endpoints();
    ep->set_name("PLAINTEXT");
    ep->set_host("127.0.0.1");
    ep->set_port(1);
    ctl::RegisterBrokerResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    grpc::Status st = stub->RegisterBroker(&ctx, req, &resp);
    if (!st.ok() || resp.error_code() != 0) {
      Fail("RegisterBroker: " + st.error_message() + " " + resp.error_message());
    }
  }
  const std::string prefix = "qb-" + std::to_string(std::random_device()() % 1000000) + "-";
  std::atomic<int> next{0};
  std::atomic<int> errors{0};
  std::mutex mu;
  std::vector<double> latencies;
  latencies.reserve(a.topics);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(std::max(a.concurrency, 0)));
  for (int t = 0; t < a.concurrency; ++t) {
    threads.emplace_back([&] {
      auto my_stub = Stub(a.targets[0]);
      std::vector<double> mine;
      for (int i = next++; i < a.topics; i = next++) {
        ctl::CreateTopicsRequest req;
        auto* topic = req.add_topics();
        topic->set_name(prefix + std::to_string(i));
        topic->set_num_partitions(a.partitions);
        topic->set_replication_factor(1);
        ctl::CreateTopicsResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        const auto t0 = Clock::now();
        grpc::Status st = my_stub->CreateTopics(&ctx, req, &resp);
        mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (!st.ok() || resp.topics_size() != 1 || resp.topics(0).error_code() != 0) {
          if (errors++ < 3) {
            std::fprintf(stderr, "CreateTopics %s: %s %s\n", topic->name().c_str(),
                         st.error_message().c_str(),
                         resp.topics_size() ? resp.topics(0).error_message().c_str() : "");
          }
        }
      }
      std::lock_guard lock(mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) {
    if (latencies.empty()) return 0.0;
    return latencies[std::min(latencies.size() - 1, static_cast<size_t>(p * latencies.size()))];
  };
  std::printf(
      "{\"topics\":%d,\"partitions_each\":%d,\"concurrency\":%d,\"seconds\":%.3f,"
      "\"topics_per_s\":%.1f,\"partitions_per_s\":%.1f,\"p50_ms\":%.2f,\"p99_ms\":%.2f,"
      "\"errors\":%d}\n",
      a.topics, a.partitions, a.concurrency, secs, a.topics / secs,
      static_cast<double>(a.topics) * a.partitions / secs, pct(0.5), pct(0.99), errors.load());
  return errors.load() == 0 ? 0 : 1;
}

int AwaitLeader(const Args& a) {
  const auto start = Clock::now();
  std::vector<std::unique_ptr<ctl::ControllerService::Stub>> stubs;
  for (const auto& t : a.targets) stubs.push_back(Stub(t));
  while (MsSince(start) < a.timeout_ms) {
    for (auto& stub : stubs) {
      ctl::DescribeQuorumResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
      grpc::Status st = stub->DescribeQuorum(&ctx, ctl::DescribeQuorumRequest(), &resp);
      if (st.ok() && resp.error_code() == 0 && resp.leader_id() >= 0 &&
          resp.leader_epoch() > a.above_epoch) {
        std::printf("{\"leader\":%d,\"epoch\":%lld,\"ms\":%lld}\n", resp.leader_id(),
                    static_cast<long long>(resp.leader_epoch()),
                    static_cast<long long>(MsSince(start)));
        return 0;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Fail("no leader above epoch " + std::to_string(a.above_epoch) + " within the timeout");
}

int Watch(const Args& a) {
  auto stub = Stub(a.targets[0]);
  ctl::DescribeQuorumResponse quorum;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status st = stub->DescribeQuorum(&ctx, ctl::DescribeQuorumRequest(), &quorum);
    if (!st.ok()) Fail("DescribeQuorum: " + st.error_message());
  }
  const int64_t last = quorum.high_watermark() - 1;
  const auto start = Clock::now();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(a.timeout_ms));
  ctl::WatchRequest req;
  req.set_from_offset(a.from);
  auto reader = stub->WatchMetadata(&ctx, req);
  ctl::MetadataUpdate update;
  int64_t updates = 0, records = 0;
  bool snapshot_first = false;
  while (reader->Read(&update)) {
    if (updates == 0) snapshot_first = update.is_snapshot();
    ++updates;
    records += update.records_size();
    if (update.offset() >= last) break;
  }
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  ctx.TryCancel();
  if (update.offset() < last) Fail("the watch ended before the high watermark");
  std::printf(
      "{\"from\":%lld,\"to\":%lld,\"ms\":%.1f,\"updates\":%lld,\"records\":%lld,"
      "\"snapshot_first\":%s}\n",
      static_cast<long long>(a.from), static_cast<long long>(last), ms,
      static_cast<long long>(updates), static_cast<long long>(records),
      snapshot_first ? "true" : "false");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a = Parse(argc, argv);
  if (a.mode == "create") return Create(a);
  if (a.mode == "await-leader") return AwaitLeader(a);
  if (a.mode == "watch") return Watch(a);
  Fail("unknown mode " + a.mode);
}
