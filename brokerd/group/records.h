// The records the group coordinator writes to __consumer_offsets, in Kafka's formats, so a
// Kafka tool reading the topic (and a future migration) sees what a Kafka broker writes.
//
// Every record has a key and a value, each starting with an int16 version:
//
//   key version | key                                   | value
//   ------------+---------------------------------------+------------------------------------
//   0, 1        | OffsetCommitKey {group, topic, part}  | OffsetCommitValue v0-v4 (we write v3,
//               |                                       | or v1 when an expire time is set)
//   2           | GroupMetadataKey {group}              | GroupMetadataValue v0-v4 (we write v3)
//   3           | ConsumerGroupMetadataKey {group}      | ConsumerGroupMetadataValue v0
//   4           | ConsumerGroupPartitionMetadataKey     | ConsumerGroupPartitionMetadataValue v0
//   5           | ConsumerGroupMemberMetadataKey        | ConsumerGroupMemberMetadataValue v0
//               |   {group, member}                     |
//   6           | ConsumerGroupTargetAssignmentMetadata | ...TargetAssignmentMetadataValue v0
//   7           | ConsumerGroupTargetAssignmentMember   | ...TargetAssignmentMemberValue v0
//               |   {group, member}                     |
//   8           | ConsumerGroupCurrentMemberAssignment  | ...CurrentMemberAssignmentValue v0
//               |   {group, member}                     |
//
// A null value is a tombstone: compaction then drops the key. The field layouts are the
// schemas in common/protocol/schema/coordinator/ (generated codec, `data` messages).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/protocol/uuid.h"
#include "common/protocol/wire.h"
#include "common/util/status.h"

