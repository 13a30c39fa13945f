// A transactional id's state at its coordinator, the transitions Kafka allows between its
// states, and its record in __transaction_state (Kafka's TransactionMetadata,
// TransactionState and TransactionLog, same rules and formats).
//
// States and the transitions the coordinator makes (a transition is first written to the
// log; the state changes once the write is stored):
//
//   Empty ──AddPartitions──▶ Ongoing ──EndTxn(commit)──▶ PrepareCommit ──markers──▶ CompleteCommit
//     ▲                       │   └───EndTxn(abort), timeout──▶ PrepareAbort ──markers──▶
//     CompleteAbort └──InitProducerId───────┘ (an ongoing transaction is aborted first:
//     PrepareEpochFence)
//
// CompleteCommit and CompleteAbort behave as Empty for the next transaction. PrepareEpochFence
// is never stored: it marks, in memory, an ongoing transaction being aborted with a bumped
// epoch (a timeout, or InitProducerId fencing the previous producer instance). Dead is a
// transactional id whose tombstone is being written (transactional.id.expiration.ms).
//
// The record: key = int16 0 then TransactionLogKey v0 {transactional id}; value = int16
// version then TransactionLogValue at that version (common/protocol/schema/transaction/): we
// write v0, and v1 (flexible, with the client's transaction version and the next producer id
// in tagged fields) for the state of a transaction.version 2 client;
// a null value is the id's tombstone. The partitions are null in Empty records, as Kafka
// writes them. The last epoch of a producer (for retried epoch bumps) is not in the record,
// as in Kafka: after a load it is unknown.
//
// Pure functions and values: no threads, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "brokerd/group/records.h"
#include "common/protocol/error_code.h"
#include "common/util/status.h"

namespace runnel::brokerd::txn {

using ::runnel::protocol::ErrorCode;

inline constexpr int64_t kNoProducerId = -1;
inline constexpr int16_t kNoProducerEpoch = -1;

// Kafka's TransactionState ids, as stored in TransactionStatus.
enum class TxnState : int8_t {
  kEmpty = 0,
  kOngoing = 1,
  kPrepareCommit = 2,
  kPrepareAbort = 3,
  kCompleteCommit = 4,
  kCompleteAbort = 5,
  kDead = 6,
  kPrepareEpochFence = 7,
};

// Kafka's state names, as DescribeTransactions and ListTransactions give them.
std::string_view TxnStateName(TxnState state);
// The state of a name (ListTransactions' filter), case as Kafka's.
std::optional<TxnState> TxnStateFromName(std::string_view name);

using TxnPartition = std::pair<std::string, int32_t>;
using TxnPartitions = std::set<TxnPartition>;

struct TxnMetadata {
  std::string transactional_id;
  int64_t producer_id = kNoProducerId;
  int64_t previous_producer_id = kNoProducerId;  // the id before an exhausted epoch rotated it
  int64_t next_producer_id = kNoProducerId;      // kept as read (transaction.version 2)
  int16_t producer_epoch = kNoProducerEpoch;
  int16_t last_producer_epoch = kNoProducerEpoch;  // memory only: the epoch before the last bump
  int32_t timeout_ms = 0;
  TxnState state = TxnState::kEmpty;
  TxnPartitions partitions;
  int64_t start_timestamp_ms = -1;  // when the ongoing transaction began; -1 when none
  int64_t last_update_timestamp_ms = -1;
  int16_t client_transaction_version = 0;

