// DescribeQuorum (key 55), v0-v2: the metadata quorum as its leader sees it. Like a Kafka
// broker, brokerd passes it to the controllers (any controller forwards it to the leader).
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"
#include "common/config/config.h"
#include "common/config/quorum_voters.h"

namespace runnel::brokerd {
namespace {

using protocol::DescribeQuorumRequest;
using protocol::DescribeQuorumResponse;
using protocol::ErrorCode;
namespace ctl = runnel::controller;

constexpr std::string_view kMetadataTopic = "__cluster_metadata";

// Kafka's rule: the request names exactly the one metadata partition.
bool NamesTheMetadataPartition(const DescribeQuorumRequest& req) {
  return req.topics.size() == 1 && req.topics[0].topic_name == kMetadataTopic &&
         req.topics[0].partitions.size() == 1 && req.topics[0].partitions[0].partition_index == 0;
}

// Every partition asked about, with `error` (Kafka answers a wrong partition this way).
DescribeQuorumResponse PartitionErrors(const DescribeQuorumRequest& req, ErrorCode error,
                                       const std::string& message) {
  DescribeQuorumResponse resp;
  for (const auto& t : req.topics) {
    DescribeQuorumResponse::TopicData topic;
    topic.topic_name = t.topic_name;
    for (const auto& p : t.partitions) {
      DescribeQuorumResponse::PartitionData out;
      out.partition_index = p.partition_index;
      out.error_code = error;
      out.error_message = message;
      out.leader_id = NodeId(-1);
      out.leader_epoch = -1;
      out.high_watermark = -1;
      topic.partitions.push_back(std::move(out));
    }
    resp.topics.push_back(std::move(topic));
  }
  return resp;
}

std::vector<DescribeQuorumResponse::ReplicaState> Replicas(
    const google::protobuf::RepeatedPtrField<ctl::QuorumReplicaState>& in) {
  std::vector<DescribeQuorumResponse::ReplicaState> out;
  for (const auto& r : in) {
    DescribeQuorumResponse::ReplicaState s;
    s.replica_id = NodeId(r.replica_id());
    s.log_end_offset = r.log_end_offset();
    s.last_fetch_timestamp = r.last_fetch_timestamp();
    s.last_caught_up_timestamp = r.last_caught_up_timestamp();
    out.push_back(std::move(s));
  }
  return out;
}

// v2's Nodes: where each voter listens for the quorum (`controller.quorum.voters`). A
// single-voter node has no controller listener, so none is listed.
std::vector<DescribeQuorumResponse::Node> VoterNodes(const config::Config& config) {
  std::vector<DescribeQuorumResponse::Node> nodes;
  auto voters = config::ParseQuorumVoters(config.GetString("controller.quorum.voters"));
  if (!voters.ok()) return nodes;  // validated at start-up
  for (const config::QuorumVoter& v : *voters) {
    DescribeQuorumResponse::Node node;
    node.node_id = NodeId(v.id);
    DescribeQuorumResponse::Listener listener;
    listener.name = "CONTROLLER";
    listener.host = v.host;
    listener.port = static_cast<uint16_t>(v.port);
    node.listeners.push_back(std::move(listener));
    nodes.push_back(std::move(node));
  }
  return nodes;
}

}  // namespace

void HandleDescribeQuorum(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                          Respond respond) {
  DescribeQuorumRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  if (!NamesTheMetadataPartition(req)) {
    return respond(EncodeResponse(
        *ctx, PartitionErrors(req, ErrorCode::kUnknownTopicOrPartition,
                              "DescribeQuorum describes only __cluster_metadata partition 0")));
  }
  std::shared_ptr<RequestContext> shared_ctx = std::move(ctx);
  broker.controller.DescribeQuorum(
      std::chrono::seconds(5),
      [&broker, shared_ctx, req, respond](const grpc::Status& status,
                                          const ctl::DescribeQuorumResponse& result) {
        if (!status.ok()) {
          KafkaLog()->warn("DescribeQuorum: controller call failed: {}", status.error_message());
          return respond(EncodeResponse(
              *shared_ctx,
              PartitionErrors(req, ControllerCallError(status), status.error_message())));
        }
        if (result.error_code() != 0) {
          return respond(EncodeResponse(
              *shared_ctx, PartitionErrors(req, static_cast<ErrorCode>(result.error_code()),
                                           result.error_message())));
        }
        DescribeQuorumResponse resp;
        DescribeQuorumResponse::PartitionData p;
        p.partition_index = 0;
        p.error_message = std::nullopt;
        p.leader_id = NodeId(result.leader_id());
        p.leader_epoch = static_cast<int32_t>(result.leader_epoch());
        p.high_watermark = result.high_watermark();
        p.current_voters = Replicas(result.voters());
        p.observers = Replicas(result.observers());
        DescribeQuorumResponse::TopicData topic;
        topic.topic_name = std::string(kMetadataTopic);
        topic.partitions.push_back(std::move(p));
        resp.topics.push_back(std::move(topic));
        resp.error_message = std::nullopt;
        resp.nodes = VoterNodes(broker.config);
        respond(EncodeResponse(*shared_ctx, resp));
      });
}

}  // namespace runnel::brokerd
