// The producer state of a partition (producer_state.h) and its use by Log::Append: Kafka's
// rules for duplicates, epochs and sequences of idempotent and transactional producers.
#include "storaged/log/producer_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "storaged/log/file_io.h"
#include "storaged/log/log.h"
#include "tests/unit/storaged/log/file_faults.h"
#include "tests/unit/storaged/log/log_test_util.h"
#include "tests/util/temp_dir.h"

namespace runnel::storaged {
namespace {

using protocol::ErrorCode;
using runnel::testing::TempDir;
using testing::FaultInjector;
using testing::Span;

constexpr int64_t kPid = 1000;
constexpr int32_t kMaxSeq = std::numeric_limits<int32_t>::max();

// A batch of `count` records of producer `pid`, epoch `epoch`, first sequence `seq`.
std::vector<uint8_t> ProducerBatchBytes(int64_t pid, int16_t epoch, int32_t seq, int count,
                                        bool transactional = false, int64_t ts = 1000) {
  record::BatchBuilder::Options o;
  o.producer_id = pid;
  o.producer_epoch = epoch;
  o.base_sequence = seq;
  o.transactional = transactional;
  record::BatchBuilder b(o);
  for (int i = 0; i < count; ++i) {
    std::string v = "v" + std::to_string(i);
    b.Add(ts + i, std::nullopt, Span(v));
  }
  StatusOr<std::vector<uint8_t>> built = b.Build();
  EXPECT_TRUE(built.ok()) << built.status();
  return built.ok() ? *built : std::vector<uint8_t>{};
}

// The manager alone: batches "written" at consecutive offsets from `next_offset_`.
class ProducerStateTest : public ::testing::Test {
 protected:
  // Checks and, when accepted, commits a batch; returns the error (kNone when appended) or
  // kDuplicateSequenceNumber for a duplicate (the log answers those with success).
  ErrorCode Append(int16_t epoch, int32_t seq, int count, bool transactional = false) {
    std::vector<uint8_t> bytes = ProducerBatchBytes(kPid, epoch, seq, count, transactional);
    record::SetBaseOffset(bytes, next_offset_);
    StatusOr<record::BatchView> b = record::BatchView::Parse(bytes);
    EXPECT_TRUE(b.ok());
    if (state_.FindDuplicate(*b)) return ErrorCode::kDuplicateSequenceNumber;
    ProducerStateManager::AppendPlan plan;
    protocol::KafkaError e = state_.CheckClientBatch(*b, next_offset_, &plan);
    if (!e.ok()) return e.code;
    state_.Commit(std::move(plan));
    next_offset_ += count;
    return ErrorCode::kNone;
  }
  // A coordinator's batch (a marker when `marker`, else a producer batch of `count`
  // records with no sequence) at the next offset; returns the error and, when accepted,
  // commits it and keeps the transactions it completed in completed_.
  ErrorCode AppendFromCoordinator(int16_t epoch, std::optional<record::EndTxnMarker> marker,
                                  int transaction_version = 0, int count = 1,
                                  bool transactional = true) {
    std::vector<uint8_t> bytes = marker ? record::BuildEndTxnMarkerBatch(kPid, epoch, *marker, 5000)
                                        : ProducerBatchBytes(kPid, epoch, -1, count, transactional);
    record::SetBaseOffset(bytes, next_offset_);
    StatusOr<record::BatchView> b = record::BatchView::Parse(bytes);
    EXPECT_TRUE(b.ok());
    ProducerStateManager::AppendPlan plan;
    protocol::KafkaError e =
        state_.CheckCoordinatorBatch(*b, next_offset_, transaction_version, &plan);
    if (!e.ok()) return e.code;
    completed_ = plan.completed();
    state_.Commit(std::move(plan));
    next_offset_ += b->last_offset_delta() + 1;
    return ErrorCode::kNone;
  }
  std::optional<ProducerBatch> Duplicate(int16_t epoch, int32_t seq, int count) {
    std::vector<uint8_t> bytes = ProducerBatchBytes(kPid, epoch, seq, count);
    StatusOr<record::BatchView> b = record::BatchView::Parse(bytes);
    EXPECT_TRUE(b.ok());
    return state_.FindDuplicate(*b);
  }

