// Waiting on the loop for the metadata cache (and storaged) to show a change made through the
// controller.
#pragma once

#include <functional>

#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {

// Runs `then` on the loop once `ready()` is true (checked now and after every metadata
// update and every change of storaged's partitions) or after `timeout_ms` or when the broker
// stops (BrokerContext::cancel_on_stop), whichever comes first; exactly once. With
// `poll_ms` > 0, `ready` is also checked that often (for what no metadata or partition
// change announces, such as a coordinator's shard finishing its load).
void WaitForMetadata(BrokerContext& broker, std::function<bool()> ready, int64_t timeout_ms,
                     std::function<void()> then, int64_t poll_ms = 0);

// True when storaged holds a log for every partition of `topic` placed on this broker, so
// produce and fetch find it, or has refused to create it (then the partition is offline
// here, see LocalLogs); CreateTopics and CreatePartitions answer only then.
bool PartitionsReadyHere(const BrokerContext& broker, const TopicInfo& topic);

// The checks a partition of a data request (Produce, Fetch, ListOffsets, DeleteRecords,
// OffsetForLeaderEpoch) goes through, in Kafka's order: the topic (nullptr = unknown) and
// partition exist (UNKNOWN_TOPIC_OR_PARTITION); the client's leader epoch, when given (>= 0),
// is the current one (FENCED_LEADER_EPOCH below it, UNKNOWN_LEADER_EPOCH above); this broker
// leads the partition, unless `leader_only` is false, and storaged holds its log
// (NOT_LEADER_OR_FOLLOWER). `*partition` is set whenever the partition exists.
protocol::ErrorCode CheckLocalPartition(const BrokerContext& broker, const TopicInfo* topic,
                                        int32_t index, int32_t current_leader_epoch,
                                        const PartitionInfo** partition, bool leader_only = true);

}  // namespace runnel::brokerd
