// Producer ids for InitProducerId, handed out from blocks the controller allocates (Kafka's
// RPCProducerIdManager): the controller writes each block to the metadata log before it
// answers, so no id is given twice across brokers, restarts and controller failovers.
//
// A broker asks for the next block when 90% of the current one is used, so a steady stream
// of InitProducerId rarely waits. A request arriving when no id is left waits for the block
// being fetched; when that fetch fails, it is answered COORDINATOR_LOAD_IN_PROGRESS, which
// clients retry (as Kafka answers while its block has not come yet). Ids of a block not used
// before a restart are never used (as in Kafka).
//
// Loop thread only.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>

#include "common/protocol/error_code.h"
#include "proto/runnel/controller.pb.h"

namespace runnel::brokerd {

class ProducerIdManager {
 public:
  using Allocated = std::function<void(const grpc::Status&,
                                       const runnel::controller::AllocateProducerIdsResponse&)>;
  // Asks the controller for a block and calls back on the loop (ControllerClient in
  // production; a test's fake).
  using Allocate = std::function<void(Allocated)>;
  // An id, or an error (the id then -1).
  using Done = std::function<void(protocol::ErrorCode, int64_t producer_id)>;

  // Waiters beyond this are answered COORDINATOR_LOAD_IN_PROGRESS at once.
  static constexpr size_t kMaxWaiters = 10000;

  explicit ProducerIdManager(Allocate allocate) : allocate_(std::move(allocate)) {}

  // The next id: at once when the block has one, else once the next block comes.
  void Next(Done done);

  // For tests.
  bool fetching() const { return fetching_; }
  size_t waiters() const { return waiters_.size(); }

 private:
  struct Block {
    int64_t next = 0;  // the next id to hand out
    int64_t end = 0;   // one past the block's last id
    int64_t size = 0;
  };
  void MaybePrefetch();
  void Fetch();
  void OnAllocated(const grpc::Status& status,
                   const runnel::controller::AllocateProducerIdsResponse& response);

  Allocate allocate_;
  Block current_;
  std::optional<Block> next_;  // fetched ahead of need
  bool fetching_ = false;
  std::deque<Done> waiters_;
};

}  // namespace runnel::brokerd
