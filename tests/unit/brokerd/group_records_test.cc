#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "brokerd/group/records.h"

namespace runnel::brokerd::group {
namespace {

using Bytes = std::vector<uint8_t>;

// Appends the bytes of a string literal (for hand-written expected encodings).
void Append(Bytes& out, std::string_view s) { out.insert(out.end(), s.begin(), s.end()); }

Bytes Concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
Bytes Str(std::string_view s) {  // int16 length + bytes (non-flexible string)
  Bytes out = {static_cast<uint8_t>(s.size() >> 8), static_cast<uint8_t>(s.size())};
  Append(out, s);
  return out;
}
Bytes Be(uint64_t v, int n) {
  Bytes out;
  for (int i = n - 1; i >= 0; --i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
  return out;
}

StatusOr<ParsedRecord> Parse(const LogRecord& r) {
  std::optional<std::span<const uint8_t>> value;
  if (r.value) value = std::span<const uint8_t>(*r.value);
  return ParseRecord(r.key, value);
}

// The parsed record as a T (a copy: the StatusOr is usually a temporary); a failure and an
// empty T when it did not parse as one.
template <typename T>
T As(const StatusOr<ParsedRecord>& parsed) {
  if (!parsed.ok()) {
    ADD_FAILURE() << parsed.status().message();
    return T{};
  }
  if (!std::holds_alternative<T>(*parsed)) {
    ADD_FAILURE() << "parsed as alternative " << parsed->index();
    return T{};
  }
  return std::get<T>(*parsed);
}

protocol::Uuid TestUuid(uint64_t n) { return protocol::Uuid::FromBits(n, n * 7 + 1); }

// One value of every record type, every field non-default, so a field dropped by either
// direction changes the re-encoded bytes.
OffsetKey TestOffsetKey() { return OffsetKey{"grp", "topic-a", 7}; }
OffsetValue TestOffsetValue() { return OffsetValue{12345, 9, "meta", 1700000000000, -1}; }
ClassicGroupValue TestClassic() {
  ClassicGroupValue v;
  v.protocol_type = "consumer";
  v.generation = 4;
  v.protocol = "range";
  v.leader = "m1";
  v.current_state_timestamp_ms = 1700000000123;
  v.members.push_back({"m1", "inst-1", "client", "/10.0.0.1", 60000, 45000, {1, 2, 3}, {4, 5}});
  v.members.push_back({"m2", std::nullopt, "client2", "/10.0.0.2", 30000, 10000, {6}, {}});
  return v;
}
ConsumerGroupPartitionMetadata TestPartitionMetadata() {
  ConsumerGroupPartitionMetadata v;
  v.topics.push_back({TestUuid(1), "a", 3});
  v.topics.push_back({TestUuid(2), "b", 1});
  return v;
}
ConsumerGroupMemberMetadata TestMemberMetadata() {
  ConsumerGroupMemberMetadata v;
  v.instance_id = "inst";
  v.rack_id = "rack-1";
  v.client_id = "cid";
  v.client_host = "/127.0.0.1";
  v.subscribed_topic_names = {"a", "b"};
  v.subscribed_topic_regex = "x.*";
  v.rebalance_timeout_ms = 300000;
  v.server_assignor = "uniform";
  return v;
}
ConsumerGroupTargetAssignmentMember TestTarget() {
  return ConsumerGroupTargetAssignmentMember{{{TestUuid(1), {0, 2}}, {TestUuid(2), {0}}}};
}
ConsumerGroupCurrentMemberAssignment TestCurrent() {
  ConsumerGroupCurrentMemberAssignment v;
  v.member_epoch = 11;
  v.previous_member_epoch = 10;
  v.state = 1;
  v.assigned_partitions = {{TestUuid(1), {1}}};
  v.partitions_pending_revocation = {{TestUuid(2), {0, 3}}};
  return v;
}

// Every record builder, with and without a value.
std::vector<LogRecord> AllRecords() {
  std::vector<LogRecord> out;
  OffsetValue with_expire = TestOffsetValue();
  with_expire.expire_timestamp_ms = 1800000000000;
  out.push_back(OffsetCommitRecord(TestOffsetKey(), TestOffsetValue()));
  out.push_back(OffsetCommitRecord(TestOffsetKey(), with_expire));
  out.push_back(OffsetTombstone(TestOffsetKey()));
  out.push_back(ClassicGroupRecord("grp", TestClassic()));
  out.push_back(ClassicGroupTombstone("grp"));
  out.push_back(ConsumerGroupMetadataRecord("grp", {17}));
  out.push_back(ConsumerGroupMetadataTombstone("grp"));
  out.push_back(ConsumerGroupPartitionMetadataRecord("grp", TestPartitionMetadata()));
  out.push_back(ConsumerGroupPartitionMetadataTombstone("grp"));
  out.push_back(ConsumerGroupMemberMetadataRecord("grp", "mem", TestMemberMetadata()));
  out.push_back(ConsumerGroupMemberMetadataTombstone("grp", "mem"));
  out.push_back(ConsumerGroupTargetAssignmentMetadataRecord("grp", {16}));
  out.push_back(ConsumerGroupTargetAssignmentMetadataTombstone("grp"));
  out.push_back(ConsumerGroupTargetAssignmentMemberRecord("grp", "mem", TestTarget()));
  out.push_back(ConsumerGroupTargetAssignmentMemberTombstone("grp", "mem"));
  out.push_back(ConsumerGroupCurrentMemberAssignmentRecord("grp", "mem", TestCurrent()));
  out.push_back(ConsumerGroupCurrentMemberAssignmentTombstone("grp", "mem"));
  return out;
}

// Builds the record again from what ParseRecord gave back.
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

TEST(GroupRecordsTest, EveryRecordRoundTrips) {
  std::vector<LogRecord> records = AllRecords();
  ASSERT_EQ(records.size(), 17u);
  for (size_t i = 0; i < records.size(); ++i) {
    SCOPED_TRACE(i);
    StatusOr<ParsedRecord> parsed = Parse(records[i]);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    LogRecord again = Rebuild(*parsed);
    EXPECT_EQ(again.key, records[i].key);
    EXPECT_EQ(again.value, records[i].value);
  }
}

TEST(GroupRecordsTest, ParsedFieldsMatch) {
  const auto& off = As<ParsedOffset>(Parse(OffsetCommitRecord(TestOffsetKey(), TestOffsetValue())));
  EXPECT_EQ(off.key.group, "grp");
  EXPECT_EQ(off.key.topic, "topic-a");
  EXPECT_EQ(off.key.partition, 7);
  ASSERT_TRUE(off.value.has_value());
  EXPECT_EQ(off.value->offset, 12345);
  EXPECT_EQ(off.value->leader_epoch, 9);
  EXPECT_EQ(off.value->metadata, "meta");
  EXPECT_EQ(off.value->commit_timestamp_ms, 1700000000000);
  EXPECT_EQ(off.value->expire_timestamp_ms, -1);

  const auto& classic = As<ParsedClassicGroup>(Parse(ClassicGroupRecord("grp", TestClassic())));
  EXPECT_EQ(classic.group, "grp");
  ASSERT_TRUE(classic.value.has_value());
  EXPECT_EQ(classic.value->protocol_type, "consumer");
  EXPECT_EQ(classic.value->generation, 4);
  EXPECT_EQ(classic.value->protocol, "range");
  EXPECT_EQ(classic.value->leader, "m1");
  EXPECT_EQ(classic.value->current_state_timestamp_ms, 1700000000123);
  ASSERT_EQ(classic.value->members.size(), 2u);
  const ClassicMemberValue& m = classic.value->members[0];
  EXPECT_EQ(m.member_id, "m1");
  EXPECT_EQ(m.group_instance_id, "inst-1");
  EXPECT_EQ(m.client_id, "client");
  EXPECT_EQ(m.client_host, "/10.0.0.1");
  EXPECT_EQ(m.rebalance_timeout_ms, 60000);
  EXPECT_EQ(m.session_timeout_ms, 45000);
  EXPECT_EQ(m.subscription, (Bytes{1, 2, 3}));
  EXPECT_EQ(m.assignment, (Bytes{4, 5}));
  EXPECT_FALSE(classic.value->members[1].group_instance_id.has_value());

  const auto& member = As<ParsedMemberRecord<ConsumerGroupMemberMetadata>>(
      Parse(ConsumerGroupMemberMetadataRecord("grp", "mem", TestMemberMetadata())));
  EXPECT_EQ(member.group, "grp");
  EXPECT_EQ(member.member_id, "mem");
  ASSERT_TRUE(member.value.has_value());
  EXPECT_EQ(member.value->subscribed_topic_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(member.value->server_assignor, "uniform");
  EXPECT_EQ(member.value->rack_id, "rack-1");

  const auto& current = As<ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>>(
      Parse(ConsumerGroupCurrentMemberAssignmentRecord("grp", "mem", TestCurrent())));
  ASSERT_TRUE(current.value.has_value());
  EXPECT_EQ(current.value->member_epoch, 11);
  EXPECT_EQ(current.value->previous_member_epoch, 10);
  EXPECT_EQ(current.value->state, 1);
  EXPECT_EQ(current.value->assigned_partitions, TestCurrent().assigned_partitions);
  EXPECT_EQ(current.value->partitions_pending_revocation,
            TestCurrent().partitions_pending_revocation);

  const auto& target = As<ParsedMemberRecord<ConsumerGroupTargetAssignmentMember>>(
      Parse(ConsumerGroupTargetAssignmentMemberRecord("grp", "mem", TestTarget())));
  ASSERT_TRUE(target.value.has_value());
  EXPECT_EQ(target.value->topic_partitions, TestTarget().topic_partitions);

  const auto& partitions = As<ParsedGroupRecord<ConsumerGroupPartitionMetadata>>(
      Parse(ConsumerGroupPartitionMetadataRecord("grp", TestPartitionMetadata())));
  ASSERT_TRUE(partitions.value.has_value());
  ASSERT_EQ(partitions.value->topics.size(), 2u);
  EXPECT_EQ(partitions.value->topics[1].topic_id, TestUuid(2));
  EXPECT_EQ(partitions.value->topics[1].topic_name, "b");
  EXPECT_EQ(partitions.value->topics[0].num_partitions, 3);

  const auto& epoch =
      As<ParsedGroupRecord<ConsumerGroupMetadata>>(Parse(ConsumerGroupMetadataRecord("grp", {17})));
  ASSERT_TRUE(epoch.value.has_value());
  EXPECT_EQ(epoch.value->epoch, 17);
  const auto& assignment_epoch = As<ParsedGroupRecord<ConsumerGroupTargetAssignmentMetadata>>(
      Parse(ConsumerGroupTargetAssignmentMetadataRecord("grp", {16})));
  ASSERT_TRUE(assignment_epoch.value.has_value());
  EXPECT_EQ(assignment_epoch.value->assignment_epoch, 16);
}

TEST(GroupRecordsTest, TombstonesHaveNoValue) {
  for (const LogRecord& r : AllRecords()) {
    if (r.value) continue;
    StatusOr<ParsedRecord> parsed = Parse(r);
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    std::visit([](const auto& p) { EXPECT_FALSE(p.value.has_value()); }, *parsed);
  }
  const auto& off = As<ParsedOffset>(Parse(OffsetTombstone(TestOffsetKey())));
  EXPECT_EQ(off.key.topic, "topic-a");
  const auto& member = As<ParsedMemberRecord<ConsumerGroupCurrentMemberAssignment>>(
      Parse(ConsumerGroupCurrentMemberAssignmentTombstone("g2", "m9")));
  EXPECT_EQ(member.group, "g2");
  EXPECT_EQ(member.member_id, "m9");
}

// Kafka's layout, written out by hand: every record is <int16 version><struct at version>,
// non-flexible versions using int16-length strings, int32-length bytes and int32 array counts.
TEST(GroupRecordsTest, OffsetCommitBytesAreKafkas) {
  LogRecord r = OffsetCommitRecord({"g", "t", 3}, {42, 5, "m", 1000, -1});
  // Key v1: group, topic (strings), partition int32.
  Bytes key = Concat({Be(1, 2), Str("g"), Str("t"), Be(3, 4)});
  // Value v3: offset int64, leader epoch int32, metadata string, commit timestamp int64.
  Bytes value = Concat({Be(3, 2), Be(42, 8), Be(5, 4), Str("m"), Be(1000, 8)});
  EXPECT_EQ(r.key, key);
  ASSERT_TRUE(r.value.has_value());
  EXPECT_EQ(*r.value, value);

  // With an expire timestamp: value v1 = offset, metadata, commit ts, expire ts (no epoch).
  LogRecord e = OffsetCommitRecord({"g", "t", 3}, {42, 5, "", 1000, 2000});
  Bytes value_v1 = Concat({Be(1, 2), Be(42, 8), Str(""), Be(1000, 8), Be(2000, 8)});
  ASSERT_TRUE(e.value.has_value());
  EXPECT_EQ(*e.value, value_v1);
}

TEST(GroupRecordsTest, GroupMetadataBytesAreKafkas) {
  ClassicGroupValue v;
  v.protocol_type = "consumer";
  v.generation = 1;
  v.protocol = "range";
  v.leader = "m1";
  v.current_state_timestamp_ms = 7;
  v.members.push_back({"m1", std::nullopt, "c", "h", 300, 100, {1, 2}, {}});
  LogRecord r = ClassicGroupRecord("g", v);
  EXPECT_EQ(r.key, Concat({Be(2, 2), Str("g")}));  // key v2: group
  Bytes value = Concat({
      Be(3, 2),               // value version 3
      Str("consumer"),        // protocolType
      Be(1, 4),               // generation
      Str("range"),           // protocol (nullable string)
      Str("m1"),              // leader (nullable string)
      Be(7, 8),               // currentStateTimestamp (v2+)
      Be(1, 4),               // members: int32 count
      Str("m1"),              //   memberId
      Be(0xffff, 2),          //   groupInstanceId (v3+): null = length -1
      Str("c"),               //   clientId
      Str("h"),               //   clientHost
      Be(300, 4),             //   rebalanceTimeout (v1+)
      Be(100, 4),             //   sessionTimeout
      Be(2, 4), Bytes{1, 2},  //   subscription: int32 length + bytes
      Be(0, 4),               //   assignment: empty
  });
  ASSERT_TRUE(r.value.has_value());
  EXPECT_EQ(*r.value, value);
}

TEST(GroupRecordsTest, OldValueVersionsParse) {
  Bytes key = Concat({Be(0, 2), Str("g"), Str("t"), Be(3, 4)});  // key v0, same layout as v1
  // OffsetCommitValue v0: offset, metadata, commit timestamp.
  Bytes v0 = Concat({Be(0, 2), Be(42, 8), Str("md"), Be(1000, 8)});
  const auto& p0 = As<ParsedOffset>(ParseRecord(key, std::span<const uint8_t>(v0)));
  EXPECT_EQ(p0.key.group, "g");
  EXPECT_EQ(p0.key.partition, 3);
  ASSERT_TRUE(p0.value.has_value());
  EXPECT_EQ(p0.value->offset, 42);
  EXPECT_EQ(p0.value->metadata, "md");
  EXPECT_EQ(p0.value->commit_timestamp_ms, 1000);
  EXPECT_EQ(p0.value->leader_epoch, -1);
  EXPECT_EQ(p0.value->expire_timestamp_ms, -1);

  // v1 adds the expire timestamp.
  Bytes v1 = Concat({Be(1, 2), Be(43, 8), Str(""), Be(1000, 8), Be(5000, 8)});
  const auto& p1 = As<ParsedOffset>(ParseRecord(key, std::span<const uint8_t>(v1)));
  ASSERT_TRUE(p1.value.has_value());
  EXPECT_EQ(p1.value->offset, 43);
  EXPECT_EQ(p1.value->expire_timestamp_ms, 5000);
  EXPECT_EQ(p1.value->leader_epoch, -1);

  // v4 (flexible): compact string (length + 1 as a varint) and an empty tagged-field section.
  Bytes v4 = Concat({Be(4, 2), Be(44, 8), Be(6, 4), Bytes{3, 'a', 'b'}, Be(9, 8), Bytes{0}});
  const auto& p4 = As<ParsedOffset>(ParseRecord(key, std::span<const uint8_t>(v4)));
  ASSERT_TRUE(p4.value.has_value());
  EXPECT_EQ(p4.value->offset, 44);
  EXPECT_EQ(p4.value->leader_epoch, 6);
  EXPECT_EQ(p4.value->metadata, "ab");

  // GroupMetadataValue v0: no state timestamp, no instance id, no rebalance timeout (Kafka
  // then uses the session timeout for both).
  Bytes gkey = Concat({Be(2, 2), Str("g")});
  Bytes g0 = Concat({Be(0, 2), Str("consumer"), Be(2, 4), Be(0xffff, 2), Be(0xffff, 2), Be(1, 4),
                     Str("m1"), Str("c"), Str("h"), Be(100, 4), Be(1, 4), Bytes{9}, Be(0, 4)});
  const auto& pg = As<ParsedClassicGroup>(ParseRecord(gkey, std::span<const uint8_t>(g0)));
  EXPECT_EQ(pg.group, "g");
  ASSERT_TRUE(pg.value.has_value());
  EXPECT_EQ(pg.value->protocol_type, "consumer");
  EXPECT_EQ(pg.value->generation, 2);
  EXPECT_FALSE(pg.value->protocol.has_value());
  EXPECT_FALSE(pg.value->leader.has_value());
  EXPECT_EQ(pg.value->current_state_timestamp_ms, -1);
  ASSERT_EQ(pg.value->members.size(), 1u);
  EXPECT_EQ(pg.value->members[0].member_id, "m1");
  EXPECT_FALSE(pg.value->members[0].group_instance_id.has_value());
  EXPECT_EQ(pg.value->members[0].session_timeout_ms, 100);
  EXPECT_EQ(pg.value->members[0].rebalance_timeout_ms, 100);
  EXPECT_EQ(pg.value->members[0].subscription, Bytes{9});
}

TEST(GroupRecordsTest, EveryTruncationIsInvalidArgument) {
  for (const LogRecord& r : AllRecords()) {
    for (size_t n = 0; n < r.key.size(); ++n) {
      std::span<const uint8_t> key(r.key.data(), n);
      StatusOr<ParsedRecord> parsed = ParseRecord(key, std::nullopt);
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << "key prefix " << n;
    }
    if (!r.value) continue;
    for (size_t n = 0; n < r.value->size(); ++n) {
      std::span<const uint8_t> value(r.value->data(), n);
      StatusOr<ParsedRecord> parsed = ParseRecord(r.key, value);
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument)
          << "value prefix " << n << " of " << r.value->size();
    }
  }
}

TEST(GroupRecordsTest, UnknownKeyVersionsAreNotFound) {
  const Bytes value = {0, 0, 1, 2, 3};
  for (int16_t v : {9, 10, 15, 100, -1, 0x7fff}) {
    Bytes key = Concat({Be(static_cast<uint16_t>(v), 2), Str("g")});
    EXPECT_EQ(ParseRecord(key, std::span<const uint8_t>(value)).status().code(),
              absl::StatusCode::kNotFound)
        << v;
    EXPECT_EQ(ParseRecord(key, std::nullopt).status().code(), absl::StatusCode::kNotFound) << v;
  }
}

TEST(GroupRecordsTest, BadValuesAreInvalidArgument) {
  Bytes key = OffsetTombstone(TestOffsetKey()).key;
  // A value version the schema does not have.
  Bytes v5 = Concat({Be(5, 2), Be(42, 8), Be(6, 4), Bytes{1}, Be(9, 8), Bytes{0}});
  EXPECT_EQ(ParseRecord(key, std::span<const uint8_t>(v5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An empty (not null) value.
  EXPECT_EQ(ParseRecord(key, std::span<const uint8_t>()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A string length past the end.
  Bytes bad = Concat({Be(3, 2), Be(42, 8), Be(5, 4), Be(0x7000, 2), Be(1000, 8)});
  EXPECT_EQ(ParseRecord(key, std::span<const uint8_t>(bad)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A hostile array count in a GroupMetadataValue.
  Bytes gkey = ClassicGroupTombstone("g").key;
  Bytes huge = Concat(
      {Be(3, 2), Str("consumer"), Be(1, 4), Str("r"), Str("l"), Be(0, 8), Be(0x7fffffff, 4)});
  EXPECT_EQ(ParseRecord(gkey, std::span<const uint8_t>(huge)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace runnel::brokerd::group
