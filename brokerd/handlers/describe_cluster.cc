// DescribeCluster (key 60), v0-v2: answered from the local metadata cache. The brokers are
// the unfenced ones; v2's IncludeFencedBrokers (KIP-1073) adds the fenced ones, marked
// IsFenced, as Kafka does. The controller id is chosen among the unfenced ones.
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using protocol::DescribeClusterRequest;
using protocol::DescribeClusterResponse;
using protocol::ErrorCode;

constexpr int8_t kEndpointTypeBroker = 1;

}  // namespace

void HandleDescribeCluster(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                           Respond respond) {
  DescribeClusterRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());

  DescribeClusterResponse resp;
  resp.endpoint_type = req.endpoint_type;
  if (req.endpoint_type != kEndpointTypeBroker) {
    resp.error_code = ErrorCode::kUnsupportedEndpointType;
    resp.error_message = "This endpoint serves brokers; controllers are not reachable here.";
    return respond(EncodeResponse(*ctx, resp));
  }
  resp.cluster_id = broker.metadata.cluster_id();
  std::vector<BrokerAddress> brokers = BrokersOnListener(broker.metadata, ctx->listener);
  resp.controller_id = NodeId(ControllerIdForClients(broker.metadata, brokers, broker.node_id));
  if (req.include_fenced_brokers) {
    brokers = BrokersOnListener(broker.metadata, ctx->listener, /*include_fenced=*/true);
  }
  for (BrokerAddress& b : brokers) {
    DescribeClusterResponse::DescribeClusterBroker out;
    out.broker_id = NodeId(b.id);
    out.host = std::move(b.host);
    out.port = b.port;
    out.rack = std::move(b.rack);
    out.is_fenced = b.fenced;
    resp.brokers.push_back(std::move(out));
  }
  if (req.include_cluster_authorized_operations) {
    resp.cluster_authorized_operations = kAllClusterOperations;
  }
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
