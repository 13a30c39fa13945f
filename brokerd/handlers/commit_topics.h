// What OffsetCommit and TxnOffsetCommit share: checking the partitions of a commit request
// against the metadata before anything reaches the group, and making its commits. Not an interface:
// include it only in those two handlers.
#pragma once

#include <cstddef>
#include <vector>

#include "brokerd/controller/metadata_cache.h"
#include "brokerd/group/coordinator.h"
#include "common/protocol/error_code.h"

namespace runnel::brokerd {

// A partition of a commit request, by its place in the request (and in the response).
struct CommitItem {
  size_t topic;
  size_t partition;
};

// Gives every partition of `topics` its entry in `out` now, in request order, and answers
// Kafka's per-partition errors there: with `by_id` (topics named by id) an unknown id is
// UNKNOWN_TOPIC_ID, else an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION. Names a
// topic given by id (what the group keeps). Returns the partitions that go to the group.
template <typename RequestTopic, typename ResponseTopic>
std::vector<CommitItem> CheckCommitTopics(const MetadataCache& metadata, bool by_id,
                                          std::vector<RequestTopic>& topics,
                                          std::vector<ResponseTopic>* out) {
  std::vector<CommitItem> valid;
  for (size_t ti = 0; ti < topics.size(); ++ti) {
    RequestTopic& topic = topics[ti];
    ResponseTopic& o = out->emplace_back();
    o.name = topic.name;
    o.topic_id = topic.topic_id;
    const TopicInfo* info =
        by_id ? metadata.FindTopicById(topic.topic_id) : metadata.FindTopic(topic.name);
    if (by_id && info != nullptr) topic.name = info->name;
    for (size_t pi = 0; pi < topic.partitions.size(); ++pi) {
      auto& p = o.partitions.emplace_back();
      p.partition_index = topic.partitions[pi].partition_index;
      if (info == nullptr && by_id) {
        p.error_code = protocol::ErrorCode::kUnknownTopicId;
        continue;
      }
      if (info == nullptr || info->partitions.count(p.partition_index) == 0) {
        p.error_code = protocol::ErrorCode::kUnknownTopicOrPartition;
        continue;
      }
      valid.push_back({ti, pi});
    }
  }
  return valid;
}

// The commits of the `valid` partitions, in `written` the partitions they are for; an
// oversized metadata string is OFFSET_METADATA_TOO_LARGE in `out` for its partition alone.
// `leader_epochs`: the request version carries them; `expire_at` -1 for none.
template <typename RequestTopic, typename ResponseTopic>
std::vector<group::Shard::Commit> CommitsOf(const std::vector<CommitItem>& valid,
                                            const std::vector<RequestTopic>& topics,
                                            std::vector<ResponseTopic>& out,
                                            const group::Shard& shard, bool leader_epochs,
                                            int64_t now, int64_t expire_at,
                                            std::vector<CommitItem>* written) {
  std::vector<group::Shard::Commit> commits;
  for (const CommitItem& it : valid) {
    const auto& in = topics[it.topic].partitions[it.partition];
    const std::string metadata = in.committed_metadata.value_or("");
    if (static_cast<int64_t>(metadata.size()) > shard.config().offset_metadata_max_bytes) {
      out[it.topic].partitions[it.partition].error_code =
          protocol::ErrorCode::kOffsetMetadataTooLarge;
      continue;
    }
    group::Shard::Commit c;
    c.topic = topics[it.topic].name;
    c.partition = in.partition_index;
    c.value.offset = in.committed_offset;
    c.value.leader_epoch = leader_epochs ? in.committed_leader_epoch : -1;
    c.value.metadata = metadata;
    c.value.commit_timestamp_ms = now;
    c.value.expire_timestamp_ms = expire_at;
    commits.push_back(std::move(c));
    written->push_back(it);
  }
  return commits;
}

}  // namespace runnel::brokerd
