#include "brokerd/group/records.h"

#include <string>
#include <utility>

#include "common/protocol/coordinator/consumer_group_current_member_assignment_key.h"
#include "common/protocol/coordinator/consumer_group_current_member_assignment_value.h"
#include "common/protocol/coordinator/consumer_group_member_metadata_key.h"
#include "common/protocol/coordinator/consumer_group_member_metadata_value.h"
#include "common/protocol/coordinator/consumer_group_metadata_key.h"
#include "common/protocol/coordinator/consumer_group_metadata_value.h"
#include "common/protocol/coordinator/consumer_group_partition_metadata_key.h"
#include "common/protocol/coordinator/consumer_group_partition_metadata_value.h"
#include "common/protocol/coordinator/consumer_group_target_assignment_member_key.h"
#include "common/protocol/coordinator/consumer_group_target_assignment_member_value.h"
#include "common/protocol/coordinator/consumer_group_target_assignment_metadata_key.h"
#include "common/protocol/coordinator/consumer_group_target_assignment_metadata_value.h"
#include "common/protocol/coordinator/group_metadata_key.h"
#include "common/protocol/coordinator/group_metadata_value.h"
#include "common/protocol/coordinator/offset_commit_key.h"
#include "common/protocol/coordinator/offset_commit_value.h"
#include "common/protocol/wire.h"

