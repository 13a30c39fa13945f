// The gRPC face of the Controller (runnel.controller.ControllerService), synchronous API:
// each call runs on a gRPC thread; a WatchMetadata stream holds one gRPC thread while it
// lasts (there is one per broker).
//
// With a controller quorum, writes, BrokerHeartbeat and DescribeQuorum are answered by the
// leader: on another node the call is forwarded to the leader's ControllerService over TCP,
// within the caller's deadline, marked so the leader never forwards it again. While no leader
// is known the call waits (bounded by its deadline) and retries; a leader that is gone or no
// longer leads (UNAVAILABLE) is retried with the next one. After a forwarded write the answer
// waits (bounded) until this node has applied it, so this node's watchers already saw it. No
// leader within the deadline: UNAVAILABLE.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/util/mutex.h"
#include "controllerd/controller.h"
#include "proto/runnel/controller.grpc.pb.h"

namespace runnel::controllerd {

class ControllerServiceImpl final : public controller::ControllerService::Service {
 public:
  // `peers`: the ControllerService address ("host:port") of every voter by node id (the
  // controller.quorum.voters entries); empty for a single voter, which never forwards.
  explicit ControllerServiceImpl(Controller& controller, std::map<int32_t, std::string> peers = {});
  ~ControllerServiceImpl() override;

  grpc::Status CreateTopics(grpc::ServerContext* context,
                            const controller::CreateTopicsRequest* request,
                            controller::CreateTopicsResponse* response) override;
  grpc::Status DeleteTopics(grpc::ServerContext* context,
                            const controller::DeleteTopicsRequest* request,
                            controller::DeleteTopicsResponse* response) override;
  grpc::Status RegisterBroker(grpc::ServerContext* context,
                              const controller::RegisterBrokerRequest* request,
                              controller::RegisterBrokerResponse* response) override;
  grpc::Status DescribeCluster(grpc::ServerContext* context,
                               const controller::DescribeClusterRequest* request,
                               controller::DescribeClusterResponse* response) override;
  grpc::Status CreatePartitions(grpc::ServerContext* context,
                                const controller::CreatePartitionsRequest* request,
                                controller::CreatePartitionsResponse* response) override;
  grpc::Status AlterConfigs(grpc::ServerContext* context,
                            const controller::AlterConfigsRequest* request,
                            controller::AlterConfigsResponse* response) override;
  grpc::Status DescribeQuorum(grpc::ServerContext* context,
                              const controller::DescribeQuorumRequest* request,
                              controller::DescribeQuorumResponse* response) override;
  grpc::Status BrokerHeartbeat(grpc::ServerContext* context,
                               const controller::BrokerHeartbeatRequest* request,
                               controller::BrokerHeartbeatResponse* response) override;
  grpc::Status AllocateProducerIds(grpc::ServerContext* context,
                                   const controller::AllocateProducerIdsRequest* request,
                                   controller::AllocateProducerIdsResponse* response) override;
  grpc::Status UpdateFeatures(grpc::ServerContext* context,
                              const controller::UpdateFeaturesRequest* request,
                              controller::UpdateFeaturesResponse* response) override;
  grpc::Status WatchMetadata(grpc::ServerContext* context, const controller::WatchRequest* request,
                             grpc::ServerWriter<controller::MetadataUpdate>* writer) override;

 private:
  using Stub = controller::ControllerService::Stub;
  template <typename Request, typename Response>
  using Remote = grpc::Status (Stub::*)(grpc::ClientContext*, const Request&, Response*);

  // Runs a leader-only call: locally when this node leads, else on the leader (see above).
  // `applied` gives a write's metadata offset (-1 none) to wait for; null for a read.
  template <typename Request, typename Response>
  grpc::Status Route(grpc::ServerContext* context, const Request& request, Response* response,
                     const std::function<StatusOr<Response>(Deadline)>& local,
                     Remote<Request, Response> remote, int64_t (*applied)(const Response&));
  Stub* StubFor(int32_t id);

  Controller& controller_;
  const std::map<int32_t, std::string> peers_;
  Mutex mu_;
  std::map<int32_t, std::unique_ptr<Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace runnel::controllerd
