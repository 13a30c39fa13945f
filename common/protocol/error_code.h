// Kafka's error codes: one enum, one table of names and retriability.
//
// RUNNEL_KAFKA_ERRORS(X) lists X(enumerator, wire name, code, retriable) once; the enum,
// ErrorName and IsRetriable are all built from it, so a code is declared in one place.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace runnel::protocol {

#define RUNNEL_KAFKA_ERRORS(X)                                                             \
  X(kUnknownServerError, UNKNOWN_SERVER_ERROR, -1, false)                                  \
  X(kNone, NONE, 0, false)                                                                 \
  X(kOffsetOutOfRange, OFFSET_OUT_OF_RANGE, 1, false)                                      \
  X(kCorruptMessage, CORRUPT_MESSAGE, 2, true)                                             \
  X(kUnknownTopicOrPartition, UNKNOWN_TOPIC_OR_PARTITION, 3, true)                         \
  X(kInvalidFetchSize, INVALID_FETCH_SIZE, 4, false)                                       \
  X(kLeaderNotAvailable, LEADER_NOT_AVAILABLE, 5, true)                                    \
  X(kNotLeaderOrFollower, NOT_LEADER_OR_FOLLOWER, 6, true)                                 \
  X(kRequestTimedOut, REQUEST_TIMED_OUT, 7, true)                                          \
  X(kBrokerNotAvailable, BROKER_NOT_AVAILABLE, 8, false)                                   \
  X(kReplicaNotAvailable, REPLICA_NOT_AVAILABLE, 9, true)                                  \
  X(kMessageTooLarge, MESSAGE_TOO_LARGE, 10, false)                                        \
  X(kStaleControllerEpoch, STALE_CONTROLLER_EPOCH, 11, false)                              \
  X(kOffsetMetadataTooLarge, OFFSET_METADATA_TOO_LARGE, 12, false)                         \
  X(kNetworkException, NETWORK_EXCEPTION, 13, true)                                        \
  X(kCoordinatorLoadInProgress, COORDINATOR_LOAD_IN_PROGRESS, 14, true)                    \
  X(kCoordinatorNotAvailable, COORDINATOR_NOT_AVAILABLE, 15, true)                         \
  X(kNotCoordinator, NOT_COORDINATOR, 16, true)                                            \
  X(kInvalidTopicException, INVALID_TOPIC_EXCEPTION, 17, false)                            \
  X(kRecordListTooLarge, RECORD_LIST_TOO_LARGE, 18, false)                                 \
  X(kNotEnoughReplicas, NOT_ENOUGH_REPLICAS, 19, true)                                     \
  X(kNotEnoughReplicasAfterAppend, NOT_ENOUGH_REPLICAS_AFTER_APPEND, 20, true)             \
  X(kInvalidRequiredAcks, INVALID_REQUIRED_ACKS, 21, false)                                \
  X(kIllegalGeneration, ILLEGAL_GENERATION, 22, false)                                     \
  X(kInconsistentGroupProtocol, INCONSISTENT_GROUP_PROTOCOL, 23, false)                    \
  X(kInvalidGroupId, INVALID_GROUP_ID, 24, false)                                          \
  X(kUnknownMemberId, UNKNOWN_MEMBER_ID, 25, false)                                        \
  X(kInvalidSessionTimeout, INVALID_SESSION_TIMEOUT, 26, false)                            \
  X(kRebalanceInProgress, REBALANCE_IN_PROGRESS, 27, false)                                \
  X(kInvalidCommitOffsetSize, INVALID_COMMIT_OFFSET_SIZE, 28, false)                       \
  X(kTopicAuthorizationFailed, TOPIC_AUTHORIZATION_FAILED, 29, false)                      \
  X(kGroupAuthorizationFailed, GROUP_AUTHORIZATION_FAILED, 30, false)                      \
  X(kClusterAuthorizationFailed, CLUSTER_AUTHORIZATION_FAILED, 31, false)                  \
  X(kInvalidTimestamp, INVALID_TIMESTAMP, 32, false)                                       \
  X(kUnsupportedSaslMechanism, UNSUPPORTED_SASL_MECHANISM, 33, false)                      \
  X(kIllegalSaslState, ILLEGAL_SASL_STATE, 34, false)                                      \
  X(kUnsupportedVersion, UNSUPPORTED_VERSION, 35, false)                                   \
  X(kTopicAlreadyExists, TOPIC_ALREADY_EXISTS, 36, false)                                  \
  X(kInvalidPartitions, INVALID_PARTITIONS, 37, false)                                     \
  X(kInvalidReplicationFactor, INVALID_REPLICATION_FACTOR, 38, false)                      \
  X(kInvalidReplicaAssignment, INVALID_REPLICA_ASSIGNMENT, 39, false)                      \
  X(kInvalidConfig, INVALID_CONFIG, 40, false)                                             \
  X(kNotController, NOT_CONTROLLER, 41, true)                                              \
  X(kInvalidRequest, INVALID_REQUEST, 42, false)                                           \
  X(kUnsupportedForMessageFormat, UNSUPPORTED_FOR_MESSAGE_FORMAT, 43, false)               \
  X(kPolicyViolation, POLICY_VIOLATION, 44, false)                                         \
  X(kOutOfOrderSequenceNumber, OUT_OF_ORDER_SEQUENCE_NUMBER, 45, false)                    \
  X(kDuplicateSequenceNumber, DUPLICATE_SEQUENCE_NUMBER, 46, false)                        \
  X(kInvalidProducerEpoch, INVALID_PRODUCER_EPOCH, 47, false)                              \
  X(kInvalidTxnState, INVALID_TXN_STATE, 48, false)                                        \
  X(kInvalidProducerIdMapping, INVALID_PRODUCER_ID_MAPPING, 49, false)                     \
  X(kInvalidTransactionTimeout, INVALID_TRANSACTION_TIMEOUT, 50, false)                    \
  X(kConcurrentTransactions, CONCURRENT_TRANSACTIONS, 51, true)                            \
  X(kTransactionCoordinatorFenced, TRANSACTION_COORDINATOR_FENCED, 52, false)              \
  X(kTransactionalIdAuthorizationFailed, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, 53, false) \
  X(kSecurityDisabled, SECURITY_DISABLED, 54, false)                                       \
  X(kOperationNotAttempted, OPERATION_NOT_ATTEMPTED, 55, false)                            \
  X(kKafkaStorageError, KAFKA_STORAGE_ERROR, 56, true)                                     \
  X(kLogDirNotFound, LOG_DIR_NOT_FOUND, 57, false)                                         \
  X(kSaslAuthenticationFailed, SASL_AUTHENTICATION_FAILED, 58, false)                      \
  X(kUnknownProducerId, UNKNOWN_PRODUCER_ID, 59, false)                                    \
  X(kReassignmentInProgress, REASSIGNMENT_IN_PROGRESS, 60, false)                          \
  X(kDelegationTokenAuthDisabled, DELEGATION_TOKEN_AUTH_DISABLED, 61, false)               \
  X(kDelegationTokenNotFound, DELEGATION_TOKEN_NOT_FOUND, 62, false)                       \
  X(kDelegationTokenOwnerMismatch, DELEGATION_TOKEN_OWNER_MISMATCH, 63, false)             \
  X(kDelegationTokenRequestNotAllowed, DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, 64, false)    \
  X(kDelegationTokenAuthorizationFailed, DELEGATION_TOKEN_AUTHORIZATION_FAILED, 65, false) \
  X(kDelegationTokenExpired, DELEGATION_TOKEN_EXPIRED, 66, false)                          \
  X(kInvalidPrincipalType, INVALID_PRINCIPAL_TYPE, 67, false)                              \
  X(kNonEmptyGroup, NON_EMPTY_GROUP, 68, false)                                            \
  X(kGroupIdNotFound, GROUP_ID_NOT_FOUND, 69, false)                                       \
  X(kFetchSessionIdNotFound, FETCH_SESSION_ID_NOT_FOUND, 70, true)                         \
  X(kInvalidFetchSessionEpoch, INVALID_FETCH_SESSION_EPOCH, 71, true)                      \
  X(kListenerNotFound, LISTENER_NOT_FOUND, 72, true)                                       \
  X(kTopicDeletionDisabled, TOPIC_DELETION_DISABLED, 73, false)                            \
  X(kFencedLeaderEpoch, FENCED_LEADER_EPOCH, 74, true)                                     \
  X(kUnknownLeaderEpoch, UNKNOWN_LEADER_EPOCH, 75, true)                                   \
  X(kUnsupportedCompressionType, UNSUPPORTED_COMPRESSION_TYPE, 76, false)                  \
  X(kStaleBrokerEpoch, STALE_BROKER_EPOCH, 77, false)                                      \
  X(kOffsetNotAvailable, OFFSET_NOT_AVAILABLE, 78, true)                                   \
  X(kMemberIdRequired, MEMBER_ID_REQUIRED, 79, false)                                      \
  X(kPreferredLeaderNotAvailable, PREFERRED_LEADER_NOT_AVAILABLE, 80, true)                \
  X(kGroupMaxSizeReached, GROUP_MAX_SIZE_REACHED, 81, false)                               \
  X(kFencedInstanceId, FENCED_INSTANCE_ID, 82, false)                                      \
  X(kEligibleLeadersNotAvailable, ELIGIBLE_LEADERS_NOT_AVAILABLE, 83, true)                \
  X(kElectionNotNeeded, ELECTION_NOT_NEEDED, 84, false)                                    \
  X(kNoReassignmentInProgress, NO_REASSIGNMENT_IN_PROGRESS, 85, false)                     \
  X(kGroupSubscribedToTopic, GROUP_SUBSCRIBED_TO_TOPIC, 86, false)                         \
  X(kInvalidRecord, INVALID_RECORD, 87, false)                                             \
  X(kUnstableOffsetCommit, UNSTABLE_OFFSET_COMMIT, 88, true)                               \
  X(kThrottlingQuotaExceeded, THROTTLING_QUOTA_EXCEEDED, 89, true)                         \
  X(kProducerFenced, PRODUCER_FENCED, 90, false)                                           \
  X(kResourceNotFound, RESOURCE_NOT_FOUND, 91, false)                                      \
  X(kDuplicateResource, DUPLICATE_RESOURCE, 92, false)                                     \
  X(kUnacceptableCredential, UNACCEPTABLE_CREDENTIAL, 93, false)                           \
  X(kInconsistentVoterSet, INCONSISTENT_VOTER_SET, 94, false)                              \
  X(kInvalidUpdateVersion, INVALID_UPDATE_VERSION, 95, false)                              \
  X(kFeatureUpdateFailed, FEATURE_UPDATE_FAILED, 96, false)                                \
  X(kPrincipalDeserializationFailure, PRINCIPAL_DESERIALIZATION_FAILURE, 97, false)        \
  X(kSnapshotNotFound, SNAPSHOT_NOT_FOUND, 98, false)                                      \
  X(kPositionOutOfRange, POSITION_OUT_OF_RANGE, 99, false)                                 \
  X(kUnknownTopicId, UNKNOWN_TOPIC_ID, 100, true)                                          \
  X(kDuplicateBrokerRegistration, DUPLICATE_BROKER_REGISTRATION, 101, false)               \
  X(kBrokerIdNotRegistered, BROKER_ID_NOT_REGISTERED, 102, false)                          \
  X(kInconsistentTopicId, INCONSISTENT_TOPIC_ID, 103, true)                                \
  X(kInconsistentClusterId, INCONSISTENT_CLUSTER_ID, 104, false)                           \
  X(kTransactionalIdNotFound, TRANSACTIONAL_ID_NOT_FOUND, 105, false)                      \
  X(kFetchSessionTopicIdError, FETCH_SESSION_TOPIC_ID_ERROR, 106, true)                    \
  X(kIneligibleReplica, INELIGIBLE_REPLICA, 107, false)                                    \
  X(kNewLeaderElected, NEW_LEADER_ELECTED, 108, false)                                     \
  X(kOffsetMovedToTieredStorage, OFFSET_MOVED_TO_TIERED_STORAGE, 109, false)               \
  X(kFencedMemberEpoch, FENCED_MEMBER_EPOCH, 110, false)                                   \
  X(kUnreleasedInstanceId, UNRELEASED_INSTANCE_ID, 111, false)                             \
  X(kUnsupportedAssignor, UNSUPPORTED_ASSIGNOR, 112, false)                                \
  X(kStaleMemberEpoch, STALE_MEMBER_EPOCH, 113, false)                                     \
  X(kMismatchedEndpointType, MISMATCHED_ENDPOINT_TYPE, 114, false)                         \
  X(kUnsupportedEndpointType, UNSUPPORTED_ENDPOINT_TYPE, 115, false)                       \
  X(kUnknownControllerId, UNKNOWN_CONTROLLER_ID, 116, false)                               \
  X(kUnknownSubscriptionId, UNKNOWN_SUBSCRIPTION_ID, 117, false)                           \
  X(kTelemetryTooLarge, TELEMETRY_TOO_LARGE, 118, false)                                   \
  X(kInvalidRegistration, INVALID_REGISTRATION, 119, false)                                \
  X(kTransactionAbortable, TRANSACTION_ABORTABLE, 120, false)                              \
  X(kInvalidRecordState, INVALID_RECORD_STATE, 121, false)                                 \
  X(kShareSessionNotFound, SHARE_SESSION_NOT_FOUND, 122, true)                             \
  X(kInvalidShareSessionEpoch, INVALID_SHARE_SESSION_EPOCH, 123, true)                     \
  X(kFencedStateEpoch, FENCED_STATE_EPOCH, 124, false)                                     \
  X(kInvalidVoterKey, INVALID_VOTER_KEY, 125, false)                                       \
  X(kDuplicateVoter, DUPLICATE_VOTER, 126, false)                                          \
  X(kVoterNotFound, VOTER_NOT_FOUND, 127, false)                                           \
  X(kInvalidRegularExpression, INVALID_REGULAR_EXPRESSION, 128, false)                     \
  X(kRebootstrapRequired, REBOOTSTRAP_REQUIRED, 129, false)