namespace runnel::brokerd::group {
namespace {

namespace p = ::runnel::protocol;

// Key versions (the int16 before each key): which record a key is.
constexpr int16_t kOffsetCommitKeyV0 = 0;
constexpr int16_t kOffsetCommitKeyV1 = 1;  // the one Kafka (and we) write
constexpr int16_t kGroupMetadataKey = 2;
constexpr int16_t kConsumerGroupMetadataKey = 3;
constexpr int16_t kConsumerGroupPartitionMetadataKey = 4;
constexpr int16_t kConsumerGroupMemberMetadataKey = 5;
constexpr int16_t kConsumerGroupTargetAssignmentMetadataKey = 6;
constexpr int16_t kConsumerGroupTargetAssignmentMemberKey = 7;
constexpr int16_t kConsumerGroupCurrentMemberAssignmentKey = 8;

// Value versions we write. OffsetCommitValue v1 is the only one with an expire timestamp
// (OffsetCommit v1 requests); without one Kafka writes v3, the newest non-flexible version,
// which older readers still understand.
constexpr int16_t kOffsetValueVersion = 3;
constexpr int16_t kOffsetValueWithExpireVersion = 1;
constexpr int16_t kGroupMetadataValueVersion = 3;
constexpr int16_t kConsumerGroupValueVersion = 0;

template <typename M>
std::vector<uint8_t> Encode(const M& message, int16_t version) {
  return EncodeVersioned(message, version);
}

template <typename K, typename V>
LogRecord Record(const K& key, int16_t key_version, const V& value, int16_t value_version) {
  return LogRecord{Encode(key, key_version), Encode(value, value_version)};
}

template <typename K>
LogRecord Tombstone(const K& key, int16_t key_version) {
  return LogRecord{Encode(key, key_version), std::nullopt};
}

// Decodes `message` at `version` from the rest of `r`. Every failure, including a version the
// schema does not have, is InvalidArgument: the bytes are not a record we can read. Bytes
// after the message are ignored, as Kafka's reader does.
template <typename M>
Status DecodeAt(p::Reader& r, int16_t version, M* message) {
  if (Status s = message->Decode(r, version); !s.ok()) {
    return absl::InvalidArgumentError(std::string(M::kName) + " v" + std::to_string(version) +
                                      ": " + std::string(s.message()));
  }
  return absl::OkStatus();
}

// A value: int16 version then the message at that version.
template <typename M>
Status DecodeValue(std::span<const uint8_t> bytes, M* message) {
  p::Reader r(bytes);
  int16_t version = 0;
  if (!r.ReadInt16(&version).ok()) {
    return absl::InvalidArgumentError(std::string(M::kName) + ": no version");
  }
  return DecodeAt(r, version, message);
}

std::vector<TopicPartitions> FromWire(
    const std::vector<p::ConsumerGroupCurrentMemberAssignmentValue::TopicPartitions>& in) {
  std::vector<TopicPartitions> out;
  out.reserve(in.size());
  for (const auto& tp : in) out.push_back(TopicPartitions{tp.topic_id, tp.partitions});
  return out;
}

std::vector<p::ConsumerGroupCurrentMemberAssignmentValue::TopicPartitions> ToWire(
    const std::vector<TopicPartitions>& in) {
  std::vector<p::ConsumerGroupCurrentMemberAssignmentValue::TopicPartitions> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    out[i].topic_id = in[i].topic_id;
    out[i].partitions = in[i].partitions;
  }
  return out;
}

// ---- Per record: key and value conversions -------------------------------------------------

p::OffsetCommitKey OffsetKeyToWire(const OffsetKey& key) {
  p::OffsetCommitKey k;
  k.group = key.group;
  k.topic = key.topic;
  k.partition = key.partition;
  return k;
}

p::GroupMetadataKey GroupKey(const std::string& group) {
  p::GroupMetadataKey k;
  k.group = group;
  return k;
}

template <typename K>
K GroupIdKey(const std::string& group) {
  K k;
  k.group_id = group;
  return k;
}

template <typename K>
K MemberKey(const std::string& group, const std::string& member_id) {
  K k;
  k.group_id = group;
  k.member_id = member_id;
  return k;
}

p::GroupMetadataValue ClassicToWire(const ClassicGroupValue& v) {
  p::GroupMetadataValue out;
  out.protocol_type = v.protocol_type;
  out.generation = v.generation;
  out.protocol = v.protocol;
  out.leader = v.leader;
  out.current_state_timestamp = v.current_state_timestamp_ms;
  out.members.resize(v.members.size());
  for (size_t i = 0; i < v.members.size(); ++i) {
    const ClassicMemberValue& m = v.members[i];
    p::GroupMetadataValue::MemberMetadata& w = out.members[i];
    w.member_id = m.member_id;
    w.group_instance_id = m.group_instance_id;
    w.client_id = m.client_id;
    w.client_host = m.client_host;
    w.rebalance_timeout = m.rebalance_timeout_ms;
    w.session_timeout = m.session_timeout_ms;
    w.subscription = m.subscription;
    w.assignment = m.assignment;
  }
  return out;
}

ClassicGroupValue ClassicFromWire(p::GroupMetadataValue&& in, int16_t version) {
  ClassicGroupValue out;
  out.protocol_type = std::move(in.protocol_type);
  out.generation = in.generation;
  out.protocol = std::move(in.protocol);
  out.leader = std::move(in.leader);
  out.current_state_timestamp_ms = in.current_state_timestamp;
  out.members.reserve(in.members.size());
  for (auto& m : in.members) {
    ClassicMemberValue member;
    member.member_id = std::move(m.member_id);
    member.group_instance_id = std::move(m.group_instance_id);
    member.client_id = std::move(m.client_id);
    member.client_host = std::move(m.client_host);
    // Version 0 has no rebalance timeout: the session timeout served as both, and Kafka
    // loads it that way.
    member.rebalance_timeout_ms = version == 0 ? m.session_timeout : m.rebalance_timeout;
    member.session_timeout_ms = m.session_timeout;
    member.subscription = std::move(m.subscription);
    member.assignment = std::move(m.assignment);
    out.members.push_back(std::move(member));
  }
  return out;
}

p::ConsumerGroupPartitionMetadataValue PartitionMetadataToWire(
    const ConsumerGroupPartitionMetadata& v) {
  p::ConsumerGroupPartitionMetadataValue out;
  out.topics.resize(v.topics.size());
  for (size_t i = 0; i < v.topics.size(); ++i) {
    out.topics[i].topic_id = v.topics[i].topic_id;
    out.topics[i].topic_name = v.topics[i].topic_name;
    out.topics[i].num_partitions = v.topics[i].num_partitions;
    // PartitionMetadata (racks per partition) stays empty: we do no rack-aware assignment,
    // and Kafka 4.0 stopped using it.
  }
  return out;
}

p::ConsumerGroupMemberMetadataValue MemberMetadataToWire(const ConsumerGroupMemberMetadata& v) {
  p::ConsumerGroupMemberMetadataValue out;
  out.instance_id = v.instance_id;
  out.rack_id = v.rack_id;
  out.client_id = v.client_id;
  out.client_host = v.client_host;
  out.subscribed_topic_names = v.subscribed_topic_names;
  out.subscribed_topic_regex = v.subscribed_topic_regex;
  out.rebalance_timeout_ms = v.rebalance_timeout_ms;
  out.server_assignor = v.server_assignor;
  return out;
}

// ---- Parsing, per key version ---------------------------------------------------------------

StatusOr<ParsedRecord> ParseOffset(p::Reader& kr, int16_t key_version,
                                   std::optional<std::span<const uint8_t>> value) {
  p::OffsetCommitKey k;
  RUNNEL_RETURN_IF_ERROR(DecodeAt(kr, key_version, &k));
  ParsedOffset out;
  out.key = OffsetKey{std::move(k.group), std::move(k.topic), k.partition};
  if (value) {
    p::OffsetCommitValue v;
    RUNNEL_RETURN_IF_ERROR(DecodeValue(*value, &v));
    out.value = OffsetValue{v.offset, v.leader_epoch, std::move(v.metadata), v.commit_timestamp,
                            v.expire_timestamp};
  }
  return ParsedRecord(std::move(out));
}

StatusOr<ParsedRecord> ParseClassicGroup(p::Reader& kr, int16_t key_version,
                                         std::optional<std::span<const uint8_t>> value) {
  p::GroupMetadataKey k;
  RUNNEL_RETURN_IF_ERROR(DecodeAt(kr, key_version, &k));
  ParsedClassicGroup out;
  out.group = std::move(k.group);
  if (value) {
    p::Reader r(*value);
    int16_t version = 0;
    if (!r.ReadInt16(&version).ok())
      return absl::InvalidArgumentError("GroupMetadataValue: no version");
    p::GroupMetadataValue v;
    RUNNEL_RETURN_IF_ERROR(DecodeAt(r, version, &v));
    out.value = ClassicFromWire(std::move(v), version);
  }
  return ParsedRecord(std::move(out));
}

// KIP-848 records keyed by group id: decodes the key K, and the value W converted by `convert`.
template <typename V, typename K, typename W, typename F>
StatusOr<ParsedRecord> ParseGroupKeyed(p::Reader& kr, int16_t key_version,
                                       std::optional<std::span<const uint8_t>> value, F convert) {
  K k;
  RUNNEL_RETURN_IF_ERROR(DecodeAt(kr, key_version, &k));
  ParsedGroupRecord<V> out;
  out.group = std::move(k.group_id);
  if (value) {
    W w;
    RUNNEL_RETURN_IF_ERROR(DecodeValue(*value, &w));
    out.value = convert(std::move(w));
  }
  return ParsedRecord(std::move(out));
}

template <typename V, typename K, typename W, typename F>
StatusOr<ParsedRecord> ParseMemberKeyed(p::Reader& kr, int16_t key_version,
                                        std::optional<std::span<const uint8_t>> value, F convert) {
  K k;
  RUNNEL_RETURN_IF_ERROR(DecodeAt(kr, key_version, &k));
  ParsedMemberRecord<V> out;
  out.group = std::move(k.group_id);
  out.member_id = std::move(k.member_id);
  if (value) {
    W w;
    RUNNEL_RETURN_IF_ERROR(DecodeValue(*value, &w));
    out.value = convert(std::move(w));
  }
  return ParsedRecord(std::move(out));
}

}  // namespace

