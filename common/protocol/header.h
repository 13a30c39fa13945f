// Kafka request and response headers, and which header version goes with which API version.
//
// Request header v0: api_key int16, api_version int16, correlation_id int32.
//            v1: + client_id nullable int16-length string.
//            v2: + tagged fields (client_id stays a non-compact string, as in Kafka).
// Response header v0: correlation_id int32.  v1: + tagged fields.
#pragma once

#include <absl/status/status.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/protocol/wire.h"

namespace runnel::protocol {

struct RequestHeader {
  int16_t api_key = 0;
  int16_t api_version = 0;
  int32_t correlation_id = 0;
  std::optional<std::string> client_id;  // absent in v0; null is allowed in v1+
  std::vector<RawTaggedField> unknown_tagged_fields;

  // `header_version` is 0..2 (see RequestHeaderVersion); anything else is an error.
  [[nodiscard]] absl::Status Decode(Reader& r, int16_t header_version);
  void Encode(Writer& w, int16_t header_version) const;
  size_t Size(int16_t header_version) const;
  bool operator==(const RequestHeader&) const = default;
};

struct ResponseHeader {
  int32_t correlation_id = 0;
  std::vector<RawTaggedField> unknown_tagged_fields;

  // `header_version` is 0 or 1 (see ResponseHeaderVersion); anything else is an error.
  [[nodiscard]] absl::Status Decode(Reader& r, int16_t header_version);
  void Encode(Writer& w, int16_t header_version) const;
  size_t Size(int16_t header_version) const;
  bool operator==(const ResponseHeader&) const = default;
};

// The request header version a client uses for `api_key` at `api_version`: 2 when that request
// version is flexible, else 1 (v0 was ControlledShutdown v0's, an API Kafka 4 removed, as it
// is from the codec). Versions outside the schema's
// range follow the same rule (flexible from the first flexible version on); an unknown key is
// treated as non-flexible (1), which is enough to read its correlation id and client id.
int16_t RequestHeaderVersion(int16_t api_key, int16_t api_version);

// The response header version: 1 when the response is flexible at `api_version`, else 0.
// ApiVersions always answers with v0, so a client that sent a version the broker does not
// know can still parse the answer. Unknown keys get 0.
int16_t ResponseHeaderVersion(int16_t api_key, int16_t api_version);

}  // namespace runnel::protocol
