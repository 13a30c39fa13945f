// Storage engine throughput and cost, each compared with a reference measured in the same
// run on the same disk:
//
//   storage_bench [--only=append,read,recovery,partitions] [--dir=PATH] [--append-mib=1024]
//                 [--recovery-mib=2048] [--partitions=10000] [--recovery-threads=1] [--keep]
//                 [--record-sizes=1024,100] [--partition-counts=1,100] [--policies=cache,sync]
//
//  1. append:     Log::Append (logs made with LogManager::CreateLog) of pre-built ~16 KiB
//                 batches, 1 KiB and 100 B records, 1 and 100 partitions round robin, flush
//                 policy "page cache" (Kafka's default) and "fdatasync every 1 MiB"
//                 (flush.messages = the records of 1 MiB). Reference: write() of the same
//                 bytes to as many plain files, round robin, with fdatasync of a file after
//                 the same number of batches in the second policy.
//  2. read:       right after each page-cache append case, Log::Read of all of it (max_bytes
//                 1 MiB) with every range pread into a buffer through the FileCache (the path
//                 of a storaged remote from its brokerd), vs. pread of the reference files in
//                 1 MiB chunks; and Log::Read alone (file ranges, no bytes) in reads/s.
//  3. recovery:   LogManager::Open after an unclean stop (every segment rescanned), vs.
//                 read() of the same bytes; and LogManager::Open after a clean stop.
//  4. partitions: memory, descriptors and maps per partition for many small partitions.
//
// The machine this runs on is shared and noisy, so each append and read case interleaves
// Runnel and its reference in slices (alternating which goes first) and sums the time of
// each: background noise lands on both alike. Ratios are Runnel/reference throughput.
// Nothing is copied per append: Append rewrites only the base offset and leader epoch of
// the batch in place (both outside the CRC), so a batch of the pool stays valid; its base
// offset is set back to 0 (an 8-byte store, in the timed loop) because a producer's batch
// must carry 0. The first append of each partition (which writes the leader-epoch
// checkpoint durably, once per leadership change) happens before the timing.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/log/log.h"
#include "common/protocol/uuid.h"
#include "common/record/batch.h"
#include "common/util/crc32c.h"
#include "storaged/log/file_names.h"
#include "storaged/log/log.h"
#include "storaged/log/log_manager.h"

namespace {

using runnel::Status;
using runnel::StatusOr;
using runnel::storaged::FileRange;
using runnel::storaged::Log;
using runnel::storaged::LogManager;
using runnel::storaged::LogManagerOptions;
using runnel::storaged::ReadResult;
using runnel::storaged::TopicPartition;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMiB = 1 << 20;
constexpr size_t kTargetBatchBytes = 16 << 10;
constexpr int kPoolBatches = 64;  // distinct pre-built batches cycled through (~1 MiB)
constexpr int kSlices = 16;       // Runnel/reference interleaving per case
constexpr int32_t kReadMaxBytes = 1 << 20;
constexpr int64_t kReadChunk = 1 << 20;
constexpr double kAppendTarget = 0.8;
constexpr double kReadTarget = 0.9;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void Die(std::string_view what) {
  fmt::print(stderr, "storage_bench: {}\n", what);
  std::exit(1);
}

void Check(const Status& s, std::string_view what) {
  if (!s.ok()) Die(fmt::format("{}: {}", what, s.ToString()));
}

template <typename T>
T Take(StatusOr<T> v, std::string_view what) {
  Check(v.status(), what);
  return std::move(*v);
}

void Print(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

struct Flags {
  std::set<std::string> only = {"append", "read", "recovery", "partitions"};
  std::string dir;  // parent of the data dir; a fresh temp dir is made under it
  int64_t append_mib = 1024;
  int64_t recovery_mib = 2048;
  int partitions = 10000;
  int recovery_threads = 1;
  bool keep = false;
  // Which append cases run (all combinations of these).
  std::vector<int> record_sizes = {1024, 100};
  std::vector<int> partition_counts = {1, 100};
  std::vector<bool> fsync_policies = {false, true};
};

void Usage() {
  std::fputs(
      "usage: storage_bench [--only=append,read,recovery,partitions] [--dir=PATH]\n"
      "                     [--append-mib=1024] [--recovery-mib=2048] [--partitions=10000]\n"
      "                     [--recovery-threads=1] [--keep] [--record-sizes=1024,100]\n"
      "                     [--partition-counts=1,100] [--policies=cache,sync]\n"
      "  --dir   parent of the data directory (default /var/tmp); must be on the disk to\n"
      "          measure, not tmpfs\n"
      "  --keep  leave the data directory in place\n"
      "  --record-sizes, --partition-counts, --policies: the append cases to run (all\n"
      "          combinations); policy cache = page cache, sync = fdatasync every 1 MiB\n"
      "  read needs append (it reads what the page-cache append cases wrote)\n",
      stderr);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&](std::string_view name) -> std::optional<std::string> {
      if (a.substr(0, name.size()) == name && a.size() > name.size() && a[name.size()] == '=') {
        return std::string(a.substr(name.size() + 1));
      }
      return std::nullopt;
    };
    auto number = [&](const std::string& s) -> int64_t {
      char* end = nullptr;
      long long n = std::strtoll(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || n <= 0) Die(fmt::format("bad number in {}", a));
      return n;
    };
    auto list = [&](const std::string& s) {
      std::vector<std::string> out;
      size_t pos = 0;
      while (pos <= s.size()) {
        size_t comma = s.find(',', pos);
        if (comma == std::string::npos) comma = s.size();
        out.push_back(s.substr(pos, comma - pos));
        pos = comma + 1;
      }
      return out;
    };
    if (auto v = value("--only")) {
      f.only.clear();
      for (const std::string& name : list(*v)) {
        if (name != "append" && name != "read" && name != "recovery" && name != "partitions") {
          Die(fmt::format("unknown benchmark '{}' in --only", name));
        }
        f.only.insert(name);
      }
    } else if (auto v = value("--record-sizes")) {
      f.record_sizes.clear();
      for (const std::string& n : list(*v)) f.record_sizes.push_back(int(number(n)));
    } else if (auto v = value("--partition-counts")) {
      f.partition_counts.clear();
      for (const std::string& n : list(*v)) f.partition_counts.push_back(int(number(n)));
    } else if (auto v = value("--policies")) {
      f.fsync_policies.clear();
      for (const std::string& p : list(*v)) {
        if (p != "cache" && p != "sync") Die(fmt::format("unknown policy '{}'", p));
        f.fsync_policies.push_back(p == "sync");
      }
    } else if (auto v = value("--dir")) {
      f.dir = *v;
    } else if (auto v = value("--append-mib")) {
      f.append_mib = number(*v);
    } else if (auto v = value("--recovery-mib")) {
      f.recovery_mib = number(*v);
    } else if (auto v = value("--partitions")) {
      f.partitions = int(number(*v));
    } else if (auto v = value("--recovery-threads")) {
      f.recovery_threads = int(number(*v));
    } else if (a == "--keep") {
      f.keep = true;
    } else {
      Usage();
      std::exit(2);
    }
  }
  if (f.only.count("read") && !f.only.count("append")) {
    Die("--only=read needs append too: it reads the data the append cases write");
  }
  return f;
}

