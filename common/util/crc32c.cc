#include "common/util/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace runnel::crc32c {
namespace {

constexpr uint32_t kPolyReflected = 0x82F63B78u;

// kTables[k][b]: CRC of byte b followed by k zero bytes; slicing-by-8 reads 8 bytes per step.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  constexpr Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPolyReflected : 0);
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
    }
  }
};
constexpr Tables kTables;

inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

#if defined(__x86_64__)
// The crc32 instruction has a latency of 3 cycles and a throughput of 1, so one dependent
// chain runs at a third of what the CPU can do. Three chains over three adjacent blocks run
// in parallel, and are joined by "shifting" a block's CRC over the length of the following
// blocks (multiplying by x^(8*len) mod P, which is linear in the CRC: 4 table lookups).
constexpr size_t kLongBlock = 8192;
constexpr size_t kShortBlock = 256;

// GF(2) 32x32 matrices (as 32 columns) for the CRC register: the operator "feed n zero bits".
uint32_t Gf2Times(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat) {
    if (vec & 1) sum ^= *mat;
  }
  return sum;
}

void Gf2Square(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Gf2Times(mat, mat[n]);
}

// Tables applying "feed `len` zero bytes" to a register, one byte of it per table.
struct ShiftTables {
  uint32_t t[4][256];
  explicit ShiftTables(size_t len) {
    uint32_t odd[32], even[32];
    odd[0] = kPolyReflected;  // one zero bit
    for (int n = 1; n < 32; ++n) odd[n] = 1u << (n - 1);
    Gf2Square(even, odd);  // two zero bits
    Gf2Square(odd, even);  // four zero bits
    // Squaring doubles the bits fed: after the loop `op` feeds 8*len bits (len a power of 2).
    const uint32_t* op = odd;
    for (size_t bits = 4; bits < 8 * len;) {
      Gf2Square(even, odd);
      bits *= 2;
      op = even;
      if (bits >= 8 * len) break;
      Gf2Square(odd, even);
      bits *= 2;
      op = odd;
    }
    for (uint32_t n = 0; n < 256; ++n) {
      t[0][n] = Gf2Times(op, n);
      t[1][n] = Gf2Times(op, n << 8);
      t[2][n] = Gf2Times(op, n << 16);
      t[3][n] = Gf2Times(op, n << 24);
    }
  }
  uint32_t Shift(uint32_t crc) const {
    return t[0][crc & 0xFF] ^ t[1][(crc >> 8) & 0xFF] ^ t[2][(crc >> 16) & 0xFF] ^ t[3][crc >> 24];
  }
};

const ShiftTables& LongShift() {
  static const ShiftTables kTables(kLongBlock);
  return kTables;
}
const ShiftTables& ShortShift() {
  static const ShiftTables kTables(kShortBlock);
  return kTables;
}

// Three interleaved chains over blocks of `block` bytes while 3 blocks remain.
__attribute__((target("sse4.2"))) inline uint64_t ThreeWay(uint64_t c, const uint8_t*& p, size_t& n,
                                                           size_t block, const ShiftTables& shift) {
  while (n >= 3 * block) {
    uint64_t c1 = 0, c2 = 0;
    const uint8_t* end = p + block;
    do {
      c = _mm_crc32_u64(c, LoadLE64(p));
      c1 = _mm_crc32_u64(c1, LoadLE64(p + block));
      c2 = _mm_crc32_u64(c2, LoadLE64(p + 2 * block));
      p += 8;
    } while (p < end);
    c = shift.Shift(static_cast<uint32_t>(c)) ^ c1;
    c = shift.Shift(static_cast<uint32_t>(c)) ^ c2;
    p += 2 * block;
    n -= 3 * block;
  }
  return c;
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  c = ThreeWay(c, p, n, kLongBlock, LongShift());
  c = ThreeWay(c, p, n, kShortBlock, ShortShift());
  while (n >= 8) {
    c = _mm_crc32_u64(c, LoadLE64(p));
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  return ~static_cast<uint32_t>(c);
}

bool DetectSse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#else
bool DetectSse42() { return false; }
#endif

const bool kHasSse42 = DetectSse42();

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  const auto& t = kTables.t;
  uint32_t c = ~crc;
  while (n >= 8) {
    uint64_t v = LoadLE64(p) ^ c;
    c = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
        t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^
        t[0][(v >> 56) & 0xFF];
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
    --n;
  }
  return ~c;
}

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (kHasSse42) return ExtendSse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return ExtendPortable(crc, data, n);
}

bool HardwareAccelerated() { return kHasSse42; }

}  // namespace runnel::crc32c