// ---- Building records ----------------------------------------------------------------------

LogRecord OffsetCommitRecord(const OffsetKey& key, const OffsetValue& value) {
  p::OffsetCommitValue v;
  v.offset = value.offset;
  v.leader_epoch = value.leader_epoch;
  v.metadata = value.metadata;
  v.commit_timestamp = value.commit_timestamp_ms;
  v.expire_timestamp = value.expire_timestamp_ms;
  const int16_t version =
      value.expire_timestamp_ms != -1 ? kOffsetValueWithExpireVersion : kOffsetValueVersion;
  return Record(OffsetKeyToWire(key), kOffsetCommitKeyV1, v, version);
}

LogRecord OffsetTombstone(const OffsetKey& key) {
  return Tombstone(OffsetKeyToWire(key), kOffsetCommitKeyV1);
}

LogRecord ClassicGroupRecord(const std::string& group, const ClassicGroupValue& value) {
  return Record(GroupKey(group), kGroupMetadataKey, ClassicToWire(value),
                kGroupMetadataValueVersion);
}

LogRecord ClassicGroupTombstone(const std::string& group) {
  return Tombstone(GroupKey(group), kGroupMetadataKey);
}

LogRecord ConsumerGroupMetadataRecord(const std::string& group, const ConsumerGroupMetadata& v) {
  p::ConsumerGroupMetadataValue w;
  w.epoch = v.epoch;
  return Record(GroupIdKey<p::ConsumerGroupMetadataKey>(group), kConsumerGroupMetadataKey, w,
                kConsumerGroupValueVersion);
}