  ProducerStateManager state_;
  int64_t next_offset_ = 0;
  std::vector<CompletedTxn> completed_;
};

TEST_F(ProducerStateTest, SequenceArithmeticWrapsAtInt32Max) {
  EXPECT_EQ(IncrementSequence(5, 3), 8);
  EXPECT_EQ(IncrementSequence(kMaxSeq, 1), 0);
  EXPECT_EQ(IncrementSequence(kMaxSeq - 1, 3), 1);
  EXPECT_EQ(DecrementSequence(1, 3), kMaxSeq - 1);
  EXPECT_EQ(DecrementSequence(8, 3), 5);
}

TEST_F(ProducerStateTest, EachOfTheLastFiveBatchesIsADuplicateWithItsOriginalOffsets) {
  for (int i = 0; i < 7; ++i) ASSERT_EQ(Append(0, i * 2, 2), ErrorCode::kNone) << i;
  const ProducerEntry* e = state_.Find(kPid);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->count(), kProducerBatchesToRetain);
  EXPECT_EQ(e->last_seq(), 13);
  // Batches 2..6 (sequences 4..13, offsets 4..13) are kept.
  for (int i = 2; i < 7; ++i) {
    std::optional<ProducerBatch> dup = Duplicate(0, i * 2, 2);
    ASSERT_TRUE(dup.has_value()) << i;
    EXPECT_EQ(dup->first_offset, i * 2);
    EXPECT_EQ(dup->last_offset, i * 2 + 1);
  }
  // Batches 0 and 1 are forgotten: Kafka answers their retry OUT_OF_ORDER_SEQUENCE_NUMBER
  // (it no longer answers DUPLICATE_SEQUENCE_NUMBER).
  EXPECT_FALSE(Duplicate(0, 0, 2).has_value());
  EXPECT_EQ(Append(0, 0, 2), ErrorCode::kOutOfOrderSequenceNumber);
  EXPECT_EQ(Append(0, 2, 2), ErrorCode::kOutOfOrderSequenceNumber);
  // Same first sequence but a different range is not a duplicate, and out of order.
  EXPECT_FALSE(Duplicate(0, 12, 1).has_value());
  EXPECT_EQ(Append(0, 12, 1), ErrorCode::kOutOfOrderSequenceNumber);
  // Another epoch's retry is no duplicate.
  EXPECT_FALSE(Duplicate(1, 12, 2).has_value());
}

TEST_F(ProducerStateTest, AGapOrAnOldSequenceIsOutOfOrderAndChangesNothing) {
  ASSERT_EQ(Append(0, 0, 3), ErrorCode::kNone);
  const ProducerEntry before = *state_.Find(kPid);
  EXPECT_EQ(Append(0, 4, 1), ErrorCode::kOutOfOrderSequenceNumber);
  EXPECT_EQ(Append(0, 2, 1), ErrorCode::kOutOfOrderSequenceNumber);
  EXPECT_EQ(*state_.Find(kPid), before);
  EXPECT_EQ(Append(0, 3, 1), ErrorCode::kNone);
}

TEST_F(ProducerStateTest, AnUnknownProducerMayStartAtAnySequence) {
  // KIP-360: a producer whose state is gone (retention, DeleteRecords) goes on.
  EXPECT_EQ(Append(3, 42, 2), ErrorCode::kNone);
  EXPECT_EQ(state_.Find(kPid)->epoch, 3);
  EXPECT_EQ(Append(3, 44, 1), ErrorCode::kNone);
  EXPECT_EQ(Append(3, 46, 1), ErrorCode::kOutOfOrderSequenceNumber);
}

TEST_F(ProducerStateTest, ANewEpochStartsAtZeroAndForgetsTheOldBatches) {
  ASSERT_EQ(Append(0, 0, 2), ErrorCode::kNone);
  EXPECT_EQ(Append(1, 2, 1), ErrorCode::kOutOfOrderSequenceNumber);
  ASSERT_EQ(Append(1, 0, 1), ErrorCode::kNone);
  EXPECT_EQ(state_.Find(kPid)->count(), 1);
  EXPECT_FALSE(Duplicate(0, 0, 2).has_value());
  // Older epochs are fenced with INVALID_PRODUCER_EPOCH (Kafka >= 2.7, not PRODUCER_FENCED).
  EXPECT_EQ(Append(0, 2, 1), ErrorCode::kInvalidProducerEpoch);
  EXPECT_EQ(Append(0, 0, 2), ErrorCode::kInvalidProducerEpoch);
  EXPECT_EQ(state_.Find(kPid)->epoch, 1);
}

TEST_F(ProducerStateTest, SequencesWrapFromInt32MaxToZero) {
  ASSERT_EQ(Append(0, kMaxSeq - 1, 2), ErrorCode::kNone);
  EXPECT_EQ(state_.Find(kPid)->last_seq(), kMaxSeq);
  EXPECT_EQ(Append(0, 1, 1), ErrorCode::kOutOfOrderSequenceNumber);
  ASSERT_EQ(Append(0, 0, 1), ErrorCode::kNone);
  ASSERT_EQ(Append(0, 1, 1), ErrorCode::kNone);
  // A batch that wraps inside itself: sequences max, 0, 1.
  std::vector<uint8_t> bytes = ProducerBatchBytes(kPid, 0, kMaxSeq, 3);
  StatusOr<record::BatchView> b = record::BatchView::Parse(bytes);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(LastSequence(*b), 1);
}

TEST_F(ProducerStateTest, ATransactionalBatchOpensATransactionAtItsFirstOffset) {
  ASSERT_EQ(Append(0, 0, 1), ErrorCode::kNone);
  EXPECT_EQ(state_.Find(kPid)->txn_first_offset, -1);
  ASSERT_EQ(Append(0, 1, 2, /*transactional=*/true), ErrorCode::kNone);
  EXPECT_EQ(state_.Find(kPid)->txn_first_offset, 1);
  ASSERT_EQ(Append(0, 3, 1, /*transactional=*/true), ErrorCode::kNone);
  EXPECT_EQ(state_.Find(kPid)->txn_first_offset, 1);
  // A non-transactional batch inside the transaction: INVALID_TXN_STATE, nothing changes.
  const ProducerEntry before = *state_.Find(kPid);
  EXPECT_EQ(Append(0, 4, 1), ErrorCode::kInvalidTxnState);
  EXPECT_EQ(*state_.Find(kPid), before);
}

TEST_F(ProducerStateTest, ACommitMarkerReplayedEndsTheTransaction) {
  ASSERT_EQ(Append(0, 0, 1, /*transactional=*/true), ErrorCode::kNone);
  record::BatchBuilder::Options o;
  o.base_offset = next_offset_;
  o.producer_id = kPid;
  o.producer_epoch = 0;
  o.transactional = true;
  o.control = true;
  record::BatchBuilder marker(o);
  const std::string key("\0\0\0\1", 4);  // version 0, type 1 (commit)
  const std::string value("\0\0\0\0\0\7", 6);
  marker.Add(5000, Span(key), Span(value));
  StatusOr<std::vector<uint8_t>> bytes = marker.Build();
  ASSERT_TRUE(bytes.ok());
  StatusOr<record::BatchView> b = record::BatchView::Parse(*bytes);
  ASSERT_TRUE(b.ok());
  std::optional<CompletedTxn> done =
      state_.ReplayBatch(ProducerBatchHeader::Of(*b), record::EndTxnMarker{true, 7});
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(*done, (CompletedTxn{kPid, 0, 1, /*aborted=*/false}));
  EXPECT_EQ(state_.Find(kPid)->txn_first_offset, -1);
  EXPECT_EQ(state_.Find(kPid)->coordinator_epoch, 7);
  EXPECT_EQ(state_.Find(kPid)->last_timestamp, 5000);
}

TEST_F(ProducerStateTest, ACoordinatorsMarkerEndsTheTransactionAndReportsIt) {
  ASSERT_EQ(Append(0, 0, 2, /*transactional=*/true), ErrorCode::kNone);  // offsets 0..1
  ASSERT_EQ(AppendFromCoordinator(0, record::EndTxnMarker{false, 3}), ErrorCode::kNone);
  ASSERT_EQ(completed_.size(), 1u);
  EXPECT_EQ(completed_[0], (CompletedTxn{kPid, 0, 2, /*aborted=*/true}));
  const ProducerEntry* e = state_.Find(kPid);
  EXPECT_EQ(e->txn_first_offset, -1);
  EXPECT_EQ(e->coordinator_epoch, 3);
  EXPECT_EQ(e->last_timestamp, 5000);
  EXPECT_EQ(e->last_seq(), 1);  // a marker keeps the batches of its epoch
  // The next transaction, committed; a marker with no transaction ongoing completes none.
  ASSERT_EQ(Append(0, 2, 1, /*transactional=*/true), ErrorCode::kNone);  // offset 3
  ASSERT_EQ(AppendFromCoordinator(0, record::EndTxnMarker{true, 3}), ErrorCode::kNone);
  ASSERT_EQ(completed_.size(), 1u);
  EXPECT_EQ(completed_[0], (CompletedTxn{kPid, 3, 4, /*aborted=*/false}));
  ASSERT_EQ(AppendFromCoordinator(0, record::EndTxnMarker{true, 3}), ErrorCode::kNone);
  EXPECT_TRUE(completed_.empty());
}

TEST_F(ProducerStateTest, AMarkerOfAnOlderEpochOrCoordinatorIsRefusedAndChangesNothing) {
  ASSERT_EQ(Append(2, 0, 1, /*transactional=*/true), ErrorCode::kNone);
  ASSERT_EQ(AppendFromCoordinator(2, record::EndTxnMarker{true, 5}), ErrorCode::kNone);
  ASSERT_EQ(Append(2, 1, 1, /*transactional=*/true), ErrorCode::kNone);
  const ProducerEntry before = *state_.Find(kPid);
  EXPECT_EQ(AppendFromCoordinator(1, record::EndTxnMarker{true, 5}),
            ErrorCode::kInvalidProducerEpoch);
  EXPECT_EQ(AppendFromCoordinator(2, record::EndTxnMarker{false, 4}),
            ErrorCode::kTransactionCoordinatorFenced);
  // TV2: the marker must carry an epoch above the producer's (the coordinator bumped it).
  EXPECT_EQ(AppendFromCoordinator(2, record::EndTxnMarker{true, 5}, /*transaction_version=*/2),
            ErrorCode::kInvalidProducerEpoch);
  EXPECT_EQ(*state_.Find(kPid), before);
  ASSERT_EQ(AppendFromCoordinator(3, record::EndTxnMarker{true, 6}, /*transaction_version=*/2),
            ErrorCode::kNone);
  ASSERT_EQ(completed_.size(), 1u);
  const ProducerEntry* e = state_.Find(kPid);
  EXPECT_EQ(e->epoch, 3);
  EXPECT_EQ(e->coordinator_epoch, 6);
  EXPECT_TRUE(e->empty());  // the new epoch forgot the old batches
  // The client goes on in the bumped epoch from sequence 0.
  EXPECT_EQ(Append(3, 0, 1), ErrorCode::kNone);
}

TEST_F(ProducerStateTest, ACoordinatorsProducerBatchHasNoSequenceButItsEpochIsChecked) {
  ASSERT_EQ(Append(1, 0, 1), ErrorCode::kNone);
  ASSERT_EQ(AppendFromCoordinator(1, std::nullopt, 0, /*count=*/2), ErrorCode::kNone);
  EXPECT_EQ(state_.Find(kPid)->txn_first_offset, 1);
  EXPECT_EQ(AppendFromCoordinator(0, std::nullopt, 0, 1), ErrorCode::kInvalidProducerEpoch);
  EXPECT_EQ(AppendFromCoordinator(1, std::nullopt, 0, 1, /*transactional=*/false),
            ErrorCode::kInvalidTxnState);
  ASSERT_EQ(AppendFromCoordinator(1, record::EndTxnMarker{true, 0}), ErrorCode::kNone);
  ASSERT_EQ(completed_.size(), 1u);
  EXPECT_EQ(completed_[0], (CompletedTxn{kPid, 1, 3, false}));
}

TEST_F(ProducerStateTest, AControlRecordThatIsNoTransactionMarkerIsInvalid) {
  record::BatchBuilder::Options o;
  o.producer_id = kPid;
  o.producer_epoch = 0;
  o.transactional = true;
  o.control = true;
  for (const std::pair<std::string, std::string>& kv :
       {std::pair<std::string, std::string>{std::string("\0\0\0\2", 4),
                                            std::string("\0\0\0\0\0\0", 6)},
        {std::string("\0\0", 2), std::string("\0\0\0\0\0\0", 6)},
        {std::string("\0\0\0\1", 4), std::string("\0\0\0", 3)}}) {
    record::BatchBuilder b(o);
    b.Add(1000, Span(kv.first), Span(kv.second));
    StatusOr<std::vector<uint8_t>> bytes = b.Build();
    ASSERT_TRUE(bytes.ok());
    StatusOr<record::BatchView> view = record::BatchView::Parse(*bytes);
    ASSERT_TRUE(view.ok());
    ProducerStateManager::AppendPlan plan;
    EXPECT_EQ(state_.CheckCoordinatorBatch(*view, 0, 0, &plan).code, ErrorCode::kInvalidRecord);
  }
  EXPECT_EQ(state_.size(), 0u);
}

TEST_F(ProducerStateTest, TheFirstUnstableOffsetIsTheEarliestOngoingTransaction) {
  auto header = [](int64_t pid, int64_t offset, bool control) {
    ProducerBatchHeader h;
    h.producer_id = pid;
    h.producer_epoch = 0;
    h.base_sequence = control ? -1 : 0;
    h.base_offset = offset;
    h.last_offset = offset;
    h.transactional = true;
    h.control = control;
    return h;
  };
  EXPECT_EQ(state_.FirstUnstableOffset(), -1);
  state_.ReplayBatch(header(1, 10, false), std::nullopt);
  state_.ReplayBatch(header(2, 12, false), std::nullopt);
  EXPECT_EQ(state_.FirstUnstableOffset(), 10);
  EXPECT_EQ(state_.FirstUnstableOffsetExcept(1), 12);
  EXPECT_EQ(state_.FirstUnstableOffsetExcept(3), 10);
  // Two producers said (by a damaged but well-formed snapshot) to start at one offset: ending
  // one leaves the other's.
  state_.ReplayBatch(header(3, 12, false), std::nullopt);
  ProducerStateManager loaded;
  ASSERT_TRUE(loaded.LoadSnapshot(state_.EncodeSnapshot()).ok());
  EXPECT_EQ(loaded.FirstUnstableOffset(), 10);
  loaded.ReplayBatch(header(1, 13, true), record::EndTxnMarker{true, 0});
  loaded.ReplayBatch(header(2, 14, true), record::EndTxnMarker{false, 0});
  EXPECT_EQ(loaded.FirstUnstableOffset(), 12);
  EXPECT_EQ(loaded.FirstUnstableOffsetExcept(3), -1);
  loaded.ReplayBatch(header(3, 15, true), record::EndTxnMarker{true, 0});
  EXPECT_EQ(loaded.FirstUnstableOffset(), -1);
}

TEST_F(ProducerStateTest, ActiveProducersListsEachProducerInIdOrder) {
  EXPECT_TRUE(state_.ActiveProducers().empty());
  // kPid: idempotent, epoch 2, sequences 0..4 at offsets 0..4 (timestamps 1000..1004).
  ASSERT_EQ(Append(2, 0, 5), ErrorCode::kNone);
  // Producer 7: a transaction opened at offset 20 by a replayed batch (sequences 3..4).
  ProducerBatchHeader h;
  h.producer_id = 7;
  h.producer_epoch = 4;
  h.base_sequence = 3;
  h.base_offset = 20;
  h.last_offset = 21;
  h.max_timestamp = 3000;
  h.transactional = true;
  state_.ReplayBatch(h, std::nullopt);
  // Producer 500: only a marker (coordinator epoch 9), so no sequence.
  ProducerBatchHeader m = h;
  m.producer_id = 500;
  m.base_sequence = -1;
  m.base_offset = 30;
  m.last_offset = 30;
  m.max_timestamp = 4000;
  m.control = true;
  state_.ReplayBatch(m, record::EndTxnMarker{false, 9});
  const std::vector<ActiveProducer> want = {
      {.producer_id = 7,
       .epoch = 4,
       .last_sequence = 4,
       .last_timestamp = 3000,
       .coordinator_epoch = -1,
       .txn_first_offset = 20},
      {.producer_id = 500,
       .epoch = 4,
       .last_sequence = -1,
       .last_timestamp = 4000,
       .coordinator_epoch = 9,
       .txn_first_offset = -1},
      {.producer_id = kPid,
       .epoch = 2,
       .last_sequence = 4,
       .last_timestamp = 1004,
       .coordinator_epoch = -1,
       .txn_first_offset = -1},
  };
  EXPECT_EQ(state_.ActiveProducers(), want);
  // A commit marker ends producer 7's transaction and keeps its coordinator epoch.
  ProducerBatchHeader c = m;
  c.producer_id = 7;
  c.base_offset = c.last_offset = 31;
  state_.ReplayBatch(c, record::EndTxnMarker{true, 3});
  const std::vector<ActiveProducer> after = state_.ActiveProducers();
  ASSERT_EQ(after.size(), 3u);
  EXPECT_EQ(after[0].txn_first_offset, -1);
  EXPECT_EQ(after[0].coordinator_epoch, 3);
  EXPECT_EQ(after[0].last_sequence, 4);
  // Expired producers are not listed.
  EXPECT_EQ(state_.RemoveExpired(5000, 1000), 3);
  EXPECT_TRUE(state_.ActiveProducers().empty());
}

TEST_F(ProducerStateTest, IdleProducersWithoutATransactionExpire) {
  ASSERT_EQ(Append(0, 0, 1), ErrorCode::kNone);  // timestamp 1000
  EXPECT_EQ(state_.RemoveExpired(1999, 1000), 0);
  state_.MarkSnapshotted();
  EXPECT_EQ(state_.RemoveExpired(2000, 1000), 1);
  EXPECT_EQ(state_.size(), 0u);
  EXPECT_TRUE(state_.dirty());
  // One in a transaction stays however old.
  ASSERT_EQ(Append(0, 0, 1, /*transactional=*/true), ErrorCode::kNone);
  EXPECT_EQ(state_.RemoveExpired(1'000'000'000, 1000), 0);
  EXPECT_EQ(state_.size(), 1u);
}

TEST_F(ProducerStateTest, ASnapshotRoundTripsTheLastBatchOfEachProducer) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Append(2, i * 2, 2), ErrorCode::kNone);
  ASSERT_EQ(Append(2, 6, 1, /*transactional=*/true), ErrorCode::kNone);
  std::string bytes = state_.EncodeSnapshot();
  EXPECT_EQ(bytes.size(), 10u + 46u);
  ProducerStateManager loaded;
  ASSERT_TRUE(loaded.LoadSnapshot(bytes).ok());
  const ProducerEntry* e = loaded.Find(kPid);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->epoch, 2);
  EXPECT_EQ(e->count(), 1);  // Kafka's format keeps the last batch only
  EXPECT_EQ(e->batch(0), (ProducerBatch{6, 6, 6, 6, 1000}));
  EXPECT_EQ(e->txn_first_offset, 6);
  EXPECT_EQ(e->last_timestamp, 1000);
  EXPECT_FALSE(loaded.dirty());
  // Kafka's bytes: version 1, then the CRC over the rest.
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[1], 1);
}