// ---------------------------------------------------------------- files and /proc

void WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) Die(fmt::format("write: {}", std::strerror(errno)));
    p += w;
    n -= size_t(w);
  }
}

// Reads up to n bytes at pos; returns how many (fewer only at the end of the file).
size_t PreadUpTo(int fd, uint8_t* p, size_t n, int64_t pos) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, pos + int64_t(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) Die(fmt::format("pread: {}", std::strerror(errno)));
    if (r == 0) break;
    done += size_t(r);
  }
  return done;
}

int OpenOrDie(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) Die(fmt::format("open {}: {}", path, std::strerror(errno)));
  return fd;
}

void MakeDir(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) Die(fmt::format("mkdir {}: {}", path, ec.message()));
}

// Drops a directory's data without writing it back: a file truncated to 0 loses its dirty
// pages at once, so the disk does not spend the next case writing data nobody wants (the
// reference files are unlinked, which does the same). Only .log files are truncated: the
// indexes are mmapped, and touching a mapping past the end of its file is SIGBUS.
void TruncateLogFiles(const std::string& dir) {
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".log") {
      if (::truncate(e.path().c_str(), 0) != 0) {
        Die(fmt::format("truncate {}: {}", e.path().string(), std::strerror(errno)));
      }
    }
  }
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) Die(fmt::format("remove {}: {}", path, ec.message()));
}

int64_t ProcStatusKb(std::string_view key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() &&
        line[key.size()] == ':') {
      return std::strtoll(line.c_str() + key.size() + 1, nullptr, 10);
    }
  }
  return -1;
}

int CountOpenFds() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++n;
  }
  return n - 1;  // the directory iterator's own descriptor
}

