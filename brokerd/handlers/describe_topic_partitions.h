// DescribeTopicPartitions (key 75, KIP-966): the answer, computed from the metadata cache
// alone, apart from the handler so the paging can be tested without a broker.
#pragma once

#include <cstdint>
#include <string>

#include "brokerd/controller/metadata_cache.h"
#include "brokerd/handlers/handler.h"
#include "common/protocol/messages.h"

namespace runnel::brokerd {

// As Kafka's broker answers `req` for a client of `listener`, with at most `partition_cap`
// partitions (max.request.partition.size.limit; the request's own limit may be lower):
//
// - topics: the named ones, or with an empty list every topic, in name order, from the
//   cursor's topic on; a named topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION (an
//   invalid name INVALID_TOPIC_EXCEPTION) and counts no partitions;
// - the partitions of the cursor's topic start at its partition index;
// - once the limit is reached, NextCursor names the first topic and partition left out;
// - a cursor whose topic is not among the named ones, or whose partition index is negative,
//   fails the whole request: every named topic INVALID_REQUEST, in request order; an empty
//   name with no cursor fails it with UNKNOWN_SERVER_ERROR (Kafka's handler throws).
//
// Unlike Kafka, a cursor's partition index near INT32_MAX does not overflow into a negative
// NextCursor: the topic is listed with no partitions and no cursor.
//
// Runnel has no eligible leader replicas (KIP-966): both ELR lists are empty, as Kafka's
// are when ELR is off (never null: the Java client reads them unchecked).
//
// `local`: a partition led here whose log is missing has no leader (see LocalLogs).
protocol::DescribeTopicPartitionsResponse DescribeTopicPartitions(
    const MetadataCache& cache, const protocol::DescribeTopicPartitionsRequest& req,
    const std::string& listener, int32_t partition_cap, const LocalLogs& local = {});

}  // namespace runnel::brokerd
