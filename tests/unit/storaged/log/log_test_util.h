// Helpers for the storage engine tests: record batches.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/record/batch.h"
#include "storaged/log/log.h"

namespace runnel::storaged::testing {

inline record::ByteSpan Span(const std::string& s) {
  return record::ByteSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// A batch of `count` records "k<i>" -> "<value_prefix><i>" with timestamps `ts`, ts+1, ...
inline std::vector<uint8_t> MakeBatch(int count, int64_t ts, const std::string& value_prefix = "v",
                                      size_t value_size = 0,
                                      record::Compression codec = record::Compression::kNone) {
  record::BatchBuilder::Options o;
  o.compression = codec;
  record::BatchBuilder b(o);
  for (int i = 0; i < count; ++i) {
    std::string key = "k" + std::to_string(i);
    std::string value = value_prefix + std::to_string(i);
    if (value.size() < value_size) value.resize(value_size, 'x');
    b.Add(ts + i, Span(key), Span(value));
  }
  StatusOr<std::vector<uint8_t>> built = b.Build();
  EXPECT_TRUE(built.ok()) << built.status();
  return built.ok() ? *built : std::vector<uint8_t>{};
}

inline int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Reads the ranges of a ReadResult and splits them into batches (copies).
inline std::vector<std::vector<uint8_t>> ReadBatches(const ReadResult& r) {
  std::vector<std::vector<uint8_t>> out;
  for (const FileRange& range : r.ranges) {
    FILE* f = std::fopen(range.path.c_str(), "rb");
    EXPECT_NE(f, nullptr) << range.path;
    if (f == nullptr) return out;
    std::vector<uint8_t> bytes(size_t(range.length));
    std::fseek(f, long(range.position), SEEK_SET);
    EXPECT_EQ(std::fread(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
    StatusOr<std::vector<record::BatchView>> views = record::SplitBatches(bytes);
    EXPECT_TRUE(views.ok()) << views.status();
    if (!views.ok()) return out;
    for (const record::BatchView& v : *views) {
      out.emplace_back(v.bytes().begin(), v.bytes().end());
    }
  }
  return out;
}

}  // namespace runnel::storaged::testing
