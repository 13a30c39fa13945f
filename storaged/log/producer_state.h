// Per-partition producer state: what the broker remembers of each idempotent or
// transactional producer that wrote to a partition, to reject out-of-order or fenced batches
// and to answer a retried batch as a duplicate instead of appending it twice (Kafka's
// ProducerStateManager / ProducerStateEntry / ProducerAppendInfo, same rules).
//
// Per producer id: its current epoch, the metadata of its last 5 batches (Kafka's
// NUM_BATCHES_TO_RETAIN: a producer has at most 5 requests in flight per partition), the
// timestamp of its last batch, the coordinator epoch of its last transaction marker and the
// offset of its ongoing transaction's first batch (-1 when none; the last stable offset is
// the lowest of these).
//
// An append is checked batch by batch into an AppendPlan (a copy of every entry it
// touches); the state changes only when the log commits the plan after a successful write,
// so a rejected or failed append leaves it as it was.
//
// Threads: none of its own; the log calls it under its append lock.
//
// Snapshots, <dir>/<20-digit offset>.snapshot: the state of every producer before that
// offset, in Kafka's ProducerSnapshot format (version 1), so a Kafka operator's tools read
// it. All integers big-endian:
//
//   offset size field
//        0    2 version               1
//        2    4 crc                   CRC32C (unsigned) of bytes [6, end)
//        6    4 entry count           >= 0
//       10      entries, 46 bytes each:
//                 8 producerId
//                 2 epoch
//                 4 lastSequence       of the producer's last batch (-1: none)
//                 8 lastOffset         of that batch (-1: no batch, e.g. only markers)
//                 4 offsetDelta        lastOffset - that batch's first offset
//                 8 timestamp          that batch's max timestamp (the last timestamp)
//                 4 coordinatorEpoch   of its last transaction marker (-1: none)
//                 8 currentTxnFirstOffset  (-1: no ongoing transaction)
//
// As in Kafka, a snapshot keeps only the last batch of each producer: after a start from
// a snapshot, only a retry of that batch is found a duplicate.
//
// When snapshots are written, and what a start reads (the rule, see Log):
//  - at every segment roll, at the new segment's base offset, even when empty: a replay
//    after a crash then reads at most the active segment;
//  - at a clean close, only for logs whose state changed since their last snapshot;
//  - a CLEAN start takes the latest snapshot as the state (none: no producers) and reads no
//    segment; an unclean start loads the latest snapshot (or none) and replays the batch
//    headers after it;
//  - snapshots above the log end (after a truncation or a torn tail) are deleted, those
//    below the log start go with their segments; a damaged one is logged, deleted and the
//    next older one used.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/record/batch.h"
#include "common/record/control.h"
#include "common/util/status.h"

namespace runnel::storaged {

inline constexpr int kProducerBatchesToRetain = 5;
inline constexpr int16_t kNoProducerEpoch = -1;
inline constexpr int32_t kNoSequence = -1;

// Sequence arithmetic of Kafka's DefaultRecordBatch: sequences wrap from Int32 max to 0.
int32_t IncrementSequence(int32_t sequence, int32_t increment);
int32_t DecrementSequence(int32_t sequence, int32_t decrement);
// The batch's last sequence (base + lastOffsetDelta, wrapped); -1 without a base sequence.
int32_t LastSequence(const record::BatchView& batch);

// Who an append comes from (Kafka's AppendOrigin; a follower's copy is Log::AppendWithOffsets).
enum class AppendOrigin {
  // A producer: control batches are refused (INVALID_RECORD), sequences and duplicates
  // checked.
  kClient,
  // A coordinator of this broker: transaction markers (control batches), and producer
  // batches without sequences (transactional offset commits). Only epochs are checked.
  kCoordinator,
};

// A transaction a marker ended (Kafka's CompletedTxn): the producer, the offsets of its
// first batch and of the marker, and whether it was aborted. A marker of a producer with no
// ongoing transaction ends none.
struct CompletedTxn {
  int64_t producer_id = -1;
  int64_t first_offset = -1;
  int64_t last_offset = -1;  // the marker's offset
  bool aborted = false;
  bool operator==(const CompletedTxn&) const = default;
};

// What the producer state reads of a stored batch's header (a replay reads no more).
struct ProducerBatchHeader {
  int64_t producer_id = record::kNoProducerId;
  int16_t producer_epoch = kNoProducerEpoch;
  int32_t base_sequence = kNoSequence;
  int64_t base_offset = 0;
  int64_t last_offset = 0;
  int64_t max_timestamp = record::kNoTimestamp;
  bool transactional = false;
  bool control = false;
  static ProducerBatchHeader Of(const record::BatchView& batch);
  int32_t last_sequence() const {
    return base_sequence == kNoSequence
               ? kNoSequence
               : IncrementSequence(base_sequence, int32_t(last_offset - base_offset));
  }
};

// One appended batch of a producer.
struct ProducerBatch {
  int32_t first_seq = kNoSequence;
  int32_t last_seq = kNoSequence;
  int64_t first_offset = -1;
  int64_t last_offset = -1;
  int64_t max_timestamp = record::kNoTimestamp;
  bool operator==(const ProducerBatch&) const = default;
};

class ProducerEntry {
 public:
  int16_t epoch = kNoProducerEpoch;
  int32_t coordinator_epoch = -1;
  int64_t last_timestamp = record::kNoTimestamp;
  int64_t txn_first_offset = -1;  // the ongoing transaction's first offset; -1 when none

