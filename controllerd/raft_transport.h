// Raft messages between controllers over gRPC (proto/runnel/raft.proto), TCP.
//
// Sending: GrpcRaftTransport is the daemon's raft::Transport. Send() only queues: each peer
// has a bounded queue and one sender thread that delivers everything queued for that peer as
// one unary Deliver call (so messages to one peer keep their order), with the deadline
// controller.quorum.request.timeout.ms. A full queue drops the new message and a failed call
// drops its batch: Raft repairs both with its own retries (heartbeats, append timeouts,
// election timers), so the transport never blocks the driver thread and never buffers without
// bound for a peer that is down.
//
// Receiving: RaftServiceImpl converts a batch back and hands it to a handler (the Quorum's
// Deliver, which only queues it for the driver thread).
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/util/status.h"
#include "controllerd/raft/raft.h"
#include "proto/runnel/raft.grpc.pb.h"

namespace runnel::controllerd {

// raft::Message <-> its protobuf mirror. FromProto refuses an unknown message type.
raftpb::Message ToProto(const raft::Message& message);
StatusOr<raft::Message> FromProto(const raftpb::Message& message);

// An insecure TCP channel to another controller ("host:port") that reconnects quickly after
// the peer restarts (gRPC's default backoff grows to two minutes; an election is a second).
std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address);

struct RaftTransportOptions {
  raft::NodeId self = raft::kNoNode;
  // Every other controller that may get messages: id -> "host:port". Messages to an id not
  // here are dropped.
  std::map<raft::NodeId, std::string> peers;
  // controller.quorum.request.timeout.ms: the deadline of one Deliver call.
  int64_t request_timeout_ms = 2000;
  // Per peer: messages and bytes (entry data and snapshot chunks) queued at most.
  size_t queue_max_messages = 4096;
  size_t queue_max_bytes = 64 << 20;
  // Bytes of messages one Deliver call carries at most (always at least one message).
  size_t batch_max_bytes = 4 << 20;
};

class GrpcRaftTransport final : public raft::Transport {
 public:
  // Starts one sender thread per peer.
  explicit GrpcRaftTransport(RaftTransportOptions options);
  // Stops the senders (an in-flight call is cancelled); what is queued is dropped.
  ~GrpcRaftTransport() override;

  void Send(raft::Message message) override;

  // Messages dropped so far (queue full, unknown peer, failed call), for tests and logs.
  uint64_t dropped() const;

 private:
  class Peer;
  const RaftTransportOptions options_;
  std::map<raft::NodeId, std::unique_ptr<Peer>> peers_;
  std::shared_ptr<std::atomic<uint64_t>> dropped_;
};

// The receiving side: every valid message of a batch addressed to `self` goes to `handler`,
// in order, from a gRPC thread. The handler must not block.
class RaftServiceImpl final : public raftpb::RaftService::Service {
 public:
  using Handler = std::function<void(std::vector<raft::Message>)>;
  RaftServiceImpl(raft::NodeId self, Handler handler) : self_(self), handler_(std::move(handler)) {}

  grpc::Status Deliver(grpc::ServerContext* context, const raftpb::RaftBatch* batch,
                       raftpb::DeliverReply* reply) override;

 private:
  const raft::NodeId self_;
  const Handler handler_;
};

}  // namespace runnel::controllerd
