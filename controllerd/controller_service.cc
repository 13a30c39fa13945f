#include "controllerd/controller_service.h"

#include <exception>

#include "common/log/log.h"

namespace runnel::controllerd {
namespace {

// How often a waiting WatchMetadata stream looks whether its client went away.
constexpr std::chrono::milliseconds kWatchPoll{200};

// Every gRPC callback is an entry point: an exception fails only this call.
template <typename Fn>
grpc::Status Guard(const char* method, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    log::Get("controllerd.grpc")->error("{} failed: {}", method, e.what());
    return grpc::Status(grpc::StatusCode::INTERNAL, std::string(method) + ": " + e.what());
  } catch (...) {
    log::Get("controllerd.grpc")->error("{} failed with an unknown exception", method);
    return grpc::Status(grpc::StatusCode::INTERNAL, std::string(method) + " failed");
  }
}

template <typename T>
grpc::Status Answer(StatusOr<T> result, T* response) {
  if (!result.ok()) return ToGrpc(result.status());
  *response = std::move(*result);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status ControllerServiceImpl::CreateTopics(grpc::ServerContext*,
                                                 const controller::CreateTopicsRequest* request,
                                                 controller::CreateTopicsResponse* response) {
  return Guard("CreateTopics",
               [&] { return Answer(controller_.CreateTopics(*request), response); });
}

grpc::Status ControllerServiceImpl::DeleteTopics(grpc::ServerContext*,
                                                 const controller::DeleteTopicsRequest* request,
                                                 controller::DeleteTopicsResponse* response) {
  return Guard("DeleteTopics",
               [&] { return Answer(controller_.DeleteTopics(*request), response); });
}

grpc::Status ControllerServiceImpl::RegisterBroker(grpc::ServerContext*,
                                                   const controller::RegisterBrokerRequest* request,
                                                   controller::RegisterBrokerResponse* response) {
  return Guard("RegisterBroker",
               [&] { return Answer(controller_.RegisterBroker(*request), response); });
}

grpc::Status ControllerServiceImpl::DescribeCluster(grpc::ServerContext*,
                                                    const controller::DescribeClusterRequest*,
                                                    controller::DescribeClusterResponse* response) {
  return Guard("DescribeCluster", [&] { return Answer(controller_.DescribeCluster(), response); });
}

grpc::Status ControllerServiceImpl::CreatePartitions(
    grpc::ServerContext*, const controller::CreatePartitionsRequest* request,
    controller::CreatePartitionsResponse* response) {
  return Guard("CreatePartitions",
               [&] { return Answer(controller_.CreatePartitions(*request), response); });
}

grpc::Status ControllerServiceImpl::AlterConfigs(grpc::ServerContext*,
                                                 const controller::AlterConfigsRequest* request,
                                                 controller::AlterConfigsResponse* response) {
  return Guard("AlterConfigs",
               [&] { return Answer(controller_.AlterConfigs(*request), response); });
}

grpc::Status ControllerServiceImpl::WatchMetadata(
    grpc::ServerContext* context, const controller::WatchRequest* request,
    grpc::ServerWriter<controller::MetadataUpdate>* writer) {
  return Guard("WatchMetadata", [&]() -> grpc::Status {
    StatusOr<std::shared_ptr<Watcher>> watcher = controller_.Watch(request->from_offset());
    if (!watcher.ok()) return ToGrpc(watcher.status());
    grpc::Status result = grpc::Status::OK;
    while (true) {
      if (context->IsCancelled()) {
        result = grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away");
        break;
      }
      StatusOr<UpdatePtr> next = (*watcher)->Next(kWatchPoll);
      if (!next.ok()) {
        result = ToGrpc(next.status());
        break;
      }
      if (*next == nullptr) continue;
      if (!writer->Write(**next)) {
        result = grpc::Status(grpc::StatusCode::CANCELLED, "watcher stream broken");
        break;
      }
    }
    controller_.Unwatch(*watcher);
    return result;
  });
}

}  // namespace runnel::controllerd
