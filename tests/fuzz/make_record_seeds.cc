// Writes record_batch_fuzzer's seed corpus: batches built with BatchBuilder for every codec
// (null keys and values, headers, offset gaps), a control batch, an empty cleaned batch, two
// batches back to back, and a batch whose snappy payload is raw rather than xerial-framed.
#include <snappy.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/record/batch.h"
#include "common/util/crc32c.h"

namespace {

using runnel::record::BatchBuilder;
using runnel::record::ByteSpan;
using runnel::record::Compression;
using runnel::record::RecordHeader;

ByteSpan Span(const std::string& s) {
  return ByteSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

std::vector<uint8_t> Build(Compression codec, bool gaps) {
  BatchBuilder::Options o;
  o.compression = codec;
  o.producer_id = 1000;
  o.producer_epoch = 2;
  o.base_sequence = 0;
  BatchBuilder b(o);
  const std::string value(300, 'v');
  b.Add(0, 1700000000000, Span("key-0"), Span(value));
  b.Add(gaps ? 2 : 1, 1700000000100, std::nullopt, Span("tomb?"),
        {RecordHeader{Span("h"), Span("hv")}, RecordHeader{Span("n"), std::nullopt}});
  b.Add(gaps ? 5 : 2, 1699999999000, Span("key-2"), std::nullopt);
  return *b.Build();
}

bool Write(const std::string& path, const std::vector<uint8_t>& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds;
  const char* names[] = {"none", "gzip", "snappy", "lz4", "zstd"};
  for (int c = 0; c <= 4; ++c) {
    seeds.emplace_back(std::string("batch_") + names[c], Build(static_cast<Compression>(c), false));
    seeds.emplace_back(std::string("gaps_") + names[c], Build(static_cast<Compression>(c), true));
  }

  BatchBuilder::Options control;
  control.control = true;
  control.transactional = true;
  control.producer_id = 1000;
  BatchBuilder marker(control);
  marker.Add(0, 1700000000000, Span(std::string("\0\0\0\1", 4)),
             Span(std::string("\0\0\0\0\0\7", 6)));
  seeds.emplace_back("control", *marker.Build());

  BatchBuilder::Options cleaned;
  cleaned.base_offset = 40;
  cleaned.delete_horizon_ms = 1700000500000;
  seeds.emplace_back("empty_cleaned", *BatchBuilder(cleaned).Build(9));

  std::vector<uint8_t> two = Build(Compression::kNone, false);
  const std::vector<uint8_t> second = Build(Compression::kLz4, false);
  two.insert(two.end(), second.begin(), second.end());
  seeds.emplace_back("two_batches", two);

  // Raw snappy (as librdkafka writes it): swap the xerial payload for one raw block.
  std::vector<uint8_t> plain = Build(Compression::kNone, false);
  std::string raw;
  snappy::Compress(reinterpret_cast<const char*>(plain.data()) + runnel::record::kBatchHeaderSize,
                   plain.size() - runnel::record::kBatchHeaderSize, &raw);
  std::vector<uint8_t> raw_batch(plain.begin(), plain.begin() + runnel::record::kBatchHeaderSize);
  raw_batch.insert(raw_batch.end(), raw.begin(), raw.end());
  const uint32_t length = static_cast<uint32_t>(raw_batch.size() - 12);
  for (int i = 0; i < 4; ++i) raw_batch[8 + i] = static_cast<uint8_t>(length >> (24 - 8 * i));
  raw_batch[22] = (raw_batch[22] & ~0x07) | 2;  // codec bits: snappy
  const uint32_t crc = runnel::crc32c::Value(raw_batch.data() + 21, raw_batch.size() - 21);
  for (int i = 0; i < 4; ++i) raw_batch[17 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
  seeds.emplace_back("raw_snappy", raw_batch);

  for (const auto& [name, bytes] : seeds) {
    if (!Write(dir + "/" + name, bytes)) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
      return 1;
    }
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
  return 0;
}
