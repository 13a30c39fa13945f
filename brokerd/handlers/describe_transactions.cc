// DescribeTransactions (key 65), v0: the state of transactional ids at their coordinator
// (kafka-transactions.sh describe): routing errors per id (NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS), TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator does not
// know, else its state name, timeout, start time, producer id and epoch and the partitions of
// its ongoing transaction, by topic.
#include <map>

#include "brokerd/handlers/handler.h"
#include "brokerd/txn/txn_coordinator.h"

namespace runnel::brokerd {

using protocol::DescribeTransactionsRequest;
using protocol::DescribeTransactionsResponse;
using protocol::ErrorCode;

void HandleDescribeTransactions(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                                Respond respond) {
  DescribeTransactionsRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  DescribeTransactionsResponse resp;
  for (const std::string& id : req.transactional_ids) {
    DescribeTransactionsResponse::TransactionState s;
    s.transactional_id = id;
    s.transaction_state = "";
    s.producer_id = ProducerId(-1);
    s.producer_epoch = -1;
    txn::TxnCoordinator::Route route = broker.txns.RouteId(id);
    std::optional<txn::TxnView> view;
    if (route.error == ErrorCode::kNone) view = route.shard->Describe(id);
    if (route.error != ErrorCode::kNone) {
      s.error_code = route.error;
    } else if (!view.has_value() || view->metadata.state == txn::TxnState::kDead) {
      s.error_code = ErrorCode::kTransactionalIdNotFound;
    } else {
      const txn::TxnMetadata& m = view->metadata;
      s.transaction_state = std::string(txn::TxnStateName(m.state));
      s.transaction_timeout_ms = m.timeout_ms;
      s.transaction_start_time_ms = m.start_timestamp_ms;
      s.producer_id = ProducerId(m.producer_id);
      s.producer_epoch = m.producer_epoch;
      std::map<std::string, std::vector<int32_t>> by_topic;
      for (const auto& [topic, partition] : m.partitions) by_topic[topic].push_back(partition);
      for (auto& [topic, partitions] : by_topic) {
        DescribeTransactionsResponse::TopicData t;
        t.topic = topic;
        t.partitions = std::move(partitions);
        s.topics.push_back(std::move(t));
      }
    }
    resp.transaction_states.push_back(std::move(s));
  }
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
