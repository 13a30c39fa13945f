#include "brokerd/error_mapping.h"

namespace runnel::brokerd {

using protocol::ErrorCode;

namespace {

// What a client can be told about a failed call: it took too long or the other daemon had
// no thread free for it (its bounded gRPC pool: the call was not run, a retry will be), the
// other daemon could not be reached (restarting, or no leader), or it failed in a way
// retrying the same call will not mend.
enum class CallFailure { kTimedOut, kUnreachable, kFailed };

CallFailure Classify(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return CallFailure::kTimedOut;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      // gRPC says so too of a message over the size limit, which no retry mends.
      return status.error_message().find("larger than max") != std::string::npos
                 ? CallFailure::kFailed
                 : CallFailure::kTimedOut;
    case grpc::StatusCode::UNAVAILABLE:
      return CallFailure::kUnreachable;
    case grpc::StatusCode::OK:  // not a failure: a caller maps a failed call only
    case grpc::StatusCode::CANCELLED:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::DATA_LOSS:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::DO_NOT_USE:
      return CallFailure::kFailed;
  }
  return CallFailure::kFailed;
}

}  // namespace

ErrorCode StorageCallError(const grpc::Status& status) {
  switch (Classify(status)) {
    case CallFailure::kTimedOut:
      return ErrorCode::kRequestTimedOut;
    case CallFailure::kUnreachable:
      return ErrorCode::kNotLeaderOrFollower;
    case CallFailure::kFailed:
      return ErrorCode::kKafkaStorageError;
  }
  return ErrorCode::kKafkaStorageError;
}

ErrorCode ControllerCallError(const grpc::Status& status) {
  switch (Classify(status)) {
    case CallFailure::kTimedOut:
      return ErrorCode::kRequestTimedOut;
    case CallFailure::kUnreachable:
      return ErrorCode::kNotController;
    case CallFailure::kFailed:
      return ErrorCode::kUnknownServerError;
  }
  return ErrorCode::kUnknownServerError;
}

ErrorCode CoordinatorWriteError(ErrorCode append_error) {
  // Kafka's own codes, not an internal set: the rule names the few that mean "moved" and
  // sends every other failure to the retriable default.
  switch (append_error) {
    case ErrorCode::kNone:
      return ErrorCode::kNone;
    case ErrorCode::kNotLeaderOrFollower:
    case ErrorCode::kUnknownTopicOrPartition:
    case ErrorCode::kFencedLeaderEpoch:
      return ErrorCode::kNotCoordinator;
    default:
      return ErrorCode::kCoordinatorNotAvailable;
  }
}

ErrorCode GroupMetadataWriteError(ErrorCode append_error) {
  switch (append_error) {
    case ErrorCode::kUnknownTopicOrPartition:
    case ErrorCode::kNotEnoughReplicas:
    case ErrorCode::kRequestTimedOut:
      return ErrorCode::kCoordinatorNotAvailable;
    case ErrorCode::kNotLeaderOrFollower:
    case ErrorCode::kKafkaStorageError:
      return ErrorCode::kNotCoordinator;
    case ErrorCode::kMessageTooLarge:
    case ErrorCode::kRecordListTooLarge:
    case ErrorCode::kInvalidFetchSize:
      return ErrorCode::kUnknownServerError;
    default:
      return append_error;
  }
}

}  // namespace runnel::brokerd
