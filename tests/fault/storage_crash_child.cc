// storage_crash_child <log.dir> <seed> <flush_messages>
//
// The victim of storage_crash_test: opens a LogManager on <log.dir> (recovering whatever a
// previous, killed, child left), finds how many batches of the workload (crash_workload.h)
// the log holds, and appends the following ones until it is killed. After each Append that
// returned OK it writes "ack <n> <base_offset> <last_offset>\n" for each batch n of the call
// to stdout with one write(2), so an acknowledgement the test reads was given after the
// engine answered. Before the first append it writes "ready <n> <log_end_offset>\n".
//
// Exit codes (the test expects to kill it, so any exit is a failure it reports):
//   2 usage, 3 the log is not what the workload wrote, 4 an engine error, 5 ran too long.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/log/log.h"
#include "tests/fault/crash_workload.h"

namespace runnel::storaged::fault {
namespace {

// Writes all of `s` or exits (the test went away: nobody is left to acknowledge to).
void WriteOut(const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t w = ::write(STDOUT_FILENO, s.data() + done, s.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) std::_Exit(4);
    done += size_t(w);
  }
}

[[noreturn]] void Die(int code, const std::string& message) {
  std::fprintf(stderr, "storage_crash_child: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(code);
}

// The number of the last batch in `log` (which must not be empty), decoded from its header.
int64_t LastBatchNumber(const Log& log, int64_t log_end_offset) {
  ReadResult r = log.Read(log_end_offset - 1, 1, /*min_one_batch=*/true);
  if (r.error != protocol::ErrorCode::kNone || r.ranges.size() != 1) {
    Die(3, fmt::format("reading the last batch (offset {}): error {}, {} ranges",
                       log_end_offset - 1, int(r.error), r.ranges.size()));
  }
  const FileRange& range = r.ranges[0];
  std::vector<uint8_t> bytes(static_cast<size_t>(range.length));
  int fd = ::open(range.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::pread(fd, bytes.data(), bytes.size(), range.position) != ssize_t(bytes.size())) {
    Die(3, fmt::format("reading {} at {}: {}", range.path, range.position, std::strerror(errno)));
  }
  ::close(fd);
  StatusOr<record::BatchView> view = record::BatchView::Parse(bytes);
  if (!view.ok()) Die(3, fmt::format("the last batch: {}", view.status().message()));
  int64_t n = BatchNumberOf(*view);
  if (n < 0 || view->last_offset() != log_end_offset - 1) {
    Die(3, fmt::format("the last batch (number {}, last offset {}) does not end the log at {}", n,
                       view->last_offset(), log_end_offset));
  }
  return n;
}

int Run(const std::string& dir, uint64_t seed, int64_t flush_messages) {
  log::Options lo;
  lo.role = "storage_crash_child";
  lo.level = "warn";
  log::Init(lo);

  StatusOr<std::unique_ptr<LogManager>> manager =
      LogManager::Open(CrashOptions(dir, flush_messages));
  if (!manager.ok()) Die(4, fmt::format("opening {}: {}", dir, manager.status().message()));
  (*manager)->Start();  // background flushes of rolled segments run while we append
  StatusOr<std::shared_ptr<Log>> created = (*manager)->CreateLog(CrashPartition(), kTopicId, {});
  if (!created.ok()) Die(4, fmt::format("creating the log: {}", created.status().message()));
  Log& log = **created;

  int64_t end = log.State().log_end_offset;
  int64_t n = end == 0 ? 0 : LastBatchNumber(log, end) + 1;
  int64_t expected_end = 0;
  for (int64_t i = 0; i < n; ++i) expected_end += RecordCount(seed, i);
  if (expected_end != end) {
    Die(3, fmt::format("{} batches should end at offset {}, the log ends at {}", n, expected_end,
                       end));
  }
  WriteOut(fmt::format("ready {} {}\n", n, end));

  // Grouping is the only thing left to chance (it must not change a batch's bytes).
  Rng group_rng(seed ^ uint64_t(::getpid()) ^ uint64_t(n) << 20);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::vector<uint8_t> buffer;
  std::vector<int> counts;
  for (int64_t calls = 0;; ++calls) {
    if ((calls & 63) == 0 && std::chrono::steady_clock::now() > deadline) {
      Die(5, "still running after 120 s: nobody killed me");
    }
    int64_t k = group_rng.Below(2) == 0 ? 1 : 1 + int64_t(group_rng.Below(4));
    k = std::min(k, kBatchesPerEpoch - n % kBatchesPerEpoch);
    buffer.clear();
    counts.clear();
    for (int64_t i = 0; i < k; ++i) {
      StatusOr<std::vector<uint8_t>> batch = BuildBatch(seed, n + i);
      if (!batch.ok())
        Die(4, fmt::format("building batch {}: {}", n + i, batch.status().message()));
      buffer.insert(buffer.end(), batch->begin(), batch->end());
      counts.push_back(RecordCount(seed, n + i));
    }
    AppendResult result = log.Append(buffer, EpochOf(n));
    if (result.error != protocol::ErrorCode::kNone) {
      Die(4, fmt::format("append of batches {}..{}: error {}: {}", n, n + k - 1, int(result.error),
                         result.error_message));
    }
    std::string acks;
    int64_t base = result.base_offset;
    for (int64_t i = 0; i < k; ++i) {
      acks += fmt::format("ack {} {} {}\n", n + i, base, base + counts[size_t(i)] - 1);
      base += counts[size_t(i)];
    }
    if (base != result.last_offset + 1) {
      Die(3, fmt::format("append of batches {}..{} ended at {}, the records say {}", n, n + k - 1,
                         result.last_offset, base - 1));
    }
    WriteOut(acks);
    n += k;
  }
}

}  // namespace
}  // namespace runnel::storaged::fault

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <log.dir> <seed> <flush_messages>\n", argv[0]);
    return 2;
  }
  char* end = nullptr;
  uint64_t seed = std::strtoull(argv[2], &end, 10);
  if (*end != '\0') return 2;
  int64_t flush_messages = std::strtoll(argv[3], &end, 10);
  if (*end != '\0' || flush_messages < 1) return 2;
  return runnel::storaged::fault::Run(argv[1], seed, flush_messages);
}
