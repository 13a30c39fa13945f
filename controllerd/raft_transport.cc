#include "controllerd/raft_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <set>
#include <thread>

#include "common/log/log.h"

namespace runnel::controllerd {
namespace {

const log::ModuleLogger kLog("controllerd.raft");

struct TypePair {
  raft::MessageType type;
  raftpb::MessageType proto;
};
constexpr TypePair kTypes[] = {
    {raft::MessageType::kPreVote, raftpb::PRE_VOTE},
    {raft::MessageType::kPreVoteResponse, raftpb::PRE_VOTE_RESPONSE},
    {raft::MessageType::kVote, raftpb::VOTE},
    {raft::MessageType::kVoteResponse, raftpb::VOTE_RESPONSE},
    {raft::MessageType::kAppend, raftpb::APPEND},
    {raft::MessageType::kAppendResponse, raftpb::APPEND_RESPONSE},
    {raft::MessageType::kSnapshot, raftpb::SNAPSHOT},
    {raft::MessageType::kSnapshotResponse, raftpb::SNAPSHOT_RESPONSE},
    {raft::MessageType::kTimeoutNow, raftpb::TIMEOUT_NOW},
    {raft::MessageType::kObserve, raftpb::OBSERVE},
    {raft::MessageType::kObserveResponse, raftpb::OBSERVE_RESPONSE},
};

raftpb::MessageType TypeToProto(raft::MessageType type) {
  for (const TypePair& p : kTypes) {
    if (p.type == type) return p.proto;
  }
  return raftpb::MESSAGE_TYPE_UNKNOWN;
}

// What a message costs in a queue and a batch: its payload bytes plus a fixed overhead.
size_t MessageBytes(const raft::Message& m) {
  size_t n = 64 + m.chunk.size();
  for (const raft::Entry& e : m.entries) n += 24 + e.data.size();
  return n;
}

// The valid messages of a batch from `from` to `self`; a message this version does not know
// is dropped (Raft treats it as lost), and so is one whose ends do not match the batch's.
std::vector<raft::Message> ValidMessages(const raftpb::RaftBatch& batch, raft::NodeId self) {
  std::vector<raft::Message> messages;
  messages.reserve(batch.messages_size());
  for (const raftpb::Message& p : batch.messages()) {
    StatusOr<raft::Message> m = FromProto(p);
    if (!m.ok() || m->to != self || m->from != batch.from()) continue;
    messages.push_back(std::move(*m));
  }
  return messages;
}

// Reconnecting an observer's Attach stream: quick after a voter restarts, capped while it is
// down.
constexpr std::chrono::milliseconds kAttachBackoffMin(50);
constexpr std::chrono::milliseconds kAttachBackoffMax(1000);
// How often an Attach call on a voter with nothing to send checks whether it was cancelled.
constexpr std::chrono::milliseconds kAttachCancelPoll(100);

// The messages waiting for one destination (a peer's Deliver sender or an observer's Attach
// stream): bounded in count and bytes, taken out in batches of at most batch_max_bytes (at
// least one message), in order. Push never blocks: a full queue drops the new message.
class SendQueue {
 public:
  SendQueue(const RaftTransportOptions& options, std::shared_ptr<std::atomic<uint64_t>> dropped)
      : max_messages_(options.queue_max_messages),
        max_bytes_(options.queue_max_bytes),
        batch_max_bytes_(options.batch_max_bytes),
        dropped_(std::move(dropped)) {}

  void Push(raft::Message message) {
    const size_t bytes = MessageBytes(message);
    {
      MutexLock lock(&mu_);
      if (stopped_ || queue_.size() >= max_messages_ ||
          (!queue_.empty() && queued_bytes_ + bytes > max_bytes_)) {
        ++*dropped_;
        return;
      }
      queued_bytes_ += bytes;
      queue_.push_back({std::move(message), bytes});
    }
    cv_.Signal();
  }

