#include "storaged/log/producer_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "common/util/big_endian.h"
#include "common/util/crc32c.h"

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

bool ProducerEntry::operator==(const ProducerEntry& other) const {
  if (epoch != other.epoch || coordinator_epoch != other.coordinator_epoch ||
      last_timestamp != other.last_timestamp || txn_first_offset != other.txn_first_offset ||
      count_ != other.count_) {
    return false;
  }
  for (int i = 0; i < count_; ++i) {
    if (!(batches_[i] == other.batches_[i])) return false;
  }
  return true;
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
  return CheckDataBatch(batch, first_offset, /*check_sequence=*/true, plan);
}

protocol::KafkaError ProducerStateManager::CheckCoordinatorBatch(const record::BatchView& batch,
                                                                 int64_t first_offset,
                                                                 int transaction_version,
                                                                 AppendPlan* plan) const {
  if (!batch.is_control()) {
    return CheckDataBatch(batch, first_offset, /*check_sequence=*/false, plan);
  }
  std::optional<record::EndTxnMarker> marker;
  protocol::KafkaError e = record::ReadEndTxnMarker(batch, &marker);
  if (!e.ok()) return e;
  if (!marker) return {};
  const int64_t producer_id = batch.producer_id();
  const int16_t epoch = batch.producer_epoch();
  ProducerEntry* staged = Staged(producer_id, plan);
  // TV2: the coordinator bumped the epoch for this marker, so a marker at or below the
  // producer's epoch is late or repeated; before TV2 the marker carries the data's epoch.
  const bool stale = transaction_version >= 2 ? epoch <= staged->epoch : epoch < staged->epoch;
  if (stale) {
    return {ErrorCode::kInvalidProducerEpoch,
            fmt::format("marker epoch {} of producer {} at offset {} is {} its epoch {} (TV{})",
                        epoch, producer_id, first_offset,
                        transaction_version >= 2 ? "not above" : "older than", staged->epoch,
                        transaction_version)};
  }
  if (staged->coordinator_epoch > marker->coordinator_epoch) {
    return {ErrorCode::kTransactionCoordinatorFenced,
            fmt::format("marker of producer {} at offset {}: coordinator epoch {} is older than "
                        "{}",
                        producer_id, first_offset, marker->coordinator_epoch,
                        staged->coordinator_epoch)};
  }
  if (staged->txn_first_offset >= 0) {
    plan->completed_.push_back(
        {producer_id, staged->txn_first_offset, first_offset, !marker->commit});
  }
  staged->MaybeUpdateEpoch(epoch);
  staged->coordinator_epoch = marker->coordinator_epoch;
  staged->last_timestamp = batch.max_timestamp();
  staged->txn_first_offset = -1;
  return {};
}

