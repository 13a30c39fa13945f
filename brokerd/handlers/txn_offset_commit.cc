// TxnOffsetCommit (key 28), v0-v6: offsets a transactional producer commits for a group as
// part of its transaction (KIP-98, sendOffsetsToTransaction). Written to the group's partition
// of __consumer_offsets as one transactional batch of the producer; they stay pending
// (invisible to OffsetFetch, UNSTABLE_OFFSET_COMMIT with require_stable) until the
// transaction's marker reaches that partition (Coordinator::CompleteTransaction).
//
// As Kafka: partitions of unknown topics are UNKNOWN_TOPIC_OR_PARTITION (v6 names topics by
// id: an unknown id is UNKNOWN_TOPIC_ID) and never reach the group; the group then checks the
// committer (v3+ carry member, generation and instance id: UNKNOWN_MEMBER_ID,
// ILLEGAL_GENERATION, FENCED_INSTANCE_ID; a KIP-848 member's stale epoch is ILLEGAL_GENERATION
// here); a group that does not exist takes generation -1 only (ILLEGAL_GENERATION otherwise);
// an oversized metadata string is OFFSET_METADATA_TOO_LARGE for its partition alone. A
// group-level error goes on every partition that reached the group; v0-v1 get
// COORDINATOR_NOT_AVAILABLE for COORDINATOR_LOAD_IN_PROGRESS (older clients do not know it).
// The producer's epoch is checked by storage on the append: an older epoch is
// INVALID_PRODUCER_EPOCH. No producer (a negative id or epoch) is INVALID_PRODUCER_ID_MAPPING,
// as Kafka's transaction verification answers for a producer it does not know: its batch
// would read back as a plain commit. When the transactional id's coordinator is this broker,
// the group's partition must be in the producer's transaction (KIP-890 part 1, as Produce):
// TRANSACTION_ABORTABLE from v4 (INVALID_TXN_STATE before), INVALID_PRODUCER_EPOCH. From v5 (a
// transaction.version 2 client, KIP-890 part 2) it is added to the transaction here instead
// of by AddOffsetsToTxn; a coordinator not reachable here is NOT_ENOUGH_REPLICAS (retriable).
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/commit_topics.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/txn/txn_coordinator.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::TxnOffsetCommitRequest;
using protocol::TxnOffsetCommitResponse;

constexpr int16_t kFirstLoadInProgressVersion = 2;
constexpr int16_t kFirstLeaderEpochVersion = 2;
constexpr int16_t kFirstTopicIdVersion = 6;
constexpr int16_t kFirstTransactionAbortableVersion = 4;
constexpr int16_t kFirstImplicitAddVersion = 5;

// Kafka's validateTransactionalOffsetCommit: 0 or the group-level error.
ErrorCode ValidateCommitter(group::GroupSlot* slot, const TxnOffsetCommitRequest& req,
                            int16_t version) {
  const int32_t generation = req.generation_id_or_member_epoch;
  if (slot == nullptr || (!slot->classic && !slot->consumer)) {
    // No group (or an offsets-only one, Kafka's Empty "simple" group): generation -1 is a
    // producer whose consumer does not use group management.
    if (generation < 0) return ErrorCode::kNone;
    return slot == nullptr ? ErrorCode::kIllegalGeneration : ErrorCode::kUnknownMemberId;
  }
  if (slot->classic) {
    return slot->classic->ValidateOffsetCommit(req.member_id, req.group_instance_id, generation,
                                               /*transactional=*/true);
  }
  const ErrorCode error = slot->consumer->ValidateOffsetCommit(req.member_id, generation, version,
                                                               /*transactional=*/true);
  return error == ErrorCode::kStaleMemberEpoch ? ErrorCode::kIllegalGeneration : error;
}

// The answer under construction; a group-level error goes on every partition that reached
// the group.
struct Answer {
  std::shared_ptr<RequestContext> ctx;
  Respond respond;
  TxnOffsetCommitResponse resp;
  std::vector<CommitItem> valid;