  // Waits up to `wait` for messages and moves the oldest into `batch`; returns how many (0:
  // stopped, or nothing came).
  size_t Pop(raftpb::RaftBatch* batch, std::chrono::milliseconds wait) {
    MutexLock lock(&mu_);
    cv_.WaitFor(&mu_, wait,
                [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_ || !queue_.empty(); });
    if (stopped_) return 0;
    size_t count = 0;
    size_t bytes = 0;
    while (!queue_.empty() && (count == 0 || bytes + queue_.front().bytes <= batch_max_bytes_)) {
      bytes += queue_.front().bytes;
      queued_bytes_ -= queue_.front().bytes;
      *batch->add_messages() = ToProto(queue_.front().message);
      queue_.pop_front();
      ++count;
    }
    return count;
  }

  // Wakes every waiter; from now on Pop returns nothing and Push drops.
  void Stop() {
    {
      MutexLock lock(&mu_);
      stopped_ = true;
    }
    cv_.SignalAll();
  }

  bool stopped() const {
    MutexLock lock(&mu_);
    return stopped_;
  }

  // Sleeps `wait` unless stopped first; returns whether it is stopped.
  bool SleepUnlessStopped(std::chrono::milliseconds wait) {
    MutexLock lock(&mu_);
    return cv_.WaitFor(&mu_, wait, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; });
  }

 private:
  struct Queued {
    raft::Message message;
    size_t bytes;
  };

  const size_t max_messages_;
  const size_t max_bytes_;
  const size_t batch_max_bytes_;
  const std::shared_ptr<std::atomic<uint64_t>> dropped_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

raftpb::Message ToProto(const raft::Message& m) {
  raftpb::Message p;
  p.set_type(TypeToProto(m.type));
  p.set_from(m.from);
  p.set_to(m.to);
  p.set_term(m.term);
  p.set_last_offset(m.last_offset);
  p.set_last_term(m.last_term);
  p.set_transfer(m.transfer);
  p.set_granted(m.granted);
  p.set_prev_offset(m.prev_offset);
  p.set_prev_term(m.prev_term);
  p.mutable_entries()->Reserve(static_cast<int>(m.entries.size()));
  for (const raft::Entry& e : m.entries) {
    raftpb::Entry* pe = p.add_entries();
    pe->set_offset(e.offset);
    pe->set_term(e.term);
    pe->set_data(e.data);
  }
  p.set_commit(m.commit);
  p.set_seq(m.seq);
  p.set_success(m.success);
  p.set_match_offset(m.match_offset);
  p.set_hint_offset(m.hint_offset);
  p.set_snapshot_end_offset(m.snapshot.end_offset);
  p.set_snapshot_epoch(m.snapshot.epoch);
  p.set_chunk_offset(m.chunk_offset);
  p.set_chunk(m.chunk);
  p.set_done(m.done);
  p.set_leader(m.leader);
  return p;
}

StatusOr<raft::Message> FromProto(const raftpb::Message& p) {
  raft::Message m;
  bool known = false;
  for (const TypePair& t : kTypes) {
    if (t.proto == p.type()) {
      m.type = t.type;
      known = true;
    }
  }
  if (!known) {
    return absl::InvalidArgumentError(fmt::format("unknown raft message type {}", p.type()));
  }
  m.from = p.from();
  m.to = p.to();
  m.term = p.term();
  m.last_offset = p.last_offset();
  m.last_term = p.last_term();
  m.transfer = p.transfer();
  m.granted = p.granted();
  m.prev_offset = p.prev_offset();
  m.prev_term = p.prev_term();
  m.entries.reserve(p.entries_size());
  for (const raftpb::Entry& e : p.entries()) {
    m.entries.push_back(raft::Entry{e.offset(), e.term(), e.data()});
  }
  m.commit = p.commit();
  m.seq = p.seq();
  m.success = p.success();
  m.match_offset = p.match_offset();
  m.hint_offset = p.hint_offset();
  m.snapshot = raft::SnapshotId{p.snapshot_end_offset(), p.snapshot_epoch()};
  m.chunk_offset = p.chunk_offset();
  m.chunk = p.chunk();
  m.done = p.done();
  m.leader = p.leader();
  return m;
}

std::shared_ptr<grpc::Channel> PeerChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// ---- GrpcRaftTransport ------------------------------------------------------------------

// One other voter: a Deliver sender, and on an observer a thread keeping an Attach stream
// open to it.
class GrpcRaftTransport::Peer {
 public:
  Peer(const RaftTransportOptions& options, raft::NodeId id, const std::string& address,
       std::shared_ptr<std::atomic<uint64_t>> dropped)
      : options_(options),
        id_(id),
        address_(address),
        dropped_(std::move(dropped)),
        queue_(options, dropped_),
        stub_(raftpb::RaftService::NewStub(PeerChannel(address))),
        sender_([this] { RunSender(); }) {}