LogRecord ConsumerGroupMetadataTombstone(const std::string& group) {
  return Tombstone(GroupIdKey<p::ConsumerGroupMetadataKey>(group), kConsumerGroupMetadataKey);
}

LogRecord ConsumerGroupPartitionMetadataRecord(const std::string& group,
                                               const ConsumerGroupPartitionMetadata& v) {
  return Record(GroupIdKey<p::ConsumerGroupPartitionMetadataKey>(group),
                kConsumerGroupPartitionMetadataKey, PartitionMetadataToWire(v),
                kConsumerGroupValueVersion);
}

LogRecord ConsumerGroupPartitionMetadataTombstone(const std::string& group) {
  return Tombstone(GroupIdKey<p::ConsumerGroupPartitionMetadataKey>(group),
                   kConsumerGroupPartitionMetadataKey);
}

LogRecord ConsumerGroupMemberMetadataRecord(const std::string& group, const std::string& member_id,
                                            const ConsumerGroupMemberMetadata& v) {
  return Record(MemberKey<p::ConsumerGroupMemberMetadataKey>(group, member_id),
                kConsumerGroupMemberMetadataKey, MemberMetadataToWire(v),
                kConsumerGroupValueVersion);
}

LogRecord ConsumerGroupMemberMetadataTombstone(const std::string& group,
                                               const std::string& member_id) {
  return Tombstone(MemberKey<p::ConsumerGroupMemberMetadataKey>(group, member_id),
                   kConsumerGroupMemberMetadataKey);
}

LogRecord ConsumerGroupTargetAssignmentMetadataRecord(
    const std::string& group, const ConsumerGroupTargetAssignmentMetadata& v) {
  p::ConsumerGroupTargetAssignmentMetadataValue w;
  w.assignment_epoch = v.assignment_epoch;
  return Record(GroupIdKey<p::ConsumerGroupTargetAssignmentMetadataKey>(group),
                kConsumerGroupTargetAssignmentMetadataKey, w, kConsumerGroupValueVersion);
}

LogRecord ConsumerGroupTargetAssignmentMetadataTombstone(const std::string& group) {
  return Tombstone(GroupIdKey<p::ConsumerGroupTargetAssignmentMetadataKey>(group),
                   kConsumerGroupTargetAssignmentMetadataKey);
}

LogRecord ConsumerGroupTargetAssignmentMemberRecord(const std::string& group,
                                                    const std::string& member_id,
                                                    const ConsumerGroupTargetAssignmentMember& v) {
  p::ConsumerGroupTargetAssignmentMemberValue w;
  w.topic_partitions.resize(v.topic_partitions.size());
  for (size_t i = 0; i < v.topic_partitions.size(); ++i) {
    w.topic_partitions[i].topic_id = v.topic_partitions[i].topic_id;
    w.topic_partitions[i].partitions = v.topic_partitions[i].partitions;
  }
  return Record(MemberKey<p::ConsumerGroupTargetAssignmentMemberKey>(group, member_id),
                kConsumerGroupTargetAssignmentMemberKey, w, kConsumerGroupValueVersion);
}

LogRecord ConsumerGroupTargetAssignmentMemberTombstone(const std::string& group,
                                                       const std::string& member_id) {
  return Tombstone(MemberKey<p::ConsumerGroupTargetAssignmentMemberKey>(group, member_id),
                   kConsumerGroupTargetAssignmentMemberKey);
}

LogRecord ConsumerGroupCurrentMemberAssignmentRecord(
    const std::string& group, const std::string& member_id,
    const ConsumerGroupCurrentMemberAssignment& v) {
  p::ConsumerGroupCurrentMemberAssignmentValue w;
  w.member_epoch = v.member_epoch;
  w.previous_member_epoch = v.previous_member_epoch;
  w.state = v.state;
  w.assigned_partitions = ToWire(v.assigned_partitions);
  w.partitions_pending_revocation = ToWire(v.partitions_pending_revocation);
  return Record(MemberKey<p::ConsumerGroupCurrentMemberAssignmentKey>(group, member_id),
                kConsumerGroupCurrentMemberAssignmentKey, w, kConsumerGroupValueVersion);
}

LogRecord ConsumerGroupCurrentMemberAssignmentTombstone(const std::string& group,
                                                        const std::string& member_id) {
  return Tombstone(MemberKey<p::ConsumerGroupCurrentMemberAssignmentKey>(group, member_id),
                   kConsumerGroupCurrentMemberAssignmentKey);
}

// ---- Reading records back ------------------------------------------------------------------

