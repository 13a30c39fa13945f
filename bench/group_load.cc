// Load on the group coordinator: many one-member classic consumer groups committing offsets,
// spoken directly in the Kafka protocol with Runnel's generated codec (no client library, so
// the client's own cost is small and every request is visible).
//
//   group_load --bootstrap HOST:PORT --topic T [--partitions P] [--groups N]
//              [--connections C] [--commit-interval-ms MS] [--heartbeat-interval-ms MS]
//              [--session-timeout-ms MS] [--duration-s S] [--warmup-s S]
//              [--setup-timeout-s S] [--group-prefix PREFIX] [--watch NAME=PID ...]
//
// What it does:
//   1. ApiVersions (picks for each API the highest version both sides know), CreateTopics of
//      T with P partitions (TOPIC_ALREADY_EXISTS is fine), then Metadata until every
//      partition of T has a leader (its partition count is taken from there).
//   2. N groups, group i on connection i % C, all set up at once: FindCoordinator; JoinGroup
//      as a new member (v4+: MEMBER_ID_REQUIRED, then again with the member id it gave);
//      SyncGroup as the leader, assigning itself every partition of T (protocol type
//      "consumer", protocol "range", ConsumerProtocol subscription and assignment bytes).
//      A group whose join/sync fails with a retriable error tries again 100 ms later.
//   3. Once every group is stable: every group sends an OffsetCommit (its generation and
//      member id, every partition, offsets counting up) every --commit-interval-ms, the
//      groups' schedules spread evenly over the interval, and a Heartbeat every
//      --heartbeat-interval-ms. Requests are pipelined on the C connections (many in flight
//      per connection, matched by correlation id). The schedule is fixed: a commit falls due
//      whether or not earlier ones were answered, but a group keeps at most one commit in
//      flight; a commit due while the previous one is unanswered is counted as skipped (so
//      achieved < offered shows a coordinator that cannot keep up, and latency is not hidden
//      by waiting). Heartbeat/commit errors that end the membership (REBALANCE_IN_PROGRESS,
//      UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION) make the group join again (counted).
//   4. After --warmup-s, commits falling due during --duration-s are measured: latency from
//      send to answer, answers with no error, errors by API and code. The CPU time of every
//      --watch process over the window (from /proc/PID/stat) and its RSS (sampled every
//      second from /proc/PID/status) are reported with them.
//
// Human-readable results go to stderr; stdout gets exactly one JSON line. Exit code 0 when
// every group became stable, no connection failed and every measured commit was answered.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <queue>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/protocol/messages.h"

namespace {

using runnel::protocol::ApiKey;
using runnel::protocol::ApiVersionsRequest;
using runnel::protocol::ApiVersionsResponse;
using runnel::protocol::Bytes;
using runnel::protocol::CreateTopicsRequest;
using runnel::protocol::CreateTopicsResponse;
using runnel::protocol::ErrorCode;
using runnel::protocol::FindCoordinatorRequest;
using runnel::protocol::FindCoordinatorResponse;
using runnel::protocol::HeartbeatRequest;
using runnel::protocol::HeartbeatResponse;
using runnel::protocol::JoinGroupRequest;
using runnel::protocol::JoinGroupResponse;
using runnel::protocol::MetadataRequest;
using runnel::protocol::MetadataResponse;
using runnel::protocol::OffsetCommitRequest;
using runnel::protocol::OffsetCommitResponse;
using runnel::protocol::Reader;
using runnel::protocol::RequestHeader;
using runnel::protocol::RequestHeaderVersion;
using runnel::protocol::ResponseHeader;
using runnel::protocol::ResponseHeaderVersion;
using runnel::protocol::SyncGroupRequest;
using runnel::protocol::SyncGroupResponse;
using runnel::protocol::Writer;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;
constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;
// Frames above this are treated as a broken stream rather than allocated.
constexpr uint32_t kMaxFrame = 64u << 20;
constexpr int64_t kRetryDelayNs = 100 * kMs;
constexpr int64_t kDrainTimeoutNs = 15 * kSec;
constexpr int64_t kSampleIntervalNs = 1 * kSec;
constexpr const char* kProtocolType = "consumer";
constexpr const char* kAssignor = "range";

constexpr ErrorCode kNone = ErrorCode::kNone;
constexpr ErrorCode kCoordinatorNotAvailable = ErrorCode::kCoordinatorNotAvailable;
constexpr ErrorCode kNotCoordinator = ErrorCode::kNotCoordinator;
constexpr ErrorCode kIllegalGeneration = ErrorCode::kIllegalGeneration;
constexpr ErrorCode kUnknownMemberId = ErrorCode::kUnknownMemberId;
constexpr ErrorCode kRebalanceInProgress = ErrorCode::kRebalanceInProgress;
constexpr ErrorCode kUnsupportedVersion = ErrorCode::kUnsupportedVersion;
constexpr ErrorCode kTopicAlreadyExists = ErrorCode::kTopicAlreadyExists;
constexpr ErrorCode kMemberIdRequired = ErrorCode::kMemberIdRequired;

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * kSec + ts.tv_nsec;
}

double SelfCpuSeconds() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::string ErrorText(ErrorCode code) { return std::string(runnel::protocol::ErrorName(code)); }

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += c;
    }
  }
  return out;
}

double Percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(q * static_cast<double>(sorted.size()));
  if (rank >= sorted.size()) rank = sorted.size() - 1;
  return static_cast<double>(sorted[rank]) / 1e6;
}

// ---------------------------------------------------------------------------------------------
// Command line.

class Options {
 public:
  bool Parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) return Error("unexpected argument " + arg);
      if (i + 1 >= argc) return Error(arg + " needs a value");
      std::string name = arg.substr(2);
      if (name == "watch") {
        watches_.push_back(argv[++i]);
      } else {
        values_[name] = argv[++i];
      }
    }
    return true;
  }
  bool CheckKnown(const std::vector<std::string>& known) {
    for (const auto& [name, value] : values_) {
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        return Error("unknown option --" + name);
      }
    }
    return true;
  }
  std::string Str(const std::string& name, const std::string& def = "") const {
    auto it = values_.find(name);
    return it == values_.end() ? def : it->second;
  }
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
  const std::vector<std::string>& watches() const { return watches_; }
  bool ok() const { return ok_; }
  bool Error(const std::string& message) {
    fmt::print(stderr, "group_load: {}\n", message);
    ok_ = false;
    return false;
  }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> watches_;
  bool ok_ = true;
};

// ---------------------------------------------------------------------------------------------
// A process whose CPU time and RSS are reported (brokerd, storaged).

struct Watched {
  std::string name;
  int pid = 0;
  double cpu_start = 0, cpu_end = 0;
  int64_t rss_kib_before = 0;  // before any group existed
  int64_t rss_kib_start = 0;   // at the start of the measured window
  int64_t rss_kib_end = 0;
  int64_t rss_kib_max = 0;  // during the window
  bool alive = true;

