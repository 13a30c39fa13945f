// Kafka's 128-bit UUID (topic ids, directory ids, ...), as 16 bytes in wire order.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace runnel::protocol {

struct Uuid {
  // Big-endian: bytes[0..7] are Kafka's most significant long, bytes[8..15] the least.
  std::array<uint8_t, 16> bytes{};

  constexpr bool operator==(const Uuid&) const = default;
  // clang-tidy 14 takes the 0 that a defaulted <=> compares with for a null pointer
  // (llvm/llvm-project#53961, fixed in clang-tidy 18).
  // NOLINTNEXTLINE(modernize-use-nullptr)
  constexpr auto operator<=>(const Uuid&) const = default;

  constexpr bool IsZero() const {
    for (uint8_t b : bytes) {
      if (b != 0) return false;
    }
    return true;
  }

  static Uuid FromBits(uint64_t most_significant, uint64_t least_significant);
  uint64_t MostSignificantBits() const;
  uint64_t LeastSignificantBits() const;

  // Kafka's text form: URL-safe base64 without padding (22 characters).
  std::string ToString() const;
  // The 16 bytes as a string (the form protobuf `bytes` fields hold).
  std::string ToByteString() const { return std::string(bytes.begin(), bytes.end()); }
  // The id held in a 16-byte string; nullopt for any other length.
  static std::optional<Uuid> FromByteString(std::string_view b);

  // Parses ToString()'s form; nullopt when `text` is not exactly that.
  static std::optional<Uuid> FromString(std::string_view text);

  // A random version-4 UUID that is, as in Kafka, never the zero id, never the metadata
  // topic's id (0, 1) and never renders with a leading '-' (which a CLI would take for a flag).
  static Uuid Random();
  // The same, drawn from `rng` (seeded generators make reproducible ids in tests).
  static Uuid Random(std::mt19937_64& rng);
};

// Kafka's reserved id of the __cluster_metadata topic.
inline constexpr Uuid kMetadataTopicId = {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};

}  // namespace runnel::protocol

template <>
struct std::hash<runnel::protocol::Uuid> {
  size_t operator()(const runnel::protocol::Uuid& u) const noexcept {
    return std::hash<uint64_t>()(u.MostSignificantBits() ^ (u.LeastSignificantBits() * 31));
  }
};
