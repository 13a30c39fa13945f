#include "storaged/log/producer_state.h"

#include <fmt/format.h>

#include <limits>

namespace runnel::storaged {

using protocol::ErrorCode;

int32_t IncrementSequence(int32_t sequence, int32_t increment) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  if (sequence > kMax - increment) return increment - (kMax - sequence) - 1;
  return sequence + increment;
}

int32_t DecrementSequence(int32_t sequence, int32_t decrement) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  if (sequence < decrement) return kMax - (decrement - sequence) + 1;
  return sequence - decrement;
}

int32_t LastSequence(const record::BatchView& batch) {
  const int32_t base = batch.base_sequence();
  if (base == kNoSequence) return kNoSequence;
  return IncrementSequence(base, batch.last_offset_delta());
}

const ProducerBatch* ProducerEntry::FindDuplicate(int16_t batch_epoch, int32_t first_seq,
                                                  int32_t last_seq) const {
  if (batch_epoch != epoch) return nullptr;
  for (int i = 0; i < count_; ++i) {
    if (batches_[i].first_seq == first_seq && batches_[i].last_seq == last_seq) {
      return &batches_[i];
    }
  }
  return nullptr;
}

void ProducerEntry::MaybeUpdateEpoch(int16_t new_epoch) {
  if (epoch == new_epoch) return;
  epoch = new_epoch;
  count_ = 0;
}

void ProducerEntry::AddBatch(int16_t batch_epoch, const ProducerBatch& batch) {
  MaybeUpdateEpoch(batch_epoch);
  if (count_ == kProducerBatchesToRetain) {
    for (int i = 1; i < count_; ++i) batches_[i - 1] = batches_[i];
    --count_;
  }
  batches_[count_++] = batch;
  last_timestamp = batch.max_timestamp;
}

const ProducerEntry* ProducerStateManager::Find(int64_t producer_id) const {
  auto it = producers_.find(producer_id);
  return it == producers_.end() ? nullptr : &it->second;
}

ProducerEntry* ProducerStateManager::Staged(int64_t producer_id, AppendPlan* plan) const {
  for (auto& [id, entry] : plan->entries_) {
    if (id == producer_id) return &entry;
  }
  const ProducerEntry* stored = Find(producer_id);
  plan->entries_.emplace_back(producer_id, stored ? *stored : ProducerEntry{});
  return &plan->entries_.back().second;
}

std::optional<ProducerBatch> ProducerStateManager::FindDuplicate(
    const record::BatchView& batch) const {
  const ProducerEntry* entry = Find(batch.producer_id());
  if (entry == nullptr) return std::nullopt;
  const ProducerBatch* dup =
      entry->FindDuplicate(batch.producer_epoch(), batch.base_sequence(), LastSequence(batch));
  if (dup == nullptr) return std::nullopt;
  return *dup;
}

protocol::KafkaError ProducerStateManager::CheckClientBatch(const record::BatchView& batch,
                                                            int64_t first_offset,
                                                            AppendPlan* plan) const {
  const int64_t producer_id = batch.producer_id();
  const int16_t epoch = batch.producer_epoch();
  const int32_t first_seq = batch.base_sequence();
  const ProducerEntry* stored = Find(producer_id);
  const int16_t stored_epoch = stored ? stored->epoch : kNoProducerEpoch;
  ProducerEntry* staged = Staged(producer_id, plan);
  // Kafka answers INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED, since 2.7 (KIP-588): the
  // producer may then abort its transaction and go on.
  if (epoch < staged->epoch) {
    return {ErrorCode::kInvalidProducerEpoch,
            fmt::format("epoch {} of producer {} at offset {} is older than its epoch {}", epoch,
                        producer_id, first_offset, staged->epoch)};
  }
  if (epoch != staged->epoch) {
    // A bumped epoch starts again at sequence 0; the first epoch seen of a producer may
    // start anywhere (its earlier batches may have been removed by retention).
    if (first_seq != 0 && staged->epoch != kNoProducerEpoch) {
      return {ErrorCode::kOutOfOrderSequenceNumber,
              fmt::format("producer {} at offset {}: new epoch {} starts at sequence {}, not 0 "
                          "(current epoch {})",
                          producer_id, first_offset, epoch, first_seq, staged->epoch)};
    }
  } else {
    const int32_t last_seq = staged->last_seq();
    const bool in_sequence = int64_t(first_seq) == int64_t(last_seq) + 1 ||
                             (first_seq == 0 && last_seq == std::numeric_limits<int32_t>::max());
    // A producer with no known epoch (all its batches removed, or new) may go on at any
    // sequence: Kafka stopped answering UNKNOWN_PRODUCER_ID for this (KIP-360).
    if (stored_epoch != kNoProducerEpoch && !in_sequence) {
      return {ErrorCode::kOutOfOrderSequenceNumber,
              fmt::format("out of order sequence for producer {} at offset {}: {} (incoming), "
                          "{} (current end sequence)",
                          producer_id, first_offset, first_seq, last_seq)};
    }
  }
  const int64_t last_offset = first_offset + batch.last_offset_delta();
  staged->AddBatch(
      epoch, {first_seq, LastSequence(batch), first_offset, last_offset, batch.max_timestamp()});
  if (staged->txn_first_offset >= 0 && !batch.is_transactional()) {
    return {ErrorCode::kInvalidTxnState,
            fmt::format("producer {} at offset {}: a non-transactional batch inside its ongoing "
                        "transaction",
                        producer_id, first_offset)};
  }
  if (staged->txn_first_offset < 0 && batch.is_transactional()) {
    staged->txn_first_offset = first_offset;
  }
  return {};
}

ProducerBatchHeader ProducerBatchHeader::Of(const record::BatchView& batch) {
  ProducerBatchHeader h;
  h.producer_id = batch.producer_id();
  h.producer_epoch = batch.producer_epoch();
  h.base_sequence = batch.base_sequence();
  h.base_offset = batch.base_offset();
  h.last_offset = batch.last_offset();
  h.max_timestamp = batch.max_timestamp();
  h.transactional = batch.is_transactional();
  h.control = batch.is_control();
  return h;
}

void ProducerStateManager::ReplayBatch(const ProducerBatchHeader& batch,
                                       int32_t marker_coordinator_epoch) {
  if (batch.producer_id < 0) return;
  ProducerEntry& entry = producers_[batch.producer_id];
  dirty_ = true;
  if (batch.control) {
    // A transaction marker: ends the transaction (Kafka's appendEndTxnMarker).
    entry.MaybeUpdateEpoch(batch.producer_epoch);
    if (marker_coordinator_epoch >= 0) entry.coordinator_epoch = marker_coordinator_epoch;
    entry.last_timestamp = batch.max_timestamp;
    entry.txn_first_offset = -1;
    return;
  }
  entry.AddBatch(batch.producer_epoch, {batch.base_sequence, batch.last_sequence(),
                                        batch.base_offset, batch.last_offset, batch.max_timestamp});
  if (entry.txn_first_offset < 0 && batch.transactional) {
    entry.txn_first_offset = batch.base_offset;
  }
}

void ProducerStateManager::Commit(AppendPlan&& plan) {
  if (plan.entries_.empty()) return;
  for (auto& [id, entry] : plan.entries_) producers_[id] = std::move(entry);
  plan.entries_.clear();
  dirty_ = true;
}

}  // namespace runnel::storaged
