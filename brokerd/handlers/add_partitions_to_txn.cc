// AddPartitionsToTxn (key 24), v0-v5: partitions joining a producer's transaction, at the
// transactional id's coordinator (txn/txn_coordinator.h).
//
// v0-v3 are the client's: one transaction. As in Kafka, when a partition does not exist
// every named partition is answered, that one UNKNOWN_TOPIC_OR_PARTITION and the others
// OPERATION_NOT_ATTEMPTED, and nothing is added; otherwise the coordinator's answer
// (NONE, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS, INVALID_PRODUCER_ID_MAPPING, ...) goes on
// every partition. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.
//
// v4-v5 are a partition leader's (KIP-890): several transactions at once, each either added
// or, with VerifyOnly, checked: is the partition in the producer's ongoing transaction
// (per partition: NONE or TRANSACTION_ABORTABLE, or the transaction's error on all). A leader
// adds partitions for a transaction.version 2 client (Produce v12+), so such a transaction
// ends by v2's rules when the coordinator aborts it.
#include "brokerd/handlers/handler.h"
#include "brokerd/txn/txn_coordinator.h"

namespace runnel::brokerd {
namespace {

using protocol::AddPartitionsToTxnRequest;
using protocol::AddPartitionsToTxnResponse;
using protocol::ErrorCode;

constexpr int16_t kFencedSince = 2;
constexpr int16_t kFirstBatchedVersion = 4;

using TopicResult = AddPartitionsToTxnResponse::AddPartitionsToTxnTopicResult;
using Topics = std::vector<AddPartitionsToTxnRequest::AddPartitionsToTxnTopic>;

// Every partition of `topics` with `error`.
std::vector<TopicResult> AllWith(const Topics& topics, ErrorCode error) {
  std::vector<TopicResult> out;
  out.reserve(topics.size());
  for (const auto& t : topics) {
    TopicResult r;
    r.name = t.name;
    r.results_by_partition.reserve(t.partitions.size());
    for (int32_t p : t.partitions) {
      auto& result = r.results_by_partition.emplace_back();
      result.partition_index = p;
      result.partition_error_code = error;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// UNKNOWN_TOPIC_OR_PARTITION for partitions that do not exist, OPERATION_NOT_ATTEMPTED for the
// rest; nullopt when all exist.
std::optional<std::vector<TopicResult>> MissingPartitions(const BrokerContext& broker,
                                                          const Topics& topics) {
  bool any = false;
  std::vector<TopicResult> out = AllWith(topics, ErrorCode::kOperationNotAttempted);
  for (size_t i = 0; i < topics.size(); ++i) {
    const TopicInfo* info = broker.metadata.FindTopic(topics[i].name);
    for (auto& r : out[i].results_by_partition) {
      if (info == nullptr || info->partitions.count(r.partition_index) == 0) {
        r.partition_error_code = ErrorCode::kUnknownTopicOrPartition;
        any = true;
      }
    }
  }
  if (!any) return std::nullopt;
  return out;
}

txn::TxnPartitions ToSet(const Topics& topics) {
  txn::TxnPartitions out;
  for (const auto& t : topics) {
    for (int32_t p : t.partitions) out.emplace(t.name, p);
  }
  return out;
}

// One transaction: adds its partitions (or verifies them) and calls `done` with the results.
void AddOne(BrokerContext& broker, const std::string& id, int64_t producer_id,
            int16_t producer_epoch, const Topics& topics, bool verify_only, int16_t version,
            const std::function<void(std::vector<TopicResult>)>& done) {
  if (id.empty()) return done(AllWith(topics, ErrorCode::kInvalidRequest));
  if (auto missing = MissingPartitions(broker, topics)) return done(std::move(*missing));
  txn::TxnCoordinator::Route route = broker.txns.RouteId(id);
  if (route.error != ErrorCode::kNone) return done(AllWith(topics, route.error));
  if (verify_only) {
    std::vector<TopicResult> out = AllWith(topics, ErrorCode::kNone);
    for (TopicResult& t : out) {
      for (auto& r : t.results_by_partition) {
        r.partition_error_code =
            route.shard->Verify(id, producer_id, producer_epoch, {t.name, r.partition_index});
      }
    }
    return done(std::move(out));
  }
  // Kafka's rule: a leader adding partitions (v4+) does so for a transaction.version 2 client.
  const int16_t client_version = version >= kFirstBatchedVersion ? txn::kTransactionVersion2 : 0;
  route.shard->AddPartitions(
      id, producer_id, producer_epoch, ToSet(topics), client_version,
      [topics, version, done](ErrorCode error) {
        done(AllWith(topics, txn::FencedForVersion(error, version, kFencedSince)));
      });
}

}  // namespace

void HandleAddPartitionsToTxn(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                              Respond respond) {
  auto req = std::make_shared<AddPartitionsToTxnRequest>();
  if (!DecodeRequest(*ctx, req.get())) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);

  if (version < kFirstBatchedVersion) {
    return AddOne(broker, req->v3_and_below_transactional_id, req->v3_and_below_producer_id.value(),
                  req->v3_and_below_producer_epoch, req->v3_and_below_topics, /*verify_only=*/false,
                  version, [shared_ctx, respond](std::vector<TopicResult> results) {
                    AddPartitionsToTxnResponse resp;
                    resp.results_by_topic_v3_and_below = std::move(results);
                    respond(EncodeResponse(*shared_ctx, resp));
                  });
  }
  auto resp = std::make_shared<AddPartitionsToTxnResponse>();
  resp->results_by_transaction.resize(req->transactions.size());
  auto remaining = std::make_shared<size_t>(req->transactions.size());
  if (*remaining == 0) return respond(EncodeResponse(*shared_ctx, *resp));
  for (size_t i = 0; i < req->transactions.size(); ++i) {
    const auto& t = req->transactions[i];
    resp->results_by_transaction[i].transactional_id = t.transactional_id;
    AddOne(broker, t.transactional_id, t.producer_id.value(), t.producer_epoch, t.topics,
           t.verify_only, version,
           [shared_ctx, respond, resp, remaining, i](std::vector<TopicResult> results) {
             resp->results_by_transaction[i].topic_results = std::move(results);
             if (--*remaining == 0) respond(EncodeResponse(*shared_ctx, *resp));
           });
  }
}

}  // namespace runnel::brokerd
