// brokerd's client of runnel-controllerd (proto/runnel/controller.proto).
//
// Unary calls use gRPC's callback API and never block the loop: the completion runs on a
// gRPC thread and is posted to the loop, where `done` runs. The metadata watch runs on its
// own thread, reading the stream and posting each update to the loop; when the stream
// breaks it reconnects from the next offset it needs, with a capped backoff.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "brokerd/net/event_loop.h"
#include "proto/runnel/controller.grpc.pb.h"

namespace runnel::brokerd {

class ControllerClient {
 public:
  ControllerClient(EventLoop& loop, const std::string& socket_path);
  ~ControllerClient();

  template <typename Resp>
  using Done = std::function<void(const grpc::Status&, const Resp&)>;

  void CreateTopics(const runnel::controller::CreateTopicsRequest& req,
                    std::chrono::milliseconds timeout,
                    Done<runnel::controller::CreateTopicsResponse> done);
  void DeleteTopics(const runnel::controller::DeleteTopicsRequest& req,
                    std::chrono::milliseconds timeout,
                    Done<runnel::controller::DeleteTopicsResponse> done);
  void DescribeCluster(std::chrono::milliseconds timeout,
                       Done<runnel::controller::DescribeClusterResponse> done);
  void CreatePartitions(const runnel::controller::CreatePartitionsRequest& req,
                        std::chrono::milliseconds timeout,
                        Done<runnel::controller::CreatePartitionsResponse> done);
  void AlterConfigs(const runnel::controller::AlterConfigsRequest& req,
                    std::chrono::milliseconds timeout,
                    Done<runnel::controller::AlterConfigsResponse> done);

  // Blocking, for start-up only (not on the loop): registers this broker, retrying while
  // the controller is unreachable, until `deadline`.
  grpc::Status RegisterBrokerBlocking(const runnel::controller::RegisterBrokerRequest& req,
                                      std::chrono::system_clock::time_point deadline,
                                      runnel::controller::RegisterBrokerResponse* resp);

  // Starts the watch thread. `apply` runs on the loop for each update, in log order.
  void StartWatch(std::function<void(const runnel::controller::MetadataUpdate&)> apply);
  // Stops the watch thread (cancels the stream) and waits for it.
  void Stop();

 private:
  void WatchLoop();

  EventLoop& loop_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<runnel::controller::ControllerService::Stub> stub_;

  std::function<void(const runnel::controller::MetadataUpdate&)> apply_;
  std::thread watch_thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  grpc::ClientContext* watch_ctx_ = nullptr;  // guarded by mu_
  std::atomic<int64_t> next_offset_{0};
};

}  // namespace runnel::brokerd
