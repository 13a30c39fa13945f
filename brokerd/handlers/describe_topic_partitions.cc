// DescribeTopicPartitions (key 75), v0: topics and their partitions from the local metadata
// cache, a page at a time (KIP-966). What Kafka 4.4's broker answers is spelled out in
// describe_topic_partitions.h.
#include "brokerd/handlers/describe_topic_partitions.h"

#include <algorithm>
#include <set>

#include "brokerd/handlers/handler.h"
#include "common/util/topic_name.h"

namespace runnel::brokerd {
namespace {

using protocol::DescribeTopicPartitionsRequest;
using protocol::DescribeTopicPartitionsResponse;
using protocol::ErrorCode;
using ResponseTopic = DescribeTopicPartitionsResponse::DescribeTopicPartitionsResponseTopic;
using ResponsePartition = DescribeTopicPartitionsResponse::DescribeTopicPartitionsResponsePartition;

// Kafka's answer to a request it refuses as a whole (its generic error response): every
// named topic with the error and nothing else, duplicates included.
DescribeTopicPartitionsResponse RefuseAll(const DescribeTopicPartitionsRequest& req,
                                          ErrorCode error) {
  DescribeTopicPartitionsResponse resp;
  for (const auto& want : req.topics) {
    ResponseTopic out;
    out.error_code = error;
    out.name = want.name;
    resp.topics.push_back(std::move(out));
  }
  return resp;
}

ResponsePartition DescribePartition(const MetadataCache& cache, const std::string& topic,
                                    const PartitionInfo& p, const std::string& listener,
                                    const LocalLogs& local) {
  ResponsePartition out;
  out.error_code = ErrorCode::kNone;  // also with no leader: leader_id -1 says it
  const bool leader_here = FillPartitionReplicas(cache, topic, p, listener, local, &out);
  // A fenced broker leads nothing (the controller moves leadership off it), so "reachable"
  // is Kafka's "registered with this listener".
  const bool leader_known =
      leader_here && p.leader >= 0 && BrokerReachable(cache, p.leader, listener);
  out.leader_id = NodeId(leader_known ? p.leader : -1);
  out.eligible_leader_replicas.emplace();
  out.last_known_elr.emplace();
  return out;
}

}  // namespace

DescribeTopicPartitionsResponse DescribeTopicPartitions(const MetadataCache& cache,
                                                        const DescribeTopicPartitionsRequest& req,
                                                        const std::string& listener,
                                                        int32_t partition_cap,
                                                        const LocalLogs& local) {
  const bool all_topics = req.topics.empty();
  const std::string cursor_topic = req.cursor ? req.cursor->topic_name : "";

  // The topics to go through, in name order, none before the cursor's.
  std::set<std::string> names;
  if (all_topics) {
    for (auto it = cache.topics().lower_bound(cursor_topic); it != cache.topics().end(); ++it) {
      names.insert(it->first);
    }
  } else {
    for (const auto& want : req.topics) {
      if (want.name >= cursor_topic) names.insert(want.name);
    }
    if (req.cursor && names.count(cursor_topic) == 0) {
      return RefuseAll(req, ErrorCode::kInvalidRequest);
    }
  }
  if (req.cursor && req.cursor->partition_index < 0) {
    return RefuseAll(req, ErrorCode::kInvalidRequest);
  }
  if (!req.cursor && names.count("") != 0) {
    // Kafka's handler fails on an empty name when there is no cursor (it reads the absent
    // cursor's partition for the topic named like the cursor's default, ""), and its generic
    // error answer gives every name UNKNOWN_SERVER_ERROR. Clients never send one.
    return RefuseAll(req, ErrorCode::kUnknownServerError);
  }

  DescribeTopicPartitionsResponse resp;
  int32_t remaining = std::max(std::min(partition_cap, req.response_partition_limit), 1);
  for (const std::string& name : names) {
    if (remaining == 0) {
      // The page is full: the next one starts at this topic (which may not exist).
      resp.next_cursor.emplace();
      resp.next_cursor->topic_name = name;
      resp.next_cursor->partition_index = 0;
      break;
    }
    ResponseTopic out;
    out.name = name;
    out.is_internal = IsInternalTopicName(name);
    out.topic_authorized_operations = kAllTopicOperations;  // no authorizer
    const TopicInfo* topic = cache.FindTopic(name);
    if (topic == nullptr) {
      // Asked for by name: said to be unknown (or invalid), counting no partitions.
      out.error_code = TopicNameError(name).empty() ? ErrorCode::kUnknownTopicOrPartition
                                                    : ErrorCode::kInvalidTopicException;
      resp.topics.push_back(std::move(out));
      continue;
    }
    out.error_code = ErrorCode::kNone;
    out.topic_id = topic->id;
    const int32_t first = req.cursor && name == cursor_topic ? req.cursor->partition_index : 0;
    auto it = topic->partitions.lower_bound(first);
    for (; it != topic->partitions.end() && remaining > 0; ++it, --remaining) {
      out.partitions.push_back(DescribePartition(cache, name, it->second, listener, local));
    }
    resp.topics.push_back(std::move(out));
    if (it != topic->partitions.end()) {
      resp.next_cursor.emplace();
      resp.next_cursor->topic_name = name;
      resp.next_cursor->partition_index = it->first;
      break;
    }
  }
  return resp;
}

void HandleDescribeTopicPartitions(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                                   Respond respond) {
  DescribeTopicPartitionsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  const int32_t cap = broker.config.GetInt("max.request.partition.size.limit");
  const LocalLogs local{&broker.partitions, broker.node_id};
  respond(EncodeResponse(*ctx,
                         DescribeTopicPartitions(broker.metadata, req, ctx->listener, cap, local)));
}

}  // namespace runnel::brokerd