TEST_F(ProducerStateTest, ADamagedSnapshotIsRefusedAndChangesNothing) {
  ASSERT_EQ(Append(0, 0, 2), ErrorCode::kNone);
  const std::string good = state_.EncodeSnapshot();
  ProducerStateManager other;
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = char(bad[i] ^ 0x40);
    EXPECT_FALSE(other.LoadSnapshot(bad).ok()) << "byte " << i;
  }
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(other.LoadSnapshot(good.substr(0, n)).ok()) << n << " bytes";
  }
  EXPECT_FALSE(other.LoadSnapshot(good + "x").ok());
  EXPECT_EQ(other.size(), 0u);
  ProducerStateManager empty;
  ASSERT_TRUE(other.LoadSnapshot(empty.EncodeSnapshot()).ok());
  EXPECT_EQ(other.size(), 0u);
}

// Log::Append with producer batches.
class LogProducerTest : public ::testing::Test {
 protected:
  std::string LogDir() const { return dir_.path() + "/orders-0"; }
  std::vector<int64_t> Snapshots() const {
    std::vector<int64_t> out;
    for (const auto& f : std::filesystem::directory_iterator(LogDir())) {
      std::string name = f.path().filename().string();
      if (std::optional<int64_t> o = ParseSegmentFileName(name, kProducerSnapshotSuffix)) {
        out.push_back(*o);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  void RemoveSnapshot(int64_t offset) {
    std::filesystem::remove(SegmentFilePath(LogDir(), offset, kProducerSnapshotSuffix));
  }
  std::unique_ptr<Log> Open(LogConfig config = {}, bool clean = true) {
    LogOptions o;
    o.dir = dir_.path() + "/orders-0";
    o.tp = {"orders", 0};
    o.config = config;
    o.files = &files_;
    o.now_ms = [] { return kNow; };
    o.producer_id_expiration_ms = 86400000;
    o.on_change = [this](const TopicPartition&, const LogState&) { ++changes_; };
    StatusOr<std::unique_ptr<Log>> log =
        Log::Open(std::move(o), "AAAAAAAAAAAAAAAAAAAAAA", 0, 0, clean, nullptr);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(*log) : nullptr;
  }
  // Batches carry timestamp `ts_` (the clock's time unless a test ages them).
  AppendResult Append(Log& log, int64_t pid, int16_t epoch, int32_t seq, int count) {
    std::vector<uint8_t> bytes = ProducerBatchBytes(pid, epoch, seq, count, false, ts_);
    return log.Append(bytes, 0);
  }

  static constexpr int64_t kNow = 1'700'000'000'000;
  int64_t ts_ = kNow;
  int changes_ = 0;  // on_change calls
  TempDir dir_{"pstate"};
  FileCache files_{16};
};

TEST_F(LogProducerTest, ARetriedBatchIsAnsweredWithItsOriginalOffsetsAndNotAppended) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  std::vector<uint8_t> plain = testing::MakeBatch(3, 1000);
  ASSERT_EQ(log->Append(plain, 0).error, ErrorCode::kNone);
  AppendResult first = Append(*log, kPid, 0, 0, 2);
  ASSERT_EQ(first.error, ErrorCode::kNone);
  EXPECT_EQ(first.base_offset, 3);
  ASSERT_EQ(Append(*log, kPid, 0, 2, 2).error, ErrorCode::kNone);
  const int64_t end = log->State().log_end_offset;
  ASSERT_EQ(end, 7);

  const int changes = changes_;
  AppendResult dup = Append(*log, kPid, 0, 0, 2);
  EXPECT_EQ(dup.error, ErrorCode::kNone) << dup.error_message;
  EXPECT_EQ(changes_, changes);  // nothing for brokerd's watch to learn
  EXPECT_EQ(dup.base_offset, 3);
  EXPECT_EQ(dup.last_offset, 4);
  EXPECT_TRUE(dup.range.path.empty());  // brokerd's AppendTail ignores it
  EXPECT_EQ(dup.range.length, 0);
  EXPECT_EQ(dup.high_watermark, end);
  EXPECT_EQ(log->State().log_end_offset, end);
  EXPECT_EQ(testing::ReadBatches(log->Read(0, 1 << 20, true)).size(), 3u);
}

TEST_F(LogProducerTest, ADuplicateInsideAMultiBatchAppendAppendsNothing) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  ASSERT_EQ(Append(*log, kPid, 0, 0, 2).error, ErrorCode::kNone);
  // A new batch of another producer, then the retry: Kafka stops at the duplicate and
  // answers with its offsets, appending nothing of the request.
  std::vector<uint8_t> records = ProducerBatchBytes(kPid + 1, 0, 0, 1);
  std::vector<uint8_t> retry = ProducerBatchBytes(kPid, 0, 0, 2);
  records.insert(records.end(), retry.begin(), retry.end());
  AppendResult r = log->Append(records, 0);
  EXPECT_EQ(r.error, ErrorCode::kNone);
  EXPECT_EQ(r.base_offset, 0);
  EXPECT_EQ(r.last_offset, 1);
  EXPECT_EQ(log->State().log_end_offset, 2);
  EXPECT_FALSE(log->Producer(kPid + 1).has_value());
}

TEST_F(LogProducerTest, ARejectedBatchFailsTheWholeAppendWithItsIndex) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  ASSERT_EQ(Append(*log, kPid, 2, 0, 1).error, ErrorCode::kNone);
  std::vector<uint8_t> records = ProducerBatchBytes(kPid + 1, 0, 0, 1);
  std::vector<uint8_t> gap = ProducerBatchBytes(kPid, 2, 5, 1);
  records.insert(records.end(), gap.begin(), gap.end());
  AppendResult r = log->Append(records, 0);
  EXPECT_EQ(r.error, ErrorCode::kOutOfOrderSequenceNumber);
  EXPECT_EQ(r.batch_index, 1);
  EXPECT_NE(r.error_message.find("orders-0"), std::string::npos) << r.error_message;
  EXPECT_EQ(log->State().log_end_offset, 1);
  EXPECT_FALSE(log->Producer(kPid + 1).has_value());