namespace runnel::brokerd::group {

// `version` as an int16 then `message` (a generated `data` message) at that version: how
// every key and value of a coordinator's records is framed (__transaction_state's too). The
// values come from decoded requests, so they fit the version chosen.
template <typename M>
std::vector<uint8_t> EncodeVersioned(const M& message, int16_t version) {
  protocol::Bytes out;
  out.reserve(2 + message.Size(version));
  protocol::Writer w(out);
  w.WriteInt16(version);
  message.Encode(w, version);
  return out;
}

// One record of __consumer_offsets as bytes; `value` is null for a tombstone.
struct LogRecord {
  std::vector<uint8_t> key;
  std::optional<std::vector<uint8_t>> value;
};

// ---- Offsets (key versions 0/1) ----------------------------------------------------------

struct OffsetKey {
  std::string group;
  std::string topic;
  int32_t partition = 0;
};
struct OffsetValue {
  int64_t offset = 0;
  int32_t leader_epoch = -1;
  std::string metadata;
  int64_t commit_timestamp_ms = 0;
  int64_t expire_timestamp_ms = -1;  // -1: none (OffsetCommit v2-v4 retention_time_ms)
};

// ---- Classic groups (key version 2) ------------------------------------------------------

struct ClassicMemberValue {
  std::string member_id;
  std::optional<std::string> group_instance_id;
  std::string client_id;
  std::string client_host;
  int32_t rebalance_timeout_ms = -1;
  int32_t session_timeout_ms = 0;
  std::vector<uint8_t> subscription;  // the chosen protocol's metadata from JoinGroup
  std::vector<uint8_t> assignment;    // from the leader's SyncGroup
};
struct ClassicGroupValue {
  std::string protocol_type;  // "consumer", "connect", or "" for none
  int32_t generation = 0;
  std::optional<std::string> protocol;  // the chosen protocol (assignor) name
  std::optional<std::string> leader;
  int64_t current_state_timestamp_ms = -1;
  std::vector<ClassicMemberValue> members;
};

// ---- KIP-848 consumer groups (key versions 3-8) ------------------------------------------

struct TopicPartitions {
  protocol::Uuid topic_id;
  std::vector<int32_t> partitions;
  bool operator==(const TopicPartitions&) const = default;
};

struct ConsumerGroupMetadata {  // key 3: the group epoch
  int32_t epoch = 0;
};
struct ConsumerGroupPartitionMetadata {  // key 4: subscribed topics as the group last saw them
  struct Topic {
    protocol::Uuid topic_id;
    std::string topic_name;
    int32_t num_partitions = 0;
  };
  std::vector<Topic> topics;
};
struct ConsumerGroupMemberMetadata {  // key 5
  std::optional<std::string> instance_id;
  std::optional<std::string> rack_id;
  std::string client_id;
  std::string client_host;
  std::vector<std::string> subscribed_topic_names;
  std::optional<std::string> subscribed_topic_regex;
  int32_t rebalance_timeout_ms = -1;
  std::optional<std::string> server_assignor;
};
struct ConsumerGroupTargetAssignmentMetadata {  // key 6
  int32_t assignment_epoch = 0;
};
struct ConsumerGroupTargetAssignmentMember {  // key 7
  std::vector<TopicPartitions> topic_partitions;
};
struct ConsumerGroupCurrentMemberAssignment {  // key 8
  int32_t member_epoch = 0;
  int32_t previous_member_epoch = 0;
  int8_t state = 0;  // Kafka's MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased
                     // partitions, 3 unknown
  std::vector<TopicPartitions> assigned_partitions;
  std::vector<TopicPartitions> partitions_pending_revocation;
};

// ---- Building records --------------------------------------------------------------------

LogRecord OffsetCommitRecord(const OffsetKey& key, const OffsetValue& value);
LogRecord OffsetTombstone(const OffsetKey& key);
LogRecord ClassicGroupRecord(const std::string& group, const ClassicGroupValue& value);
LogRecord ClassicGroupTombstone(const std::string& group);

LogRecord ConsumerGroupMetadataRecord(const std::string& group, const ConsumerGroupMetadata& v);
LogRecord ConsumerGroupMetadataTombstone(const std::string& group);
LogRecord ConsumerGroupPartitionMetadataRecord(const std::string& group,
                                               const ConsumerGroupPartitionMetadata& v);
LogRecord ConsumerGroupPartitionMetadataTombstone(const std::string& group);
LogRecord ConsumerGroupMemberMetadataRecord(const std::string& group, const std::string& member_id,
                                            const ConsumerGroupMemberMetadata& v);
LogRecord ConsumerGroupMemberMetadataTombstone(const std::string& group,
                                               const std::string& member_id);
LogRecord ConsumerGroupTargetAssignmentMetadataRecord(
    const std::string& group, const ConsumerGroupTargetAssignmentMetadata& v);
LogRecord ConsumerGroupTargetAssignmentMetadataTombstone(const std::string& group);
LogRecord ConsumerGroupTargetAssignmentMemberRecord(const std::string& group,
                                                    const std::string& member_id,
                                                    const ConsumerGroupTargetAssignmentMember& v);
LogRecord ConsumerGroupTargetAssignmentMemberTombstone(const std::string& group,
                                                       const std::string& member_id);
LogRecord ConsumerGroupCurrentMemberAssignmentRecord(const std::string& group,
                                                     const std::string& member_id,
                                                     const ConsumerGroupCurrentMemberAssignment& v);
LogRecord ConsumerGroupCurrentMemberAssignmentTombstone(const std::string& group,
                                                        const std::string& member_id);

// ---- Reading records back (coordinator load) ---------------------------------------------

// A decoded record. `value` is nullopt for a tombstone.
struct ParsedOffset {
  OffsetKey key;
  std::optional<OffsetValue> value;
};
struct ParsedClassicGroup {
  std::string group;
  std::optional<ClassicGroupValue> value;
};
template <typename V>
struct ParsedGroupRecord {  // KIP-848 records keyed by group only
  std::string group;
  std::optional<V> value;
};
template <typename V>
struct ParsedMemberRecord {  // KIP-848 records keyed by group and member
  std::string group;
  std::string member_id;
  std::optional<V> value;
};
using ParsedRecord =
    std::variant<ParsedOffset, ParsedClassicGroup, ParsedGroupRecord<ConsumerGroupMetadata>,
                 ParsedGroupRecord<ConsumerGroupPartitionMetadata>,
                 ParsedMemberRecord<ConsumerGroupMemberMetadata>,
                 ParsedGroupRecord<ConsumerGroupTargetAssignmentMetadata>,
                 ParsedMemberRecord<ConsumerGroupTargetAssignmentMember>,
                 ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>>;

// Decodes one record. InvalidArgument for bytes that do not parse (the loader logs and skips
// them); NotFound for a key version this coordinator does not know (share groups, newer
// Kafka records), which the loader skips silently.
StatusOr<ParsedRecord> ParseRecord(std::span<const uint8_t> key,
                                   std::optional<std::span<const uint8_t>> value);

}  // namespace runnel::brokerd::group