int CountMaps() {
  std::ifstream in("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::string DescribeFs(const std::string& path, bool* is_tmpfs) {
  struct statfs fs {};
  struct stat st {};
  if (::statfs(path.c_str(), &fs) != 0 || ::stat(path.c_str(), &st) != 0) {
    Die(fmt::format("statfs {}: {}", path, std::strerror(errno)));
  }
  std::string type;
  switch (fs.f_type) {
    case 0xEF53:
      type = "ext2/3/4";
      break;
    case 0x58465342:
      type = "xfs";
      break;
    case 0x9123683E:
      type = "btrfs";
      break;
    case 0x01021994:
      type = "tmpfs";
      break;
    case 0x794c7630:
      type = "overlayfs";
      break;
    default:
      type = fmt::format("fs type {:#x}", uint64_t(fs.f_type));
  }
  *is_tmpfs = fs.f_type == 0x01021994;
  return fmt::format("{}, device {}:{}, {:.1f} GiB free", type, major(st.st_dev), minor(st.st_dev),
                     double(fs.f_bavail) * double(fs.f_bsize) / double(1LL << 30));
}

// ---------------------------------------------------------------- batches

struct BatchPool {
  std::vector<std::vector<uint8_t>> batches;  // all of the same size
  int record_size = 0;
  int records_per_batch = 0;
  size_t batch_bytes = 0;
};

// `count` distinct batches of records with a `record_size`-byte random value and no key,
// as many per batch as make it about kTargetBatchBytes.
BatchPool MakePool(int record_size, int count, int records_per_batch = 0) {
  BatchPool pool;
  pool.record_size = record_size;
  // A record without a key costs its value plus ~8-10 bytes of varints and attributes.
  pool.records_per_batch =
      records_per_batch > 0
          ? records_per_batch
          : std::max(1, int(std::lround(double(kTargetBatchBytes) / (record_size + 9))));
  std::mt19937_64 rng(uint64_t(record_size) * 7919 + uint64_t(count));
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::vector<uint8_t> value(static_cast<size_t>(record_size));
  for (int b = 0; b < count; ++b) {
    runnel::record::BatchBuilder builder({});
    for (int r = 0; r < pool.records_per_batch; ++r) {
      for (uint8_t& byte : value) byte = uint8_t(rng());
      builder.Add(now, std::nullopt, runnel::record::ByteSpan(value.data(), value.size()));
    }
    pool.batches.push_back(Take(builder.Build(), "building a batch"));
    if (pool.batches.back().size() != pool.batches.front().size()) Die("uneven batch sizes");
  }
  pool.batch_bytes = pool.batches.front().size();
  return pool;
}

std::string RecordSizeName(int record_size) {
  return record_size % 1024 == 0 ? fmt::format("{} KiB", record_size / 1024)
                                 : fmt::format("{} B", record_size);
}

// ---------------------------------------------------------------- the engine

std::unique_ptr<LogManager> OpenManager(const std::string& dir, int recovery_threads = 1) {
  LogManagerOptions o;
  o.dirs = {dir};
  o.recovery_threads_per_dir = recovery_threads;
  return Take(LogManager::Open(o), "LogManager::Open");
}

std::vector<std::shared_ptr<Log>> CreateLogs(LogManager& manager, const std::string& topic,
                                             int partitions,
                                             const std::map<std::string, std::string>& configs) {
  std::string topic_id = runnel::protocol::Uuid::Random().ToString();
  std::vector<std::shared_ptr<Log>> logs;
  logs.reserve(static_cast<size_t>(std::max(partitions, 0)));
  for (int p = 0; p < partitions; ++p) {
    logs.push_back(
        Take(manager.CreateLog(TopicPartition{topic, p}, topic_id, configs), "CreateLog"));
  }
  return logs;
}

// Appends pool batch `i % pool size` to log `i % logs`, as a producer's batch.
inline void AppendOne(const std::vector<std::shared_ptr<Log>>& logs, BatchPool& pool, int64_t i) {
  std::vector<uint8_t>& batch = pool.batches[size_t(i % int64_t(pool.batches.size()))];
  runnel::record::SetBaseOffset(batch, 0);
  runnel::storaged::AppendResult r = logs[size_t(i % int64_t(logs.size()))]->Append(batch, 0);
  if (r.error != runnel::protocol::ErrorCode::kNone) {
    Die(fmt::format("Append: error {}: {}", int(r.error), r.error_message));
  }
}

// ---------------------------------------------------------------- 1 + 2: append, read

struct Reference {
  std::vector<int> fds;
  std::vector<std::string> paths;
  std::vector<int64_t> batches_since_sync;
};

// Reads every log from offset 0 in slices; each call reads about `bytes` more. Every batch
// has the same size and record count, so the offset after a range follows from where the
// range ends (a consumer would parse the last header of the bytes it got; that is checked
// when bytes are read).
class EngineReader {
 public:
  EngineReader(LogManager* manager, std::vector<std::shared_ptr<Log>> logs, bool fetch_bytes,
               size_t batch_bytes, int records_per_batch)
      : manager_(manager),
        logs_(std::move(logs)),
        fetch_bytes_(fetch_bytes),
        batch_bytes_(int64_t(batch_bytes)),
        records_per_batch_(records_per_batch),
        buffer_(size_t(kReadMaxBytes) + batch_bytes) {}

  // Returns false when every log has been read to its end.
  bool ReadSome(int64_t bytes) {
    int64_t goal = total_ + bytes;
    while (total_ < goal && log_ < logs_.size()) {
      const Log& log = *logs_[log_];
      ReadResult r = log.Read(offset_, kReadMaxBytes, /*min_one_batch=*/true);
      if (r.error != runnel::protocol::ErrorCode::kNone) {
        Die(fmt::format("Read: error {}", int(r.error)));
      }
      ++reads_;
      if (r.ranges.empty()) {  // at the end of this log
        ++log_;
        offset_ = 0;
        continue;
      }
      for (const FileRange& range : r.ranges) {
        int64_t next = SegmentBase(range.path) +
                       (range.position + range.length) / batch_bytes_ * records_per_batch_;
        if (fetch_bytes_) {
          // As StorageServiceImpl::ReadRanges does: through the cache of open files.
          std::shared_ptr<runnel::storaged::FileHandle> file =
              Take(manager_->files().Get(range.path), "FileCache::Get");
          if (size_t(range.length) > buffer_.size()) Die("range larger than the buffer");
          size_t got = PreadUpTo(file->fd(), buffer_.data(), size_t(range.length), range.position);
          if (got != size_t(range.length)) Die("short read of a range");
          // The last batch's header says where the next read starts.
          const uint8_t* last = buffer_.data() + got - size_t(batch_bytes_);
          uint64_t base = 0;
          for (int i = 0; i < 8; ++i) base = (base << 8) | last[i];
          if (int64_t(base) + records_per_batch_ != next) {
            Die(fmt::format("batch at {} of {} has offset {}, expected {}", range.position,
                            range.path, base, next - records_per_batch_));
          }
        }
        total_ += range.length;
        offset_ = next;
      }
    }
    return log_ < logs_.size();
  }
  int64_t total() const { return total_; }
  int64_t reads() const { return reads_; }

 private:
  static int64_t SegmentBase(const std::string& path) {
    std::string_view name = path;
    name = name.substr(name.rfind('/') + 1);
    std::optional<int64_t> base =
        runnel::storaged::ParseSegmentFileName(name, runnel::storaged::kLogSuffix);
    if (!base) Die(fmt::format("not a segment file: {}", path));
    return *base;
  }

  LogManager* manager_;
  std::vector<std::shared_ptr<Log>> logs_;
  bool fetch_bytes_;
  int64_t batch_bytes_;
  int records_per_batch_;
  std::vector<uint8_t> buffer_;
  size_t log_ = 0;
  int64_t offset_ = 0;
  int64_t total_ = 0;
  int64_t reads_ = 0;
};

// Reads the reference files in order, 1 MiB preads, in slices.
class ReferenceReader {
 public:
  explicit ReferenceReader(const Reference& ref) : ref_(ref), buffer_(size_t(kReadChunk)) {}
  bool ReadSome(int64_t bytes) {
    int64_t goal = total_ + bytes;
    while (total_ < goal && file_ < ref_.fds.size()) {
      size_t got = PreadUpTo(ref_.fds[file_], buffer_.data(), buffer_.size(), position_);
      if (got == 0) {
        ++file_;
        position_ = 0;
        continue;
      }
      checksum_ += buffer_[got - 1];
      position_ += int64_t(got);
      total_ += int64_t(got);
    }
    return file_ < ref_.fds.size();
  }
  int64_t total() const { return total_; }

 private:
  const Reference& ref_;
  std::vector<uint8_t> buffer_;
  size_t file_ = 0;
  int64_t position_ = 0;
  int64_t total_ = 0;
  uint64_t checksum_ = 0;
};

std::string Verdict(double ratio, double target) {
  return fmt::format("{:5.2f}  (>= {:.1f} {})", ratio, target, ratio >= target ? "ok" : "MISSED");
}

struct AppendCase {
  int record_size;
  int partitions;
  bool fsync;
};

// Runs one append case, and the read case on its data when `with_reads`; returns the read
// row to print.
std::optional<std::string> RunAppendCase(const Flags& flags, const std::string& root,
                                         const AppendCase& c, bool with_reads) {
  BatchPool pool = MakePool(c.record_size, kPoolBatches);
  const int64_t total_batches =
      std::max<int64_t>(kSlices, flags.append_mib * kMiB / int64_t(pool.batch_bytes));
  const int64_t per_slice = total_batches / kSlices;
  const int64_t batches = per_slice * kSlices;
  const int64_t bytes = batches * int64_t(pool.batch_bytes);
  const int64_t records = batches * pool.records_per_batch;
  // flush.messages = the records of 1 MiB of whole batches: Log flushes when that many
  // records arrived since its last flush, i.e. after every `sync_batches` batches.
  const int64_t sync_batches = std::max<int64_t>(1, kMiB / int64_t(pool.batch_bytes));
  const int64_t flush_messages = sync_batches * pool.records_per_batch;

  std::string name =
      fmt::format("{} x {} part{}, {}", RecordSizeName(c.record_size), c.partitions,
                  c.partitions == 1 ? "" : "s", c.fsync ? "fdatasync/MiB" : "page cache");
  std::string dir = fmt::format("{}/append-{}-{}-{}", root, c.record_size, c.partitions,
                                c.fsync ? "sync" : "cache");
  std::string engine_dir = dir + "/runnel";
  std::string ref_dir = dir + "/reference";
  MakeDir(engine_dir);
  MakeDir(ref_dir);

  std::unique_ptr<LogManager> manager = OpenManager(engine_dir);
  manager->Start();
  std::map<std::string, std::string> configs;
  if (c.fsync) configs["flush.messages"] = std::to_string(flush_messages);
  std::vector<std::shared_ptr<Log>> logs = CreateLogs(*manager, "bench", c.partitions, configs);

  Reference ref;
  for (int p = 0; p < c.partitions; ++p) {
    ref.paths.push_back(fmt::format("{}/file-{}", ref_dir, p));
    ref.fds.push_back(OpenOrDie(ref.paths.back(), O_WRONLY | O_CREAT | O_TRUNC));
    ref.batches_since_sync.push_back(0);
  }
  // The first append of a partition at a leader epoch writes the leader-epoch checkpoint
  // durably (once per leadership change, not per produce): done here, outside the timing,
  // with the same first write to each reference file.
  auto first = Clock::now();
  for (int p = 0; p < c.partitions; ++p) AppendOne({logs[size_t(p)]}, pool, p);
  double first_append_ms = Since(first) * 1e3 / c.partitions;
  for (int p = 0; p < c.partitions; ++p) {
    WriteAll(ref.fds[size_t(p)], pool.batches[0].data(), pool.batches[0].size());
    ref.batches_since_sync[size_t(p)] = 1;
  }

  auto ref_write = [&](int64_t i) {
    const std::vector<uint8_t>& batch = pool.batches[size_t(i % int64_t(pool.batches.size()))];
    size_t f = size_t(i % c.partitions);
    WriteAll(ref.fds[f], batch.data(), batch.size());
    if (c.fsync && ++ref.batches_since_sync[f] >= sync_batches) {
      if (::fdatasync(ref.fds[f]) != 0) Die(fmt::format("fdatasync: {}", std::strerror(errno)));
      ref.batches_since_sync[f] = 0;
    }
  };

  double engine_s = 0, ref_s = 0;
  int64_t engine_next = 0, ref_next = 0;
  for (int s = 0; s < kSlices; ++s) {
    auto run_engine = [&] {
      auto t = Clock::now();
      for (int64_t end = engine_next + per_slice; engine_next < end; ++engine_next) {
        AppendOne(logs, pool, engine_next);
      }
      engine_s += Since(t);
    };
    auto run_ref = [&] {
      auto t = Clock::now();
      for (int64_t end = ref_next + per_slice; ref_next < end; ++ref_next) ref_write(ref_next);
      ref_s += Since(t);
    };
    if (s % 2 == 0) {
      run_engine();
      run_ref();
    } else {
      run_ref();
      run_engine();
    }
  }
  int64_t engine_records = 0;
  for (const auto& log : logs) engine_records += log->State().log_end_offset;
  if (engine_records != records + int64_t(c.partitions) * pool.records_per_batch) {
    Die(fmt::format("{}: the logs hold {} records, {} were appended", name, engine_records,
                    records));
  }
  double engine_mibs = double(bytes) / kMiB / engine_s;
  double ref_mibs = double(bytes) / kMiB / ref_s;
  Print(fmt::format("  {:<30} {:9.1f} {:12.0f}   {:9.1f}   {}", name, engine_mibs,
                    double(records) / engine_s, ref_mibs,
                    Verdict(engine_mibs / ref_mibs, kAppendTarget)));
  Print(fmt::format(
      "  {:<30} (untimed first append per partition: {:.1f} ms{})", "", first_append_ms,
      c.fsync ? fmt::format("; fdatasync after every {} batches = {} bytes per "
                            "partition, flush.messages={}",
                            sync_batches, sync_batches * int64_t(pool.batch_bytes), flush_messages)
              : ""));

  std::optional<std::string> read_row;
  if (with_reads) {
    // The same data, from the page cache (just written), interleaved in slices.
    const int64_t stored = bytes + int64_t(c.partitions) * int64_t(pool.batch_bytes);
    const int64_t slice_bytes = stored / kSlices + 1;
    EngineReader engine_reader(manager.get(), logs, /*fetch_bytes=*/true, pool.batch_bytes,
                               pool.records_per_batch);
    Reference ref_read;
    for (const std::string& path : ref.paths) ref_read.fds.push_back(OpenOrDie(path, O_RDONLY));
    ReferenceReader ref_reader(ref_read);
    double read_engine_s = 0, read_ref_s = 0;
    bool engine_more = true, ref_more = true;
    for (int s = 0; (engine_more || ref_more) && s < 4 * kSlices; ++s) {
      auto run_engine = [&] {
        auto t = Clock::now();
        if (engine_more) engine_more = engine_reader.ReadSome(slice_bytes);
        read_engine_s += Since(t);
      };
      auto run_ref = [&] {
        auto t = Clock::now();
        if (ref_more) ref_more = ref_reader.ReadSome(slice_bytes);
        read_ref_s += Since(t);
      };
      if (s % 2 == 0) {
        run_engine();
        run_ref();
      } else {
        run_ref();
        run_engine();
      }
    }
    if (engine_more || ref_more || engine_reader.total() != stored ||
        ref_reader.total() != stored) {
      Die(fmt::format("{}: read {} bytes from the logs and {} from the files, wrote {}", name,
                      engine_reader.total(), ref_reader.total(), stored));
    }
    for (int fd : ref_read.fds) ::close(fd);

    // Log::Read alone: the file-range path, no bytes read. Whole passes until 0.5 s.
    int64_t range_reads = 0;
    auto t = Clock::now();
    double range_s = 0;
    for (int pass = 0; pass < 1000 && range_s < 0.5; ++pass) {
      EngineReader ranges_only(manager.get(), logs, /*fetch_bytes=*/false, pool.batch_bytes,
                               pool.records_per_batch);
      while (ranges_only.ReadSome(INT64_MAX / 2)) {
      }
      if (ranges_only.total() != stored) Die("Log::Read alone did not cover the log");
      range_reads += ranges_only.reads();
      range_s = Since(t);
    }
    double engine_read_mibs = double(stored) / kMiB / read_engine_s;
    double ref_read_mibs = double(stored) / kMiB / read_ref_s;
    read_row =
        fmt::format("  {:<30} {:9.1f}   {:9.1f}   {}  {:9.0f} {:8.1f}", name, engine_read_mibs,
                    ref_read_mibs, Verdict(engine_read_mibs / ref_read_mibs, kReadTarget),
                    double(range_reads) / range_s, range_s / double(range_reads) * 1e6);
  }

  for (int fd : ref.fds) ::close(fd);
  logs.clear();
  if (!flags.keep) {
    TruncateLogFiles(engine_dir);
    RemoveTree(ref_dir);
  }
  Check(manager->Shutdown(), "Shutdown");
  manager.reset();
  if (!flags.keep) RemoveTree(dir);
  return read_row;
}

// ---------------------------------------------------------------- 3: recovery

// Reads every file in `paths` with read() in 1 MiB chunks (optionally CRC32C over the
// bytes); returns the seconds taken and adds the bytes to *bytes.
double ReadFiles(const std::vector<std::string>& paths, bool crc, int64_t* bytes) {
  std::vector<uint8_t> buffer(static_cast<size_t>(kReadChunk));
  uint32_t sum = 0;
  auto t = Clock::now();
  for (const std::string& path : paths) {
    int fd = OpenOrDie(path, O_RDONLY);
    for (;;) {
      ssize_t n = ::read(fd, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) Die(fmt::format("read {}: {}", path, std::strerror(errno)));
      if (n == 0) break;
      if (crc) sum = runnel::crc32c::Extend(sum, buffer.data(), size_t(n));
      *bytes += n;
    }
    ::close(fd);
  }
  double s = Since(t);
  if (crc && sum == 0x12345678) Print("");  // keeps the CRC from being optimized away
  return s;
}

std::vector<std::string> LogFilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".log") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void RunRecovery(const Flags& flags, const std::string& root) {
  constexpr int kPartitions = 100;
  const std::string dir = root + "/recovery";
  MakeDir(dir);
  BatchPool pool = MakePool(1024, kPoolBatches);
  const int64_t batches = flags.recovery_mib * kMiB / int64_t(pool.batch_bytes);
  Print(
      fmt::format("3. Recovery: {} MiB in {} partitions ({} records, {}-byte batches), "
                  "{} recovery thread(s)",
                  flags.recovery_mib, kPartitions, RecordSizeName(pool.record_size),
                  pool.batch_bytes, flags.recovery_threads));
  {
    std::unique_ptr<LogManager> manager = OpenManager(dir);
    std::vector<std::shared_ptr<Log>> logs = CreateLogs(*manager, "recover", kPartitions, {});
    auto t = Clock::now();
    for (int64_t i = 0; i < batches; ++i) AppendOne(logs, pool, i);
    double write_s = Since(t);
    logs.clear();
    t = Clock::now();
    Check(manager->Shutdown(), "Shutdown");
    Print(fmt::format("  written in {:.2f} s; Shutdown (fdatasync of everything) {:.2f} s", write_s,
                      Since(t)));
  }
  // An unclean stop, as far as the next start can tell: no clean-shutdown marker, and no
  // recovery point, so every segment is taken to hold unflushed data and is rescanned
  // (each batch's header, lengths and CRC checked, both indexes rebuilt, then fdatasync).
  std::string marker = dir + "/" + std::string(runnel::storaged::kCleanShutdownMarker);
  std::string recovery_points = dir + "/" + std::string(runnel::storaged::kRecoveryPointCheckpoint);
  for (const std::string& path : {marker, recovery_points}) {
    if (::unlink(path.c_str()) != 0) Die(fmt::format("unlink {}: {}", path, std::strerror(errno)));
  }
  Print(fmt::format("  unclean stop simulated: after Shutdown, removed {} and {}, so every",
                    runnel::storaged::kCleanShutdownMarker,
                    runnel::storaged::kRecoveryPointCheckpoint));
  Print("  segment is after the recovery point and rescanned (header, lengths and CRC of every");
  Print("  batch, both indexes rebuilt). Both sides read from the page cache (data just written).");

  std::vector<std::string> paths = LogFilesUnder(dir);
  int64_t ref_bytes = 0;
  double ref_s = ReadFiles(paths, /*crc=*/false, &ref_bytes);
  int64_t crc_bytes = 0;
  double crc_s = ReadFiles(paths, /*crc=*/true, &crc_bytes);
  if (ref_bytes != batches * int64_t(pool.batch_bytes)) {
    Die(fmt::format("the .log files hold {} bytes, {} were appended", ref_bytes,
                    batches * int64_t(pool.batch_bytes)));
  }

  auto t = Clock::now();
  std::unique_ptr<LogManager> manager = OpenManager(dir, flags.recovery_threads);
  double open_s = Since(t);
  const runnel::storaged::LoadReport& report = manager->load_report();
  int64_t records = 0;
  for (const auto& log : manager->AllLogs()) records += log->State().log_end_offset;
  if (records != batches * pool.records_per_batch || report.truncated_bytes != 0) {
    Die(fmt::format("recovery found {} records ({} truncated bytes), {} were appended", records,
                    report.truncated_bytes, batches * pool.records_per_batch));
  }
  double gib = double(ref_bytes) / double(1LL << 30);
  Print(
      fmt::format("  Runnel LogManager::Open, unclean  {:8.3f} s  {:6.2f} GiB/s  "
                  "({} of {} segments recovered)",
                  open_s, gib / open_s, report.recovered_segments, report.segments));
  Print(fmt::format("  reference read() of the .log files {:7.3f} s  {:6.2f} GiB/s", ref_s,
                    gib / ref_s));
  Print(fmt::format("  ratio Runnel/reference            {:8.2f}", ref_s / open_s));
  Print(
      fmt::format("  (read() + CRC32C of the same bytes {:6.3f} s  {:6.2f} GiB/s: the floor "
                  "of a validating scan)",
                  crc_s, gib / crc_s));
  Check(manager->Shutdown(), "Shutdown");
  manager.reset();

  t = Clock::now();
  manager = OpenManager(dir, flags.recovery_threads);
  double clean_s = Since(t);
  Print(
      fmt::format("  Runnel LogManager::Open, clean    {:8.3f} s  ({:.2f} ms per partition; {} "
                  "segments, {} recovered)",
                  clean_s, clean_s * 1e3 / kPartitions, manager->load_report().segments,
                  manager->load_report().recovered_segments));
  Check(manager->Shutdown(), "Shutdown");
  manager.reset();
  if (!flags.keep) RemoveTree(dir);
}

