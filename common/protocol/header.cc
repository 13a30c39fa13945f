#include "common/protocol/header.h"

#include "common/protocol/api_keys.h"
#include "common/protocol/codec_internal.h"

namespace runnel::protocol {
namespace {

constexpr int16_t kApiVersionsKey = 18;

absl::Status BadHeaderVersion(const char* which, int16_t v) {
  return absl::InvalidArgumentError(std::string(which) + " header version " + std::to_string(v) +
                                    " does not exist");
}

absl::Status ReadTagged(Reader& r, std::vector<RawTaggedField>* unknown) {
  // No header tag is known to this code (Kafka defines none either).
  return internal::ReadTaggedFields(r, unknown,
                                    [](uint32_t, Reader&, bool*) { return absl::OkStatus(); });
}

template <typename W>
void EncodeRequestHeader(const RequestHeader& h, W& w, int16_t header_version) {
  w.WriteInt16(h.api_key);
  w.WriteInt16(h.api_version);
  w.WriteInt32(h.correlation_id);
  if (header_version >= 1) {
    // Kafka keeps the client id non-compact even in header v2 ("flexibleVersions": "none").
    w.WriteNullableString(h.client_id, /*compact=*/false, /*nullable=*/true);
  }
  if (header_version >= 2) {
    w.WriteUnsignedVarint(static_cast<uint32_t>(h.unknown_tagged_fields.size()));
    internal::WriteRawTagsBefore(w, h.unknown_tagged_fields, 0, uint64_t{1} << 32);
  }
}

template <typename W>
void EncodeResponseHeader(const ResponseHeader& h, W& w, int16_t header_version) {
  w.WriteInt32(h.correlation_id);
  if (header_version >= 1) {
    w.WriteUnsignedVarint(static_cast<uint32_t>(h.unknown_tagged_fields.size()));
    internal::WriteRawTagsBefore(w, h.unknown_tagged_fields, 0, uint64_t{1} << 32);
  }
}

}  // namespace

absl::Status RequestHeader::Decode(Reader& r, int16_t header_version) {
  if (header_version < 0 || header_version > 2) return BadHeaderVersion("request", header_version);
  *this = RequestHeader();
  RUNNEL_CODEC_TRY(r.ReadInt16(&api_key), "RequestApiKey");
  RUNNEL_CODEC_TRY(r.ReadInt16(&api_version), "RequestApiVersion");
  RUNNEL_CODEC_TRY(r.ReadInt32(&correlation_id), "CorrelationId");
  if (header_version >= 1) {
    RUNNEL_CODEC_TRY(r.ReadNullableString(&client_id, /*compact=*/false, /*nullable=*/true),
                     "ClientId");
  }
  if (header_version >= 2) RUNNEL_CODEC_TRY(ReadTagged(r, &unknown_tagged_fields), "tagged fields");
  return absl::OkStatus();
}

void RequestHeader::Encode(Writer& w, int16_t header_version) const {
  EncodeRequestHeader(*this, w, header_version);
}

size_t RequestHeader::Size(int16_t header_version) const {
  SizeCounter counter;
  EncodeRequestHeader(*this, counter, header_version);
  return counter.size();
}

absl::Status ResponseHeader::Decode(Reader& r, int16_t header_version) {
  if (header_version < 0 || header_version > 1) {
    return BadHeaderVersion("response", header_version);
  }
  *this = ResponseHeader();
  RUNNEL_CODEC_TRY(r.ReadInt32(&correlation_id), "CorrelationId");
  if (header_version >= 1) RUNNEL_CODEC_TRY(ReadTagged(r, &unknown_tagged_fields), "tagged fields");
  return absl::OkStatus();
}

void ResponseHeader::Encode(Writer& w, int16_t header_version) const {
  EncodeResponseHeader(*this, w, header_version);
}

size_t ResponseHeader::Size(int16_t header_version) const {
  SizeCounter counter;
  EncodeResponseHeader(*this, counter, header_version);
  return counter.size();
}

int16_t RequestHeaderVersion(int16_t api_key, int16_t api_version) {
  const ApiSchemaInfo* api = FindApiSchema(api_key);
  if (api == nullptr) return 1;
  const int16_t first = api->first_flexible_request;
  return first >= 0 && api_version >= first ? 2 : 1;
}

int16_t ResponseHeaderVersion(int16_t api_key, int16_t api_version) {
  if (api_key == kApiVersionsKey) return 0;
  const ApiSchemaInfo* api = FindApiSchema(api_key);
  if (api == nullptr) return 0;
  const int16_t first = api->first_flexible_response;
  return first >= 0 && api_version >= first ? 1 : 0;
}

}  // namespace runnel::protocol
