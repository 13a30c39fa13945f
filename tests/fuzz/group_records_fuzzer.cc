// ParseRecord (brokerd/group/records.cc) on arbitrary __consumer_offsets records: it must
// never crash or read out of bounds, answer only OK / InvalidArgument / NotFound, and a record
// it parses must survive being rebuilt from the parsed value and parsed again.
//
// Input: a 2-byte big-endian key length, the key, then (if any bytes are left) one flag byte,
// 0 for a tombstone, else the value is the rest.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>

#include "brokerd/group/records.h"

namespace runnel::brokerd::group {
namespace {

// Rebuilds the bytes of the record a ParseRecord result describes.
LogRecord Rebuild(const ParsedRecord& parsed) {
  struct Visitor {
    LogRecord operator()(const ParsedOffset& p) {
      return p.value ? OffsetCommitRecord(p.key, *p.value) : OffsetTombstone(p.key);
    }
    LogRecord operator()(const ParsedClassicGroup& p) {
      return p.value ? ClassicGroupRecord(p.group, *p.value) : ClassicGroupTombstone(p.group);
    }
    LogRecord operator()(const ParsedGroupRecord<ConsumerGroupMetadata>& p) {
      return p.value ? ConsumerGroupMetadataRecord(p.group, *p.value)
                     : ConsumerGroupMetadataTombstone(p.group);
    }
    LogRecord operator()(const ParsedGroupRecord<ConsumerGroupPartitionMetadata>& p) {
      return p.value ? ConsumerGroupPartitionMetadataRecord(p.group, *p.value)
                     : ConsumerGroupPartitionMetadataTombstone(p.group);
    }
    LogRecord operator()(const ParsedMemberRecord<ConsumerGroupMemberMetadata>& p) {
      return p.value ? ConsumerGroupMemberMetadataRecord(p.group, p.member_id, *p.value)
                     : ConsumerGroupMemberMetadataTombstone(p.group, p.member_id);
    }
    LogRecord operator()(const ParsedGroupRecord<ConsumerGroupTargetAssignmentMetadata>& p) {
      return p.value ? ConsumerGroupTargetAssignmentMetadataRecord(p.group, *p.value)
                     : ConsumerGroupTargetAssignmentMetadataTombstone(p.group);
    }
    LogRecord operator()(const ParsedMemberRecord<ConsumerGroupTargetAssignmentMember>& p) {
      return p.value ? ConsumerGroupTargetAssignmentMemberRecord(p.group, p.member_id, *p.value)
                     : ConsumerGroupTargetAssignmentMemberTombstone(p.group, p.member_id);
    }
    LogRecord operator()(const ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>& p) {
      return p.value ? ConsumerGroupCurrentMemberAssignmentRecord(p.group, p.member_id, *p.value)
                     : ConsumerGroupCurrentMemberAssignmentTombstone(p.group, p.member_id);
    }
  };
  return std::visit(Visitor{}, parsed);
}

StatusOr<ParsedRecord> Parse(const LogRecord& r) {
  std::optional<std::span<const uint8_t>> value;
  if (r.value) value = std::span<const uint8_t>(*r.value);
  return ParseRecord(r.key, value);
}

}  // namespace
}  // namespace runnel::brokerd::group

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace runnel::brokerd::group;
  if (size < 2) return 0;
  size_t key_len = (static_cast<size_t>(data[0]) << 8) | data[1];
  std::span<const uint8_t> rest(data + 2, size - 2);
  if (key_len > rest.size()) key_len = rest.size();
  std::span<const uint8_t> key = rest.first(key_len);
  rest = rest.subspan(key_len);
  std::optional<std::span<const uint8_t>> value;
  if (!rest.empty() && rest[0] != 0) value = rest.subspan(1);

  runnel::StatusOr<ParsedRecord> parsed = ParseRecord(key, value);
  if (!parsed.ok()) {
    const absl::StatusCode code = parsed.status().code();
    if (code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kNotFound) {
      std::abort();
    }
    return 0;
  }
  // What we write back must parse, and rebuild to the same bytes (the written form is
  // canonical even when the input was an older version).
  LogRecord once = Rebuild(*parsed);
  runnel::StatusOr<ParsedRecord> again = Parse(once);
  if (!again.ok()) std::abort();
  LogRecord twice = Rebuild(*again);
  if (twice.key != once.key || twice.value != once.value) std::abort();
  return 0;
}
