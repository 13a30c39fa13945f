// Round-trip checking for the generated messages, shared by the generated per-API test sources
// (roundtrip_<api>.cc in the build tree) and roundtrip_test.cc, which runs them under gtest.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/protocol/records.h"
#include "common/protocol/uuid.h"
#include "common/protocol/wire.h"

namespace runnel::protocol::testing {

// Deterministic values for the generated Fill() functions. The null policy makes some seeds
// exercise every null and others every non-null value, so both paths are always covered.
class FillRng {
 public:
  enum class Nulls { kNever, kAlways, kRandom };

  FillRng(uint64_t seed, Nulls nulls) : rng_(seed), nulls_(nulls) {}

  template <typename T>
  T Int() {
    return static_cast<T>(rng_());
  }
  bool Bool() { return (rng_() & 1) != 0; }
  double Double() {
    // Finite values only: NaN != NaN would make equal messages compare unequal.
    return static_cast<double>(static_cast<int64_t>(rng_() % 2000001) - 1000000) / 8.0;
  }
  Uuid RandomUuid() { return Uuid::FromBits(rng_(), rng_()); }
  std::string String() {
    std::string s(rng_() % 9, 'a');
    for (char& c : s) c = static_cast<char>('a' + rng_() % 26);
    return s;
  }
  Bytes RandomBytes() {
    Bytes b(rng_() % 9);
    for (uint8_t& c : b) c = static_cast<uint8_t>(rng_());
    return b;
  }
  // Array lengths: one or two elements.
  size_t Count() { return 1 + rng_() % 2; }
  // Whether a nullable value should be null this time.
  bool Null() {
    switch (nulls_) {
      case Nulls::kNever:
        return false;
      case Nulls::kAlways:
        return true;
      case Nulls::kRandom:
        return rng_() % 3 == 0;
    }
    return false;
  }
  // Sometimes adds an unknown tagged field (tags from 1000 up, above every known tag) so the
  // preservation of unknown tags is exercised.
  void MaybeUnknownTags(std::vector<RawTaggedField>* out) {
    if (rng_() % 2 == 0) return;
    out->push_back(RawTaggedField{static_cast<uint32_t>(1000 + rng_() % 100), RandomBytes()});
  }

 private:
  std::mt19937_64 rng_;
  Nulls nulls_;
};

// One generated case: a message type at a version.
struct RoundTripCase {
  std::string message;  // e.g. "MetadataRequest"
  int16_t api_key;
  bool is_request;
  int16_t version;
  // Runs the round trip for one seed; seed 0 uses a default-constructed message.
  absl::Status (*run)(int16_t version, uint64_t seed);
  // The encoding of the message RoundTrip() builds for `seed` (the fuzzer's seed corpus).
  Bytes (*encode)(int16_t version, uint64_t seed);

  friend void PrintTo(const RoundTripCase& c, std::ostream* os) {
    *os << c.message << " v" << c.version;
  }
};

std::vector<RoundTripCase> AllRoundTripCases();

inline FillRng::Nulls NullsForSeed(uint64_t seed) {
  switch (seed % 3) {
    case 0:
      return FillRng::Nulls::kNever;
    case 1:
      return FillRng::Nulls::kAlways;
    default:
      return FillRng::Nulls::kRandom;
  }
}

template <typename T>
T MakeMessage(int16_t v, uint64_t seed, void (*fill)(T&, int16_t, FillRng&)) {
  T m;
  if (seed != 0) {
    FillRng rng(seed, NullsForSeed(seed));
    fill(m, v, rng);
  }
  return m;
}

template <typename T>
Bytes EncodeMessage(int16_t v, uint64_t seed, void (*fill)(T&, int16_t, FillRng&)) {
  Bytes out;
  Writer w(out);
  MakeMessage<T>(v, seed, fill).Encode(w, v);
  return out;
}

// Fill (seed != 0), check encodable, encode, check Size(), decode, compare; every strict
// prefix must fail to decode; trailing bytes must be left unread.
template <typename T>
absl::Status RoundTrip(int16_t v, uint64_t seed, void (*fill)(T&, int16_t, FillRng&)) {
  auto fail = [&](const std::string& what) {
    return absl::InternalError(std::string(T::kName) + " v" + std::to_string(v) + " seed " +
                               std::to_string(seed) + ": " + what);
  };
  const T m = MakeMessage<T>(v, seed, fill);
  if (absl::Status s = m.CheckEncodable(v); !s.ok()) {
    return fail("CheckEncodable: " + std::string(s.message()));
  }
  Bytes buf = {0xee};  // a byte before the message: Encode must append, not overwrite
  Writer w(buf);
  m.Encode(w, v);
  if (buf.size() - 1 != m.Size(v)) {
    return fail("Size() " + std::to_string(m.Size(v)) + " != encoded " +
                std::to_string(buf.size() - 1));
  }
  buf.erase(buf.begin());

  T decoded;
  Reader r(buf);
  if (absl::Status s = decoded.Decode(r, v); !s.ok()) {
    return fail("Decode: " + std::string(s.message()));
  }
  if (!r.empty()) return fail(std::to_string(r.remaining()) + " bytes left after Decode");
  if (!(decoded == m)) return fail("decoded message differs from the original");

  Bytes again;
  Writer w2(again);
  decoded.Encode(w2, v);
  if (again != buf) return fail("re-encoding the decoded message gives different bytes");

  for (size_t n = 0; n < buf.size(); ++n) {
    Reader prefix(std::span<const uint8_t>(buf.data(), n));
    T x;
    if (x.Decode(prefix, v).ok()) {
      return fail("a " + std::to_string(n) + "-byte prefix of " + std::to_string(buf.size()) +
                  " bytes decoded without error");
    }
  }

  Bytes trailing = buf;
  trailing.insert(trailing.end(), {0xde, 0xad, 0xbe, 0xef});
  Reader tr(trailing);
  T y;
  if (absl::Status s = y.Decode(tr, v); !s.ok()) {
    return fail("Decode with trailing bytes: " + std::string(s.message()));
  }
  if (tr.position() != buf.size()) {
    return fail("Decode with trailing bytes consumed " + std::to_string(tr.position()) +
                " bytes, not " + std::to_string(buf.size()));
  }
  if (!(y == m)) return fail("decoded message (with trailing bytes) differs");
  return absl::OkStatus();
}

}  // namespace runnel::protocol::testing