// ---------------------------------------------------------------- 4: per-partition cost

void RunPartitions(const Flags& flags, const std::string& root) {
  const std::string dir = root + "/partitions";
  MakeDir(dir);
  const int n = flags.partitions;
  BatchPool pool = MakePool(100, 1, /*records_per_batch=*/1);
  Print(fmt::format("4. Per-partition cost: {} partitions, one {}-byte batch (1 record) each", n,
                    pool.batch_bytes));
  std::unique_ptr<LogManager> manager = OpenManager(dir);
  manager->Start();
  int64_t rss0 = ProcStatusKb("VmRSS");
  int fds0 = CountOpenFds();
  int maps0 = CountMaps();
  std::string topic_id = runnel::protocol::Uuid::Random().ToString();
  // Several threads, as a storaged's gRPC threads would create and write partitions; each
  // appends its own copy of the batch (Append rewrites its header in place).
  constexpr int kThreads = 8;
  std::vector<std::shared_ptr<Log>> logs(static_cast<size_t>(n));
  auto run = [&](const std::function<void(int)>& fn) {
    auto t = Clock::now();
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        for (int p = i; p < n; p += kThreads) fn(p);
      });
    }
    for (std::thread& th : threads) th.join();
    return Since(t);
  };
  double create_s = run([&](int p) {
    logs[size_t(p)] =
        Take(manager->CreateLog(TopicPartition{"many", p}, topic_id, {}), "CreateLog");
  });
  std::vector<BatchPool> pools(kThreads, pool);
  double append_s =
      run([&](int p) { AppendOne({logs[size_t(p)]}, pools[size_t(p % kThreads)], 0); });
  logs.clear();
  int64_t rss1 = ProcStatusKb("VmRSS");
  int fds1 = CountOpenFds();
  int maps1 = CountMaps();
  size_t cached = manager->files().open_count();
  size_t max_open = manager->files().max_open();
  Print(
      fmt::format("  {} threads: CreateLog {:.2f} s ({:.0f}/s), then the first Append of each "
                  "{:.2f} s ({:.0f}/s)",
                  kThreads, create_s, n / create_s, append_s, n / append_s));
  Print(fmt::format("  RSS            {:8.1f} MiB -> {:8.1f} MiB: {:6.1f} KiB per partition",
                    rss0 / 1024.0, rss1 / 1024.0, double(rss1 - rss0) / n));
  Print(
      fmt::format("  open fds       {:8d}     -> {:8d}    : {} (FileCache holds {} of max {}; "
                  "{} opened in all)",
                  fds0, fds1, fds1 - fds0 <= int(max_open) + 8 ? "bounded" : "NOT BOUNDED", cached,
                  max_open, manager->files().opens()));
  std::string max_maps = ReadSmallFile("/proc/sys/vm/max_map_count");
  Print(
      fmt::format("  memory maps    {:8d}     -> {:8d}    : {:.2f} per partition "
                  "(vm.max_map_count {})",
                  maps0, maps1, double(maps1 - maps0) / n, max_maps));
  auto t = Clock::now();
  Check(manager->Shutdown(), "Shutdown");
  double shutdown_s = Since(t);
  Print(fmt::format("  Shutdown {:.2f} s ({:.2f} ms per partition)", shutdown_s,
                    shutdown_s * 1e3 / n));
  manager.reset();
  if (!flags.keep) RemoveTree(dir);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  runnel::log::Options lo;
  lo.role = "storage_bench";
  lo.level = "warn";
  runnel::log::Init(lo);

  std::string parent = flags.dir.empty() ? "/var/tmp" : flags.dir;
  MakeDir(parent);
  std::string tmpl = parent + "/rnl-storage-bench-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    Die(fmt::format("mkdtemp {}: {}", tmpl, std::strerror(errno)));
  }
  const std::string root = tmpl;
  bool tmpfs = false;
  std::string fs = DescribeFs(root, &tmpfs);
  Print(fmt::format("storage_bench: data in {} ({})", root, fs));
  if (tmpfs) Print("  WARNING: tmpfs measures memory, not a disk; pass --dir on a disk");
  auto start = Clock::now();

  if (flags.only.count("append")) {
    Print(fmt::format(
        "1. Append: Log::Append of pre-built batches via LogManager, {} MiB per case, vs. "
        "write() of the same bytes to plain files (one per partition, round robin)",
        flags.append_mib));
    Print(
        "  Runnel and reference alternate in 16 slices; no copy per append (Append rewrites "
        "the base offset");
    Print(
        "  and leader epoch in place, outside the CRC; the timed loop resets the base offset "
        "to 0, 8 bytes).");
    Print(fmt::format("  {:<30} {:>9} {:>12}   {:>9}   {}", "case", "MiB/s", "records/s",
                      "ref MiB/s", "ratio"));
    std::vector<std::string> read_rows;
    for (int record_size : flags.record_sizes) {
      for (int partitions : flags.partition_counts) {
        for (bool fsync : flags.fsync_policies) {
          std::optional<std::string> row = RunAppendCase(
              flags, root, {record_size, partitions, fsync}, !fsync && flags.only.count("read"));
          if (row) read_rows.push_back(*row);
        }
      }
    }
    if (!read_rows.empty()) {
      Print(
          fmt::format("2. Read from the page cache (the page-cache cases' data): Log::Read, "
                      "max_bytes {} KiB, each range pread into a buffer, vs. pread of the "
                      "reference files in {} KiB chunks; then Log::Read alone (ranges only)",
                      kReadMaxBytes / 1024, kReadChunk / 1024));
      Print(fmt::format("  {:<30} {:>9}   {:>9}   {:<20}  {:>9} {:>8}", "case", "MiB/s",
                        "ref MiB/s", "ratio", "reads/s", "us/read"));
      for (const std::string& row : read_rows) Print(row);
    }
  }
  if (flags.only.count("recovery")) RunRecovery(flags, root);
  if (flags.only.count("partitions")) RunPartitions(flags, root);

  if (!flags.keep) RemoveTree(root);
  Print(fmt::format("storage_bench: done in {:.0f} s", Since(start)));
  return 0;
}
