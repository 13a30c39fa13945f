// Kafka's Uuid as the controller holds it: 16 raw bytes in a std::string, the form of the
// protobuf `bytes` fields of the metadata records. The id itself is protocol::Uuid; these
// are the conversions at the protobuf edge.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "common/protocol/uuid.h"

namespace runnel::controllerd {

inline constexpr size_t kUuidSize = 16;

// True when `bytes` is 16 bytes, all zero (Kafka's Uuid.ZERO_UUID, "no id").
bool IsZeroUuid(std::string_view bytes);
// True when `bytes` is a usable id: 16 bytes, not all zero.
bool IsValidUuid(std::string_view bytes);

// Kafka's text form of a 16-byte id: URL-safe base64 without padding, 22 characters.
std::string UuidToBase64(std::string_view bytes);

// Random ids as protocol::Uuid::Random makes them, from a generator that can be seeded so
// tests get the same ids every run.
class UuidGenerator {
 public:
  UuidGenerator();  // seeded from std::random_device
  explicit UuidGenerator(uint64_t seed) : rng_(seed) {}
  std::string Next() { return protocol::Uuid::Random(rng_).ToByteString(); }

 private:
  std::mt19937_64 rng_;
};

}  // namespace runnel::controllerd