  ~Peer() {
    queue_.Stop();
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      if (call_ != nullptr) call_->TryCancel();
      if (attach_call_ != nullptr) attach_call_->TryCancel();
    }
    sender_.join();
    if (attacher_.joinable()) attacher_.join();
  }

  void Push(raft::Message message) { queue_.Push(std::move(message)); }

  // Keeps an Attach stream open to this peer from now on, handing what arrives to `handler`
  // (which must outlive this Peer). Once.
  void StartAttach(const RaftHandler* handler) {
    attacher_ = std::thread([this, handler] { RunAttach(*handler); });
  }

 private:
  void RunSender() {
    while (true) {
      raftpb::RaftBatch batch;
      batch.set_from(options_.self);
      batch.set_to(id_);
      const size_t count = queue_.Pop(&batch, std::chrono::milliseconds(1000));
      if (queue_.stopped()) return;
      if (count == 0) continue;
      grpc::ClientContext context;
      {
        MutexLock lock(&mu_);
        if (stopping_) return;
        call_ = &context;
      }
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(options_.request_timeout_ms));
      raftpb::DeliverReply reply;
      grpc::Status status = stub_->Deliver(&context, batch, &reply);
      {
        MutexLock lock(&mu_);
        call_ = nullptr;
      }
      if (status.ok()) {
        if (failing_) kLog()->info("controller {} at {} is reachable again", id_, address_);
        failing_ = false;
        continue;
      }
      *dropped_ += count;
      if (!failing_) {
        kLog()->warn("cannot reach controller {} at {}: {} (Raft retries)", id_, address_,
                     status.error_message());
      }
      failing_ = true;
      // A peer that is down fails each call at once; pausing keeps a full queue from spinning.
      if (queue_.SleepUnlessStopped(std::chrono::milliseconds(20))) return;
    }
  }

  // The observer's side of Attach: open, say who we are, read until the stream ends, again.
  void RunAttach(const RaftHandler& handler) {
    std::chrono::milliseconds backoff = kAttachBackoffMin;
    bool failing = false;
    while (true) {
      grpc::ClientContext context;
      {
        MutexLock lock(&mu_);
        if (stopping_) return;
        attach_call_ = &context;
      }
      bool accepted = false;
      std::unique_ptr<grpc::ClientReaderWriter<raftpb::RaftBatch, raftpb::RaftBatch>> stream =
          stub_->Attach(&context);
      raftpb::RaftBatch hello;
      hello.set_from(options_.self);
      hello.set_to(id_);
      if (stream->Write(hello)) {
        raftpb::RaftBatch batch;
        while (stream->Read(&batch)) {
          if (!accepted) {
            // The voter's empty first batch: it has registered this stream.
            accepted = true;
            backoff = kAttachBackoffMin;
            if (failing) kLog()->info("attached to controller {} at {} again", id_, address_);
            failing = false;
          }
          if (batch.from() != id_) continue;
          std::vector<raft::Message> messages = ValidMessages(batch, options_.self);
          batch.Clear();
          if (messages.empty()) continue;
          try {
            handler(std::move(messages));
          } catch (const std::exception& e) {
            kLog()->error("delivering messages from controller {} failed: {}", id_, e.what());
          }
        }
      }
      grpc::Status status = stream->Finish();
      {
        MutexLock lock(&mu_);
        attach_call_ = nullptr;
        if (stopping_) return;
      }
      if (!failing) {
        kLog()->warn("Attach stream to controller {} at {} ended: {} (reconnecting)", id_, address_,
                     status.error_message());
      }
      failing = true;
      if (queue_.SleepUnlessStopped(backoff)) return;
      if (!accepted) backoff = std::min(2 * backoff, kAttachBackoffMax);
    }
  }

