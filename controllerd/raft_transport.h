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
//
// Observers (brokers following the metadata log) have no address the voters know, so a voter
// cannot Deliver to them. Instead an observer's transport (options.observer) keeps one Attach
// stream open to every voter and hands what arrives on it to its receiver (SetReceiver); a
// voter's RaftServiceImpl registers each Attach stream with the voter's transport, whose
// Send() to an id that is not a peer then goes down that observer's stream, through the same
// bounded queue and batching as a Deliver sender. Observer -> voter messages still go by
// Deliver.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/util/mutex.h"
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

// Where received messages go: in order, from a gRPC or transport thread; must not block.
using RaftHandler = std::function<void(std::vector<raft::Message>)>;

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
  // This node is an observer (not in controller.quorum.voters): it keeps an Attach stream
  // open to every peer, and what the peers send comes back on those streams.
  bool observer = false;
};

class GrpcRaftTransport final : public raft::Transport {
 public:
  // Starts one sender thread per peer.
  explicit GrpcRaftTransport(RaftTransportOptions options);
  // Stops the senders (an in-flight call is cancelled) and the Attach streams (both ways,
  // as DetachObservers); what is queued is dropped.
  ~GrpcRaftTransport() override;

  // Only on an observer, once, before any traffic is expected: where the messages the peers
  // send on the Attach streams go. Opens those streams (one thread per peer, reconnecting
  // with a backoff of 50 ms doubling up to 1 s, back to 50 ms once a stream was accepted).
  // A voter does not need it: its RaftServiceImpl delivers what arrives.
  void SetReceiver(RaftHandler handler);

  // A voter: ends every observer's Attach stream and refuses new ones (messages to
  // observers are dropped from then on). Call before shutting the server down so that its
  // drain does not wait for the streams; the destructor does it too. Idempotent.
  void DetachObservers();

  // To a peer: queued for its Deliver sender. To another id: queued for the Attach stream
  // of that observer when one is open, else dropped. Never blocks.
  void Send(raft::Message message) override;

  // Messages dropped so far (queue full, unknown peer or unattached observer, failed call or
  // stream write), for tests and logs.
  uint64_t dropped() const;

  // Observers whose Attach stream is registered right now, for tests and logs.
  size_t attached_observers() const;

 private:
  friend class RaftServiceImpl;
  class Peer;
  class ObserverStreams;

  const RaftTransportOptions options_;
  std::shared_ptr<std::atomic<uint64_t>> dropped_;
  // Shared with RaftServiceImpl, whose Attach calls may outlive this transport.
  std::shared_ptr<ObserverStreams> observers_;
  Mutex receiver_mu_;
  // Set once by SetReceiver, before the Attach threads start.
  RaftHandler receiver_ ABSL_GUARDED_BY(receiver_mu_);
  std::map<raft::NodeId, std::unique_ptr<Peer>> peers_;
};

// The receiving side: every valid message of a batch addressed to `self` goes to `handler`,
// in order, from a gRPC thread. The handler must not block.
//
// Attach streams from observers are registered with `transport` (this node's own transport,
// which then sends what is addressed to an observer down its stream); without one, Attach is
// refused (UNIMPLEMENTED). `transport` only needs to be alive during the constructor: a
// stream outliving it is ended when it is destroyed. An Attach call returns once the
// observer goes, the transport is destroyed or DetachObservers is called, or the server
// cancels it (Shutdown with a deadline); so shut the server down with a deadline, or call
// DetachObservers first.
class RaftServiceImpl final : public raftpb::RaftService::Service {
 public:
  using Handler = RaftHandler;
  RaftServiceImpl(raft::NodeId self, Handler handler, GrpcRaftTransport* transport = nullptr);

  grpc::Status Deliver(grpc::ServerContext* context, const raftpb::RaftBatch* batch,
                       raftpb::DeliverReply* reply) override;
  grpc::Status Attach(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<raftpb::RaftBatch, raftpb::RaftBatch>* stream) override;

 private:
  // The valid messages of `batch` for this node, to the handler.
  void DeliverBatch(const raftpb::RaftBatch& batch);

  const raft::NodeId self_;
  const Handler handler_;
  const std::shared_ptr<GrpcRaftTransport::ObserverStreams> observers_;
};

}  // namespace runnel::controllerd