protocol::KafkaError ProducerStateManager::CheckDataBatch(const record::BatchView& batch,
                                                          int64_t first_offset, bool check_sequence,
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
  // (A coordinator's batch has no sequence to check.)
  if (check_sequence && epoch != staged->epoch) {
    // A bumped epoch starts again at sequence 0; the first epoch seen of a producer may
    // start anywhere (its earlier batches may have been removed by retention).
    if (first_seq != 0 && staged->epoch != kNoProducerEpoch) {
      return {ErrorCode::kOutOfOrderSequenceNumber,
              fmt::format("producer {} at offset {}: new epoch {} starts at sequence {}, not 0 "
                          "(current epoch {})",
                          producer_id, first_offset, epoch, first_seq, staged->epoch)};
    }
  } else if (check_sequence) {
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

std::optional<CompletedTxn> ProducerStateManager::ReplayBatch(
    const ProducerBatchHeader& batch, const std::optional<record::EndTxnMarker>& marker) {
  if (batch.producer_id < 0) return std::nullopt;
  if (batch.control && !marker) return std::nullopt;
  const ProducerEntry* stored = Find(batch.producer_id);
  ProducerEntry entry = stored ? *stored : ProducerEntry{};
  dirty_ = true;
  std::optional<CompletedTxn> completed;
  if (batch.control) {
    // A transaction marker: ends the transaction (Kafka's appendEndTxnMarker).
    if (entry.txn_first_offset >= 0) {
      completed = CompletedTxn{batch.producer_id, entry.txn_first_offset, batch.base_offset,
                               !marker->commit};
    }
    entry.MaybeUpdateEpoch(batch.producer_epoch);
    entry.coordinator_epoch = marker->coordinator_epoch;
    entry.last_timestamp = batch.max_timestamp;
    entry.txn_first_offset = -1;
  } else {
    entry.AddBatch(batch.producer_epoch,
                   {batch.base_sequence, batch.last_sequence(), batch.base_offset,
                    batch.last_offset, batch.max_timestamp});
    if (entry.txn_first_offset < 0 && batch.transactional) {
      entry.txn_first_offset = batch.base_offset;
    }
  }
  Store(batch.producer_id, entry);
  return completed;
}

void ProducerStateManager::Store(int64_t producer_id, const ProducerEntry& entry) {
  ProducerEntry& slot = producers_[producer_id];
  if (slot.txn_first_offset != entry.txn_first_offset) {
    if (slot.txn_first_offset >= 0) ongoing_.erase({slot.txn_first_offset, producer_id});
    if (entry.txn_first_offset >= 0) ongoing_.insert({entry.txn_first_offset, producer_id});
  }
  slot = entry;
}

int64_t ProducerStateManager::FirstUnstableOffsetExcept(int64_t producer_id) const {
  for (const auto& [first_offset, id] : ongoing_) {
    if (id != producer_id) return first_offset;
  }
  return -1;
}

void ProducerStateManager::Commit(AppendPlan&& plan) {
  if (plan.entries_.empty()) return;
  for (const auto& [id, entry] : plan.entries_) Store(id, entry);
  plan.entries_.clear();
  plan.completed_.clear();
  dirty_ = true;
}

std::vector<ActiveProducer> ProducerStateManager::ActiveProducers() const {
  std::vector<ActiveProducer> out;
  out.reserve(producers_.size());
  for (const auto& [id, e] : producers_) {
    out.push_back({.producer_id = id,
                   .epoch = e.epoch,
                   .last_sequence = e.last_seq(),
                   .last_timestamp = e.last_timestamp,
                   .coordinator_epoch = e.coordinator_epoch,
                   .txn_first_offset = e.txn_first_offset});
  }
  std::sort(out.begin(), out.end(), [](const ActiveProducer& a, const ActiveProducer& b) {
    return a.producer_id < b.producer_id;
  });
  return out;
}

int ProducerStateManager::RemoveExpired(int64_t now_ms, int64_t expiration_ms) {
  int removed = 0;
  for (auto it = producers_.begin(); it != producers_.end();) {
    const ProducerEntry& e = it->second;
    if (e.txn_first_offset < 0 && now_ms - e.last_timestamp >= expiration_ms) {
      producers_.erase(it++);
      ++removed;
    } else {
      ++it;
    }
  }
  if (removed > 0) dirty_ = true;
  return removed;
}

namespace {

constexpr int16_t kSnapshotVersion = 1;
constexpr size_t kSnapshotCrcAt = 2;
constexpr size_t kSnapshotEntriesAt = 6;  // the CRC covers the count and the entries
constexpr size_t kSnapshotHeaderSize = 10;
constexpr size_t kSnapshotEntrySize = 46;

void Put16(std::string* out, int16_t v) {
  out->push_back(char(uint16_t(v) >> 8));
  out->push_back(char(uint16_t(v) & 0xff));
}
void Put32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(char((v >> shift) & 0xff));
}
void Put64(std::string* out, int64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(char((uint64_t(v) >> shift) & 0xff));
}

}  // namespace

std::string ProducerStateManager::EncodeSnapshot() const {
  std::vector<int64_t> ids;
  ids.reserve(producers_.size());
  for (const auto& [id, entry] : producers_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::string out;
  out.reserve(kSnapshotHeaderSize + ids.size() * kSnapshotEntrySize);
  Put16(&out, kSnapshotVersion);
  Put32(&out, 0);  // the CRC, filled in below
  Put32(&out, uint32_t(ids.size()));
  for (int64_t id : ids) {
    const ProducerEntry& e = producers_.at(id);
    const ProducerBatch* last = e.empty() ? nullptr : &e.batch(e.count() - 1);
    Put64(&out, id);
    Put16(&out, e.epoch);
    Put32(&out, uint32_t(last ? last->last_seq : kNoSequence));
    Put64(&out, last ? last->last_offset : -1);
    Put32(&out, uint32_t(last ? int32_t(last->last_offset - last->first_offset) : 0));
    Put64(&out, e.last_timestamp);
    Put32(&out, uint32_t(e.coordinator_epoch));
    Put64(&out, e.txn_first_offset);
  }
  const uint32_t crc =
      crc32c::Value(out.data() + kSnapshotEntriesAt, out.size() - kSnapshotEntriesAt);
  for (int i = 0; i < 4; ++i) out[kSnapshotCrcAt + i] = char((crc >> (24 - 8 * i)) & 0xff);
  return out;
}

Status ProducerStateManager::LoadSnapshot(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < kSnapshotHeaderSize) {
    return absl::DataLossError(
        fmt::format("producer snapshot of {} bytes is too short", bytes.size()));
  }
  const int16_t version = int16_t(LoadBigEndian16(p));
  if (version != kSnapshotVersion) {
    return absl::DataLossError(fmt::format("producer snapshot version {} is not 1", version));
  }
  const uint32_t stored_crc = LoadBigEndian32(p + kSnapshotCrcAt);
  const int32_t count = int32_t(LoadBigEndian32(p + kSnapshotEntriesAt));
  if (count < 0 || uint64_t(count) * kSnapshotEntrySize != bytes.size() - kSnapshotHeaderSize) {
    return absl::DataLossError(
        fmt::format("producer snapshot of {} bytes cannot hold {} entries", bytes.size(), count));
  }
  const uint32_t crc =
      crc32c::Value(bytes.data() + kSnapshotEntriesAt, bytes.size() - kSnapshotEntriesAt);
  if (crc != stored_crc) {
    return absl::DataLossError(fmt::format(
        "producer snapshot CRC {:#x} does not match its bytes ({:#x})", stored_crc, crc));
  }
  absl::flat_hash_map<int64_t, ProducerEntry> loaded;
  loaded.reserve(size_t(count));
  for (int32_t i = 0; i < count; ++i) {
    const uint8_t* e = p + kSnapshotHeaderSize + size_t(i) * kSnapshotEntrySize;
    const int64_t id = int64_t(LoadBigEndian64(e));
    ProducerEntry entry;
    entry.epoch = int16_t(LoadBigEndian16(e + 8));
    const int32_t last_seq = int32_t(LoadBigEndian32(e + 10));
    const int64_t last_offset = int64_t(LoadBigEndian64(e + 14));
    const int32_t offset_delta = int32_t(LoadBigEndian32(e + 22));
    const int64_t timestamp = int64_t(LoadBigEndian64(e + 26));
    entry.coordinator_epoch = int32_t(LoadBigEndian32(e + 34));
    entry.txn_first_offset = int64_t(LoadBigEndian64(e + 38));
    if (entry.txn_first_offset < 0) entry.txn_first_offset = -1;
    if (last_offset >= 0) {
      if (offset_delta < 0 || offset_delta > last_offset) {
        return absl::DataLossError(
            fmt::format("producer snapshot entry {}: offset delta {} does not fit last offset {}",
                        i, offset_delta, last_offset));
      }
      entry.AddBatch(entry.epoch,
                     {last_seq < 0 ? kNoSequence : DecrementSequence(last_seq, offset_delta),
                      last_seq, last_offset - offset_delta, last_offset, timestamp});
    }
    entry.last_timestamp = timestamp;
    if (!loaded.emplace(id, entry).second) {
      return absl::DataLossError(fmt::format("producer snapshot names producer {} twice", id));
    }
  }
  producers_ = std::move(loaded);
  ongoing_.clear();
  for (const auto& [id, entry] : producers_) {
    if (entry.txn_first_offset >= 0) ongoing_.insert({entry.txn_first_offset, id});
  }
  dirty_ = false;
  return absl::OkStatus();
}

}  // namespace runnel::storaged