  bool empty() const { return count_ == 0; }
  int count() const { return count_; }
  // The i-th kept batch, oldest first.
  const ProducerBatch& batch(int i) const { return batches_[i]; }
  int32_t last_seq() const { return empty() ? kNoSequence : batches_[count_ - 1].last_seq; }
  // The kept batch of this epoch with exactly this sequence range, if any.
  const ProducerBatch* FindDuplicate(int16_t epoch, int32_t first_seq, int32_t last_seq) const;
  // Sets the epoch (a new one forgets the batches) and keeps `batch`, dropping the oldest
  // beyond kProducerBatchesToRetain.
  void AddBatch(int16_t batch_epoch, const ProducerBatch& batch);
  // A new epoch forgets the batches of the old one.
  void MaybeUpdateEpoch(int16_t new_epoch);
  // Equal fields and kept batches.
  bool operator==(const ProducerEntry& other) const;

 private:
  std::array<ProducerBatch, kProducerBatchesToRetain> batches_{};
  int count_ = 0;
};

// One producer as DescribeProducers lists it (Kafka's ProducerStateManager.activeProducers).
struct ActiveProducer {
  int64_t producer_id = record::kNoProducerId;
  int16_t epoch = kNoProducerEpoch;
  int32_t last_sequence = kNoSequence;  // of its last kept batch; -1 when none
  int64_t last_timestamp = record::kNoTimestamp;
  int32_t coordinator_epoch = -1;
  int64_t txn_first_offset = -1;  // the ongoing transaction's first offset; -1 when none
  bool operator==(const ActiveProducer&) const = default;
};

class ProducerStateManager {
 public:
  // The changes of one append, applied by Commit once its write succeeded. Kafka appends
  // one batch per partition and request, so a plan holds one or a few entries.
  class AppendPlan {
   public:
    bool empty() const { return entries_.empty(); }
    // The transactions this append's markers end, in offset order.
    const std::vector<CompletedTxn>& completed() const { return completed_; }

   private:
    friend class ProducerStateManager;
    std::vector<std::pair<int64_t, ProducerEntry>> entries_;
    std::vector<CompletedTxn> completed_;
  };