  bool operator==(const TxnMetadata&) const = default;
};

// Kafka's rule: an epoch this high cannot be bumped again; the producer gets a new id.
inline bool EpochExhausted(int16_t epoch) { return epoch >= INT16_MAX - 1; }

// The transaction.version from which every transaction's end bumps the epoch (KIP-890 part 2).
inline constexpr int16_t kTransactionVersion2 = 2;

// What a request makes of a transactional id: an error (no change), nothing to write
// (error NONE, no target: the request is already satisfied), or a target state to write.
struct Transition {
  ErrorCode error = ErrorCode::kNone;
  std::optional<TxnMetadata> target;
};

struct ProducerIdAndEpoch {
  int64_t producer_id = kNoProducerId;
  int16_t producer_epoch = kNoProducerEpoch;
};

// InitProducerId with a transactional id, for an existing id's metadata `m` (a new id
// starts as NewTxnMetadata). `expected`: the id and epoch a v3+ producer names (KIP-360).
// `pending`: a transition of the id is being written. `new_producer_id`: a fresh id, used
// when the epoch is exhausted (NeedsNewProducerId says whether the caller must get one).
//  - pending, PrepareCommit or PrepareAbort: CONCURRENT_TRANSACTIONS (the client retries);
//  - `expected` naming another producer (and not a retry of a rotation): PRODUCER_FENCED;
//  - Ongoing: target PrepareEpochFence with the epoch bumped: the caller aborts the
//    transaction with that epoch and answers CONCURRENT_TRANSACTIONS;
//  - Empty, CompleteCommit, CompleteAbort: target Empty with the epoch bumped (or kept, for
//    a retry of a bump whose answer was lost), or with the new producer id at epoch 0.
Transition PrepareInitProducerId(const TxnMetadata& m, bool pending, int32_t timeout_ms,
                                 std::optional<ProducerIdAndEpoch> expected,
                                 int64_t new_producer_id, int64_t now_ms);
bool NeedsNewProducerId(const TxnMetadata& m, std::optional<ProducerIdAndEpoch> expected);
// The metadata of a transactional id seen for the first time.
TxnMetadata NewTxnMetadata(std::string transactional_id, int64_t producer_id, int32_t timeout_ms,
                           int64_t now_ms);

// AddPartitionsToTxn / AddOffsetsToTxn: another producer id INVALID_PRODUCER_ID_MAPPING,
// another epoch PRODUCER_FENCED, a pending transition or a transaction ending
// CONCURRENT_TRANSACTIONS; partitions already in the ongoing transaction need no write;
// otherwise target Ongoing with them added (a new transaction starts now).
// `client_transaction_version`: 2 when the partitions come from a transaction.version 2
// client (Produce v12+, TxnOffsetCommit v5+, AddPartitionsToTxn v4+ adding), else 0; kept
// in the Ongoing state (its end follows that version's rules when the coordinator aborts it).
Transition PrepareAddPartitions(const TxnMetadata& m, bool pending, int64_t producer_id,
                                int16_t producer_epoch, const TxnPartitions& partitions,
                                int16_t client_transaction_version, int64_t now_ms);
// AddPartitionsToTxn v4+ verify-only (KIP-890), Kafka's rule: another producer id
// INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED, a transaction ending
// CONCURRENT_TRANSACTIONS; then NONE when the partition is in the transaction, else
// TRANSACTION_ABORTABLE (the producer aborts and retries in a new transaction).
ErrorCode VerifyPartition(const TxnMetadata& m, int64_t producer_id, int16_t producer_epoch,
                          const TxnPartition& partition);

// EndTxn from a client (`from_client`) or the coordinator's own abort (timeouts, fencing;
// its epoch may be above the stored one). `pending_fence`: the id's pending transition is a
// PrepareEpochFence (which this abort carries out). Ongoing: target PrepareCommit or
// PrepareAbort; already completed the same way: NONE with no target; a transaction being
// completed the same way: CONCURRENT_TRANSACTIONS; the other way, or none: INVALID_TXN_STATE.
Transition PrepareEndTxn(const TxnMetadata& m, bool pending, bool pending_fence,
                         int64_t producer_id, int16_t producer_epoch, bool commit, bool from_client,
                         int64_t now_ms);

// EndTxn under transaction.version 2 (KIP-890 part 2: EndTxn v5+, and the coordinator's own
// aborts of a transaction a v2 client began). Every end bumps the epoch: the Prepare state,
// its markers and the next transaction carry epoch + 1, which the client learns from the
// answer. Kafka's rules:
//  - a pending transition other than the fence: CONCURRENT_TRANSACTIONS;
//  - another producer id (unless a retry across a rotation): INVALID_PRODUCER_ID_MAPPING;
//  - the epoch must be the current one, or, once the end is stored (Prepare or Complete),
//    the one before it (a retry); else PRODUCER_FENCED;
//  - Ongoing: PrepareCommit or PrepareAbort at epoch + 1;
//  - a retry of the end already made: NONE with no target (the caller answers the current id
//    and epoch); the other end after it: INVALID_TXN_STATE;
//  - an abort with no transaction (Empty, or completed and not a retry): PrepareAbort with no
//    partitions, which bumps the epoch all the same; a commit with none: INVALID_TXN_STATE.
// An exhausted epoch (EpochExhausted) takes `new_producer_id` into next_producer_id: the
// completion moves the id to it at epoch 0 (NeedsNewProducerIdAtEnd says when the caller must
// get one).
Transition PrepareEndTxnV2(const TxnMetadata& m, bool pending, bool pending_fence,
                           int64_t producer_id, int16_t producer_epoch, bool commit,
                           bool from_client, int64_t new_producer_id, int64_t now_ms);
bool NeedsNewProducerIdAtEnd(const TxnMetadata& m);

// The state after a PrepareCommit/PrepareAbort's markers are all written: CompleteCommit or
// CompleteAbort with no partitions; under transaction.version 2 a rotated producer id
// (next_producer_id) becomes the id, at epoch 0.
TxnMetadata PrepareComplete(const TxnMetadata& m, int64_t now_ms);

// PRODUCER_FENCED as a request `version` may carry it (KIP-588): versions before
// `fenced_since` (InitProducerId 4; AddPartitionsToTxn, AddOffsetsToTxn, EndTxn 2) get
// INVALID_PRODUCER_EPOCH, the error those clients know for it. Other errors pass unchanged.
inline ErrorCode FencedForVersion(ErrorCode error, int16_t version, int16_t fenced_since) {
  return error == ErrorCode::kProducerFenced && version < fenced_since
             ? ErrorCode::kInvalidProducerEpoch
             : error;
}

// What a partition leader answers for a write whose transaction verification
// (VerifyPartition) failed with `error` (Kafka's AddPartitionsToTxnManager): PRODUCER_FENCED
// is INVALID_PRODUCER_EPOCH; TRANSACTION_ABORTABLE stays so for request versions that know it
// (`abortable_known`), else INVALID_TXN_STATE; CONCURRENT_TRANSACTIONS (the transaction is
// ending) is NOT_ENOUGH_REPLICAS, which clients retry. Others pass unchanged.
inline ErrorCode VerificationError(ErrorCode error, bool abortable_known) {
  switch (error) {
    case ErrorCode::kProducerFenced:
      return ErrorCode::kInvalidProducerEpoch;
    case ErrorCode::kTransactionAbortable:
      return abortable_known ? error : ErrorCode::kInvalidTxnState;
    case ErrorCode::kConcurrentTransactions:
      return ErrorCode::kNotEnoughReplicas;
    default:
      return error;
  }
}

// ---- __transaction_state records ---------------------------------------------------------

group::LogRecord EncodeTxnRecord(const TxnMetadata& m);
group::LogRecord EncodeTxnTombstone(const std::string& transactional_id);

struct ParsedTxnRecord {
  std::string transactional_id;
  std::optional<TxnMetadata> value;  // nullopt: a tombstone
};
// NotFound for a key version that is not a transaction record (skipped quietly, as Kafka
// skips unknown coordinator records); InvalidArgument saying what does not parse.
StatusOr<ParsedTxnRecord> ParseTxnRecord(std::span<const uint8_t> key,
                                         std::optional<std::span<const uint8_t>> value);

}  // namespace runnel::brokerd::txn