  void Send() { respond(EncodeResponse(*ctx, resp)); }
  void All(ErrorCode error) {
    if (error == ErrorCode::kCoordinatorLoadInProgress &&
        ctx->header.api_version < kFirstLoadInProgressVersion) {
      error = ErrorCode::kCoordinatorNotAvailable;
    }
    for (const CommitItem& it : valid) {
      resp.topics[it.topic].partitions[it.partition].error_code = error;
    }
    Send();
  }
};

// The commit once the group's partition is known to be in the transaction: the committer's
// checks, then the write.
void CommitChecked(BrokerContext& broker, const TxnOffsetCommitRequest& req,
                   const std::shared_ptr<Answer>& answer) {
  const int16_t version = answer->ctx->header.api_version;
  // Routed again: a v5+ commit gets here after the transaction's write.
  group::Coordinator::Route route = broker.groups.RouteGroup(req.group_id);
  if (route.error != ErrorCode::kNone) return answer->All(route.error);
  group::Shard& shard = *route.shard;
  if (ErrorCode error = ValidateCommitter(shard.Find(req.group_id), req, version);
      error != ErrorCode::kNone) {
    return answer->All(error);
  }
  std::vector<CommitItem> written;
  std::vector<group::Shard::Commit> commits =
      CommitsOf(answer->valid, req.topics, answer->resp.topics, shard,
                version >= kFirstLeaderEpochVersion, shard.NowMs(), /*expire_at=*/-1, &written);
  if (commits.empty()) return answer->Send();
  shard.CommitTxnOffsets(req.group_id, req.producer_id.value(), req.producer_epoch,
                         std::move(commits), [answer, written](ErrorCode error) {
                           for (const CommitItem& it : written) {
                             answer->resp.topics[it.topic].partitions[it.partition].error_code =
                                 error;
                           }
                           answer->Send();
                         });
}

}  // namespace

void HandleTxnOffsetCommit(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                           Respond respond) {
  auto req = std::make_shared<TxnOffsetCommitRequest>();
  if (!DecodeRequest(*ctx, req.get())) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;
  auto answer = std::make_shared<Answer>();
  answer->ctx = std::move(ctx);
  answer->respond = std::move(respond);
  answer->valid = CheckCommitTopics(broker.metadata, version >= kFirstTopicIdVersion, req->topics,
                                    &answer->resp.topics);
  if (answer->valid.empty()) return answer->Send();

  group::Coordinator::Route route = broker.groups.RouteGroup(req->group_id);
  if (route.error != ErrorCode::kNone) return answer->All(route.error);
  if (req->producer_id.value() < 0 || req->producer_epoch < 0) {
    return answer->All(ErrorCode::kInvalidProducerIdMapping);
  }
  const txn::TxnPartition offsets_partition{std::string(group::kOffsetsTopic),
                                            route.shard->partition()};
  txn::TxnCoordinator::Route txn_route = broker.txns.RouteId(req->transactional_id);
  if (version >= kFirstImplicitAddVersion) {
    // KIP-890 part 2: the group's partition joins the transaction here (no AddOffsetsToTxn).
    if (txn_route.error != ErrorCode::kNone) return answer->All(ErrorCode::kNotEnoughReplicas);
    return txn_route.shard->AddPartitions(
        req->transactional_id, req->producer_id.value(), req->producer_epoch, {offsets_partition},
        txn::kTransactionVersion2, [&broker, req, answer](ErrorCode error) {
          switch (error) {
            case ErrorCode::kNone:
              return CommitChecked(broker, *req, answer);
            case ErrorCode::kNotCoordinator:
            case ErrorCode::kCoordinatorLoadInProgress:
              return answer->All(ErrorCode::kNotEnoughReplicas);
            default:
              return answer->All(txn::VerificationError(error, /*abortable_known=*/true));
          }
        });
  }
  // KIP-890 part 1, as for Produce: the group's partition must be in the producer's
  // transaction (AddOffsetsToTxn), when the id's coordinator is this broker.
  if (txn_route.error == ErrorCode::kNone) {
    const ErrorCode error = txn::VerificationError(
        txn_route.shard->Verify(req->transactional_id, req->producer_id.value(),
                                req->producer_epoch, offsets_partition),
        version >= kFirstTransactionAbortableVersion);
    if (error != ErrorCode::kNone) return answer->All(error);
  }
  CommitChecked(broker, *req, answer);
}

}  // namespace runnel::brokerd