  // Checks a producer's data batch from a client (producer id >= 0), to be written at
  // [first_offset, first_offset + lastOffsetDelta], and stages its effect in `plan`.
  // Returns the error, in Kafka's order: an epoch older than the producer's
  // (INVALID_PRODUCER_EPOCH), a new epoch not starting at sequence 0 or a sequence that
  // does not follow the last one (OUT_OF_ORDER_SEQUENCE_NUMBER; an unknown producer, or
  // one whose batches were all removed, may start at any sequence, as after KIP-360),
  // a non-transactional batch inside an ongoing transaction (INVALID_TXN_STATE).
  // Duplicates are not found here: see FindDuplicate, which the caller checks first.
  protocol::KafkaError CheckClientBatch(const record::BatchView& batch, int64_t first_offset,
                                        AppendPlan* plan) const;
  // The same for a batch from a coordinator (AppendOrigin::kCoordinator), Kafka's rules:
  //  - a producer batch: the epoch is checked as above, the sequence not (it is -1);
  //  - a transaction marker: an epoch older than the producer's is INVALID_PRODUCER_EPOCH
  //    (with `transaction_version` >= 2, where the coordinator bumps the epoch before
  //    writing the marker, one not above it is); a coordinator epoch older than the one of
  //    the producer's last marker is TRANSACTION_COORDINATOR_FENCED; a record that is not
  //    an ABORT or COMMIT marker is INVALID_RECORD. An accepted marker ends the ongoing
  //    transaction, if any (added to plan->completed()), and keeps the marker's epochs and
  //    timestamp. An empty control batch (compaction's leftover) changes nothing.
  protocol::KafkaError CheckCoordinatorBatch(const record::BatchView& batch, int64_t first_offset,
                                             int transaction_version, AppendPlan* plan) const;
  // A retried batch: one of the producer's kept batches with the same epoch and sequence
  // range (as the state was before this append).
  std::optional<ProducerBatch> FindDuplicate(const record::BatchView& batch) const;
  // Applies a batch already in the log (a replay at load, a follower's copy): no checks,
  // as Kafka trusts batches that are not from a client. A control batch ends the
  // producer's transaction with `marker` (its record, record::ReadEndTxnMarker) and returns
  // the transaction it completed, if any; a control batch without a marker (an empty one,
  // compaction's leftover) changes nothing, as in Kafka.
  std::optional<CompletedTxn> ReplayBatch(const ProducerBatchHeader& batch,
                                          const std::optional<record::EndTxnMarker>& marker);
  void Commit(AppendPlan&& plan);

  // The first offset of the earliest ongoing transaction (the last stable offset when it
  // is below the high watermark); -1 when none is ongoing.
  int64_t FirstUnstableOffset() const { return ongoing_.empty() ? -1 : ongoing_.begin()->first; }
  // The same among the transactions of producers other than `producer_id` (Kafka's
  // lastStableOffset(completedTxn): what the partition's last stable offset is once that
  // producer's transaction ended).
  int64_t FirstUnstableOffsetExcept(int64_t producer_id) const;

  const ProducerEntry* Find(int64_t producer_id) const;
  // Every producer the state knows (not expired, or in a transaction), in producer id order.
  std::vector<ActiveProducer> ActiveProducers() const;
  size_t size() const { return producers_.size(); }
  const absl::flat_hash_map<int64_t, ProducerEntry>& producers() const { return producers_; }
  void Clear() {
    producers_.clear();
    ongoing_.clear();
  }

  // Removes the producers with no ongoing transaction whose last batch's timestamp is
  // `expiration_ms` or more before `now_ms` (Kafka's producer.id.expiration.ms rule, on the
  // batch timestamps as Kafka does). Returns how many.
  int RemoveExpired(int64_t now_ms, int64_t expiration_ms);

  // The snapshot file's bytes for the current state (entries in producer id order).
  std::string EncodeSnapshot() const;
  // Replaces the state with a snapshot's; kDataLoss saying why (nothing changes) when the
  // bytes are short, of another version, carry trailing bytes or fail the CRC.
  Status LoadSnapshot(std::string_view bytes);
  // Whether the state changed since the last MarkSnapshotted (snapshots are written only
  // then at a clean close).
  bool dirty() const { return dirty_; }
  void MarkSnapshotted() { dirty_ = false; }

 private:
  // The entry as this append sees it: the plan's copy, else a copy of the stored one (or a
  // new one) added to the plan.
  ProducerEntry* Staged(int64_t producer_id, AppendPlan* plan) const;
  // A data batch: the epoch, then the sequence when `check_sequence`, then the
  // transaction state.
  protocol::KafkaError CheckDataBatch(const record::BatchView& batch, int64_t first_offset,
                                      bool check_sequence, AppendPlan* plan) const;
  // Stores `entry` as the producer's, keeping ongoing_ in step.
  void Store(int64_t producer_id, const ProducerEntry& entry);
  absl::flat_hash_map<int64_t, ProducerEntry> producers_;
  // The ongoing transactions as (first offset, producer id), in offset order: what the last
  // stable offset is computed from without visiting every producer. (A pair, so that a
  // snapshot naming one first offset twice loses neither.)
  std::set<std::pair<int64_t, int64_t>> ongoing_;
  bool dirty_ = false;
};

}  // namespace runnel::storaged
