#include "brokerd/txn/txn_metadata.h"

#include <gtest/gtest.h>

#include <vector>

namespace runnel::brokerd::txn {
namespace {

constexpr int64_t kNow = 1'700'000'000'000;
constexpr int32_t kTimeout = 60000;

TxnMetadata Stored(TxnState state, int16_t epoch, TxnPartitions partitions = {}) {
  TxnMetadata m = NewTxnMetadata("tx", 4000, kTimeout, kNow - 1000);
  m.state = state;
  m.producer_epoch = epoch;
  m.partitions = std::move(partitions);
  if (state == TxnState::kOngoing) m.start_timestamp_ms = kNow - 500;
  return m;
}

TEST(TxnMetadataTest, AFirstInitGivesEpochZeroAndARetryOfTheBumpGetsItAgain) {
  TxnMetadata fresh = NewTxnMetadata("tx", 4000, kTimeout, kNow);
  Transition t = PrepareInitProducerId(fresh, false, kTimeout, std::nullopt, -1, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  ASSERT_TRUE(t.target.has_value());
  EXPECT_EQ(t.target->state, TxnState::kEmpty);
  EXPECT_EQ(t.target->producer_id, 4000);
  EXPECT_EQ(t.target->producer_epoch, 0);

  // A new instance (no expected id) bumps; one naming the current epoch bumps too and
  // remembers it, so a retry of that bump (naming the epoch before) gets the same answer.
  TxnMetadata m = Stored(TxnState::kCompleteCommit, 3);
  t = PrepareInitProducerId(m, false, kTimeout, std::nullopt, -1, kNow);
  EXPECT_EQ(t.target->producer_epoch, 4);
  t = PrepareInitProducerId(m, false, kTimeout, ProducerIdAndEpoch{4000, 3}, -1, kNow);
  ASSERT_TRUE(t.target.has_value());
  EXPECT_EQ(t.target->producer_epoch, 4);
  EXPECT_EQ(t.target->last_producer_epoch, 3);
  TxnMetadata bumped = *t.target;
  t = PrepareInitProducerId(bumped, false, kTimeout, ProducerIdAndEpoch{4000, 3}, -1, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->producer_epoch, 4);
  // Any other epoch, or another producer id, is fenced.
  EXPECT_EQ(
      PrepareInitProducerId(bumped, false, kTimeout, ProducerIdAndEpoch{4000, 1}, -1, kNow).error,
      ErrorCode::kProducerFenced);
  EXPECT_EQ(
      PrepareInitProducerId(bumped, false, kTimeout, ProducerIdAndEpoch{17, 4}, -1, kNow).error,
      ErrorCode::kProducerFenced);
}

TEST(TxnMetadataTest, InitDuringATransactionFencesItAndWhileItEndsIsConcurrent) {
  TxnMetadata ongoing = Stored(TxnState::kOngoing, 5, {{"t", 0}});
  Transition t = PrepareInitProducerId(ongoing, false, kTimeout, std::nullopt, -1, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->state, TxnState::kPrepareEpochFence);
  EXPECT_EQ(t.target->producer_epoch, 6);
  for (TxnState s : {TxnState::kPrepareCommit, TxnState::kPrepareAbort}) {
    EXPECT_EQ(PrepareInitProducerId(Stored(s, 5), false, kTimeout, std::nullopt, -1, kNow).error,
              ErrorCode::kConcurrentTransactions);
  }
  EXPECT_EQ(PrepareInitProducerId(Stored(TxnState::kEmpty, 5), /*pending=*/true, kTimeout,
                                  std::nullopt, -1, kNow)
                .error,
            ErrorCode::kConcurrentTransactions);
}

TEST(TxnMetadataTest, AnExhaustedEpochRotatesTheProducerId) {
  TxnMetadata m = Stored(TxnState::kCompleteAbort, INT16_MAX - 1);
  EXPECT_TRUE(NeedsNewProducerId(m, std::nullopt));
  EXPECT_FALSE(NeedsNewProducerId(Stored(TxnState::kCompleteAbort, 7), std::nullopt));
  Transition t = PrepareInitProducerId(m, false, kTimeout, std::nullopt, 9000, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->producer_id, 9000);
  EXPECT_EQ(t.target->producer_epoch, 0);
  EXPECT_EQ(t.target->previous_producer_id, 4000);
  // The producer named its exhausted epoch (KIP-360): a retry of that rotation, whose answer
  // was lost, gets the new id and epoch again rather than being fenced.
  const ProducerIdAndEpoch exhausted{4000, INT16_MAX - 1};
  t = PrepareInitProducerId(m, false, kTimeout, exhausted, 9000, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  t = PrepareInitProducerId(*t.target, false, kTimeout, exhausted, -1, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->producer_id, 9000);
  EXPECT_EQ(t.target->producer_epoch, 0);
  // Another epoch of the old id is fenced.
  EXPECT_EQ(PrepareInitProducerId(*t.target, false, kTimeout, ProducerIdAndEpoch{4000, 5}, -1, kNow)
                .error,
            ErrorCode::kProducerFenced);
}

TEST(TxnMetadataTest, AddPartitionsStartsATransactionAndChecksTheProducer) {
  TxnMetadata m = Stored(TxnState::kCompleteCommit, 2);
  Transition t = PrepareAddPartitions(m, false, 4000, 2, {{"a", 0}, {"b", 1}}, 0, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->state, TxnState::kOngoing);
  EXPECT_EQ(t.target->start_timestamp_ms, kNow);
  EXPECT_EQ(t.target->partitions, (TxnPartitions{{"a", 0}, {"b", 1}}));

  // Partitions already in the ongoing transaction: nothing to write.
  t = PrepareAddPartitions(*t.target, false, 4000, 2, {{"a", 0}}, 0, kNow + 5);
  EXPECT_EQ(t.error, ErrorCode::kNone);
  EXPECT_FALSE(t.target.has_value());
  TxnMetadata ongoing = Stored(TxnState::kOngoing, 2, {{"a", 0}});
  t = PrepareAddPartitions(ongoing, false, 4000, 2, {{"c", 3}}, 0, kNow + 5);
  EXPECT_EQ(t.target->partitions, (TxnPartitions{{"a", 0}, {"c", 3}}));
  EXPECT_EQ(t.target->start_timestamp_ms, ongoing.start_timestamp_ms);

  EXPECT_EQ(PrepareAddPartitions(m, false, 17, 2, {{"a", 0}}, 0, kNow).error,
            ErrorCode::kInvalidProducerIdMapping);
  EXPECT_EQ(PrepareAddPartitions(m, false, 4000, 1, {{"a", 0}}, 0, kNow).error,
            ErrorCode::kProducerFenced);
  EXPECT_EQ(PrepareAddPartitions(m, true, 4000, 2, {{"a", 0}}, 0, kNow).error,
            ErrorCode::kConcurrentTransactions);
  EXPECT_EQ(
      PrepareAddPartitions(Stored(TxnState::kPrepareCommit, 2), false, 4000, 2, {{"a", 0}}, 0, kNow)
          .error,
      ErrorCode::kConcurrentTransactions);
}

TEST(TxnMetadataTest, VerifyAnswersAsKafkaDoes) {
  TxnMetadata ongoing = Stored(TxnState::kOngoing, 2, {{"a", 0}});
  EXPECT_EQ(VerifyPartition(ongoing, 4000, 2, {"a", 0}), ErrorCode::kNone);
  EXPECT_EQ(VerifyPartition(ongoing, 4000, 2, {"a", 1}), ErrorCode::kTransactionAbortable);
  EXPECT_EQ(VerifyPartition(ongoing, 4000, 1, {"a", 0}), ErrorCode::kProducerFenced);
  EXPECT_EQ(VerifyPartition(ongoing, 17, 2, {"a", 0}), ErrorCode::kInvalidProducerIdMapping);
  EXPECT_EQ(VerifyPartition(Stored(TxnState::kPrepareAbort, 2, {{"a", 0}}), 4000, 2, {"a", 0}),
            ErrorCode::kConcurrentTransactions);
  EXPECT_EQ(VerifyPartition(Stored(TxnState::kCompleteCommit, 2), 4000, 2, {"a", 0}),
            ErrorCode::kTransactionAbortable);
}

TEST(TxnMetadataTest, EndTxnPreparesOnceAndRetriesAreAnsweredByTheState) {
  TxnMetadata ongoing = Stored(TxnState::kOngoing, 2, {{"a", 0}});
  Transition t = PrepareEndTxn(ongoing, false, false, 4000, 2, /*commit=*/true, true, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->state, TxnState::kPrepareCommit);
  EXPECT_EQ(t.target->partitions, ongoing.partitions);

  const TxnMetadata prepared = *t.target;
  EXPECT_EQ(PrepareEndTxn(prepared, false, false, 4000, 2, true, true, kNow).error,
            ErrorCode::kConcurrentTransactions);
  EXPECT_EQ(PrepareEndTxn(prepared, false, false, 4000, 2, false, true, kNow).error,
            ErrorCode::kInvalidTxnState);
  const TxnMetadata done = PrepareComplete(prepared, kNow + 1);
  EXPECT_EQ(done.state, TxnState::kCompleteCommit);
  EXPECT_TRUE(done.partitions.empty());
  t = PrepareEndTxn(done, false, false, 4000, 2, true, true, kNow);
  EXPECT_EQ(t.error, ErrorCode::kNone);
  EXPECT_FALSE(t.target.has_value());
  EXPECT_EQ(PrepareEndTxn(done, false, false, 4000, 2, false, true, kNow).error,
            ErrorCode::kInvalidTxnState);
  EXPECT_EQ(
      PrepareEndTxn(Stored(TxnState::kEmpty, 2), false, false, 4000, 2, true, true, kNow).error,
      ErrorCode::kInvalidTxnState);
  // Fencing: a client's epoch must be the current one.
  EXPECT_EQ(PrepareEndTxn(ongoing, false, false, 4000, 1, true, true, kNow).error,
            ErrorCode::kProducerFenced);
  EXPECT_EQ(PrepareEndTxn(ongoing, false, false, 4000, 3, true, true, kNow).error,
            ErrorCode::kProducerFenced);
  EXPECT_EQ(PrepareEndTxn(ongoing, false, false, 17, 2, true, true, kNow).error,
            ErrorCode::kInvalidProducerIdMapping);
  EXPECT_EQ(PrepareEndTxn(ongoing, true, false, 4000, 2, true, true, kNow).error,
            ErrorCode::kConcurrentTransactions);
}

TEST(TxnMetadataTest, TheCoordinatorsFencingAbortCarriesTheBumpedEpoch) {
  TxnMetadata ongoing = Stored(TxnState::kOngoing, 2, {{"a", 0}});
  Transition t = PrepareEndTxn(ongoing, /*pending=*/true, /*pending_fence=*/true, 4000, 3,
                               /*commit=*/false, /*from_client=*/false, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->state, TxnState::kPrepareAbort);
  EXPECT_EQ(t.target->producer_epoch, 3);
  // The fenced producer's own end is refused afterwards.
  EXPECT_EQ(PrepareEndTxn(*t.target, false, false, 4000, 2, true, true, kNow).error,
            ErrorCode::kProducerFenced);
}

TEST(TxnMetadataTest, V2EveryEndBumpsTheEpochAndARetryOfItIsAnsweredNone) {
  TxnMetadata ongoing = Stored(TxnState::kOngoing, 2, {{"a", 0}});
  Transition t = PrepareEndTxnV2(ongoing, false, false, 4000, 2, /*commit=*/true,
                                 /*from_client=*/true, -1, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->state, TxnState::kPrepareCommit);
  EXPECT_EQ(t.target->producer_epoch, 3);  // the markers carry it
  EXPECT_EQ(t.target->client_transaction_version, kTransactionVersion2);
  EXPECT_EQ(t.target->partitions, ongoing.partitions);
  const TxnMetadata prepared = *t.target;
  // While the markers are written: the same end again (old epoch) is CONCURRENT_TRANSACTIONS,
  // the other INVALID_TXN_STATE, the bumped epoch is not the client's yet.
  EXPECT_EQ(PrepareEndTxnV2(prepared, false, false, 4000, 2, true, true, -1, kNow).error,
            ErrorCode::kConcurrentTransactions);
  EXPECT_EQ(PrepareEndTxnV2(prepared, false, false, 4000, 2, false, true, -1, kNow).error,
            ErrorCode::kInvalidTxnState);
  EXPECT_EQ(PrepareEndTxnV2(prepared, false, false, 4000, 3, true, true, -1, kNow).error,
            ErrorCode::kProducerFenced);
  const TxnMetadata done = PrepareComplete(prepared, kNow + 1);
  EXPECT_EQ(done.state, TxnState::kCompleteCommit);
  EXPECT_EQ(done.producer_id, 4000);
  EXPECT_EQ(done.producer_epoch, 3);
  // A retry with the old epoch: NONE, nothing to write.
  t = PrepareEndTxnV2(done, false, false, 4000, 2, true, true, -1, kNow);
  EXPECT_EQ(t.error, ErrorCode::kNone);
  EXPECT_FALSE(t.target.has_value());
  EXPECT_EQ(PrepareEndTxnV2(done, false, false, 4000, 2, false, true, -1, kNow).error,
            ErrorCode::kInvalidTxnState);
  // A commit with no transaction is INVALID_TXN_STATE; an abort with none still ends one,
  // with no partitions, and bumps the epoch.
  EXPECT_EQ(PrepareEndTxnV2(done, false, false, 4000, 3, true, true, -1, kNow).error,
            ErrorCode::kInvalidTxnState);
  t = PrepareEndTxnV2(done, false, false, 4000, 3, false, true, -1, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->state, TxnState::kPrepareAbort);
  EXPECT_EQ(t.target->producer_epoch, 4);
  EXPECT_TRUE(t.target->partitions.empty());
  t = PrepareEndTxnV2(Stored(TxnState::kEmpty, 0), false, false, 4000, 0, false, true, -1, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->producer_epoch, 1);
  // Older epochs, other ids, pending transitions.
  EXPECT_EQ(PrepareEndTxnV2(ongoing, false, false, 4000, 1, true, true, -1, kNow).error,
            ErrorCode::kProducerFenced);
  EXPECT_EQ(PrepareEndTxnV2(done, false, false, 4000, 1, true, true, -1, kNow).error,
            ErrorCode::kProducerFenced);
  EXPECT_EQ(PrepareEndTxnV2(ongoing, false, false, 17, 2, true, true, -1, kNow).error,
            ErrorCode::kInvalidProducerIdMapping);
  EXPECT_EQ(PrepareEndTxnV2(ongoing, true, false, 4000, 2, true, true, -1, kNow).error,
            ErrorCode::kConcurrentTransactions);
}

TEST(TxnMetadataTest, V2AnExhaustedEpochMovesToTheNextProducerIdAtCompletion) {
  TxnMetadata ongoing = Stored(TxnState::kOngoing, INT16_MAX - 1, {{"a", 0}});
  ASSERT_TRUE(NeedsNewProducerIdAtEnd(ongoing));
  Transition t = PrepareEndTxnV2(ongoing, false, false, 4000, INT16_MAX - 1, true, true,
                                 /*new_producer_id=*/5000, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->producer_id, 4000);  // the markers go out under the old id
  EXPECT_EQ(t.target->producer_epoch, INT16_MAX);
  EXPECT_EQ(t.target->next_producer_id, 5000);
  const TxnMetadata done = PrepareComplete(*t.target, kNow + 1);
  EXPECT_EQ(done.producer_id, 5000);
  EXPECT_EQ(done.producer_epoch, 0);
  EXPECT_EQ(done.previous_producer_id, 4000);
  EXPECT_EQ(done.next_producer_id, -1);
  // A retry under the old id and its last epoch is still answered NONE.
  t = PrepareEndTxnV2(done, false, false, 4000, INT16_MAX - 1, true, true, -1, kNow);
  EXPECT_EQ(t.error, ErrorCode::kNone);
  EXPECT_FALSE(t.target.has_value());
  // The Prepare record keeps the next id and the client's version (value v1, flexible).
  TxnMetadata prepared =
      PrepareEndTxnV2(ongoing, false, false, 4000, INT16_MAX - 1, true, true, 5000, kNow)
          .target.value();
  group::LogRecord r = EncodeTxnRecord(prepared);
  ASSERT_TRUE(r.value.has_value());
  EXPECT_EQ((*r.value)[1], 1);
  StatusOr<ParsedTxnRecord> parsed = ParseTxnRecord(r.key, *r.value);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  prepared.last_producer_epoch = kNoProducerEpoch;  // memory only, as in Kafka
  EXPECT_EQ(parsed->value, prepared);
}

TEST(TxnMetadataTest, V2TheCoordinatorsAbortOfAFencedTransactionBumpsOnce) {
  TxnMetadata ongoing = Stored(TxnState::kOngoing, 2, {{"a", 0}});
  ongoing.client_transaction_version = kTransactionVersion2;
  Transition t = PrepareEndTxnV2(ongoing, /*pending=*/true, /*pending_fence=*/true, 4000, 3,
                                 /*commit=*/false, /*from_client=*/false, -1, kNow);
  ASSERT_EQ(t.error, ErrorCode::kNone);
  EXPECT_EQ(t.target->state, TxnState::kPrepareAbort);
  EXPECT_EQ(t.target->producer_epoch, 3);
  EXPECT_EQ(PrepareComplete(*t.target, kNow).producer_epoch, 3);
}

TEST(TxnMetadataTest, RecordsRoundTripInKafkasFormat) {
  TxnMetadata m = Stored(TxnState::kOngoing, 7, {{"b", 2}, {"a", 1}, {"a", 0}});
  group::LogRecord r = EncodeTxnRecord(m);
  // Key: int16 version 0, then the id as an int16-length string.
  EXPECT_EQ(r.key, (std::vector<uint8_t>{0, 0, 0, 2, 't', 'x'}));
  ASSERT_TRUE(r.value.has_value());
  // Value v0: version, producer id 4000, epoch 7, timeout, status 1 (Ongoing), 2 topics.
  ASSERT_GE(r.value->size(), 21u);
  EXPECT_EQ((*r.value)[1], 0);
  EXPECT_EQ((*r.value)[8], 0x0f);  // 4000 = 0x0fa0
  EXPECT_EQ((*r.value)[9], 0xa0);
  EXPECT_EQ((*r.value)[11], 7);
  EXPECT_EQ((*r.value)[16], 1);
  StatusOr<ParsedTxnRecord> parsed = ParseTxnRecord(r.key, *r.value);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->transactional_id, "tx");
  ASSERT_TRUE(parsed->value.has_value());
  EXPECT_EQ(*parsed->value, m);

  // Empty records carry null partitions; tombstones have no value.
  TxnMetadata empty = Stored(TxnState::kEmpty, 1);
  parsed = ParseTxnRecord(EncodeTxnRecord(empty).key, *EncodeTxnRecord(empty).value);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed->value, empty);
  group::LogRecord tomb = EncodeTxnTombstone("tx");
  parsed = ParseTxnRecord(tomb.key, std::nullopt);
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(parsed->value.has_value());

  // A key of another record type is skipped; broken bytes are errors.
  const std::vector<uint8_t> other{0, 1, 0, 2, 't', 'x'};
  EXPECT_EQ(ParseTxnRecord(other, std::nullopt).status().code(), absl::StatusCode::kNotFound);
  const std::vector<uint8_t> shortkey{0, 0, 0, 9, 't'};
  EXPECT_EQ(ParseTxnRecord(shortkey, std::nullopt).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> bad_status = *r.value;
  bad_status[16] = 42;
  EXPECT_EQ(ParseTxnRecord(r.key, bad_status).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TxnMetadataTest, FencedIsInvalidProducerEpochForOldVersions) {
  EXPECT_EQ(FencedForVersion(ErrorCode::kProducerFenced, 1, 2), ErrorCode::kInvalidProducerEpoch);
  EXPECT_EQ(FencedForVersion(ErrorCode::kProducerFenced, 2, 2), ErrorCode::kProducerFenced);
  EXPECT_EQ(FencedForVersion(ErrorCode::kConcurrentTransactions, 0, 2),
            ErrorCode::kConcurrentTransactions);
  EXPECT_EQ(TxnStateName(TxnState::kPrepareEpochFence), "PrepareEpochFence");
  EXPECT_EQ(TxnStateFromName("CompleteAbort"), TxnState::kCompleteAbort);
  EXPECT_EQ(TxnStateFromName("ongoing"), std::nullopt);
}

}  // namespace
}  // namespace runnel::brokerd::txn
