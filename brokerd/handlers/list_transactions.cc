// ListTransactions (key 66), v0-v2: the transactional ids of the __transaction_state
// partitions this broker leads (kafka-transactions.sh list asks every broker and merges).
//
// Filters, as Kafka: states by Kafka's names (a name it does not know is returned in
// UnknownStateFilters and matches nothing), producer ids, v1's DurationFilter (only
// transactions started longer ago than that many ms), v2's TransactionalIdPattern (a full
// match of the regular expression, RE2 syntax as Kafka's RE2/J; one that does not compile is
// INVALID_REGULAR_EXPRESSION). While a shard loads the answer is
// COORDINATOR_LOAD_IN_PROGRESS, so the client retries rather than miss ids.
#include <re2/re2.h>

#include <chrono>
#include <memory>
#include <set>

#include "brokerd/handlers/handler.h"
#include "brokerd/txn/txn_coordinator.h"

namespace runnel::brokerd {

using protocol::ErrorCode;
using protocol::ListTransactionsRequest;
using protocol::ListTransactionsResponse;

void HandleListTransactions(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                            Respond respond) {
  ListTransactionsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  ListTransactionsResponse resp;
  std::set<txn::TxnState> states;
  for (const std::string& name : req.state_filters) {
    if (auto s = txn::TxnStateFromName(name)) {
      states.insert(*s);
    } else {
      resp.unknown_state_filters.push_back(name);
    }
  }
  std::set<int64_t> producer_ids;
  for (ProducerId id : req.producer_id_filters) producer_ids.insert(id.value());
  std::unique_ptr<re2::RE2> pattern;
  if (req.transactional_id_pattern.has_value() && !req.transactional_id_pattern->empty()) {
    pattern = std::make_unique<re2::RE2>(*req.transactional_id_pattern, re2::RE2::Quiet);
    if (!pattern->ok()) {
      resp.error_code = ErrorCode::kInvalidRegularExpression;
      return respond(EncodeResponse(*ctx, resp));
    }
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (txn::TxnShard* shard : broker.txns.shards()) {
    if (shard->state() == txn::TxnShard::State::kLoading) {
      ListTransactionsResponse loading;
      loading.error_code = ErrorCode::kCoordinatorLoadInProgress;
      return respond(EncodeResponse(*ctx, loading));
    }
    for (const txn::TxnView& v : shard->List()) {
      const txn::TxnMetadata& m = v.metadata;
      if (m.state == txn::TxnState::kDead) continue;
      // Named filters that all were unknown match nothing.
      if (!req.state_filters.empty() && states.count(m.state) == 0) continue;
      if (!producer_ids.empty() && producer_ids.count(m.producer_id) == 0) continue;
      if (req.duration_filter >= 0 && now - m.start_timestamp_ms <= req.duration_filter) continue;
      if (pattern && !re2::RE2::FullMatch(m.transactional_id, *pattern)) continue;
      ListTransactionsResponse::TransactionState s;
      s.transactional_id = m.transactional_id;
      s.producer_id = ProducerId(m.producer_id);
      s.transaction_state = std::string(txn::TxnStateName(m.state));
      resp.transaction_states.push_back(std::move(s));
    }
  }
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
