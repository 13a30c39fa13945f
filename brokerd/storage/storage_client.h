// brokerd's client of runnel-storaged (proto/runnel/storage.proto).
//
// Like ControllerClient: unary calls use gRPC's callback API and never block the loop; the
// completion runs on a gRPC thread and is posted to the loop, where `done` runs. The
// partition watch (WatchPartitions) runs on its own thread and posts every message to the
// loop; when the stream breaks (storaged restarted) it reconnects with a capped backoff, and
// the first message of each stream is a full snapshot.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "brokerd/net/event_loop.h"
#include "brokerd/unary_calls.h"
#include "brokerd/watch_thread.h"
#include "proto/runnel/storage.grpc.pb.h"

namespace runnel::brokerd {

class StorageClient {
 public:
  StorageClient(EventLoop& loop, const std::string& socket_path);
  ~StorageClient();

  template <typename Resp>
  using Done = UnaryDone<Resp>;

  // Each takes the request by value (moved into the call) and a timeout.
  void Append(storage::AppendRequest req, std::chrono::milliseconds timeout,
              Done<storage::AppendResponse> done);
  void Read(storage::ReadRequest req, std::chrono::milliseconds timeout,
            Done<storage::ReadResponse> done);
  void ListOffsets(storage::ListOffsetsRequest req, std::chrono::milliseconds timeout,
                   Done<storage::ListOffsetsResponse> done);
  void DeleteRecords(storage::DeleteRecordsRequest req, std::chrono::milliseconds timeout,
                     Done<storage::DeleteRecordsResponse> done);
  void OffsetsForLeaderEpoch(storage::OffsetsForLeaderEpochRequest req,
                             std::chrono::milliseconds timeout,
                             Done<storage::OffsetsForLeaderEpochResponse> done);
  void DescribeProducers(storage::DescribeProducersRequest req, std::chrono::milliseconds timeout,
                         Done<storage::DescribeProducersResponse> done);
  void DescribeLogDirs(std::chrono::milliseconds timeout,
                       Done<storage::DescribeLogDirsResponse> done);
  void CreatePartitions(storage::PartitionsRequest req, std::chrono::milliseconds timeout,
                        Done<storage::PartitionsResponse> done);
  void DeletePartitions(storage::PartitionsRequest req, std::chrono::milliseconds timeout,
                        Done<storage::PartitionsResponse> done);
  void UpdatePartitionConfigs(storage::PartitionsRequest req, std::chrono::milliseconds timeout,
                              Done<storage::PartitionsResponse> done);
  void GetPartitionStates(storage::GetPartitionStatesRequest req, std::chrono::milliseconds timeout,
                          Done<storage::GetPartitionStatesResponse> done);

  // Starts the watch thread. `apply` runs on the loop for each message; `snapshot` is true
  // for the first message of a stream (every partition's state, replacing what was known).
  // `lost` runs on the loop when a stream that had delivered messages breaks.
  void StartWatch(std::function<void(const storage::PartitionChange&, bool snapshot)> apply,
                  std::function<void()> lost);
  // Stops the watch thread (cancels the stream) and waits for it; cancels the calls in
  // flight and waits for their completions, and refuses calls from then on. Call it after
  // the loop has stopped and before it is destroyed.
  void Stop();

 private:
  void WatchLoop();

  EventLoop& loop_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<storage::StorageService::Stub> stub_;
  std::shared_ptr<InflightCalls> inflight_ = std::make_shared<InflightCalls>();

  std::function<void(const storage::PartitionChange&, bool)> apply_;
  std::function<void()> lost_;
  WatchThread watch_;  // last: its thread uses the members above
};

}  // namespace runnel::brokerd
