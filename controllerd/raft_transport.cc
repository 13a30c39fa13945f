#include "controllerd/raft_transport.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "common/log/log.h"

namespace runnel::controllerd {
namespace {

std::shared_ptr<spdlog::logger> Logger() { return log::Get("controllerd.raft"); }

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

class GrpcRaftTransport::Peer {
 public:
  Peer(const RaftTransportOptions& options, raft::NodeId id, const std::string& address,
       std::shared_ptr<std::atomic<uint64_t>> dropped)
      : options_(options),
        id_(id),
        address_(address),
        dropped_(std::move(dropped)),
        stub_(raftpb::RaftService::NewStub(PeerChannel(address))),
        thread_([this] { Run(); }) {}

  ~Peer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      if (call_ != nullptr) call_->TryCancel();
    }
    cv_.notify_all();
    thread_.join();
  }

  void Push(raft::Message message) {
    const size_t bytes = MessageBytes(message);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.size() >= options_.queue_max_messages ||
          (!queue_.empty() && queued_bytes_ + bytes > options_.queue_max_bytes)) {
        ++*dropped_;
        return;
      }
      queued_bytes_ += bytes;
      queue_.push_back({std::move(message), bytes});
    }
    cv_.notify_one();
  }

 private:
  struct Queued {
    raft::Message message;
    size_t bytes;
  };

  void Run() {
    while (true) {
      raftpb::RaftBatch batch;
      batch.set_from(options_.self);
      batch.set_to(id_);
      size_t count = 0;
      grpc::ClientContext context;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (stopping_) return;
        size_t bytes = 0;
        while (!queue_.empty() &&
               (count == 0 || bytes + queue_.front().bytes <= options_.batch_max_bytes)) {
          bytes += queue_.front().bytes;
          queued_bytes_ -= queue_.front().bytes;
          *batch.add_messages() = ToProto(queue_.front().message);
          queue_.pop_front();
          ++count;
        }
        call_ = &context;
      }
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(options_.request_timeout_ms));
      raftpb::DeliverReply reply;
      grpc::Status status = stub_->Deliver(&context, batch, &reply);
      {
        std::lock_guard<std::mutex> lock(mu_);
        call_ = nullptr;
      }
      if (status.ok()) {
        if (failing_) Logger()->info("controller {} at {} is reachable again", id_, address_);
        failing_ = false;
        continue;
      }
      *dropped_ += count;
      if (!failing_) {
        Logger()->warn("cannot reach controller {} at {}: {} (Raft retries)", id_, address_,
                       status.error_message());
      }
      failing_ = true;
      // A peer that is down fails each call at once; pausing keeps a full queue from spinning.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stopping_; });
    }
  }

  const RaftTransportOptions& options_;
  const raft::NodeId id_;
  const std::string address_;
  std::shared_ptr<std::atomic<uint64_t>> dropped_;
  std::unique_ptr<raftpb::RaftService::Stub> stub_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  size_t queued_bytes_ = 0;
  bool stopping_ = false;
  grpc::ClientContext* call_ = nullptr;
  bool failing_ = false;  // the sender thread's own
  std::thread thread_;    // last: starts once everything above is built
};

GrpcRaftTransport::GrpcRaftTransport(RaftTransportOptions options)
    : options_(std::move(options)), dropped_(std::make_shared<std::atomic<uint64_t>>(0)) {
  for (const auto& [id, address] : options_.peers) {
    if (id == options_.self) continue;
    peers_[id] = std::make_unique<Peer>(options_, id, address, dropped_);
  }
}

GrpcRaftTransport::~GrpcRaftTransport() { peers_.clear(); }

void GrpcRaftTransport::Send(raft::Message message) {
  auto it = peers_.find(message.to);
  if (it == peers_.end()) {
    ++*dropped_;
    return;
  }
  it->second->Push(std::move(message));
}

uint64_t GrpcRaftTransport::dropped() const { return dropped_->load(); }

// ---- RaftServiceImpl --------------------------------------------------------------------

grpc::Status RaftServiceImpl::Deliver(grpc::ServerContext*, const raftpb::RaftBatch* batch,
                                      raftpb::DeliverReply*) {
  try {
    if (batch->to() != self_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          fmt::format("this is controller {}, not {}", self_, batch->to()));
    }
    std::vector<raft::Message> messages;
    messages.reserve(batch->messages_size());
    for (const raftpb::Message& p : batch->messages()) {
      StatusOr<raft::Message> m = FromProto(p);
      // A message this version does not know is dropped; Raft treats it as lost.
      if (!m.ok() || m->to != self_ || m->from != batch->from()) continue;
      messages.push_back(std::move(*m));
    }
    if (!messages.empty()) handler_(std::move(messages));
    return grpc::Status::OK;
  } catch (const std::exception& e) {
    Logger()->error("Deliver failed: {}", e.what());
    return grpc::Status(grpc::StatusCode::INTERNAL, e.what());
  }
}

}  // namespace runnel::controllerd