  AppendResult fenced = Append(*log, kPid, 1, 1, 1);
  EXPECT_EQ(fenced.error, ErrorCode::kInvalidProducerEpoch);
  EXPECT_EQ(fenced.batch_index, 0);
  // Two batches of one producer in one append follow each other.
  std::vector<uint8_t> two = ProducerBatchBytes(kPid, 2, 1, 1);
  std::vector<uint8_t> next = ProducerBatchBytes(kPid, 2, 2, 3);
  two.insert(two.end(), next.begin(), next.end());
  ASSERT_EQ(log->Append(two, 0).error, ErrorCode::kNone);
  EXPECT_EQ(log->Producer(kPid)->last_seq(), 4);
  EXPECT_EQ(log->Producer(kPid)->count(), 3);
}

TEST_F(LogProducerTest, AFailedWriteLeavesTheProducerStateUnchanged) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  ASSERT_EQ(Append(*log, kPid, 0, 0, 2).error, ErrorCode::kNone);
  const ProducerEntry before = *log->Producer(kPid);
  {
    FaultInjector faults;
    faults.Fail(FileOp::kWrite, "00000000000000000000.log", ENOSPC);
    AppendResult r = Append(*log, kPid, 0, 2, 2);
    EXPECT_EQ(r.error, ErrorCode::kKafkaStorageError);
  }
  EXPECT_EQ(*log->Producer(kPid), before);
  // The retry after the disk has room is no duplicate: it is appended.
  AppendResult retry = Append(*log, kPid, 0, 2, 2);
  ASSERT_EQ(retry.error, ErrorCode::kNone);
  EXPECT_EQ(retry.base_offset, 2);
  EXPECT_FALSE(retry.range.path.empty());
  EXPECT_EQ(log->Producer(kPid)->last_seq(), 3);
}