  const RaftTransportOptions& options_;
  const raft::NodeId id_;
  const std::string address_;
  const std::shared_ptr<std::atomic<uint64_t>> dropped_;
  SendQueue queue_;
  std::unique_ptr<raftpb::RaftService::Stub> stub_;
  Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* call_ ABSL_GUARDED_BY(mu_) = nullptr;         // the Deliver call in flight
  grpc::ClientContext* attach_call_ ABSL_GUARDED_BY(mu_) = nullptr;  // the Attach stream open
  bool failing_ = false;                                             // the sender thread's own
  std::thread attacher_;
  std::thread sender_;  // last: starts once everything above is built
};

// A voter's Attach streams, one per observer. Shared by the transport (Send) and the
// RaftServiceImpl (Attach calls), which may outlive the transport: Close() ends every stream
// and refuses new ones.
class GrpcRaftTransport::ObserverStreams {
 public:
  ObserverStreams(const RaftTransportOptions& options,
                  std::shared_ptr<std::atomic<uint64_t>> dropped)
      : options_(options), dropped_(std::move(dropped)) {}

  void Send(raft::Message message) {
    MutexLock lock(&mu_);
    auto it = by_observer_.find(message.to);
    if (it == by_observer_.end()) {
      ++*dropped_;
      return;
    }
    it->second->queue.Push(std::move(message));
  }

  // Serves one Attach call whose first batch came from `observer`, until the stream ends, it
  // is replaced or cancelled, or Close(). This thread writes (so nothing writes once it
  // returns); a second one reads and hands each batch to `deliver`.
  grpc::Status Serve(grpc::ServerContext* context,
                     grpc::ServerReaderWriter<raftpb::RaftBatch, raftpb::RaftBatch>* stream,
                     raft::NodeId self, raft::NodeId observer,
                     const std::function<void(const raftpb::RaftBatch&)>& deliver) {
    auto s = std::make_shared<Stream>(options_, dropped_, context);
    {
      MutexLock lock(&mu_);
      if (closed_) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            fmt::format("controller {} takes no observers now", self));
      }
      std::shared_ptr<Stream>& slot = by_observer_[observer];
      if (slot != nullptr) {
        // The observer reconnected; its old stream (maybe half-dead) goes.
        slot->queue.Stop();
        slot->context->TryCancel();
      }
      slot = s;
      active_.insert(s.get());
    }
    kLog()->info("observer {} attached", observer);
    std::thread reader([&] {
      try {
        raftpb::RaftBatch batch;
        while (stream->Read(&batch)) {
          deliver(batch);
          batch.Clear();
        }
      } catch (const std::exception& e) {
        kLog()->error("Attach from observer {} failed: {}", observer, e.what());
      }
      s->queue.Stop();
    });
    try {
      raftpb::RaftBatch ack;
      ack.set_from(self);
      ack.set_to(observer);
      bool ok = stream->Write(ack);
      while (ok) {
        raftpb::RaftBatch batch;
        batch.set_from(self);
        batch.set_to(observer);
        const size_t count = s->queue.Pop(&batch, kAttachCancelPoll);
        // Server shutdown cancels the call; the reader then ends too, but only once gRPC
        // wakes it, so look.
        if (s->queue.stopped() || context->IsCancelled()) break;
        if (count == 0) continue;
        if (!stream->Write(batch)) {
          *dropped_ += count;
          ok = false;
        }
      }
    } catch (const std::exception& e) {
      kLog()->error("Attach to observer {} failed: {}", observer, e.what());
    }
    context->TryCancel();  // ends the reader's Read, if the observer is still there
    reader.join();
    {
      MutexLock lock(&mu_);
      active_.erase(s.get());
      auto it = by_observer_.find(observer);
      if (it != by_observer_.end() && it->second == s) by_observer_.erase(it);
    }
    kLog()->info("observer {} detached", observer);
    return grpc::Status::OK;
  }

  void Close() {
    MutexLock lock(&mu_);
    closed_ = true;
    for (Stream* s : active_) {
      s->queue.Stop();
      s->context->TryCancel();
    }
    by_observer_.clear();
  }

  size_t attached() const {
    MutexLock lock(&mu_);
    return by_observer_.size();
  }

 private:
  struct Stream {
    Stream(const RaftTransportOptions& options, std::shared_ptr<std::atomic<uint64_t>> dropped,
           grpc::ServerContext* c)
        : queue(options, std::move(dropped)), context(c) {}
    SendQueue queue;
    grpc::ServerContext* const context;  // valid while in active_
  };

  const RaftTransportOptions options_;
  const std::shared_ptr<std::atomic<uint64_t>> dropped_;
  mutable Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::map<raft::NodeId, std::shared_ptr<Stream>> by_observer_ ABSL_GUARDED_BY(mu_);
  // Every Attach call still running, replaced ones too, so Close() can cancel them all.
  std::set<Stream*> active_ ABSL_GUARDED_BY(mu_);
};