  double CpuSeconds() {
    std::ifstream f(fmt::format("/proc/{}/stat", pid));
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    size_t paren = text.rfind(')');
    if (paren == std::string::npos) {
      alive = false;
      return 0;
    }
    std::istringstream rest(text.substr(paren + 2));
    std::vector<std::string> fields;
    std::string field;
    while (rest >> field) fields.push_back(field);
    // stat(5) fields 14 (utime) and 15 (stime), counted from field 3 (state) here.
    if (fields.size() < 13) {
      alive = false;
      return 0;
    }
    static const double kTicks = static_cast<double>(sysconf(_SC_CLK_TCK));
    return static_cast<double>(std::stoll(fields[11]) + std::stoll(fields[12])) / kTicks;
  }
  int64_t RssKib() {
    std::ifstream f(fmt::format("/proc/{}/status", pid));
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::strtoll(line.c_str() + 6, nullptr, 10);
    }
    alive = false;
    return 0;
  }
};

// ---------------------------------------------------------------------------------------------
// Frames.

// Appends one request frame (length, header, body) to `out`.
template <typename Request>
void AppendRequest(Bytes& out, const Request& request, int16_t version, int32_t correlation_id) {
  const size_t start = out.size();
  Writer w(out);
  w.WriteInt32(0);  // length, patched below
  RequestHeader header;
  header.api_key = Request::kApiKey;
  header.api_version = version;
  header.correlation_id = correlation_id;
  header.client_id = "group_load";
  header.Encode(w, RequestHeaderVersion(Request::kApiKey, version));
  request.Encode(w, version);
  const uint32_t length = static_cast<uint32_t>(out.size() - start - 4);
  for (int i = 0; i < 4; ++i) out[start + i] = static_cast<uint8_t>(length >> (24 - 8 * i));
}

// Decodes a response frame (after the length) whose correlation id is already known to match.
template <typename Response>
absl::Status DecodeResponse(std::span<const uint8_t> frame, int16_t version, Response* out) {
  Reader r(frame);
  ResponseHeader header;
  if (absl::Status s = header.Decode(r, ResponseHeaderVersion(Response::kApiKey, version));
      !s.ok()) {
    return s;
  }
  return out->Decode(r, version);
}

int32_t PeekCorrelationId(std::span<const uint8_t> frame) {
  return static_cast<int32_t>((uint32_t{frame[0]} << 24) | (uint32_t{frame[1]} << 16) |
                              (uint32_t{frame[2]} << 8) | uint32_t{frame[3]});
}

bool SplitHostPort(const std::string& hp, std::string* host, int* port) {
  size_t colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = hp.substr(0, colon);
  *port = std::atoi(hp.c_str() + colon + 1);
  return *port > 0 && *port < 65536;
}