TEST_F(LogProducerTest, AnExpiredProducerIsForgottenAndItsRetryAppendedAgain) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  ts_ = kNow - 86400000 + 1;
  ASSERT_EQ(Append(*log, kPid, 0, 0, 1).error, ErrorCode::kNone);
  EXPECT_EQ(log->RemoveExpiredProducers(), 0);
  ts_ = kNow - 86400000;
  ASSERT_EQ(Append(*log, kPid, 0, 1, 1).error, ErrorCode::kNone);
  EXPECT_EQ(log->RemoveExpiredProducers(), 1);
  EXPECT_FALSE(log->Producer(kPid).has_value());
  // As in Kafka: an unknown producer; its retry is a new batch.
  AppendResult again = Append(*log, kPid, 0, 1, 1);
  EXPECT_EQ(again.error, ErrorCode::kNone);
  EXPECT_EQ(again.base_offset, 2);
}

TEST_F(LogProducerTest, ASnapshotsExpiredProducersAreNotLoaded) {
  {
    auto log = Open();
    ASSERT_NE(log, nullptr);
    ts_ = kNow - 86400000;
    ASSERT_EQ(Append(*log, kPid, 0, 0, 1).error, ErrorCode::kNone);
    ts_ = kNow;
    ASSERT_EQ(Append(*log, kPid + 1, 0, 0, 1).error, ErrorCode::kNone);
    ASSERT_TRUE(log->Close().ok());
  }
  auto log = Open();
  ASSERT_NE(log, nullptr);
  EXPECT_FALSE(log->Producer(kPid).has_value());
  EXPECT_TRUE(log->Producer(kPid + 1).has_value());
}