enum class ErrorCode : int16_t {
#define RUNNEL_ERROR_ENUM(e, name, code, retriable) e = (code),
  RUNNEL_KAFKA_ERRORS(RUNNEL_ERROR_ENUM)
#undef RUNNEL_ERROR_ENUM
};

// Kafka's upper-case name of `code`, e.g. "UNKNOWN_TOPIC_OR_PARTITION"; "UNKNOWN_CODE" for a
// number this table does not know.
constexpr std::string_view ErrorName(ErrorCode code) {
  switch (code) {
#define RUNNEL_ERROR_NAME(e, name, code, retriable) \
  case ErrorCode::e:                                \
    return #name;
    RUNNEL_KAFKA_ERRORS(RUNNEL_ERROR_NAME)
#undef RUNNEL_ERROR_NAME
  }
  return "UNKNOWN_CODE";
}

// Whether a client may retry the failed request as it is (Kafka's RetriableException).
constexpr bool IsRetriable(ErrorCode code) {
  switch (code) {
#define RUNNEL_ERROR_RETRIABLE(e, name, code, retriable) \
  case ErrorCode::e:                                     \
    return retriable;
    // One case per code, from the table: many return the same value, on purpose.
    // NOLINTNEXTLINE(bugprone-branch-clone)
    RUNNEL_KAFKA_ERRORS(RUNNEL_ERROR_RETRIABLE)
#undef RUNNEL_ERROR_RETRIABLE
  }
  return false;
}

constexpr int16_t ToWire(ErrorCode code) { return static_cast<int16_t>(code); }

// The code a gRPC message of ours carries as an integer (storaged's and controllerd's answers
// hold Kafka codes). Any int16 is an ErrorCode; a wider number is not Kafka's and reads as
// UNKNOWN_SERVER_ERROR.
constexpr ErrorCode ErrorFromWire(int32_t code) {
  return code >= INT16_MIN && code <= INT16_MAX ? static_cast<ErrorCode>(code)
                                                : ErrorCode::kUnknownServerError;
}

// "NAME (code)", for logs and test failure messages.
std::ostream& operator<<(std::ostream& os, ErrorCode code);

// A Kafka error as a client gets it: the code, and the text for the response's error message
// field (empty when there is none). Every handler, coordinator and validator reports its
// failures as one, so a code never travels without its reason.
struct KafkaError {
  ErrorCode code = ErrorCode::kNone;
  std::string message;

  bool ok() const { return code == ErrorCode::kNone; }
};

}  // namespace runnel::protocol
