// The workload shared by storage_crash_child (which appends it until killed) and
// storage_crash_test (which checks what survived): batch number n of a run is a pure
// function of (seed, n), so the test can rebuild every batch the child may have written,
// byte for byte, without being told anything but the acknowledgements.
//
// A batch carries its own number: its first timestamp is kBaseTimestamp + n * 1000, so the
// child finds where to continue by decoding the last batch of the log.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/record/batch.h"
#include "common/util/status.h"
#include "storaged/log/log_manager.h"

namespace runnel::storaged::fault {

inline constexpr char kTopic[] = "crash";
inline constexpr int32_t kPartition = 0;
inline constexpr char kTopicId[] = "Y3Jhc2gtdGVzdC10b3BpYw";
inline constexpr int64_t kBaseTimestamp = 1'700'000'000'000;
inline constexpr int64_t kTimestampStep = 1000;  // per batch; records add 0..19
// Batches [64e, 64e + 63] are appended with leader epoch e; one Append call never spans two
// epochs, so the epoch of a batch does not depend on how the child grouped its appends.
inline constexpr int64_t kBatchesPerEpoch = 64;
inline constexpr int kMaxRecords = 20;

inline TopicPartition CrashPartition() { return {kTopic, kPartition}; }

// splitmix64: a tiny generator whose output is fixed by its seed on every platform (the
// standard distributions are not), as both processes must agree on every byte.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform enough in [0, n) for a test (n > 0).
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t state_;
};

inline uint64_t BatchSeed(uint64_t seed, int64_t n) {
  Rng r(seed ^ (uint64_t(n) * 0xD1B54A32D192ED03ull));
  return r.Next();
}

inline int32_t EpochOf(int64_t n) { return int32_t(n / kBatchesPerEpoch); }

// Records in batch n (the first draw of its generator, so cheap to compute alone).
inline int RecordCount(uint64_t seed, int64_t n) {
  Rng r(BatchSeed(seed, n));
  return 1 + int(r.Below(kMaxRecords));
}

// The batch number a batch of this workload carries; -1 when it is not one of ours.
inline int64_t BatchNumberOf(const record::BatchView& batch) {
  int64_t delta = batch.base_timestamp() - kBaseTimestamp;
  if (delta < 0 || delta % kTimestampStep != 0) return -1;
  return delta / kTimestampStep;
}

// Batch n as a producer sends it: base offset 0, leader epoch -1. 1..20 records; keys and
// values null, short, or (rarely) a few KiB; patterned bytes (so codecs have work) or
// noise; some records with a header; some batches gzip / snappy / lz4 / zstd.
inline StatusOr<std::vector<uint8_t>> BuildBatch(uint64_t seed, int64_t n) {
  Rng r(BatchSeed(seed, n));
  const int count = 1 + int(r.Below(kMaxRecords));
  record::BatchBuilder::Options options;
  switch (r.Below(10)) {
    case 5:
      options.compression = record::Compression::kGzip;
      break;
    case 6:
      options.compression = record::Compression::kSnappy;
      break;
    case 7:
      options.compression = record::Compression::kLz4;
      break;
    case 8:
    case 9:
      options.compression = record::Compression::kZstd;
      break;
    default:
      break;
  }
  auto fill = [&r](size_t size) {
    std::string s(size, '\0');
    if (r.Below(4) == 0) {
      for (char& c : s) c = char(r.Next());
    } else {
      uint64_t start = r.Below(26), step = 1 + r.Below(5);
      for (size_t j = 0; j < size; ++j) s[j] = char('a' + (start + j / step) % 26);
    }
    return s;
  };
  record::BatchBuilder builder(options);
  for (int i = 0; i < count; ++i) {
    std::optional<std::string> key, value;
    uint64_t k = r.Below(100);
    if (k >= 8) key = fill(k < 98 ? r.Below(24) : 256 + r.Below(2048));
    uint64_t v = r.Below(100);
    if (v >= 4) value = fill(v < 97 ? r.Below(128) : 512 + r.Below(3584));
    std::vector<std::string> header_value;
    std::vector<record::RecordHeader> headers;
    if (r.Below(8) == 0) {
      header_value.push_back("n=" + std::to_string(n));
      const std::string& hv = header_value.back();
      headers.push_back({record::ByteSpan(reinterpret_cast<const uint8_t*>("batch"), 5),
                         record::ByteSpan(reinterpret_cast<const uint8_t*>(hv.data()), hv.size())});
    }
    auto span = [](const std::optional<std::string>& s) -> std::optional<record::ByteSpan> {
      if (!s) return std::nullopt;
      return record::ByteSpan(reinterpret_cast<const uint8_t*>(s->data()), s->size());
    };
    builder.Add(i, kBaseTimestamp + n * kTimestampStep + i, span(key), span(value), headers);
  }
  return builder.Build();
}

// Both processes run the log with these settings: small segments and a small index interval
// so that rolls and index entries happen every few appends, and a small index so an index
// fills up now and then (another reason to roll). No retention (the timestamps are old), no
// cleaner. `flush_messages` 1 syncs every append (the group-commit path); INT64_MAX leaves
// data in the page cache, which a kill -9 does not lose.
inline LogManagerOptions CrashOptions(const std::string& log_dir, int64_t flush_messages) {
  LogManagerOptions o;
  o.dirs = {log_dir};
  o.defaults.segment_bytes = 64 << 10;
  o.defaults.index_interval_bytes = 512;
  o.defaults.segment_index_bytes = 512;  // 64 offset entries, 42 time entries
  o.defaults.retention_ms = -1;
  o.defaults.flush_messages = flush_messages;
  o.cleaner_enable = false;
  return o;
}

}  // namespace runnel::storaged::fault