TEST_F(LogProducerTest, OnlyACoordinatorMayAppendTransactionMarkers) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  std::vector<uint8_t> txn = ProducerBatchBytes(kPid, 0, 0, 2, /*transactional=*/true, ts_);
  ASSERT_EQ(log->Append(txn, 0).error, ErrorCode::kNone);
  std::vector<uint8_t> marker =
      record::BuildEndTxnMarkerBatch(kPid, 0, record::EndTxnMarker{true, 4}, ts_);
  std::vector<uint8_t> copy = marker;
  AppendResult refused = log->Append(copy, 0);
  EXPECT_EQ(refused.error, ErrorCode::kInvalidRecord);
  EXPECT_EQ(log->State().log_end_offset, 2);
  EXPECT_EQ(log->Producer(kPid)->txn_first_offset, 0);

  AppendResult written = log->Append(marker, 0, AppendOrigin::kCoordinator);
  ASSERT_EQ(written.error, ErrorCode::kNone) << written.error_message;
  EXPECT_EQ(written.base_offset, 2);
  EXPECT_EQ(log->State().log_end_offset, 3);
  EXPECT_EQ(log->Producer(kPid)->txn_first_offset, -1);
  EXPECT_EQ(log->Producer(kPid)->coordinator_epoch, 4);
  // A fenced coordinator's marker fails the append with its batch index; nothing written.
  std::vector<uint8_t> zombie =
      record::BuildEndTxnMarkerBatch(kPid, 0, record::EndTxnMarker{false, 3}, ts_);
  AppendResult fenced = log->Append(zombie, 0, AppendOrigin::kCoordinator);
  EXPECT_EQ(fenced.error, ErrorCode::kTransactionCoordinatorFenced);
  EXPECT_EQ(fenced.batch_index, 0);
  EXPECT_EQ(log->State().log_end_offset, 3);
  // A coordinator's batch without sequences (a transactional offset commit) is accepted,
  // a client's is not.
  std::vector<uint8_t> unsequenced = ProducerBatchBytes(kPid, 0, -1, 1, true, ts_);
  std::vector<uint8_t> unsequenced_copy = unsequenced;
  EXPECT_EQ(log->Append(unsequenced_copy, 0).error, ErrorCode::kInvalidRecord);
  ASSERT_EQ(log->Append(unsequenced, 0, AppendOrigin::kCoordinator).error, ErrorCode::kNone);
  EXPECT_EQ(log->Producer(kPid)->txn_first_offset, 3);
  // The state survives an unclean restart without snapshots, the replay reading the markers.
  log.reset();
  for (int64_t offset : Snapshots()) RemoveSnapshot(offset);
  log = Open({}, /*clean=*/false);
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(log->Producer(kPid)->txn_first_offset, 3);
  EXPECT_EQ(log->Producer(kPid)->coordinator_epoch, 4);
}

