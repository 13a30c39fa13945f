#include "common/protocol/codec_internal.h"

namespace runnel::protocol::internal {

absl::Status FieldError(const absl::Status& status, const char* field) {
  return absl::Status(status.code(), std::string(field) + ": " + std::string(status.message()));
}

absl::Status UnsupportedVersion(const char* message, int16_t version, int16_t min, int16_t max) {
  return absl::UnimplementedError(std::string(message) + " version " + std::to_string(version) +
                                  " is not supported (supported: " + std::to_string(min) + "-" +
                                  std::to_string(max) + ")");
}

absl::Status NotEncodable(const char* field, int16_t version) {
  return absl::InvalidArgumentError(std::string(field) + " has a non-default value but version " +
                                    std::to_string(version) + " cannot carry it");
}

absl::Status NullNotEncodable(const char* field, int16_t version) {
  return absl::InvalidArgumentError(std::string(field) + " is null but not nullable in version " +
                                    std::to_string(version));
}

absl::Status StringTooLong(const char* field, size_t length) {
  return absl::InvalidArgumentError(std::string(field) + " is " + std::to_string(length) +
                                    " bytes, above Kafka's 32767-byte string limit");
}

absl::Status CheckStrings(const std::vector<std::string>& v, const char* field) {
  for (const std::string& s : v) {
    if (s.size() > kMaxStringLength) return StringTooLong(field, s.size());
  }
  return absl::OkStatus();
}

}  // namespace runnel::protocol::internal
