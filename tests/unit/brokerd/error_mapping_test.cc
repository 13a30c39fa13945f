// Pins brokerd/error_mapping.h: what a client sees for each failure inside Runnel. A change
// here changes what Kafka clients do (retry, refresh metadata, give up), so every row is
// spelled out.
#include "brokerd/error_mapping.h"

#include <gtest/gtest.h>

#include <sstream>
#include <utility>
#include <vector>

namespace runnel::brokerd {
namespace {

using grpc::StatusCode;
using protocol::ErrorCode;

// Every code gRPC defines (grpc::StatusCode 0-16).
std::vector<StatusCode> AllStatusCodes() {
  std::vector<StatusCode> all;
  for (int c = 0; c <= 16; ++c) all.push_back(static_cast<StatusCode>(c));
  return all;
}

// The other daemon's answer was late, or it had no thread free for the call (its gRPC
// pool is bounded): both are worth a retry.
bool Busy(StatusCode c) {
  return c == StatusCode::DEADLINE_EXCEEDED || c == StatusCode::RESOURCE_EXHAUSTED;
}

TEST(ErrorMappingTest, StorageCallFailures) {
  for (StatusCode c : AllStatusCodes()) {
    const ErrorCode want = Busy(c)                        ? ErrorCode::kRequestTimedOut
                           : c == StatusCode::UNAVAILABLE ? ErrorCode::kNotLeaderOrFollower
                                                          : ErrorCode::kKafkaStorageError;
    EXPECT_EQ(StorageCallError(grpc::Status(c, "x")), want) << "grpc code " << c;
  }
  // A message over gRPC's size limit is no busy server: a retry would fail the same way.
  EXPECT_EQ(StorageCallError(grpc::Status(StatusCode::RESOURCE_EXHAUSTED,
                                          "Received message larger than max (9 vs. 4)")),
            ErrorCode::kKafkaStorageError);
  EXPECT_EQ(
      StorageCallError(grpc::Status(StatusCode::RESOURCE_EXHAUSTED, "Server Threadpool Exhausted")),
      ErrorCode::kRequestTimedOut);
}

TEST(ErrorMappingTest, StorageCallFailuresAreAlwaysRetriableNeverUnknownServerError) {
  // Produce answers with this mapping: an idempotent producer must be able to retry every
  // failed call in order, which UNKNOWN_SERVER_ERROR would not let it do.
  for (StatusCode c : AllStatusCodes()) {
    const ErrorCode e = StorageCallError(grpc::Status(c, "x"));
    EXPECT_NE(e, ErrorCode::kUnknownServerError) << "grpc code " << c;
    EXPECT_TRUE(protocol::IsRetriable(e)) << "grpc code " << c << " gives " << e;
  }
}

TEST(ErrorMappingTest, ControllerCallFailures) {
  for (StatusCode c : AllStatusCodes()) {
    const ErrorCode want = Busy(c)                        ? ErrorCode::kRequestTimedOut
                           : c == StatusCode::UNAVAILABLE ? ErrorCode::kNotController
                                                          : ErrorCode::kUnknownServerError;
    EXPECT_EQ(ControllerCallError(grpc::Status(c, "x")), want) << "grpc code " << c;
  }
}

TEST(ErrorMappingTest, CoordinatorWriteFailures) {
  const std::vector<std::pair<ErrorCode, ErrorCode>> rows = {
      {ErrorCode::kNone, ErrorCode::kNone},
      {ErrorCode::kNotLeaderOrFollower, ErrorCode::kNotCoordinator},
      {ErrorCode::kUnknownTopicOrPartition, ErrorCode::kNotCoordinator},
      {ErrorCode::kFencedLeaderEpoch, ErrorCode::kNotCoordinator},
      {ErrorCode::kRequestTimedOut, ErrorCode::kCoordinatorNotAvailable},
      {ErrorCode::kKafkaStorageError, ErrorCode::kCoordinatorNotAvailable},
      {ErrorCode::kNotEnoughReplicas, ErrorCode::kCoordinatorNotAvailable},
      {ErrorCode::kMessageTooLarge, ErrorCode::kCoordinatorNotAvailable},
      {ErrorCode::kCorruptMessage, ErrorCode::kCoordinatorNotAvailable},
      {ErrorCode::kUnknownServerError, ErrorCode::kCoordinatorNotAvailable},
  };
  for (const auto& [in, want] : rows) EXPECT_EQ(CoordinatorWriteError(in), want) << in;
}

TEST(ErrorMappingTest, GroupMetadataWriteFailures) {
  const std::vector<std::pair<ErrorCode, ErrorCode>> rows = {
      {ErrorCode::kNone, ErrorCode::kNone},
      {ErrorCode::kUnknownTopicOrPartition, ErrorCode::kCoordinatorNotAvailable},
      {ErrorCode::kNotEnoughReplicas, ErrorCode::kCoordinatorNotAvailable},
      {ErrorCode::kRequestTimedOut, ErrorCode::kCoordinatorNotAvailable},
      {ErrorCode::kNotLeaderOrFollower, ErrorCode::kNotCoordinator},
      {ErrorCode::kKafkaStorageError, ErrorCode::kNotCoordinator},
      {ErrorCode::kMessageTooLarge, ErrorCode::kUnknownServerError},
      {ErrorCode::kRecordListTooLarge, ErrorCode::kUnknownServerError},
      {ErrorCode::kInvalidFetchSize, ErrorCode::kUnknownServerError},
      // What the coordinator's shard hands it passes through.
      {ErrorCode::kNotCoordinator, ErrorCode::kNotCoordinator},
      {ErrorCode::kCoordinatorNotAvailable, ErrorCode::kCoordinatorNotAvailable},
  };
  for (const auto& [in, want] : rows) EXPECT_EQ(GroupMetadataWriteError(in), want) << in;
}

TEST(ErrorCodeTest, FromWireKeepsEveryInt16AndRefusesWiderNumbers) {
  EXPECT_EQ(protocol::ErrorFromWire(0), ErrorCode::kNone);
  EXPECT_EQ(protocol::ErrorFromWire(6), ErrorCode::kNotLeaderOrFollower);
  EXPECT_EQ(protocol::ErrorFromWire(-1), ErrorCode::kUnknownServerError);
  EXPECT_EQ(protocol::ToWire(protocol::ErrorFromWire(32767)), 32767);
  EXPECT_EQ(protocol::ErrorFromWire(40000), ErrorCode::kUnknownServerError);
  EXPECT_EQ(protocol::ErrorFromWire(-40000), ErrorCode::kUnknownServerError);
}

TEST(ErrorCodeTest, PrintsNameAndNumber) {
  std::ostringstream out;
  out << ErrorCode::kNotCoordinator << " " << static_cast<ErrorCode>(999);
  EXPECT_EQ(out.str(), "NOT_COORDINATOR (16) UNKNOWN_CODE (999)");
}

}  // namespace
}  // namespace runnel::brokerd
