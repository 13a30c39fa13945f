// Where a failure inside Runnel becomes the Kafka error a client sees: failed gRPC calls to
// storaged and controllerd, and failed writes of the group coordinator. This is the one place
// such mappings live; tests/unit/brokerd/error_mapping_test.cc pins every row.
//
// The gRPC switches list every status code and have no `default:`, so a new code breaks the
// build (-Werror=switch) until someone decides what a client should see for it. Produce's
// mapping never gives UNKNOWN_SERVER_ERROR: an idempotent producer treats it as fatal to the
// batch's fate, while REQUEST_TIMED_OUT and NOT_LEADER_OR_FOLLOWER let it retry in order.
#pragma once

#include <grpcpp/support/status.h>

#include "common/protocol/error_code.h"

namespace runnel::brokerd {

// A failed call to storaged (Append, Read, ListOffsets, DeleteRecords, ...): a timeout is
// REQUEST_TIMED_OUT; storaged restarting or unreachable is NOT_LEADER_OR_FOLLOWER, so the
// client refreshes its metadata and retries; a call we sent wrong or storaged failed on is
// KAFKA_STORAGE_ERROR (retriable too).
protocol::ErrorCode StorageCallError(const grpc::Status& status);

// A failed call to the controller (CreateTopics, DeleteTopics, AlterConfigs, ...): a timeout
// is REQUEST_TIMED_OUT; no reachable leader is NOT_CONTROLLER (the client retries); the rest
// is UNKNOWN_SERVER_ERROR, as Kafka's forwarding manager answers.
protocol::ErrorCode ControllerCallError(const grpc::Status& status);

// What a client of the group coordinator is told when the coordinator's own write to
// __consumer_offsets failed with `append_error` (Kafka's CoordinatorRuntime rule): the
// partition moved away (NOT_COORDINATOR), or anything else, a timeout included,
// COORDINATOR_NOT_AVAILABLE, which every client retries. NONE stays NONE.
protocol::ErrorCode CoordinatorWriteError(protocol::ErrorCode append_error);

// The classic group's rule for a failed group-metadata write (Kafka's
// appendGroupMetadataErrorToResponseError). Behind the coordinator's shard only
// CoordinatorWriteError's two codes reach it, which it keeps; other GroupEnv writers (tests)
// may hand it the append's own code.
protocol::ErrorCode GroupMetadataWriteError(protocol::ErrorCode append_error);

}  // namespace runnel::brokerd
