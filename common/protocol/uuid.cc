#include "common/protocol/uuid.h"

#include <algorithm>
#include <random>

#include "common/util/big_endian.h"

namespace runnel::protocol {
namespace {

constexpr char kBase64Url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int Base64UrlValue(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '-') return 62;
  if (c == '_') return 63;
  return -1;
}

}  // namespace

Uuid Uuid::FromBits(uint64_t most_significant, uint64_t least_significant) {
  Uuid u;
  StoreBigEndian(u.bytes.data(), most_significant, 8);
  StoreBigEndian(u.bytes.data() + 8, least_significant, 8);
  return u;
}

uint64_t Uuid::MostSignificantBits() const { return LoadBigEndian64(bytes.data()); }

uint64_t Uuid::LeastSignificantBits() const { return LoadBigEndian64(bytes.data() + 8); }

std::string Uuid::ToString() const {
  std::string out;
  out.reserve(22);
  // 16 bytes = 5 full 3-byte groups + 1 trailing byte (2 characters, no padding).
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t n = (uint32_t{bytes[i]} << 16) | (uint32_t{bytes[i + 1]} << 8) | bytes[i + 2];
    out.push_back(kBase64Url[(n >> 18) & 63]);
    out.push_back(kBase64Url[(n >> 12) & 63]);
    out.push_back(kBase64Url[(n >> 6) & 63]);
    out.push_back(kBase64Url[n & 63]);
  }
  uint32_t n = uint32_t{bytes[i]} << 16;
  out.push_back(kBase64Url[(n >> 18) & 63]);
  out.push_back(kBase64Url[(n >> 12) & 63]);
  return out;
}

std::optional<Uuid> Uuid::FromString(std::string_view text) {
  if (text.size() != 22) return std::nullopt;
  int values[22];
  for (size_t i = 0; i < 22; ++i) {
    values[i] = Base64UrlValue(text[i]);
    if (values[i] < 0) return std::nullopt;
  }
  Uuid u;
  size_t out = 0;
  for (size_t i = 0; i + 4 <= 20; i += 4) {
    uint32_t n = (values[i] << 18) | (values[i + 1] << 12) | (values[i + 2] << 6) | values[i + 3];
    u.bytes[out++] = static_cast<uint8_t>(n >> 16);
    u.bytes[out++] = static_cast<uint8_t>(n >> 8);
    u.bytes[out++] = static_cast<uint8_t>(n);
  }
  // The last two characters carry 8 bits; the 4 low bits of the last one must be zero, else
  // the text is not what ToString() produces for any id.
  if ((values[21] & 0x0f) != 0) return std::nullopt;
  u.bytes[15] = static_cast<uint8_t>((values[20] << 2) | (values[21] >> 4));
  return u;
}

std::optional<Uuid> Uuid::FromByteString(std::string_view b) {
  Uuid u;
  if (b.size() != u.bytes.size()) return std::nullopt;
  std::copy(b.begin(), b.end(), u.bytes.begin());
  return u;
}

Uuid Uuid::Random() {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }());
  return Random(rng);
}

Uuid Uuid::Random(std::mt19937_64& rng) {
  while (true) {
    uint64_t msb = rng();
    uint64_t lsb = rng();
    msb = (msb & ~uint64_t{0xf000}) | 0x4000;                      // version 4
    lsb = (lsb & ~(uint64_t{0xc} << 60)) | (uint64_t{0x8} << 60);  // IETF variant
    Uuid u = FromBits(msb, lsb);
    if (u.IsZero() || u == kMetadataTopicId || u.ToString()[0] == '-') continue;
    return u;
  }
}

}  // namespace runnel::protocol
