// Big-endian (network order) loads and stores: Kafka's frames, record batches and index
// entries all hold their integers so. The one copy of these helpers; callers cast the result
// to the signed type the format names.
#pragma once

#include <cstddef>
#include <cstdint>

namespace runnel {

// The `n`-byte (1-8) big-endian integer at `p`.
constexpr uint64_t LoadBigEndian(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}
constexpr uint16_t LoadBigEndian16(const uint8_t* p) {
  return static_cast<uint16_t>(LoadBigEndian(p, 2));
}
constexpr uint32_t LoadBigEndian32(const uint8_t* p) {
  return static_cast<uint32_t>(LoadBigEndian(p, 4));
}
constexpr uint64_t LoadBigEndian64(const uint8_t* p) { return LoadBigEndian(p, 8); }

// Writes the low `n` bytes (1-8) of `v` to `p`, most significant first.
constexpr void StoreBigEndian(uint8_t* p, uint64_t v, size_t n) {
  for (size_t i = n; i > 0; --i) {
    p[i - 1] = static_cast<uint8_t>(v);
    v >>= 8;
  }
}
constexpr void StoreBigEndian32(uint8_t* p, uint32_t v) { StoreBigEndian(p, v, 4); }

}  // namespace runnel