// A connected TCP socket (TCP_NODELAY), or -1 with `error` set.
int ConnectTcp(const std::string& host, int port, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *error = fmt::format("resolve {}: {}", host, gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    *error = fmt::format("connect {}:{}: {}", host, port, strerror(errno));
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

// One request at a time, blocking with a timeout: the setup before the load.
class BlockingClient {
 public:
  ~BlockingClient() {
    if (fd_ >= 0) close(fd_);
  }
  bool Connect(const std::string& host, int port, std::string* error) {
    fd_ = ConnectTcp(host, port, error);
    if (fd_ < 0) return false;
    timeval tv{30, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    return true;
  }

  template <typename Request>
  absl::Status Call(const Request& request, int16_t version,
                    typename Request::ResponseType* response) {
    Bytes out;
    const int32_t cid = ++correlation_id_;
    AppendRequest(out, request, version, cid);
    size_t sent = 0;
    while (sent < out.size()) {
      ssize_t n = send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return absl::UnavailableError(fmt::format("send: {}", strerror(errno)));
      sent += static_cast<size_t>(n);
    }
    uint8_t len_buf[4];
    if (!ReadExact(len_buf, 4)) return absl::UnavailableError("connection closed or timed out");
    const uint32_t len = (uint32_t{len_buf[0]} << 24) | (uint32_t{len_buf[1]} << 16) |
                         (uint32_t{len_buf[2]} << 8) | uint32_t{len_buf[3]};
    if (len < 4 || len > kMaxFrame) return absl::DataLossError(fmt::format("frame of {} B", len));
    Bytes frame(len);
    if (!ReadExact(frame.data(), len)) return absl::UnavailableError("connection closed");
    if (PeekCorrelationId(frame) != cid) return absl::DataLossError("correlation id mismatch");
    return DecodeResponse(frame, version, response);
  }

 private:
  bool ReadExact(uint8_t* p, size_t n) {
    while (n > 0) {
      ssize_t r = recv(fd_, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }

  int fd_ = -1;
  int32_t correlation_id_ = 0;
};

// The version used for each API: the highest both this codec and the broker know.
class Versions {
 public:
  void Set(int16_t key, int16_t min, int16_t max) { ranges_[key] = {min, max}; }
  // -1 when the broker does not offer the API or the ranges do not meet.
  template <typename Request>
  int16_t Pick() const {
    auto it = ranges_.find(Request::kApiKey);
    if (it == ranges_.end()) return -1;
    int16_t v = std::min(Request::kMaxVersion, it->second.second);
    return v >= it->second.first && v >= Request::kMinVersion ? v : -1;
  }

 private:
  std::map<int16_t, std::pair<int16_t, int16_t>> ranges_;
};

// ConsumerProtocolSubscription v1 (not flexible): topics, null user data, no owned partitions.
Bytes Subscription(const std::string& topic) {
  Bytes b;
  Writer w(b);
  w.WriteInt16(1);
  w.WriteArrayLength(1, false);
  w.WriteString(topic, false);
  w.WriteNullableBytes(std::nullopt, false, true);
  w.WriteArrayLength(0, false);
  return b;
}

// ConsumerProtocolAssignment v1: every partition of `topic`, null user data.
Bytes Assignment(const std::string& topic, int partitions) {
  Bytes b;
  Writer w(b);
  w.WriteInt16(1);
  w.WriteArrayLength(1, false);
  w.WriteString(topic, false);
  w.WriteArrayLength(static_cast<size_t>(partitions), false);
  for (int p = 0; p < partitions; ++p) w.WriteInt32(p);
  w.WriteNullableBytes(std::nullopt, false, true);
  return b;
}

// ---------------------------------------------------------------------------------------------
// The load.

struct Config {
  std::string host;
  int port = 0;
  std::string topic;
  int partitions = 0;
  int groups = 0;
  int connections = 0;
  int64_t commit_interval_ns = 0;
  int64_t heartbeat_interval_ns = 0;
  int32_t session_timeout_ms = 0;
  int64_t duration_ns = 0;
  int64_t warmup_ns = 0;
  int64_t setup_timeout_ns = 0;
  std::string group_prefix;
};

struct ChosenVersions {
  int16_t find_coordinator = -1, join = -1, sync = -1, heartbeat = -1, commit = -1;
};

enum class Phase { kFind, kJoin, kSync, kStable };

enum class TimerKind { kFind, kJoin, kHeartbeat, kCommit, kSample, kWindowStart, kWindowEnd };

struct Timer {
  int64_t due = 0;
  int32_t group = -1;
  TimerKind kind = TimerKind::kFind;
  uint32_t epoch = 0;  // retry timers of an older membership attempt are ignored
  bool operator>(const Timer& o) const { return due > o.due; }
};

struct Group {
  std::string id;
  int conn = 0;
  Phase phase = Phase::kFind;
  std::string member_id;
  int32_t generation = -1;
  uint32_t epoch = 0;
  bool heartbeat_in_flight = false;
  bool commit_in_flight = false;
  bool heartbeat_timer_running = false;
  bool ever_stable = false;
  int64_t next_offset = 0;
};

struct Pending {
  int32_t group = -1;
  int16_t api_key = 0;
  int16_t version = 0;
  int64_t sent_ns = 0;
  bool measured = false;  // a commit falling due inside the measured window
};

struct Connection {
  int fd = -1;
  Bytes out;
  size_t out_pos = 0;
  Bytes in;
  std::unordered_map<int32_t, Pending> pending;
  bool want_write = false;
};

class Load {
 public:
  Load(Config config, ChosenVersions versions, std::vector<Watched> watched)
      : cfg_(std::move(config)),
        v_(versions),
        watched_(std::move(watched)),
        subscription_(Subscription(cfg_.topic)),
        assignment_(Assignment(cfg_.topic, cfg_.partitions)) {}

  ~Load() {
    for (Connection& c : conns_) {
      if (c.fd >= 0) close(c.fd);
    }
    if (epoll_fd_ >= 0) close(epoll_fd_);
  }

  bool Run();
  int Report();

 private:
  // Setup and membership.
  void StartFind(int32_t g);
  void SendJoin(int32_t g);
  void SendSync(int32_t g);
  void Rejoin(int32_t g, bool reset_member, int64_t delay_ns);
  void BecomeStable(int32_t g);
  // Steady state.
  void OnCommitDue(int32_t g, int64_t due);
  void OnHeartbeatDue(int32_t g);
  void OnWindowStart();
  void OnWindowEnd();
  void Sample();
  // Responses.
  void OnResponse(Connection& c, std::span<const uint8_t> frame);
  void OnFindCoordinator(const Pending& p, std::span<const uint8_t> frame);
  void OnJoin(const Pending& p, std::span<const uint8_t> frame);
  void OnSync(const Pending& p, std::span<const uint8_t> frame);
  void OnHeartbeat(const Pending& p, std::span<const uint8_t> frame, int64_t now);
  void OnCommit(const Pending& p, std::span<const uint8_t> frame, int64_t now);
  // Plumbing.
  template <typename Request>
  void Send(int32_t g, const Request& request, int16_t version, bool measured = false);
  void Schedule(int64_t due, int32_t g, TimerKind kind) {
    timers_.push(Timer{due, g, kind, g >= 0 ? groups_[g].epoch : 0});
  }
  void CountError(const std::string& api, ErrorCode code) {
    ++errors_[window_started_ ? 1 : 0][fmt::format("{}:{}", api, ErrorText(code))];
  }
  void CountProblem(const std::string& what) { ++errors_[window_started_ ? 1 : 0][what]; }
  bool FlushWrites();
  bool ReadConnection(Connection& c);
  void Fail(const std::string& message) {
    if (failure_.empty()) failure_ = message;
  }
  bool Done() const;

  Config cfg_;
  ChosenVersions v_;
  std::vector<Watched> watched_;
  const Bytes subscription_;
  const Bytes assignment_;

  int epoll_fd_ = -1;
  std::vector<Connection> conns_;
  std::vector<Group> groups_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  int32_t next_correlation_id_ = 0;
  std::string failure_;
  std::string coordinator_mismatch_;

  int64_t setup_start_ns_ = 0;
  int64_t all_stable_ns_ = 0;  // 0 until every group was stable once
  int64_t window_start_ns_ = 0, window_end_ns_ = 0;
  bool window_started_ = false, window_ended_ = false;
  int64_t drain_deadline_ns_ = 0;
  int stable_count_ = 0;
  int64_t finds_ = 0, joins_ = 0, syncs_ = 0;
  int64_t rejoins_after_stable_ = 0;  // memberships lost after the setup (in any phase)
  int64_t rejoins_in_window_ = 0;

  // Measured window.
  int64_t offered_ = 0, sent_ = 0, ok_ = 0, failed_ = 0;
  int64_t skipped_in_flight_ = 0, skipped_not_stable_ = 0;
  int64_t measured_in_flight_ = 0;
  int64_t heartbeats_ok_ = 0;
  int64_t max_send_lag_ns_ = 0;
  std::vector<int64_t> commit_latency_ns_;
  std::vector<int64_t> heartbeat_latency_ns_;
  double client_cpu_start_ = 0, client_cpu_end_ = 0;
  std::map<std::string, int64_t> errors_[2];  // [0] setup and warm-up, [1] measured window
};

template <typename Request>
void Load::Send(int32_t g, const Request& request, int16_t version, bool measured) {
  Connection& c = conns_[groups_[g].conn];
  const int32_t cid = ++next_correlation_id_;
  AppendRequest(c.out, request, version, cid);
  c.pending[cid] = Pending{g, Request::kApiKey, version, NowNs(), measured};
}

void Load::StartFind(int32_t g) {
  Group& group = groups_[g];
  group.phase = Phase::kFind;
  ++finds_;
  FindCoordinatorRequest req;
  if (v_.find_coordinator >= 4) {
    req.coordinator_keys = {group.id};
  } else {
    req.key = group.id;
  }
  req.key_type = 0;
  Send(g, req, v_.find_coordinator);
}

void Load::SendJoin(int32_t g) {
  Group& group = groups_[g];
  group.phase = Phase::kJoin;
  ++joins_;
  JoinGroupRequest req;
  req.group_id = group.id;
  req.session_timeout_ms = cfg_.session_timeout_ms;
  req.rebalance_timeout_ms = 300000;  // the Java consumer's max.poll.interval.ms default
  req.member_id = group.member_id;
  req.group_instance_id = std::nullopt;
  req.protocol_type = kProtocolType;
  req.protocols.push_back({kAssignor, subscription_, {}});
  req.reason = std::nullopt;
  Send(g, req, v_.join);
}

void Load::SendSync(int32_t g) {
  Group& group = groups_[g];
  group.phase = Phase::kSync;
  ++syncs_;
  SyncGroupRequest req;
  req.group_id = group.id;
  req.generation_id = group.generation;
  req.member_id = group.member_id;
  req.group_instance_id = std::nullopt;
  if (v_.sync >= 5) {
    req.protocol_type = kProtocolType;
    req.protocol_name = kAssignor;
  }
  req.assignments.push_back({group.member_id, assignment_, {}});
  Send(g, req, v_.sync);
}

// The membership ended or could not be made: join again (after `delay_ns`), as a new member
// when `reset_member`.
void Load::Rejoin(int32_t g, bool reset_member, int64_t delay_ns) {
  Group& group = groups_[g];
  if (group.phase == Phase::kStable) --stable_count_;
  if (group.ever_stable) {
    ++rejoins_after_stable_;
    if (window_started_ && !window_ended_) ++rejoins_in_window_;
  }
  ++group.epoch;
  if (reset_member) group.member_id.clear();
  group.generation = -1;
  group.phase = Phase::kJoin;
  if (delay_ns > 0) {
    Schedule(NowNs() + delay_ns, g, TimerKind::kJoin);
  } else {
    SendJoin(g);
  }
}

void Load::BecomeStable(int32_t g) {
  Group& group = groups_[g];
  group.phase = Phase::kStable;
  group.ever_stable = true;
  ++stable_count_;
  if (!group.heartbeat_timer_running) {
    group.heartbeat_timer_running = true;
    Schedule(NowNs() + cfg_.heartbeat_interval_ns, g, TimerKind::kHeartbeat);
  }
  if (all_stable_ns_ == 0 && stable_count_ == cfg_.groups) {
    // Everyone is in: start the commit schedule, spread evenly over one interval.
    all_stable_ns_ = NowNs();
    fmt::print(stderr, "group_load: {} groups stable after {:.2f} s ({} joins, {} syncs)\n",
               cfg_.groups, static_cast<double>(all_stable_ns_ - setup_start_ns_) / kSec, joins_,
               syncs_);
    for (int32_t i = 0; i < cfg_.groups; ++i) {
      Schedule(all_stable_ns_ + cfg_.commit_interval_ns * i / cfg_.groups, i, TimerKind::kCommit);
    }
    window_start_ns_ = all_stable_ns_ + cfg_.warmup_ns;
    window_end_ns_ = window_start_ns_ + cfg_.duration_ns;
    Schedule(window_start_ns_, -1, TimerKind::kWindowStart);
    Schedule(window_end_ns_, -1, TimerKind::kWindowEnd);
  }
}

void Load::OnCommitDue(int32_t g, int64_t due) {
  if (due >= window_end_ns_) return;  // the schedule ends with the window
  Schedule(due + cfg_.commit_interval_ns, g, TimerKind::kCommit);
  const bool measured = due >= window_start_ns_;
  Group& group = groups_[g];
  if (measured) ++offered_;
  if (group.phase != Phase::kStable) {
    if (measured) ++skipped_not_stable_;
    return;
  }
  if (group.commit_in_flight) {
    if (measured) ++skipped_in_flight_;
    return;
  }
  const int64_t lag = NowNs() - due;
  if (measured) {
    ++sent_;
    ++measured_in_flight_;
    max_send_lag_ns_ = std::max(max_send_lag_ns_, lag);
  }
  group.commit_in_flight = true;
  OffsetCommitRequest req;
  req.group_id = group.id;
  req.generation_id_or_member_epoch = group.generation;
  req.member_id = group.member_id;
  req.group_instance_id = std::nullopt;
  req.retention_time_ms = -1;
  auto& topic = req.topics.emplace_back();
  topic.name = cfg_.topic;
  const int64_t offset = ++group.next_offset;
  for (int p = 0; p < cfg_.partitions; ++p) {
    auto& part = topic.partitions.emplace_back();
    part.partition_index = p;
    part.committed_offset = offset;
    part.committed_leader_epoch = -1;
    part.committed_metadata = "";
  }
  Send(g, req, v_.commit, measured);
}

void Load::OnHeartbeatDue(int32_t g) {
  Schedule(NowNs() + cfg_.heartbeat_interval_ns, g, TimerKind::kHeartbeat);
  Group& group = groups_[g];
  if (group.phase != Phase::kStable || group.heartbeat_in_flight) return;
  group.heartbeat_in_flight = true;
  HeartbeatRequest req;
  req.group_id = group.id;
  req.generation_id = group.generation;
  req.member_id = group.member_id;
  req.group_instance_id = std::nullopt;
  Send(g, req, v_.heartbeat, window_started_ && !window_ended_);
}

void Load::OnWindowStart() {
  window_started_ = true;
  for (Watched& w : watched_) {
    w.cpu_start = w.CpuSeconds();
    w.rss_kib_start = w.rss_kib_max = w.RssKib();
  }
  client_cpu_start_ = SelfCpuSeconds();
  fmt::print(stderr, "group_load: measuring for {:.0f} s\n",
             static_cast<double>(cfg_.duration_ns) / kSec);
}

void Load::OnWindowEnd() {
  window_ended_ = true;
  for (Watched& w : watched_) {
    w.cpu_end = w.CpuSeconds();
    w.rss_kib_end = w.RssKib();
    w.rss_kib_max = std::max(w.rss_kib_max, w.rss_kib_end);
  }
  client_cpu_end_ = SelfCpuSeconds();
  drain_deadline_ns_ = NowNs() + kDrainTimeoutNs;
}

void Load::Sample() {
  if (window_started_ && !window_ended_) {
    for (Watched& w : watched_) w.rss_kib_max = std::max(w.rss_kib_max, w.RssKib());
  }
  for (Watched& w : watched_) {
    if (!w.alive) Fail(fmt::format("{} (pid {}) is gone", w.name, w.pid));
  }
  Schedule(NowNs() + kSampleIntervalNs, -1, TimerKind::kSample);
}

void Load::OnResponse(Connection& c, std::span<const uint8_t> frame) {
  const int64_t now = NowNs();
  auto it = c.pending.find(PeekCorrelationId(frame));
  if (it == c.pending.end()) {
    Fail(fmt::format("a response with unknown correlation id {}", PeekCorrelationId(frame)));
    return;
  }
  const Pending p = it->second;
  c.pending.erase(it);
  switch (static_cast<ApiKey>(p.api_key)) {
    case ApiKey::kFindCoordinator:
      OnFindCoordinator(p, frame);
      break;
    case ApiKey::kJoinGroup:
      OnJoin(p, frame);
      break;
    case ApiKey::kSyncGroup:
      OnSync(p, frame);
      break;
    case ApiKey::kHeartbeat:
      OnHeartbeat(p, frame, now);
      break;
    case ApiKey::kOffsetCommit:
      OnCommit(p, frame, now);
      break;
    default:
      Fail("a response to a request never sent");
  }
}

void Load::OnFindCoordinator(const Pending& p, std::span<const uint8_t> frame) {
  FindCoordinatorResponse resp;
  if (absl::Status s = DecodeResponse(frame, p.version, &resp); !s.ok()) {
    return Fail(fmt::format("FindCoordinator response: {}", s.ToString()));
  }
  ErrorCode error = resp.error_code;
  std::string host = resp.host;
  int32_t port = resp.port;
  if (p.version >= 4) {
    if (resp.coordinators.size() != 1) return Fail("FindCoordinator: not one coordinator back");
    error = resp.coordinators[0].error_code;
    host = resp.coordinators[0].host;
    port = resp.coordinators[0].port;
  }
  if (error != kNone) {
    CountError("FindCoordinator", error);
    ++groups_[p.group].epoch;
    Schedule(NowNs() + kRetryDelayNs, p.group, TimerKind::kFind);
    return;
  }
  // One node: every coordinator is the node connected to. Say so once if it is not.
  if (port != cfg_.port && coordinator_mismatch_.empty()) {
    coordinator_mismatch_ = fmt::format("{}:{}", host, port);
    fmt::print(stderr, "group_load: warning: coordinator {} is not the bootstrap {}:{}\n",
               coordinator_mismatch_, cfg_.host, cfg_.port);
  }
  SendJoin(p.group);
}

void Load::OnJoin(const Pending& p, std::span<const uint8_t> frame) {
  JoinGroupResponse resp;
  if (absl::Status s = DecodeResponse(frame, p.version, &resp); !s.ok()) {
    return Fail(fmt::format("JoinGroup response: {}", s.ToString()));
  }
  Group& group = groups_[p.group];
  switch (resp.error_code) {
    case kNone:
      break;
    case kMemberIdRequired:
      // KIP-394: the first join of a new member only gets its member id.
      CountError("JoinGroup", resp.error_code);
      if (resp.member_id.empty()) return Fail("JoinGroup: MEMBER_ID_REQUIRED without a member id");
      group.member_id = resp.member_id;
      return SendJoin(p.group);
    case kUnknownMemberId:
      CountError("JoinGroup", resp.error_code);
      return Rejoin(p.group, /*reset_member=*/true, kRetryDelayNs);
    case kNotCoordinator:
    case kCoordinatorNotAvailable:
      CountError("JoinGroup", resp.error_code);
      ++group.epoch;
      Schedule(NowNs() + kRetryDelayNs, p.group, TimerKind::kFind);
      return;
    default:
      CountError("JoinGroup", resp.error_code);
      return Rejoin(p.group, /*reset_member=*/false, kRetryDelayNs);
  }
  group.member_id = resp.member_id;
  group.generation = resp.generation_id;
  if (resp.leader != resp.member_id) {
    CountProblem("JoinGroup:NOT_LEADER_OF_ONE_MEMBER_GROUP");
    return Rejoin(p.group, /*reset_member=*/true, kRetryDelayNs);
  }
  if (resp.members.size() != 1 || resp.members[0].member_id != resp.member_id ||
      resp.members[0].metadata != subscription_) {
    CountProblem("JoinGroup:UNEXPECTED_MEMBERS");
  }
  if (p.version >= 7 && resp.protocol_name.value_or("") != kAssignor) {
    CountProblem("JoinGroup:UNEXPECTED_PROTOCOL");
  }
  SendSync(p.group);
}

void Load::OnSync(const Pending& p, std::span<const uint8_t> frame) {
  SyncGroupResponse resp;
  if (absl::Status s = DecodeResponse(frame, p.version, &resp); !s.ok()) {
    return Fail(fmt::format("SyncGroup response: {}", s.ToString()));
  }
  switch (resp.error_code) {
    case kNone:
      break;
    case kUnknownMemberId:
      CountError("SyncGroup", resp.error_code);
      return Rejoin(p.group, /*reset_member=*/true, kRetryDelayNs);
    case kNotCoordinator:
    case kCoordinatorNotAvailable:
      CountError("SyncGroup", resp.error_code);
      ++groups_[p.group].epoch;
      Schedule(NowNs() + kRetryDelayNs, p.group, TimerKind::kFind);
      return;
    default:  // REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, ...
      CountError("SyncGroup", resp.error_code);
      return Rejoin(p.group, /*reset_member=*/false, 0);
  }
  if (resp.assignment != assignment_) CountProblem("SyncGroup:UNEXPECTED_ASSIGNMENT");
  BecomeStable(p.group);
}

void Load::OnHeartbeat(const Pending& p, std::span<const uint8_t> frame, int64_t now) {
  Group& group = groups_[p.group];
  group.heartbeat_in_flight = false;
  HeartbeatResponse resp;
  if (absl::Status s = DecodeResponse(frame, p.version, &resp); !s.ok()) {
    return Fail(fmt::format("Heartbeat response: {}", s.ToString()));
  }
  if (p.measured) heartbeat_latency_ns_.push_back(now - p.sent_ns);
  if (resp.error_code == kNone) {
    if (p.measured) ++heartbeats_ok_;
    return;
  }
  CountError("Heartbeat", resp.error_code);
  if (group.phase != Phase::kStable) return;  // already joining again
  switch (resp.error_code) {
    case kUnknownMemberId:
      return Rejoin(p.group, /*reset_member=*/true, 0);
    case kRebalanceInProgress:
    case kIllegalGeneration:
      return Rejoin(p.group, /*reset_member=*/false, 0);
    default:
      return;  // coordinator errors: the next heartbeat tries again
  }
}

void Load::OnCommit(const Pending& p, std::span<const uint8_t> frame, int64_t now) {
  Group& group = groups_[p.group];
  group.commit_in_flight = false;
  if (p.measured) --measured_in_flight_;
  OffsetCommitResponse resp;
  if (absl::Status s = DecodeResponse(frame, p.version, &resp); !s.ok()) {
    return Fail(fmt::format("OffsetCommit response: {}", s.ToString()));
  }
  ErrorCode error = kNone;
  size_t partitions = 0;
  for (const auto& t : resp.topics) {
    for (const auto& part : t.partitions) {
      ++partitions;
      if (part.error_code != kNone && error == kNone) error = part.error_code;
    }
  }
  if (error == kNone && partitions != static_cast<size_t>(cfg_.partitions)) {
    CountProblem("OffsetCommit:WRONG_PARTITION_COUNT");
    if (p.measured) ++failed_;
    return;
  }
  if (error == kNone) {
    if (p.measured) {
      ++ok_;
      commit_latency_ns_.push_back(now - p.sent_ns);
    }
    return;
  }
  if (p.measured) ++failed_;
  CountError("OffsetCommit", error);
  if (group.phase != Phase::kStable) return;
  switch (error) {
    case kUnknownMemberId:
      return Rejoin(p.group, /*reset_member=*/true, 0);
    case kRebalanceInProgress:
    case kIllegalGeneration:
      return Rejoin(p.group, /*reset_member=*/false, 0);
    default:
      return;
  }
}

bool Load::FlushWrites() {
  for (Connection& c : conns_) {
    while (c.out_pos < c.out.size()) {
      ssize_t n = send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_pos += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      Fail(fmt::format("send: {}", strerror(errno)));
      return false;
    }
    if (c.out_pos == c.out.size()) {
      c.out.clear();
      c.out_pos = 0;
    }
    const bool want = c.out_pos < c.out.size();
    if (want != c.want_write) {
      epoll_event ev{};
      ev.events = want ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
      ev.data.u32 = static_cast<uint32_t>(&c - conns_.data());
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &ev);
      c.want_write = want;
    }
  }
  return true;
}

bool Load::ReadConnection(Connection& c) {
  uint8_t buf[65536];
  for (int round = 0; round < 64; ++round) {  // bounded: other connections get their turn
    ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
    if (n == 0) {
      Fail("the broker closed a connection");
      return false;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      Fail(fmt::format("recv: {}", strerror(errno)));
      return false;
    }
    c.in.insert(c.in.end(), buf, buf + n);
    if (static_cast<size_t>(n) < sizeof(buf)) break;
  }
  size_t pos = 0;
  while (c.in.size() - pos >= 4) {
    const uint8_t* h = c.in.data() + pos;
    const uint32_t len =
        (uint32_t{h[0]} << 24) | (uint32_t{h[1]} << 16) | (uint32_t{h[2]} << 8) | uint32_t{h[3]};
    if (len < 4 || len > kMaxFrame) {
      Fail(fmt::format("a response frame of {} bytes", len));
      return false;
    }
    if (c.in.size() - pos - 4 < len) break;
    OnResponse(c, std::span<const uint8_t>(c.in.data() + pos + 4, len));
    pos += 4 + len;
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(pos));
  return true;
}

bool Load::Done() const {
  if (!window_ended_) return false;
  return measured_in_flight_ == 0 || NowNs() >= drain_deadline_ns_;
}

bool Load::Run() {
  std::string error;
  for (Watched& w : watched_) w.rss_kib_before = w.RssKib();
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  conns_.resize(static_cast<size_t>(cfg_.connections));
  for (size_t i = 0; i < conns_.size(); ++i) {
    Connection& c = conns_[i];
    c.fd = ConnectTcp(cfg_.host, cfg_.port, &error);
    if (c.fd < 0) {
      Fail(error);
      return false;
    }
    fcntl(c.fd, F_SETFL, fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(i);
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c.fd, &ev);
  }
  groups_.resize(static_cast<size_t>(cfg_.groups));
  for (int32_t i = 0; i < cfg_.groups; ++i) {
    groups_[i].id = fmt::format("{}{:05d}", cfg_.group_prefix, i);
    groups_[i].conn = i % cfg_.connections;
  }
  setup_start_ns_ = NowNs();
  for (int32_t i = 0; i < cfg_.groups; ++i) StartFind(i);
  Schedule(NowNs() + kSampleIntervalNs, -1, TimerKind::kSample);

  std::vector<epoll_event> events(static_cast<size_t>(cfg_.connections));
  while (failure_.empty() && !Done()) {
    const int64_t now = NowNs();
    if (all_stable_ns_ == 0 && now - setup_start_ns_ > cfg_.setup_timeout_ns) {
      std::map<int, int> phases;
      for (const Group& g : groups_) ++phases[static_cast<int>(g.phase)];
      size_t unanswered = 0;
      for (const Connection& c : conns_) unanswered += c.pending.size();
      Fail(fmt::format(
          "only {} of {} groups stable after {:.0f} s (in find {}, join {}, sync {}; {} requests "
          "unanswered)",
          stable_count_, cfg_.groups, static_cast<double>(cfg_.setup_timeout_ns) / kSec, phases[0],
          phases[1], phases[2], unanswered));
      break;
    }
    while (!timers_.empty() && timers_.top().due <= now) {
      const Timer t = timers_.top();
      timers_.pop();
      switch (t.kind) {
        case TimerKind::kFind:
          if (t.epoch == groups_[t.group].epoch) StartFind(t.group);
          break;
        case TimerKind::kJoin:
          if (t.epoch == groups_[t.group].epoch) SendJoin(t.group);
          break;
        case TimerKind::kHeartbeat:
          OnHeartbeatDue(t.group);
          break;
        case TimerKind::kCommit:
          OnCommitDue(t.group, t.due);
          break;
        case TimerKind::kSample:
          Sample();
          break;
        case TimerKind::kWindowStart:
          OnWindowStart();
          break;
        case TimerKind::kWindowEnd:
          OnWindowEnd();
          break;
      }
    }
    if (!FlushWrites()) break;
    int timeout_ms = 100;
    if (!timers_.empty()) {
      const int64_t wait = timers_.top().due - NowNs();
      timeout_ms = wait <= 0 ? 0 : static_cast<int>(std::min<int64_t>(100, (wait + kMs - 1) / kMs));
    }
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      Fail(fmt::format("epoll_wait: {}", strerror(errno)));
      break;
    }
    for (int i = 0; i < n; ++i) {
      Connection& c = conns_[events[static_cast<size_t>(i)].data.u32];
      if (events[static_cast<size_t>(i)].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        if (!ReadConnection(c)) break;
      }
    }
  }
  return failure_.empty();
}

int Load::Report() {
  const double window_s = static_cast<double>(cfg_.duration_ns) / kSec;
  std::sort(commit_latency_ns_.begin(), commit_latency_ns_.end());
  std::sort(heartbeat_latency_ns_.begin(), heartbeat_latency_ns_.end());
  const double offered_rate =
      static_cast<double>(cfg_.groups) * kSec / static_cast<double>(cfg_.commit_interval_ns);
  const double achieved = static_cast<double>(ok_) / window_s;
  const double p50 = Percentile(commit_latency_ns_, 0.50),
               p99 = Percentile(commit_latency_ns_, 0.99),
               p999 = Percentile(commit_latency_ns_, 0.999);
  const double max =
      commit_latency_ns_.empty() ? 0 : static_cast<double>(commit_latency_ns_.back()) / 1e6;
  const double hb_p50 = Percentile(heartbeat_latency_ns_, 0.50),
               hb_p99 = Percentile(heartbeat_latency_ns_, 0.99);
  const double setup_s =
      all_stable_ns_ == 0 ? -1 : static_cast<double>(all_stable_ns_ - setup_start_ns_) / kSec;
  const double client_cpu = window_ended_ ? (client_cpu_end_ - client_cpu_start_) / window_s : 0;
  const bool complete = failure_.empty() && window_ended_ && measured_in_flight_ == 0;

  fmt::print(stderr,
             "group_load: {} groups x {} partitions of {}, {} connections, commit every {} ms, "
             "heartbeat every {} ms, {:.0f} s measured\n",
             cfg_.groups, cfg_.partitions, cfg_.topic, cfg_.connections,
             cfg_.commit_interval_ns / kMs, cfg_.heartbeat_interval_ns / kMs, window_s);
  fmt::print(stderr,
             "  setup {:.2f} s; commits offered {:.0f}/s, answered OK {:.0f}/s "
             "({} sent, {} ok, {} failed, {} skipped in flight, {} skipped not stable, "
             "{} unanswered)\n"
             "  commit latency p50 {:.3f} ms, p99 {:.3f} ms, p99.9 {:.3f} ms, max {:.3f} ms; "
             "heartbeat p50 {:.3f} ms, p99 {:.3f} ms; max send lag {:.3f} ms\n"
             "  memberships lost after setup {} ({} in the window); client CPU {:.3f} s/s\n",
             setup_s, offered_rate, achieved, sent_, ok_, failed_, skipped_in_flight_,
             skipped_not_stable_, measured_in_flight_, p50, p99, p999, max, hb_p50, hb_p99,
             static_cast<double>(max_send_lag_ns_) / 1e6, rejoins_after_stable_, rejoins_in_window_,
             client_cpu);
  std::string procs;
  for (Watched& w : watched_) {
    const double cpu = window_ended_ ? (w.cpu_end - w.cpu_start) / window_s : 0;
    fmt::print(stderr,
               "  {} (pid {}): CPU {:.3f} s/s, RSS {:.1f} MiB before the groups, {:.1f} at the "
               "window start, {:.1f} at the end, {:.1f} max\n",
               w.name, w.pid, cpu, w.rss_kib_before / 1024.0, w.rss_kib_start / 1024.0,
               w.rss_kib_end / 1024.0, w.rss_kib_max / 1024.0);
    procs += fmt::format(
        "{}\"{}\":{{\"pid\":{},\"cpu_s_per_s\":{:.4f},\"rss_mib_before\":{:.1f},"
        "\"rss_mib_start\":{:.1f},\"rss_mib_end\":{:.1f},\"rss_mib_max\":{:.1f}}}",
        procs.empty() ? "" : ",", JsonEscape(w.name), w.pid, cpu, w.rss_kib_before / 1024.0,
        w.rss_kib_start / 1024.0, w.rss_kib_end / 1024.0, w.rss_kib_max / 1024.0);
  }
  std::string errors[2];
  for (int i = 0; i < 2; ++i) {
    for (const auto& [what, n] : errors_[i]) {
      errors[i] += fmt::format("{}\"{}\":{}", errors[i].empty() ? "" : ",", JsonEscape(what), n);
      fmt::print(stderr, "  {} {}: {}\n", i == 0 ? "setup/warm-up" : "measured", what, n);
    }
  }
  if (!failure_.empty()) fmt::print(stderr, "group_load: FAILED: {}\n", failure_);
  fmt::print(
      "{{\"bench\":\"group_load\",\"ok\":{},\"failure\":\"{}\",\"groups\":{},\"partitions\":{},"
      "\"connections\":{},\"commit_interval_ms\":{},\"heartbeat_interval_ms\":{},"
      "\"duration_s\":{:.1f},\"setup_s\":{:.3f},\"offered_commits_per_s\":{:.1f},"
      "\"achieved_commits_per_s\":{:.1f},\"commits_offered\":{},\"commits_sent\":{},"
      "\"commits_ok\":{},\"commits_failed\":{},\"commits_skipped_in_flight\":{},"
      "\"commits_skipped_not_stable\":{},\"commits_unanswered\":{},"
      "\"commit_p50_ms\":{:.3f},\"commit_p99_ms\":{:.3f},\"commit_p999_ms\":{:.3f},"
      "\"commit_max_ms\":{:.3f},\"heartbeats_ok\":{},\"heartbeat_p50_ms\":{:.3f},"
      "\"heartbeat_p99_ms\":{:.3f},\"max_send_lag_ms\":{:.3f},\"memberships_lost\":{},"
      "\"memberships_lost_in_window\":{},\"joins\":{},\"syncs\":{},\"client_cpu_s_per_s\":{:.4f},"
      "\"versions\":{{\"FindCoordinator\":{},\"JoinGroup\":{},\"SyncGroup\":{},\"Heartbeat\":{},"
      "\"OffsetCommit\":{}}},\"errors_setup\":{{{}}},\"errors\":{{{}}},\"procs\":{{{}}}}}\n",
      complete ? "true" : "false", JsonEscape(failure_), cfg_.groups, cfg_.partitions,
      cfg_.connections, cfg_.commit_interval_ns / kMs, cfg_.heartbeat_interval_ns / kMs, window_s,
      setup_s, offered_rate, achieved, offered_, sent_, ok_, failed_, skipped_in_flight_,
      skipped_not_stable_, measured_in_flight_, p50, p99, p999, max, heartbeats_ok_, hb_p50, hb_p99,
      static_cast<double>(max_send_lag_ns_) / 1e6, rejoins_after_stable_, rejoins_in_window_,
      joins_, syncs_, client_cpu, v_.find_coordinator, v_.join, v_.sync, v_.heartbeat, v_.commit,
      errors[0], errors[1], procs);
  std::fflush(stdout);
  return complete ? kExitOk : kExitFailed;
}

// ---------------------------------------------------------------------------------------------
// Setup over one blocking connection: versions, the topic, its partition count.

bool Prepare(Config& cfg, ChosenVersions* chosen) {
  std::string error;
  BlockingClient client;
  if (!client.Connect(cfg.host, cfg.port, &error)) {
    fmt::print(stderr, "group_load: {}\n", error);
    return false;
  }
  ApiVersionsRequest av_req;
  av_req.client_software_name = "runnel-group-load";
  av_req.client_software_version = "1";
  ApiVersionsResponse av;
  absl::Status status = client.Call(av_req, 3, &av);
  if (status.ok() && av.error_code == kUnsupportedVersion) {
    // The broker answered in v0 with the ApiVersions range it knows (KIP-511): ask again.
    int16_t max = 0;
    for (const auto& k : av.api_keys) {
      if (k.api_key == ApiVersionsRequest::kApiKey) max = std::min<int16_t>(k.max_version, 2);
    }
    av = ApiVersionsResponse();
    status = client.Call(av_req, max, &av);
  }
  if (!status.ok() || av.error_code != kNone) {
    fmt::print(stderr, "group_load: ApiVersions: {} {}\n", status.ToString(),
               ErrorText(av.error_code));
    return false;
  }
  Versions versions;
  for (const auto& k : av.api_keys) versions.Set(k.api_key, k.min_version, k.max_version);
  chosen->find_coordinator = versions.Pick<FindCoordinatorRequest>();
  chosen->join = versions.Pick<JoinGroupRequest>();
  chosen->sync = versions.Pick<SyncGroupRequest>();
  chosen->heartbeat = versions.Pick<HeartbeatRequest>();
  chosen->commit = versions.Pick<OffsetCommitRequest>();
  const int16_t create = versions.Pick<CreateTopicsRequest>();
  const int16_t metadata = versions.Pick<MetadataRequest>();
  const std::pair<const char*, int16_t> needed[] = {
      {"FindCoordinator", chosen->find_coordinator},
      {"JoinGroup", chosen->join},
      {"SyncGroup", chosen->sync},
      {"Heartbeat", chosen->heartbeat},
      {"OffsetCommit", chosen->commit},
      {"CreateTopics", cfg.partitions > 0 ? create : int16_t{0}},
      {"Metadata", metadata}};
  bool all = true;
  for (const auto& [name, v] : needed) {
    if (v < 0) {
      fmt::print(stderr, "group_load: the broker does not offer {} (ApiVersions)\n", name);
      all = false;
    }
  }
  if (!all) return false;
  if (metadata < 1) {
    fmt::print(stderr, "group_load: Metadata v1+ needed\n");
    return false;
  }

  if (cfg.partitions > 0) {
    CreateTopicsRequest req;
    auto& t = req.topics.emplace_back();
    t.name = cfg.topic;
    t.num_partitions = cfg.partitions;
    t.replication_factor = -1;
    req.timeout_ms = 30000;
    CreateTopicsResponse resp;
    if (create < 4) t.replication_factor = 1;  // -1 (broker default) needs v4+
    if (absl::Status s = client.Call(req, create, &resp); !s.ok()) {
      fmt::print(stderr, "group_load: CreateTopics: {}\n", s.ToString());
      return false;
    }
    for (const auto& r : resp.topics) {
      if (r.error_code != kNone && r.error_code != kTopicAlreadyExists) {
        fmt::print(stderr, "group_load: CreateTopics {}: {} {}\n", r.name, ErrorText(r.error_code),
                   r.error_message.value_or(""));
        return false;
      }
    }
  }
  const int64_t deadline = NowNs() + 30 * kSec;
  std::string last;
  while (NowNs() < deadline) {
    MetadataRequest req;
    req.topics.emplace();
    auto& t = req.topics->emplace_back();
    t.name = cfg.topic;
    req.allow_auto_topic_creation = false;
    MetadataResponse resp;
    if (absl::Status s = client.Call(req, metadata, &resp); !s.ok()) {
      fmt::print(stderr, "group_load: Metadata: {}\n", s.ToString());
      return false;
    }
    if (resp.topics.size() == 1 && resp.topics[0].error_code == kNone &&
        !resp.topics[0].partitions.empty()) {
      bool led = true;
      for (const auto& p : resp.topics[0].partitions) {
        led = led && p.error_code == kNone && p.leader_id.value() >= 0;
      }
      if (led) {
        cfg.partitions = static_cast<int>(resp.topics[0].partitions.size());
        return true;
      }
      last = "a partition without a leader";
    } else if (!resp.topics.empty()) {
      last = ErrorText(resp.topics[0].error_code);
    }
    usleep(100000);
  }
  fmt::print(stderr, "group_load: topic {} not ready within 30 s ({})\n", cfg.topic, last);
  return false;
}

int Usage() {
  fmt::print(
      stderr,
      "usage: group_load --bootstrap HOST:PORT --topic T [--partitions P (create it; 0 "
      "= use as is)]\n"
      "       [--groups N] [--connections C] [--commit-interval-ms MS]\n"
      "       [--heartbeat-interval-ms MS] [--session-timeout-ms MS] [--duration-s S]\n"
      "       [--warmup-s S] [--setup-timeout-s S] [--group-prefix P] [--watch NAME=PID]...\n");
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (argc < 2 || !opt.Parse(argc, argv)) return Usage();
  if (!opt.CheckKnown({"bootstrap", "topic", "partitions", "groups", "connections",
                       "commit-interval-ms", "heartbeat-interval-ms", "session-timeout-ms",
                       "duration-s", "warmup-s", "setup-timeout-s", "group-prefix"})) {
    return Usage();
  }
  Config cfg;
  if (!SplitHostPort(opt.Str("bootstrap"), &cfg.host, &cfg.port)) {
    opt.Error("--bootstrap HOST:PORT is required");
  }
  cfg.topic = opt.Str("topic");
  if (cfg.topic.empty()) opt.Error("--topic is required");
  cfg.partitions = static_cast<int>(opt.Int("partitions", 4, 0, 100000));
  cfg.groups = static_cast<int>(opt.Int("groups", 1000, 1, 1000000));
  cfg.connections = static_cast<int>(opt.Int("connections", 16, 1, 1024));
  cfg.commit_interval_ns = opt.Int("commit-interval-ms", 100, 1, 3600000) * kMs;
  cfg.heartbeat_interval_ns = opt.Int("heartbeat-interval-ms", 3000, 1, 3600000) * kMs;
  cfg.session_timeout_ms = static_cast<int32_t>(opt.Int("session-timeout-ms", 45000, 1, 3600000));
  cfg.duration_ns = opt.Int("duration-s", 60, 1, 86400) * kSec;
  cfg.warmup_ns = opt.Int("warmup-s", 5, 0, 3600) * kSec;
  cfg.setup_timeout_ns = opt.Int("setup-timeout-s", 120, 1, 86400) * kSec;
  cfg.group_prefix = opt.Str("group-prefix", "load-");
  std::vector<Watched> watched;
  for (const std::string& w : opt.watches()) {
    size_t eq = w.find('=');
    int pid = eq == std::string::npos ? 0 : std::atoi(w.c_str() + eq + 1);
    if (eq == 0 || pid <= 0) {
      opt.Error("--watch needs NAME=PID, got " + w);
      continue;
    }
    watched.push_back(Watched{w.substr(0, eq), pid});
  }
  if (!opt.ok()) return Usage();

  ChosenVersions versions;
  if (!Prepare(cfg, &versions)) {
    fmt::print("{{\"bench\":\"group_load\",\"ok\":false,\"failure\":\"setup\"}}\n");
    return kExitFailed;
  }
  fmt::print(stderr,
             "group_load: topic {} has {} partitions; versions FindCoordinator v{}, JoinGroup v{}, "
             "SyncGroup v{}, Heartbeat v{}, OffsetCommit v{}\n",
             cfg.topic, cfg.partitions, versions.find_coordinator, versions.join, versions.sync,
             versions.heartbeat, versions.commit);
  Load load(cfg, versions, std::move(watched));
  load.Run();
  return load.Report();
}
