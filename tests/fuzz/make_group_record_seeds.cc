// Writes group_records_fuzzer's seed corpus: one record of every __consumer_offsets type
// (values and tombstones) built with brokerd/group/records.h, framed as the fuzzer reads them.
#include <cstdio>
#include <string>
#include <vector>

#include "brokerd/group/records.h"

namespace {

using namespace runnel::brokerd::group;

bool Write(const std::string& path, const LogRecord& r) {
  std::vector<uint8_t> bytes = {static_cast<uint8_t>(r.key.size() >> 8),
                                static_cast<uint8_t>(r.key.size())};
  bytes.insert(bytes.end(), r.key.begin(), r.key.end());
  bytes.push_back(r.value ? 1 : 0);
  if (r.value) bytes.insert(bytes.end(), r.value->begin(), r.value->end());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <output dir>\n", argv[0]);
    return 2;
  }
  const runnel::protocol::Uuid topic = runnel::protocol::Uuid::FromBits(1, 2);
  ClassicGroupValue classic;
  classic.protocol_type = "consumer";
  classic.generation = 3;
  classic.protocol = "range";
  classic.leader = "m1";
  classic.members.push_back({"m1", "i1", "c", "h", 1000, 500, {1, 2}, {3}});
  ConsumerGroupMemberMetadata member;
  member.client_id = "c";
  member.subscribed_topic_names = {"a"};
  ConsumerGroupCurrentMemberAssignment current;
  current.member_epoch = 2;
  current.assigned_partitions = {{topic, {0, 1}}};
  const std::vector<LogRecord> records = {
      OffsetCommitRecord({"g", "t", 0}, {10, 1, "md", 1000, -1}),
      OffsetCommitRecord({"g", "t", 1}, {10, -1, "", 1000, 2000}),
      OffsetTombstone({"g", "t", 0}),
      ClassicGroupRecord("g", classic),
      ClassicGroupTombstone("g"),
      ConsumerGroupMetadataRecord("g", {4}),
      ConsumerGroupPartitionMetadataRecord("g", {{{topic, "a", 2}}}),
      ConsumerGroupMemberMetadataRecord("g", "m", member),
      ConsumerGroupTargetAssignmentMetadataRecord("g", {4}),
      ConsumerGroupTargetAssignmentMemberRecord("g", "m", {{{topic, {0}}}}),
      ConsumerGroupCurrentMemberAssignmentRecord("g", "m", current),
      ConsumerGroupCurrentMemberAssignmentTombstone("g", "m"),
  };
  for (size_t i = 0; i < records.size(); ++i) {
    if (!Write(std::string(argv[1]) + "/seed-" + std::to_string(i), records[i])) {
      std::perror(argv[1]);
      return 1;
    }
  }
  return 0;
}