TEST_F(LogProducerTest, PlainBatchesLeaveNoProducerState) {
  auto log = Open();
  ASSERT_NE(log, nullptr);
  for (int i = 0; i < 3; ++i) {
    std::vector<uint8_t> plain = testing::MakeBatch(2, kNow);
    ASSERT_EQ(log->Append(plain, 0).error, ErrorCode::kNone);
  }
  EXPECT_EQ(log->ProducerCount(), 0u);
}

TEST_F(LogProducerTest, ADuplicateOnALogAppendTimeTopicAnswersTheStampedTime) {
  LogConfig config;
  config.timestamp_type = record::TimestampType::kLogAppendTime;
  auto log = Open(config);
  ASSERT_NE(log, nullptr);
  AppendResult first = Append(*log, kPid, 0, 0, 1);
  ASSERT_EQ(first.error, ErrorCode::kNone);
  EXPECT_EQ(first.log_append_time, 1'700'000'000'000);
  AppendResult dup = Append(*log, kPid, 0, 0, 1);
  EXPECT_EQ(dup.error, ErrorCode::kNone);
  EXPECT_EQ(dup.log_append_time, 1'700'000'000'000);
  EXPECT_EQ(dup.base_offset, 0);
}

TEST_F(LogProducerTest, ACleanRestartKeepsTheLastBatchAsADuplicate) {
  {
    auto log = Open();
    ASSERT_NE(log, nullptr);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(Append(*log, kPid, 0, i * 2, 2).error, ErrorCode::kNone);
    ASSERT_TRUE(log->Close().ok());
  }
  EXPECT_EQ(Snapshots(), std::vector<int64_t>{6});
  auto log = Open({}, /*clean=*/true);
  ASSERT_NE(log, nullptr);
  AppendResult dup = Append(*log, kPid, 0, 4, 2);
  EXPECT_EQ(dup.error, ErrorCode::kNone);
  EXPECT_EQ(dup.base_offset, 4);
  EXPECT_EQ(dup.last_offset, 5);
  EXPECT_TRUE(dup.range.path.empty());
  EXPECT_EQ(log->State().log_end_offset, 6);
  EXPECT_EQ(Append(*log, kPid, 0, 7, 1).error, ErrorCode::kOutOfOrderSequenceNumber);
  EXPECT_EQ(Append(*log, kPid, 0, 6, 1).error, ErrorCode::kNone);
}

TEST_F(LogProducerTest, AnUncleanRestartReplaysTheBatchesAfterTheLatestSnapshot) {
  LogConfig config;
  config.segment_bytes = 300;  // a roll every few batches
  int64_t end = 0;
  {
    auto log = Open(config);
    ASSERT_NE(log, nullptr);
    for (int i = 0; i < 12; ++i) {
      ASSERT_EQ(Append(*log, kPid, 0, i * 2, 2).error, ErrorCode::kNone) << i;
    }
    end = log->State().log_end_offset;
    ASSERT_GT(log->State().segments, 2);
    ASSERT_TRUE(log->Close().ok());
  }
  // A crash: no snapshot at close; the ones at each roll are there.
  std::vector<int64_t> snaps = Snapshots();
  ASSERT_GE(snaps.size(), 3u);
  ASSERT_EQ(snaps.back(), end);
  RemoveSnapshot(end);
  auto log = Open(config, /*clean=*/false);
  ASSERT_NE(log, nullptr);
  // The replay restores the last 5 batches of the active segment and before.
  std::optional<ProducerEntry> e = log->Producer(kPid);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->last_seq(), 23);
  AppendResult dup = Append(*log, kPid, 0, 22, 2);
  EXPECT_EQ(dup.error, ErrorCode::kNone);
  EXPECT_EQ(dup.base_offset, 22);
  EXPECT_TRUE(dup.range.path.empty());
  EXPECT_EQ(log->State().log_end_offset, end);
}

TEST_F(LogProducerTest, AnUncleanRestartWithoutSnapshotsReplaysFromTheLogStart) {
  {
    auto log = Open();
    ASSERT_NE(log, nullptr);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(Append(*log, kPid, 1, i, 1).error, ErrorCode::kNone);
    ASSERT_TRUE(log->Close().ok());
  }
  for (int64_t o : Snapshots()) RemoveSnapshot(o);
  auto log = Open({}, /*clean=*/false);
  ASSERT_NE(log, nullptr);
  for (int i = 0; i < 3; ++i) {
    AppendResult dup = Append(*log, kPid, 1, i, 1);
    EXPECT_EQ(dup.error, ErrorCode::kNone);
    EXPECT_EQ(dup.base_offset, i);
  }
  EXPECT_EQ(log->State().log_end_offset, 3);
}