GrpcRaftTransport::GrpcRaftTransport(RaftTransportOptions options)
    : options_(std::move(options)),
      dropped_(std::make_shared<std::atomic<uint64_t>>(0)),
      observers_(std::make_shared<ObserverStreams>(options_, dropped_)) {
  for (const auto& [id, address] : options_.peers) {
    if (id == options_.self) continue;
    peers_[id] = std::make_unique<Peer>(options_, id, address, dropped_);
  }
}

GrpcRaftTransport::~GrpcRaftTransport() {
  DetachObservers();
  peers_.clear();
}

void GrpcRaftTransport::SetReceiver(RaftHandler handler) {
  MutexLock lock(&receiver_mu_);
  if (receiver_ != nullptr) {
    kLog()->error("GrpcRaftTransport::SetReceiver called twice; ignored");
    return;
  }
  receiver_ = std::move(handler);
  if (!options_.observer) return;
  for (auto& [id, peer] : peers_) peer->StartAttach(&receiver_);
}

void GrpcRaftTransport::DetachObservers() { observers_->Close(); }

void GrpcRaftTransport::Send(raft::Message message) {
  auto it = peers_.find(message.to);
  if (it != peers_.end()) {
    it->second->Push(std::move(message));
    return;
  }
  // Not a voter: an observer, reachable only over the stream it opened (if any).
  observers_->Send(std::move(message));
}

uint64_t GrpcRaftTransport::dropped() const { return dropped_->load(); }

size_t GrpcRaftTransport::attached_observers() const { return observers_->attached(); }

// ---- RaftServiceImpl --------------------------------------------------------------------

RaftServiceImpl::RaftServiceImpl(raft::NodeId self, Handler handler, GrpcRaftTransport* transport)
    : self_(self),
      handler_(std::move(handler)),
      observers_(transport != nullptr ? transport->observers_ : nullptr) {}

void RaftServiceImpl::DeliverBatch(const raftpb::RaftBatch& batch) {
  std::vector<raft::Message> messages = ValidMessages(batch, self_);
  if (!messages.empty()) handler_(std::move(messages));
}

grpc::Status RaftServiceImpl::Deliver(grpc::ServerContext*, const raftpb::RaftBatch* batch,
                                      raftpb::DeliverReply*) {
  try {
    if (batch->to() != self_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          fmt::format("this is controller {}, not {}", self_, batch->to()));
    }
    DeliverBatch(*batch);
    return grpc::Status::OK;
  } catch (const std::exception& e) {
    kLog()->error("Deliver failed: {}", e.what());
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  }
}

grpc::Status RaftServiceImpl::Attach(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<raftpb::RaftBatch, raftpb::RaftBatch>* stream) {
  try {
    if (observers_ == nullptr) {
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                          fmt::format("controller {} takes no observers", self_));
    }
    raftpb::RaftBatch first;
    if (!stream->Read(&first)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "the stream ended before its first batch");
    }
    if (first.to() != self_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          fmt::format("this is controller {}, not {}", self_, first.to()));
    }
    const raft::NodeId observer = first.from();
    if (observer == self_ || observer == raft::kNoNode) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          fmt::format("{} cannot attach as an observer", observer));
    }
    DeliverBatch(first);
    return observers_->Serve(context, stream, self_, observer,
                             [this, observer](const raftpb::RaftBatch& batch) {
                               if (batch.from() == observer && batch.to() == self_) {
                                 DeliverBatch(batch);
                               }
                             });
  } catch (const std::exception& e) {
    kLog()->error("Attach failed: {}", e.what());
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  }
}

}  // namespace runnel::controllerd
