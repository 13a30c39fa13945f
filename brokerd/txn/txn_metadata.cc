#include "brokerd/txn/txn_metadata.h"

#include <algorithm>
#include <array>
#include <map>
#include <vector>

#include "common/protocol/transaction/transaction_log_key.h"
#include "common/protocol/transaction/transaction_log_value.h"
#include "common/protocol/wire.h"

namespace runnel::brokerd::txn {

namespace p = ::runnel::protocol;

namespace {

constexpr int16_t kKeyVersion = 0;
constexpr int16_t kValueVersion = 0;
constexpr int16_t kFlexibleValueVersion = 1;

constexpr std::array<std::string_view, 8> kStateNames = {
    "Empty",          "Ongoing",       "PrepareCommit", "PrepareAbort",
    "CompleteCommit", "CompleteAbort", "Dead",          "PrepareEpochFence"};

bool IsCompleteOrEmpty(TxnState s) {
  return s == TxnState::kEmpty || s == TxnState::kCompleteCommit || s == TxnState::kCompleteAbort;
}

// `m` moved to `state`, stamped `now_ms`.
TxnMetadata To(const TxnMetadata& m, TxnState state, int64_t now_ms) {
  TxnMetadata t = m;
  t.state = state;
  t.last_update_timestamp_ms = now_ms;
  return t;
}

// Kafka's isValidProducerId for InitProducerId's expected id and epoch: the metadata was just
// made (epoch -1), the id is the current one (its epoch is checked by the bump), or it is the
// previous id and its epoch exhausted (a retry of a rotation whose answer was lost).
bool ExpectedIsValid(const TxnMetadata& m, const ProducerIdAndEpoch& e) {
  return m.producer_epoch == kNoProducerEpoch || e.producer_id == m.producer_id ||
         (e.producer_id == m.previous_producer_id && EpochExhausted(e.producer_epoch));
}

// EndTxn while the markers of a Prepare state are out: the same end again is
// CONCURRENT_TRANSACTIONS (the client retries), the other one INVALID_TXN_STATE.
ErrorCode WhileEnding(TxnState prepared, bool commit) {
  return commit == (prepared == TxnState::kPrepareCommit) ? ErrorCode::kConcurrentTransactions
                                                          : ErrorCode::kInvalidTxnState;
}

}  // namespace

std::string_view TxnStateName(TxnState state) {
  const auto i = static_cast<size_t>(state);
  return i < kStateNames.size() ? kStateNames[i] : std::string_view("Unknown");
}

std::optional<TxnState> TxnStateFromName(std::string_view name) {
  for (size_t i = 0; i < kStateNames.size(); ++i) {
    if (kStateNames[i] == name) return static_cast<TxnState>(i);
  }
  return std::nullopt;
}

TxnMetadata NewTxnMetadata(std::string transactional_id, int64_t producer_id, int32_t timeout_ms,
                           int64_t now_ms) {
  TxnMetadata m;
  m.transactional_id = std::move(transactional_id);
  m.producer_id = producer_id;
  m.timeout_ms = timeout_ms;
  m.state = TxnState::kEmpty;
  m.last_update_timestamp_ms = now_ms;
  return m;
}

bool NeedsNewProducerId(const TxnMetadata& m, std::optional<ProducerIdAndEpoch> expected) {
  return IsCompleteOrEmpty(m.state) && EpochExhausted(m.producer_epoch) &&
         (!expected.has_value() || expected->producer_epoch == m.producer_epoch);
}

Transition PrepareInitProducerId(const TxnMetadata& m, bool pending, int32_t timeout_ms,
                                 std::optional<ProducerIdAndEpoch> expected,
                                 int64_t new_producer_id, int64_t now_ms) {
  if (pending) return {ErrorCode::kConcurrentTransactions, std::nullopt};
  if (expected.has_value() && !ExpectedIsValid(m, *expected)) {
    return {ErrorCode::kProducerFenced, std::nullopt};
  }
  switch (m.state) {
    case TxnState::kPrepareCommit:
    case TxnState::kPrepareAbort:
      return {ErrorCode::kConcurrentTransactions, std::nullopt};
    case TxnState::kOngoing: {
      // The previous instance's transaction is aborted with a bumped epoch, fencing it.
      if (m.producer_epoch == INT16_MAX) return {ErrorCode::kProducerFenced, std::nullopt};
      TxnMetadata t = m;
      t.state = TxnState::kPrepareEpochFence;
      t.producer_epoch = static_cast<int16_t>(m.producer_epoch + 1);
      t.last_producer_epoch = kNoProducerEpoch;
      return {ErrorCode::kNone, std::move(t)};
    }
    case TxnState::kEmpty:
    case TxnState::kCompleteCommit:
    case TxnState::kCompleteAbort:
      break;
    case TxnState::kDead:
    case TxnState::kPrepareEpochFence:
      // Never stored: a Dead id is removed and a fence is pending; retried by the client.
      return {ErrorCode::kConcurrentTransactions, std::nullopt};
  }
  TxnMetadata t = To(m, TxnState::kEmpty, now_ms);
  t.timeout_ms = timeout_ms;
  t.partitions.clear();
  t.start_timestamp_ms = -1;
  if (NeedsNewProducerId(m, expected)) {
    t.previous_producer_id = m.producer_id;
    t.producer_id = new_producer_id;
    t.producer_epoch = 0;
    t.last_producer_epoch = expected.has_value() ? m.producer_epoch : kNoProducerEpoch;
    return {ErrorCode::kNone, std::move(t)};
  }
  const auto bumped = static_cast<int16_t>(m.producer_epoch + 1);
  if (!expected.has_value() || m.producer_epoch == kNoProducerEpoch ||
      expected->producer_epoch == m.producer_epoch) {
    t.producer_epoch = bumped;
    t.last_producer_epoch = expected.has_value() ? m.producer_epoch : kNoProducerEpoch;
  } else if (expected->producer_epoch == m.last_producer_epoch) {
    // A retry of the bump that made the current epoch: answered with it again.
  } else {
    return {ErrorCode::kProducerFenced, std::nullopt};
  }
  return {ErrorCode::kNone, std::move(t)};
}

Transition PrepareAddPartitions(const TxnMetadata& m, bool pending, int64_t producer_id,
                                int16_t producer_epoch, const TxnPartitions& partitions,
                                int16_t client_transaction_version, int64_t now_ms) {
  if (m.producer_id != producer_id) return {ErrorCode::kInvalidProducerIdMapping, std::nullopt};
  if (m.producer_epoch != producer_epoch) return {ErrorCode::kProducerFenced, std::nullopt};
  if (pending) return {ErrorCode::kConcurrentTransactions, std::nullopt};
  switch (m.state) {
    case TxnState::kPrepareCommit:
    case TxnState::kPrepareAbort:
    case TxnState::kPrepareEpochFence:
    case TxnState::kDead:
      return {ErrorCode::kConcurrentTransactions, std::nullopt};
    case TxnState::kOngoing:
      if (std::includes(m.partitions.begin(), m.partitions.end(), partitions.begin(),
                        partitions.end())) {
        return {ErrorCode::kNone, std::nullopt};
      }
      break;
    case TxnState::kEmpty:
    case TxnState::kCompleteCommit:
    case TxnState::kCompleteAbort:
      break;
  }
  TxnMetadata t = To(m, TxnState::kOngoing, now_ms);
  if (m.state != TxnState::kOngoing) {
    t.start_timestamp_ms = now_ms;
    t.partitions.clear();
  }
  t.partitions.insert(partitions.begin(), partitions.end());
  t.client_transaction_version = client_transaction_version;
  return {ErrorCode::kNone, std::move(t)};
}

ErrorCode VerifyPartition(const TxnMetadata& m, int64_t producer_id, int16_t producer_epoch,
                          const TxnPartition& partition) {
  if (m.producer_id != producer_id) return ErrorCode::kInvalidProducerIdMapping;
  if (m.producer_epoch != producer_epoch) return ErrorCode::kProducerFenced;
  if (m.state == TxnState::kPrepareCommit || m.state == TxnState::kPrepareAbort) {
    return ErrorCode::kConcurrentTransactions;
  }
  // Partitions stay in the set until the transaction completes, so Ongoing is implied.
  return m.partitions.count(partition) > 0 ? ErrorCode::kNone : ErrorCode::kTransactionAbortable;
}

Transition PrepareEndTxn(const TxnMetadata& m, bool pending, bool pending_fence,
                         int64_t producer_id, int16_t producer_epoch, bool commit, bool from_client,
                         int64_t now_ms) {
  if (m.producer_id != producer_id) return {ErrorCode::kInvalidProducerIdMapping, std::nullopt};
  // A client must name the current epoch; the coordinator's own abort may carry a bumped one.
  if ((from_client && producer_epoch != m.producer_epoch) || producer_epoch < m.producer_epoch) {
    return {ErrorCode::kProducerFenced, std::nullopt};
  }
  if (pending && !pending_fence) return {ErrorCode::kConcurrentTransactions, std::nullopt};
  switch (m.state) {
    case TxnState::kOngoing: {
      TxnMetadata t = To(m, commit ? TxnState::kPrepareCommit : TxnState::kPrepareAbort, now_ms);
      if (!commit && pending_fence) {
        t.producer_epoch = producer_epoch;
        t.last_producer_epoch = kNoProducerEpoch;
      }
      return {ErrorCode::kNone, std::move(t)};
    }
    case TxnState::kCompleteCommit:
      return {commit ? ErrorCode::kNone : ErrorCode::kInvalidTxnState, std::nullopt};
    case TxnState::kCompleteAbort:
      return {commit ? ErrorCode::kInvalidTxnState : ErrorCode::kNone, std::nullopt};
    case TxnState::kPrepareCommit:
    case TxnState::kPrepareAbort:
      return {WhileEnding(m.state, commit), std::nullopt};
    case TxnState::kEmpty:
      return {ErrorCode::kInvalidTxnState, std::nullopt};
    case TxnState::kDead:
    case TxnState::kPrepareEpochFence:
      return {ErrorCode::kConcurrentTransactions, std::nullopt};
  }
  return {ErrorCode::kInvalidTxnState, std::nullopt};
}

bool NeedsNewProducerIdAtEnd(const TxnMetadata& m) { return EpochExhausted(m.producer_epoch); }

Transition PrepareEndTxnV2(const TxnMetadata& m, bool pending, bool pending_fence,
                           int64_t producer_id, int16_t producer_epoch, bool commit,
                           bool from_client, int64_t new_producer_id, int64_t now_ms) {
  // A retry of an end whose answer was lost: the stored end already bumped the epoch, or
  // rotated the id (the last epoch of the old id, 32766, became epoch 0 of the new one).
  const bool retry_after_bump =
      !pending_fence && producer_id == m.producer_id && m.producer_epoch == producer_epoch + 1;
  const bool retry_after_rotation = !pending_fence && producer_id == m.previous_producer_id &&
                                    producer_epoch == INT16_MAX - 1 && m.producer_epoch == 0;
  const bool retry = retry_after_bump || retry_after_rotation;
  bool valid_epoch = false;
  if (pending_fence) {
    valid_epoch =
        (!from_client || producer_epoch == m.producer_epoch) && producer_epoch >= m.producer_epoch;
  } else if (m.state == TxnState::kPrepareCommit || m.state == TxnState::kPrepareAbort) {
    valid_epoch = retry_after_bump;
  } else if (m.state == TxnState::kCompleteCommit || m.state == TxnState::kCompleteAbort) {
    valid_epoch = retry || producer_epoch == m.producer_epoch;
  } else {
    valid_epoch = producer_epoch == m.producer_epoch;
  }
  if (pending && !pending_fence) return {ErrorCode::kConcurrentTransactions, std::nullopt};
  if (m.producer_id != producer_id && !retry_after_rotation) {
    return {ErrorCode::kInvalidProducerIdMapping, std::nullopt};
  }
  if (!valid_epoch) return {ErrorCode::kProducerFenced, std::nullopt};

  // The end to write: Prepare* at epoch + 1 (an epoch already at the maximum is only ever
  // aborted, and then kept), with the rotated id when the epoch is exhausted.
  auto prepare = [&](TxnState state, bool no_partitions) -> Transition {
    TxnMetadata t = To(m, state, now_ms);
    if (!(m.producer_epoch == INT16_MAX && state == TxnState::kPrepareAbort)) {
      t.producer_epoch = static_cast<int16_t>(m.producer_epoch + 1);
    }
    t.last_producer_epoch = m.producer_epoch;
    t.next_producer_id = NeedsNewProducerIdAtEnd(m) ? new_producer_id : kNoProducerId;
    t.client_transaction_version = kTransactionVersion2;
    if (no_partitions) {
      // An abort with nothing added: its start is now, as Kafka records it.
      t.partitions.clear();
      t.start_timestamp_ms = now_ms;
    }
    return {ErrorCode::kNone, std::move(t)};
  };
  switch (m.state) {
    case TxnState::kOngoing:
      return prepare(commit ? TxnState::kPrepareCommit : TxnState::kPrepareAbort, false);
    case TxnState::kCompleteCommit:
      if (commit) return {retry ? ErrorCode::kNone : ErrorCode::kInvalidTxnState, std::nullopt};
      if (retry) return {ErrorCode::kInvalidTxnState, std::nullopt};
      return prepare(TxnState::kPrepareAbort, true);
    case TxnState::kCompleteAbort:
      if (commit) return {ErrorCode::kInvalidTxnState, std::nullopt};
      if (retry) return {ErrorCode::kNone, std::nullopt};
      return prepare(TxnState::kPrepareAbort, true);
    case TxnState::kEmpty:
      if (commit) return {ErrorCode::kInvalidTxnState, std::nullopt};
      return prepare(TxnState::kPrepareAbort, true);
    case TxnState::kPrepareCommit:
    case TxnState::kPrepareAbort:
      return {WhileEnding(m.state, commit), std::nullopt};
    case TxnState::kDead:
    case TxnState::kPrepareEpochFence:
      return {ErrorCode::kConcurrentTransactions, std::nullopt};
  }
  return {ErrorCode::kInvalidTxnState, std::nullopt};
}

TxnMetadata PrepareComplete(const TxnMetadata& m, int64_t now_ms) {
  TxnMetadata t = To(
      m, m.state == TxnState::kPrepareCommit ? TxnState::kCompleteCommit : TxnState::kCompleteAbort,
      now_ms);
  t.partitions.clear();
  if (m.client_transaction_version >= kTransactionVersion2 && m.next_producer_id != kNoProducerId) {
    t.previous_producer_id = m.producer_id;
    t.producer_id = m.next_producer_id;
    t.producer_epoch = 0;
  }
  t.next_producer_id = kNoProducerId;
  return t;
}

// ---- Records -----------------------------------------------------------------------------

group::LogRecord EncodeTxnRecord(const TxnMetadata& m) {
  p::TransactionLogKey key;
  key.transactional_id = m.transactional_id;
  p::TransactionLogValue value;
  value.producer_id = m.producer_id;
  value.previous_producer_id = m.previous_producer_id;
  value.next_producer_id = m.next_producer_id;
  value.producer_epoch = m.producer_epoch;
  value.transaction_timeout_ms = m.timeout_ms;
  value.transaction_status = static_cast<int8_t>(m.state);
  if (m.state == TxnState::kEmpty) {
    value.transaction_partitions.reset();
  } else {
    std::map<std::string, std::vector<int32_t>> by_topic;
    for (const auto& [topic, partition] : m.partitions) by_topic[topic].push_back(partition);
    value.transaction_partitions.emplace();
    for (auto& [topic, ids] : by_topic) {
      p::TransactionLogValue::PartitionsSchema s;
      s.topic = topic;
      s.partition_ids = std::move(ids);
      value.transaction_partitions->push_back(std::move(s));
    }
  }
  value.transaction_last_update_timestamp_ms = m.last_update_timestamp_ms;
  value.transaction_start_timestamp_ms = m.start_timestamp_ms;
  value.client_transaction_version = m.client_transaction_version;
  const int16_t version = m.client_transaction_version >= 2 ? kFlexibleValueVersion : kValueVersion;
  return group::LogRecord{group::EncodeVersioned(key, kKeyVersion),
                          group::EncodeVersioned(value, version)};
}

group::LogRecord EncodeTxnTombstone(const std::string& transactional_id) {
  p::TransactionLogKey key;
  key.transactional_id = transactional_id;
  return group::LogRecord{group::EncodeVersioned(key, kKeyVersion), std::nullopt};
}

StatusOr<ParsedTxnRecord> ParseTxnRecord(std::span<const uint8_t> key,
                                         std::optional<std::span<const uint8_t>> value) {
  p::Reader kr(key);
  int16_t key_version = 0;
  if (!kr.ReadInt16(&key_version).ok()) {
    return absl::InvalidArgumentError("TransactionLogKey: no version");
  }
  if (key_version != kKeyVersion) {
    return absl::NotFoundError("not a transaction record: key version " +
                               std::to_string(key_version));
  }
  p::TransactionLogKey k;
  if (Status s = k.Decode(kr, kKeyVersion); !s.ok()) {
    return absl::InvalidArgumentError("TransactionLogKey: " + std::string(s.message()));
  }
  ParsedTxnRecord out;
  out.transactional_id = std::move(k.transactional_id);
  if (!value.has_value()) return out;
  p::Reader vr(*value);
  int16_t version = 0;
  if (!vr.ReadInt16(&version).ok()) {
    return absl::InvalidArgumentError("TransactionLogValue: no version");
  }
  p::TransactionLogValue v;
  if (Status s = v.Decode(vr, version); !s.ok()) {
    return absl::InvalidArgumentError("TransactionLogValue v" + std::to_string(version) + ": " +
                                      std::string(s.message()));
  }
  if (v.transaction_status < 0 ||
      v.transaction_status > static_cast<int8_t>(TxnState::kPrepareEpochFence)) {
    return absl::InvalidArgumentError("TransactionLogValue: unknown status " +
                                      std::to_string(v.transaction_status));
  }
  TxnMetadata m;
  m.transactional_id = out.transactional_id;
  m.producer_id = v.producer_id;
  m.previous_producer_id = v.previous_producer_id;
  m.next_producer_id = v.next_producer_id;
  m.producer_epoch = v.producer_epoch;
  m.timeout_ms = v.transaction_timeout_ms;
  m.state = static_cast<TxnState>(v.transaction_status);
  if (v.transaction_partitions.has_value()) {
    for (const auto& s : *v.transaction_partitions) {
      for (int32_t id : s.partition_ids) m.partitions.emplace(s.topic, id);
    }
  }
  m.last_update_timestamp_ms = v.transaction_last_update_timestamp_ms;
  m.start_timestamp_ms = v.transaction_start_timestamp_ms;
  m.client_transaction_version = v.client_transaction_version;
  out.value = std::move(m);
  return out;
}

}  // namespace runnel::brokerd::txn