TEST_F(LogProducerTest, ADamagedSnapshotIsDeletedAndTheStateReplayed) {
  {
    auto log = Open();
    ASSERT_NE(log, nullptr);
    for (int i = 0; i < 2; ++i) ASSERT_EQ(Append(*log, kPid, 0, i, 1).error, ErrorCode::kNone);
    ASSERT_TRUE(log->Close().ok());
  }
  ASSERT_EQ(Snapshots(), std::vector<int64_t>{2});
  {
    std::ofstream f(SegmentFilePath(LogDir(), 2, kProducerSnapshotSuffix),
                    std::ios::binary | std::ios::trunc);
    f << "short";
  }
  // A snapshot cut short by a crash before its rename.
  const std::string tmp = SegmentFilePath(LogDir(), 2, kProducerSnapshotSuffix) + ".tmp";
  { std::ofstream(tmp, std::ios::binary) << "cut"; }
  // Even a clean start replays when its latest snapshot is damaged.
  auto log = Open({}, /*clean=*/true);
  ASSERT_NE(log, nullptr);
  EXPECT_TRUE(Snapshots().empty());
  EXPECT_FALSE(std::filesystem::exists(tmp));
  AppendResult dup = Append(*log, kPid, 0, 1, 1);
  EXPECT_EQ(dup.error, ErrorCode::kNone);
  EXPECT_EQ(dup.base_offset, 1);
  EXPECT_EQ(log->State().log_end_offset, 2);
}

TEST_F(LogProducerTest, LogsWithoutProducersWriteNoSnapshotAtClose) {
  {
    auto log = Open();
    ASSERT_NE(log, nullptr);
    std::vector<uint8_t> plain = testing::MakeBatch(2, kNow);
    ASSERT_EQ(log->Append(plain, 0).error, ErrorCode::kNone);
    ASSERT_TRUE(log->Close().ok());
  }
  EXPECT_TRUE(Snapshots().empty());
  {
    // A clean start with producers but no change since the last snapshot writes none.
    auto log = Open();
    ASSERT_NE(log, nullptr);
    ASSERT_EQ(Append(*log, kPid, 0, 0, 1).error, ErrorCode::kNone);
    ASSERT_TRUE(log->Close().ok());
  }
  EXPECT_EQ(Snapshots(), std::vector<int64_t>{3});
  {
    auto log = Open();
    ASSERT_NE(log, nullptr);
    std::vector<uint8_t> plain = testing::MakeBatch(2, kNow);
    ASSERT_EQ(log->Append(plain, 0).error, ErrorCode::kNone);
    ASSERT_TRUE(log->Close().ok());
  }
  EXPECT_EQ(Snapshots(), std::vector<int64_t>{3});
  auto log = Open();
  ASSERT_NE(log, nullptr);
  EXPECT_EQ(Append(*log, kPid, 0, 0, 1).base_offset, 2);  // still a duplicate
}

TEST_F(LogProducerTest, TruncationRebuildsTheStateAndDropsLaterSnapshots) {
  LogConfig config;
  config.segment_bytes = 300;
  auto log = Open(config);
  ASSERT_NE(log, nullptr);
  for (int i = 0; i < 12; ++i) ASSERT_EQ(Append(*log, kPid, 0, i, 1).error, ErrorCode::kNone);
  ASSERT_GE(Snapshots().size(), 2u);
  ASSERT_TRUE(log->TruncateTo(5).ok());
  for (int64_t o : Snapshots()) EXPECT_LE(o, 5);
  std::optional<ProducerEntry> e = log->Producer(kPid);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->last_seq(), 4);
  // Sequence 5 was cut: its retry is appended again, at offset 5; 4 is still a duplicate.
  AppendResult again = Append(*log, kPid, 0, 5, 1);
  EXPECT_EQ(again.error, ErrorCode::kNone);
  EXPECT_EQ(again.base_offset, 5);
  EXPECT_FALSE(again.range.path.empty());
  AppendResult dup = Append(*log, kPid, 0, 4, 1);
  EXPECT_EQ(dup.base_offset, 4);
  EXPECT_TRUE(dup.range.path.empty());
}

TEST_F(LogProducerTest, RetentionDeletesTheSnapshotsOfTheRemovedSegments) {
  LogConfig config;
  config.segment_bytes = 300;
  auto log = Open(config);
  ASSERT_NE(log, nullptr);
  for (int i = 0; i < 12; ++i) ASSERT_EQ(Append(*log, kPid, 0, i, 1).error, ErrorCode::kNone);
  std::vector<std::shared_ptr<Segment>> segments = log->Segments();
  ASSERT_GE(segments.size(), 3u);
  const int64_t keep_from = segments.back()->base_offset();
  const std::vector<int64_t> before = Snapshots();
  ErrorCode error = ErrorCode::kNone;
  ASSERT_TRUE(log->DeleteRecordsBefore(keep_from, &error).ok());
  std::vector<std::shared_ptr<Segment>> to_unlink;
  ASSERT_GT(log->DeleteOldSegments(&to_unlink), 0);
  ASSERT_EQ(log->State().log_start_offset, keep_from);
  std::vector<int64_t> after = Snapshots();
  // Those of the removed segments are gone; the kept segments' stay.
  std::vector<int64_t> want;
  for (int64_t o : before) {
    if (o >= keep_from) want.push_back(o);
  }
  EXPECT_EQ(after, want);
  EXPECT_LT(after.size(), before.size());
  EXPECT_EQ(after.front(), keep_from);
}

}  // namespace
}  // namespace runnel::storaged