StatusOr<ParsedRecord> ParseRecord(std::span<const uint8_t> key,
                                   std::optional<std::span<const uint8_t>> value) {
  p::Reader kr(key);
  int16_t key_version = 0;
  if (!kr.ReadInt16(&key_version).ok()) {
    return absl::InvalidArgumentError("record key shorter than its version");
  }
  switch (key_version) {
    case kOffsetCommitKeyV0:
    case kOffsetCommitKeyV1:
      return ParseOffset(kr, key_version, value);
    case kGroupMetadataKey:
      return ParseClassicGroup(kr, key_version, value);
    case kConsumerGroupMetadataKey:
      return ParseGroupKeyed<ConsumerGroupMetadata, p::ConsumerGroupMetadataKey,
                             p::ConsumerGroupMetadataValue>(
          kr, key_version, value,
          [](p::ConsumerGroupMetadataValue&& w) { return ConsumerGroupMetadata{w.epoch}; });
    case kConsumerGroupPartitionMetadataKey:
      return ParseGroupKeyed<ConsumerGroupPartitionMetadata, p::ConsumerGroupPartitionMetadataKey,
                             p::ConsumerGroupPartitionMetadataValue>(
          kr, key_version, value, [](p::ConsumerGroupPartitionMetadataValue&& w) {
            ConsumerGroupPartitionMetadata out;
            out.topics.reserve(w.topics.size());
            for (auto& t : w.topics) {
              out.topics.push_back({t.topic_id, std::move(t.topic_name), t.num_partitions});
            }
            return out;
          });
    case kConsumerGroupMemberMetadataKey:
      return ParseMemberKeyed<ConsumerGroupMemberMetadata, p::ConsumerGroupMemberMetadataKey,
                              p::ConsumerGroupMemberMetadataValue>(
          kr, key_version, value, [](p::ConsumerGroupMemberMetadataValue&& w) {
            ConsumerGroupMemberMetadata out;
            out.instance_id = std::move(w.instance_id);
            out.rack_id = std::move(w.rack_id);
            out.client_id = std::move(w.client_id);
            out.client_host = std::move(w.client_host);
            out.subscribed_topic_names = std::move(w.subscribed_topic_names);
            out.subscribed_topic_regex = std::move(w.subscribed_topic_regex);
            out.rebalance_timeout_ms = w.rebalance_timeout_ms;
            out.server_assignor = std::move(w.server_assignor);
            return out;
          });
    case kConsumerGroupTargetAssignmentMetadataKey:
      return ParseGroupKeyed<ConsumerGroupTargetAssignmentMetadata,
                             p::ConsumerGroupTargetAssignmentMetadataKey,
                             p::ConsumerGroupTargetAssignmentMetadataValue>(
          kr, key_version, value, [](p::ConsumerGroupTargetAssignmentMetadataValue&& w) {
            return ConsumerGroupTargetAssignmentMetadata{w.assignment_epoch};
          });
    case kConsumerGroupTargetAssignmentMemberKey:
      return ParseMemberKeyed<ConsumerGroupTargetAssignmentMember,
                              p::ConsumerGroupTargetAssignmentMemberKey,
                              p::ConsumerGroupTargetAssignmentMemberValue>(
          kr, key_version, value, [](p::ConsumerGroupTargetAssignmentMemberValue&& w) {
            ConsumerGroupTargetAssignmentMember out;
            out.topic_partitions.reserve(w.topic_partitions.size());
            for (auto& tp : w.topic_partitions) {
              out.topic_partitions.push_back({tp.topic_id, std::move(tp.partitions)});
            }
            return out;
          });
    case kConsumerGroupCurrentMemberAssignmentKey:
      return ParseMemberKeyed<ConsumerGroupCurrentMemberAssignment,
                              p::ConsumerGroupCurrentMemberAssignmentKey,
                              p::ConsumerGroupCurrentMemberAssignmentValue>(
          kr, key_version, value, [](p::ConsumerGroupCurrentMemberAssignmentValue&& w) {
            ConsumerGroupCurrentMemberAssignment out;
            out.member_epoch = w.member_epoch;
            out.previous_member_epoch = w.previous_member_epoch;
            out.state = w.state;
            out.assigned_partitions = FromWire(w.assigned_partitions);
            out.partitions_pending_revocation = FromWire(w.partitions_pending_revocation);
            return out;
          });
    default:
      // Share groups (9+), newer Kafka records, or garbage: not ours to interpret.
      return absl::NotFoundError("unknown __consumer_offsets key version " +
                                 std::to_string(key_version));
  }
}

}  // namespace runnel::brokerd::group
