// The gRPC face of the Controller (runnel.controller.ControllerService), synchronous API:
// each call runs on a gRPC thread and takes the controller's lock; a WatchMetadata stream
// holds one gRPC thread while it lasts (there is one per broker).
#pragma once

#include <atomic>
#include <chrono>

#include "controllerd/controller.h"
#include "proto/runnel/controller.grpc.pb.h"

namespace runnel::controllerd {

class ControllerServiceImpl final : public controller::ControllerService::Service {
 public:
  explicit ControllerServiceImpl(Controller& controller) : controller_(controller) {}

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
  grpc::Status WatchMetadata(grpc::ServerContext* context, const controller::WatchRequest* request,
                             grpc::ServerWriter<controller::MetadataUpdate>* writer) override;

 private:
  Controller& controller_;
};

}  // namespace runnel::controllerd
