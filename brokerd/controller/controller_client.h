// brokerd's client of runnel-controllerd (proto/runnel/controller.proto).
//
// It knows several controllers: the local one over its Unix socket (when this node runs the
// controller role) and every voter of the quorum over TCP. Any controller answers: one that
// does not lead forwards writes to the leader. A call goes to the first controller, in that
// order, whose channel is not failing, so a local controllerd being restarted sends calls to
// another voter meanwhile.
//
// Unary calls use gRPC's callback API and never block the loop: the completion runs on a
// gRPC thread and is posted to the loop, where `done` runs. The metadata watch runs on its
// own thread, reading the stream and posting each update to the loop; when the stream
// breaks it reconnects from the next offset it needs, with a capped backoff.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "brokerd/net/event_loop.h"
#include "brokerd/unary_calls.h"
#include "brokerd/watch_thread.h"
#include "proto/runnel/controller.grpc.pb.h"

namespace runnel::brokerd {

class ControllerClient {
 public:
  // `targets`: gRPC target strings ("unix:/run/controllerd.sock", "127.0.0.1:9093"), in
  // order of preference; at least one.
  ControllerClient(EventLoop& loop, const std::vector<std::string>& targets);
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
  void DescribeQuorum(std::chrono::milliseconds timeout,
                      Done<runnel::controller::DescribeQuorumResponse> done);
  void CreatePartitions(const runnel::controller::CreatePartitionsRequest& req,
                        std::chrono::milliseconds timeout,
                        Done<runnel::controller::CreatePartitionsResponse> done);
  void AlterConfigs(const runnel::controller::AlterConfigsRequest& req,
                    std::chrono::milliseconds timeout,
                    Done<runnel::controller::AlterConfigsResponse> done);
  void UpdateFeatures(const runnel::controller::UpdateFeaturesRequest& req,
                      std::chrono::milliseconds timeout,
                      Done<runnel::controller::UpdateFeaturesResponse> done);

  // Registers (again) from the loop, e.g. when a heartbeat is told the registration is gone.
  void RegisterBroker(const runnel::controller::RegisterBrokerRequest& req,
                      std::chrono::milliseconds timeout,
                      Done<runnel::controller::RegisterBrokerResponse> done);
  void BrokerHeartbeat(const runnel::controller::BrokerHeartbeatRequest& req,
                       std::chrono::milliseconds timeout,
                       Done<runnel::controller::BrokerHeartbeatResponse> done);
  void AllocateProducerIds(const runnel::controller::AllocateProducerIdsRequest& req,
                           std::chrono::milliseconds timeout,
                           Done<runnel::controller::AllocateProducerIdsResponse> done);

  // Blocking, for start-up only (not on the loop): registers this broker, retrying while
  // no controller answers (a quorum still forming), until `stop` is set or Stop() is called.
  // The last error then.
  grpc::Status RegisterBrokerBlocking(const runnel::controller::RegisterBrokerRequest& req,
                                      const std::atomic<bool>& stop,
                                      runnel::controller::RegisterBrokerResponse* resp);

  // Starts the watch thread. `apply` runs on the loop for each update, in log order.
  void StartWatch(std::function<void(const runnel::controller::MetadataUpdate&)> apply);
  // Stops the watch thread (cancels the stream) and waits for it; cancels the calls in
  // flight and waits for their completions, and refuses calls from then on. Call it after
  // the loop has stopped and before it is destroyed.
  void Stop();

 private:
  void WatchLoop();
  // The controller a new call goes to: the first whose channel is not in TRANSIENT_FAILURE,
  // else the one after the last pick (so every controller gets tried in turn).
  runnel::controller::ControllerService::Stub& PickStub();

  EventLoop& loop_;
  std::vector<std::string> targets_;
  std::vector<std::shared_ptr<grpc::Channel>> channels_;
  std::vector<std::unique_ptr<runnel::controller::ControllerService::Stub>> stubs_;
  std::atomic<size_t> rotate_{0};
  std::shared_ptr<InflightCalls> inflight_ = std::make_shared<InflightCalls>();

  std::function<void(const runnel::controller::MetadataUpdate&)> apply_;
  std::atomic<int64_t> next_offset_{0};
  // Last: its thread uses the members above. Its stop also ends RegisterBrokerBlocking.
  WatchThread watch_;
};

}  // namespace runnel::brokerd
