// Helpers for the generated message code only (included by the generated .cc files); not an
// API for other modules.
#pragma once

#include <absl/base/optimization.h>
#include <absl/status/status.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/protocol/wire.h"
#include "common/util/strong_int.h"

namespace runnel::protocol::internal {

// Prefixes a decode/check error with the Kafka name of the field it happened in, so a nested
// failure reads "Topics: Partitions: truncated int32: ...".
absl::Status FieldError(const absl::Status& status, const char* field);
// Decoding a message at a version outside its schema's range.
absl::Status UnsupportedVersion(const char* message, int16_t version, int16_t min, int16_t max);
// A field that `version` cannot carry holds a non-default value (Kafka's rule for encoding).
absl::Status NotEncodable(const char* field, int16_t version);
// A null value in a version where the field is not nullable.
absl::Status NullNotEncodable(const char* field, int16_t version);
absl::Status StringTooLong(const char* field, size_t length);

#define RUNNEL_CODEC_TRY(expr, field)                                        \
  do {                                                                       \
    ::absl::Status _codec_status = (expr);                                   \
    if (ABSL_PREDICT_FALSE(!_codec_status.ok()))                             \
      return ::runnel::protocol::internal::FieldError(_codec_status, field); \
  } while (0)

// ---- strong ids ----

template <typename Tag>
absl::Status ReadStrong(Reader& r, StrongInt<Tag, int32_t>* out) {
  int32_t v;
  absl::Status s = r.ReadInt32(&v);
  *out = StrongInt<Tag, int32_t>(v);
  return s;
}
template <typename Tag>
absl::Status ReadStrong(Reader& r, StrongInt<Tag, int64_t>* out) {
  int64_t v;
  absl::Status s = r.ReadInt64(&v);
  *out = StrongInt<Tag, int64_t>(v);
  return s;
}
inline absl::Status ReadStrong(Reader& r, ErrorCode* out) {
  int16_t v;
  absl::Status s = r.ReadInt16(&v);
  *out = static_cast<ErrorCode>(v);
  return s;
}

// The wire value of a strong id or an error code.
template <typename Tag, typename T>
constexpr T Raw(StrongInt<Tag, T> v) {
  return v.value();
}
constexpr int16_t Raw(ErrorCode e) { return ToWire(e); }

// ---- arrays ----

// `decode(r, T*)` decodes one element.
template <typename T, typename F>
absl::Status ReadArray(Reader& r, std::vector<T>* out, bool compact, size_t min_element_size,
                       F&& decode) {
  int32_t n;
  if (absl::Status s = r.ReadArrayLength(&n, compact, /*nullable=*/false, min_element_size);
      !s.ok()) {
    return s;
  }
  out->clear();
  out->resize(static_cast<size_t>(n));
  for (T& e : *out) {
    if (absl::Status s = decode(r, &e); ABSL_PREDICT_FALSE(!s.ok())) return s;
  }
  return absl::OkStatus();
}

template <typename T, typename F>
absl::Status ReadNullableArray(Reader& r, std::optional<std::vector<T>>* out, bool compact,
                               bool nullable, size_t min_element_size, F&& decode) {
  int32_t n;
  if (absl::Status s = r.ReadArrayLength(&n, compact, nullable, min_element_size); !s.ok()) {
    return s;
  }
  if (n < 0) {
    out->reset();
    return absl::OkStatus();
  }
  std::vector<T>& v = out->emplace();
  v.resize(static_cast<size_t>(n));
  for (T& e : v) {
    if (absl::Status s = decode(r, &e); ABSL_PREDICT_FALSE(!s.ok())) return s;
  }
  return absl::OkStatus();
}

// `encode(w, const T&)` encodes one element.
template <typename W, typename T, typename F>
void WriteArray(W& w, const std::vector<T>& v, bool compact, F&& encode) {
  w.WriteArrayLength(v.size(), compact);
  for (const T& e : v) encode(w, e);
}

// Null is written as Kafka's null marker when `nullable`, else as an empty array.
template <typename W, typename T, typename F>
void WriteNullableArray(W& w, const std::optional<std::vector<T>>& v, bool compact, bool nullable,
                        F&& encode) {
  if (!v) {
    if (nullable) {
      w.WriteNullArrayLength(compact);
    } else {
      w.WriteArrayLength(0, compact);
    }
    return;
  }
  WriteArray(w, *v, compact, encode);
}

// ---- nullable structs ----
// On the wire an int8 marker precedes the struct: -1 for null, 1 for present (Kafka reads
// any non-negative marker as present).

template <typename T, typename F>
absl::Status ReadNullableStruct(Reader& r, std::optional<T>* out, bool nullable, F&& decode) {
  if (nullable) {
    int8_t marker;
    if (absl::Status s = r.ReadInt8(&marker); !s.ok()) return s;
    if (marker < 0) {
      out->reset();
      return absl::OkStatus();
    }
  }
  return decode(r, &out->emplace());
}

// Null in a version where the struct is not nullable is written as a default struct.
template <typename W, typename T, typename F>
void WriteNullableStruct(W& w, const std::optional<T>& v, bool nullable, F&& encode) {
  if (nullable) w.WriteInt8(v ? 1 : -1);
  if (v) {
    encode(w, *v);
  } else if (!nullable) {
    encode(w, T{});
  }
}

// Calls `check(const T&)` on each element, stopping at the first error.
template <typename T, typename F>
absl::Status CheckEach(const std::vector<T>& v, F&& check) {
  for (const T& e : v) {
    if (absl::Status s = check(e); !s.ok()) return s;
  }
  return absl::OkStatus();
}
template <typename T, typename F>
absl::Status CheckEach(const std::optional<std::vector<T>>& v, F&& check) {
  return v ? CheckEach(*v, check) : absl::OkStatus();
}

absl::Status CheckStrings(const std::vector<std::string>& v, const char* field);

// ---- tagged fields ----

// Reads a tagged-field section. For each field, `known(tag, sub_reader, &is_known)` decodes
// the tags the caller knows at this version (setting is_known) from a reader limited to that
// field's bytes, which it must consume exactly; other tags are kept in `unknown`.
template <typename F>
absl::Status ReadTaggedFields(Reader& r, std::vector<RawTaggedField>* unknown, F&& known) {
  uint32_t count;
  if (absl::Status s = r.ReadUnsignedVarint(&count); !s.ok()) return s;
  // Each field takes at least two bytes (tag and size).
  if (count > r.remaining() / 2) {
    return absl::InvalidArgumentError("tagged field count " + std::to_string(count) +
                                      " cannot fit in the " + std::to_string(r.remaining()) +
                                      " bytes left");
  }
  unknown->clear();
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t tag, size;
    if (absl::Status s = r.ReadUnsignedVarint(&tag); !s.ok()) return s;
    if (absl::Status s = r.ReadUnsignedVarint(&size); !s.ok()) return s;
    std::span<const uint8_t> data;
    if (absl::Status s = r.ReadRaw(size, &data); !s.ok()) {
      return absl::InvalidArgumentError("tagged field " + std::to_string(tag) + ": " +
                                        std::string(s.message()));
    }
    Reader sub(data);
    bool is_known = false;
    if (absl::Status s = known(tag, sub, &is_known); !s.ok()) return s;
    if (!is_known) {
      unknown->push_back(RawTaggedField{tag, Bytes(data.begin(), data.end())});
    } else if (!sub.empty()) {
      return absl::InvalidArgumentError("tagged field " + std::to_string(tag) + " has " +
                                        std::to_string(sub.remaining()) + " unread bytes");
    }
  }
  return absl::OkStatus();
}

// Writes the unknown fields from index `next` on whose tag is below `before`, so that known
// and unknown fields come out merged in tag order. Returns the new index.
template <typename W>
size_t WriteRawTagsBefore(W& w, const std::vector<RawTaggedField>& unknown, size_t next,
                          uint64_t before) {
  while (next < unknown.size() && unknown[next].tag < before) {
    const RawTaggedField& f = unknown[next++];
    w.WriteUnsignedVarint(f.tag);
    w.WriteUnsignedVarint(static_cast<uint32_t>(f.data.size()));
    w.WriteRaw(f.data);
  }
  return next;
}

// Writes one known tagged field: tag, size, then `encode(writer)`'s bytes.
template <typename W, typename F>
void WriteTagged(W& w, uint32_t tag, F&& encode) {
  SizeCounter counter;
  encode(counter);
  w.WriteUnsignedVarint(tag);
  w.WriteUnsignedVarint(static_cast<uint32_t>(counter.size()));
  encode(w);
}

}  // namespace runnel::protocol::internal
