#include "controllerd/uuid.h"

namespace runnel::controllerd {

bool IsZeroUuid(std::string_view bytes) {
  std::optional<protocol::Uuid> id = protocol::Uuid::FromByteString(bytes);
  return id.has_value() && id->IsZero();
}

bool IsValidUuid(std::string_view bytes) {
  std::optional<protocol::Uuid> id = protocol::Uuid::FromByteString(bytes);
  return id.has_value() && !id->IsZero();
}

std::string UuidToBase64(std::string_view bytes) {
  std::optional<protocol::Uuid> id = protocol::Uuid::FromByteString(bytes);
  return id.has_value() ? id->ToString() : std::string();
}

UuidGenerator::UuidGenerator() {
  std::random_device rd;
  std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
  rng_.seed(seq);
}

}  // namespace runnel::controllerd
