// GrpcRaftTransport and RaftServiceImpl over real gRPC on 127.0.0.1: a voter (server +
// transport) and an observer (transport only, no address): the observer's messages reach the
// voter by Deliver, the voter's come back on the observer's Attach stream; a voter restart,
// a replaced stream, refused streams, drops, and shutting either side down mid-traffic.
#include "controllerd/raft_transport.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/util/wait.h"

namespace runnel::controllerd {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr raft::NodeId kVoter = 1;
constexpr raft::NodeId kObserver = 100;

// What a handler received, with bounded waits.
class Inbox {
 public:
  RaftHandler Handler() {
    return [this](std::vector<raft::Message> messages) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (raft::Message& m : messages) messages_.push_back(std::move(m));
      }
      cv_.notify_all();
    };
  }

  // Waits up to `wait` for `pred(messages)`; returns its last value.
  bool WaitFor(const std::function<bool(const std::vector<raft::Message>&)>& pred,
               milliseconds wait = milliseconds(10000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, wait, [&] { return pred(messages_); });
  }

  bool WaitForCount(size_t n, milliseconds wait = milliseconds(10000)) {
    return WaitFor([n](const std::vector<raft::Message>& m) { return m.size() >= n; }, wait);
  }

  std::vector<raft::Message> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(messages_);
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return messages_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<raft::Message> messages_;
};

raft::Message Msg(raft::MessageType type, raft::NodeId from, raft::NodeId to, uint64_t seq) {
  raft::Message m;
  m.type = type;
  m.from = from;
  m.to = to;
  m.term = 3;
  m.seq = seq;
  return m;
}

bool WaitUntil(const std::function<bool()>& pred, milliseconds wait = milliseconds(10000)) {
  return runnel::testing::WaitUntil(pred, wait);
}

// A voter: its transport (no other voter), its RaftService, a server on 127.0.0.1.
struct Voter {
  // port 0: an ephemeral one.
  explicit Voter(int want_port = 0, bool takes_observers = true) {
    RaftTransportOptions o;
    o.self = kVoter;
    transport = std::make_unique<GrpcRaftTransport>(std::move(o));
    service = std::make_unique<RaftServiceImpl>(kVoter, inbox.Handler(),
                                                takes_observers ? transport.get() : nullptr);
    grpc::ServerBuilder builder;
    builder.AddListeningPort(fmt::format("127.0.0.1:{}", want_port),
                             grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
  }
  // The daemon's order: streams first, so the drain does not wait for them.
  ~Voter() {
    if (transport) transport->DetachObservers();
    if (server) {
      server->Shutdown(std::chrono::system_clock::now() + seconds(5));
      server->Wait();
    }
    transport.reset();
  }
  std::string address() const { return fmt::format("127.0.0.1:{}", port); }

  Inbox inbox;  // first: outlives the service that calls it
  std::unique_ptr<GrpcRaftTransport> transport;
  std::unique_ptr<RaftServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

// An observer: a transport to the voter, no server.
struct Observer {
  explicit Observer(const std::string& voter_address, raft::NodeId id = kObserver) {
    RaftTransportOptions o;
    o.self = id;
    o.peers = {{kVoter, voter_address}};
    o.observer = true;
    transport = std::make_unique<GrpcRaftTransport>(std::move(o));
    transport->SetReceiver(inbox.Handler());
  }
  Inbox inbox;
  std::unique_ptr<GrpcRaftTransport> transport;
};

// Sends `type` messages from `transport` until stopped (at most 60 s), counting them.
class Pump {
 public:
  Pump(GrpcRaftTransport* transport, raft::MessageType type, raft::NodeId from, raft::NodeId to)
      : thread_([=, this] {
          const auto deadline = Clock::now() + seconds(60);
          for (uint64_t seq = 1; !stop_ && Clock::now() < deadline; ++seq) {
            raft::Message m = Msg(type, from, to, seq);
            m.entries.push_back(raft::Entry{static_cast<int64_t>(seq), 3, std::string(100, 'x')});
            transport->Send(std::move(m));
            sent_ = seq;
            std::this_thread::sleep_for(milliseconds(1));  // a steady flow, not a flood
          }
        }) {}
  ~Pump() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t sent() const { return sent_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sent_{0};
  std::thread thread_;
};

TEST(RaftTransportTest, ObserverSendsByDeliverAndReceivesOnItsStream) {
  Voter voter;
  ASSERT_NE(voter.port, 0);
  Observer observer(voter.address());
  ASSERT_TRUE(WaitUntil([&] { return voter.transport->attached_observers() == 1; }));

  observer.transport->Send(Msg(raft::MessageType::kObserve, kObserver, kVoter, 7));
  ASSERT_TRUE(voter.inbox.WaitForCount(1));
  std::vector<raft::Message> got = voter.inbox.Take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].type, raft::MessageType::kObserve);
  EXPECT_EQ(got[0].from, kObserver);
  EXPECT_EQ(got[0].seq, 7u);

  raft::Message reply = Msg(raft::MessageType::kObserveResponse, kVoter, kObserver, 8);
  reply.leader = kVoter;
  voter.transport->Send(reply);
  // Then many, with data, which must arrive in order.
  constexpr uint64_t kMany = 200;
  for (uint64_t seq = 1; seq <= kMany; ++seq) {
    raft::Message m = Msg(raft::MessageType::kAppend, kVoter, kObserver, seq);
    m.entries.push_back(raft::Entry{static_cast<int64_t>(seq), 3, fmt::format("entry {}", seq)});
    voter.transport->Send(std::move(m));
  }
  ASSERT_TRUE(observer.inbox.WaitForCount(1 + kMany));
  got = observer.inbox.Take();
  ASSERT_EQ(got.size(), 1 + kMany);
  EXPECT_EQ(got[0].type, raft::MessageType::kObserveResponse);
  EXPECT_EQ(got[0].leader, kVoter);
  EXPECT_EQ(got[0].to, kObserver);
  for (uint64_t seq = 1; seq <= kMany; ++seq) {
    const raft::Message& m = got[seq];
    ASSERT_EQ(m.type, raft::MessageType::kAppend);
    ASSERT_EQ(m.seq, seq);
    ASSERT_EQ(m.entries.size(), 1u);
    EXPECT_EQ(m.entries[0].data, fmt::format("entry {}", seq));
  }
  EXPECT_EQ(voter.transport->dropped(), 0u);
  EXPECT_EQ(observer.transport->dropped(), 0u);
}

TEST(RaftTransportTest, MessagesToAnUnattachedObserverAreDropped) {
  Voter voter;
  ASSERT_NE(voter.port, 0);
  voter.transport->Send(Msg(raft::MessageType::kObserveResponse, kVoter, kObserver, 1));
  voter.transport->Send(Msg(raft::MessageType::kObserveResponse, kVoter, kObserver + 1, 2));
  EXPECT_EQ(voter.transport->dropped(), 2u);

  // Attached: only that observer's messages get through.
  Observer observer(voter.address());
  ASSERT_TRUE(WaitUntil([&] { return voter.transport->attached_observers() == 1; }));
  voter.transport->Send(Msg(raft::MessageType::kObserveResponse, kVoter, kObserver + 1, 3));
  voter.transport->Send(Msg(raft::MessageType::kObserveResponse, kVoter, kObserver, 4));
  ASSERT_TRUE(observer.inbox.WaitForCount(1));
  EXPECT_EQ(voter.transport->dropped(), 3u);
  // A sleep: nothing more may arrive in it (the other observer's message was dropped).
  std::this_thread::sleep_for(milliseconds(100));
  std::vector<raft::Message> got = observer.inbox.Take();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].seq, 4u);

  // Gone again: dropped again.
  observer.transport.reset();
  ASSERT_TRUE(WaitUntil([&] { return voter.transport->attached_observers() == 0; }));
  voter.transport->Send(Msg(raft::MessageType::kObserveResponse, kVoter, kObserver, 5));
  EXPECT_EQ(voter.transport->dropped(), 4u);
}

TEST(RaftTransportTest, ObserverReattachesAfterTheVoterRestarts) {
  auto voter = std::make_unique<Voter>();
  const int port = voter->port;
  ASSERT_NE(port, 0);
  Observer observer(voter->address());
  ASSERT_TRUE(WaitUntil([&] { return voter->transport->attached_observers() == 1; }));
  voter->transport->Send(Msg(raft::MessageType::kObserveResponse, kVoter, kObserver, 1));
  ASSERT_TRUE(observer.inbox.WaitForCount(1));

  // A restart: everything of the voter goes (server first, as a crash would end it), then
  // comes back on the same port.
  voter->server->Shutdown(std::chrono::system_clock::now() + milliseconds(200));
  voter->server->Wait();
  voter->server.reset();
  voter.reset();
  // Down for a while: the observer keeps retrying (and its Deliver calls fail). A sleep: the
  // time down is what the observer must get over.
  observer.transport->Send(Msg(raft::MessageType::kObserve, kObserver, kVoter, 2));
  std::this_thread::sleep_for(milliseconds(300));
  const auto restarted = Clock::now();
  voter = std::make_unique<Voter>(port);
  ASSERT_EQ(voter->port, port);
  ASSERT_TRUE(WaitUntil([&] { return voter->transport->attached_observers() == 1; }, seconds(5)))
      << "the observer did not re-attach";
  const auto reattach = std::chrono::duration_cast<milliseconds>(Clock::now() - restarted);
  EXPECT_LT(reattach.count(), 3000);

  voter->transport->Send(Msg(raft::MessageType::kObserveResponse, kVoter, kObserver, 3));
  ASSERT_TRUE(observer.inbox.WaitFor(
      [](const std::vector<raft::Message>& m) { return !m.empty() && m.back().seq == 3; },
      seconds(5)));
  observer.transport->Send(Msg(raft::MessageType::kObserve, kObserver, kVoter, 4));
  ASSERT_TRUE(voter->inbox.WaitFor(
      [](const std::vector<raft::Message>& m) { return !m.empty() && m.back().seq == 4; },
      seconds(5)));
}

using RawStream = grpc::ClientReaderWriter<raftpb::RaftBatch, raftpb::RaftBatch>;

raftpb::RaftBatch Hello(raft::NodeId from, raft::NodeId to) {
  raftpb::RaftBatch b;
  b.set_from(from);
  b.set_to(to);
  return b;
}

std::unique_ptr<grpc::ClientContext> StreamContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + seconds(20));
  return context;
}

TEST(RaftTransportTest, SecondAttachReplacesTheFirst) {
  Voter voter;
  ASSERT_NE(voter.port, 0);
  auto stub = raftpb::RaftService::NewStub(PeerChannel(voter.address()));

  auto context1 = StreamContext();
  std::unique_ptr<RawStream> first = stub->Attach(context1.get());
  raftpb::RaftBatch hello = Hello(kObserver, kVoter);
  // The first batch may carry messages: delivered as Deliver's are.
  *hello.add_messages() = ToProto(Msg(raft::MessageType::kObserve, kObserver, kVoter, 1));
  ASSERT_TRUE(first->Write(hello));
  raftpb::RaftBatch batch;
  ASSERT_TRUE(first->Read(&batch));  // the voter's acknowledgement
  EXPECT_EQ(batch.from(), kVoter);
  EXPECT_EQ(batch.messages_size(), 0);
  ASSERT_TRUE(voter.inbox.WaitForCount(1));

  auto context2 = StreamContext();
  std::unique_ptr<RawStream> second = stub->Attach(context2.get());
  ASSERT_TRUE(second->Write(Hello(kObserver, kVoter)));
  ASSERT_TRUE(second->Read(&batch));
  EXPECT_EQ(voter.transport->attached_observers(), 1u);

  // The first stream ends (bounded by its deadline if it did not).
  EXPECT_FALSE(first->Read(&batch));
  EXPECT_FALSE(first->Finish().ok());

  voter.transport->Send(Msg(raft::MessageType::kObserveResponse, kVoter, kObserver, 2));
  ASSERT_TRUE(second->Read(&batch));
  ASSERT_EQ(batch.messages_size(), 1);
  EXPECT_EQ(batch.messages(0).seq(), 2u);
  EXPECT_EQ(batch.from(), kVoter);
  EXPECT_EQ(batch.to(), kObserver);

  // Messages the observer sends on the stream are delivered too.
  raftpb::RaftBatch more = Hello(kObserver, kVoter);
  *more.add_messages() = ToProto(Msg(raft::MessageType::kObserve, kObserver, kVoter, 3));
  ASSERT_TRUE(second->Write(more));
  ASSERT_TRUE(voter.inbox.WaitForCount(2));
  EXPECT_EQ(voter.inbox.Take().back().seq, 3u);

  ASSERT_TRUE(second->WritesDone());
  EXPECT_FALSE(second->Read(&batch));
  second->Finish();
  EXPECT_TRUE(WaitUntil([&] { return voter.transport->attached_observers() == 0; }));
}

TEST(RaftTransportTest, AttachIsRefusedWhenMisaddressedOrNotTaken) {
  Voter voter;
  Voter no_observers(0, /*takes_observers=*/false);
  ASSERT_NE(voter.port, 0);
  ASSERT_NE(no_observers.port, 0);

  auto stub = raftpb::RaftService::NewStub(PeerChannel(voter.address()));
  auto context = StreamContext();
  std::unique_ptr<RawStream> stream = stub->Attach(context.get());
  ASSERT_TRUE(stream->Write(Hello(kObserver, kVoter + 1)));
  raftpb::RaftBatch batch;
  EXPECT_FALSE(stream->Read(&batch));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(voter.transport->attached_observers(), 0u);

  auto stub2 = raftpb::RaftService::NewStub(PeerChannel(no_observers.address()));
  auto context2 = StreamContext();
  std::unique_ptr<RawStream> stream2 = stub2->Attach(context2.get());
  stream2->Write(Hello(kObserver, kVoter));
  EXPECT_FALSE(stream2->Read(&batch));
  EXPECT_EQ(stream2->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);

  // A transport that stopped taking observers refuses them, and the observer keeps trying.
  voter.transport->DetachObservers();
  Observer observer(voter.address());
  // A sleep: none of the observer's attempts in it may attach.
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(voter.transport->attached_observers(), 0u);
}

// Shutting either side down while messages flow both ways: no hang (every step is timed),
// nothing touched after it is freed (ASan).
TEST(RaftTransportTest, VoterTransportGoesFirstWhileTrafficFlows) {
  Voter voter;
  ASSERT_NE(voter.port, 0);
  Observer observer(voter.address());
  ASSERT_TRUE(WaitUntil([&] { return voter.transport->attached_observers() == 1; }));
  Pump down(voter.transport.get(), raft::MessageType::kAppend, kVoter, kObserver);
  Pump up(observer.transport.get(), raft::MessageType::kObserve, kObserver, kVoter);
  ASSERT_TRUE(observer.inbox.WaitForCount(20));
  ASSERT_TRUE(voter.inbox.WaitForCount(20));
  down.Stop();
  // The transport goes while the server still serves its streams: they must end by
  // themselves, so a drain without any deadline would not wait for them.
  const auto start = Clock::now();
  voter.transport.reset();
  voter.server->Shutdown(std::chrono::system_clock::now() + seconds(20));
  voter.server->Wait();
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(Clock::now() - start).count(), 5000);
  voter.server.reset();
  up.Stop();
}

TEST(RaftTransportTest, VoterServerGoesFirstWhileTrafficFlows) {
  Voter voter;
  ASSERT_NE(voter.port, 0);
  Observer observer(voter.address());
  ASSERT_TRUE(WaitUntil([&] { return voter.transport->attached_observers() == 1; }));
  Pump down(voter.transport.get(), raft::MessageType::kAppend, kVoter, kObserver);
  Pump up(observer.transport.get(), raft::MessageType::kObserve, kObserver, kVoter);
  ASSERT_TRUE(observer.inbox.WaitForCount(20));
  // A server shutdown with a short deadline cancels the stream; its call notices.
  const auto start = Clock::now();
  voter.server->Shutdown(std::chrono::system_clock::now() + milliseconds(100));
  voter.server->Wait();
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(Clock::now() - start).count(), 5000);
  EXPECT_TRUE(WaitUntil([&] { return voter.transport->attached_observers() == 0; }));
  voter.server.reset();
  // The pump keeps sending to the gone observer: dropped, counted.
  const uint64_t dropped = voter.transport->dropped();
  EXPECT_TRUE(WaitUntil([&] { return voter.transport->dropped() > dropped; }));
  down.Stop();
  up.Stop();
}

TEST(RaftTransportTest, ObserverGoesWhileTrafficFlows) {
  Voter voter;
  ASSERT_NE(voter.port, 0);
  auto observer = std::make_unique<Observer>(voter.address());
  ASSERT_TRUE(WaitUntil([&] { return voter.transport->attached_observers() == 1; }));
  Pump down(voter.transport.get(), raft::MessageType::kAppend, kVoter, kObserver);
  {
    Pump up(observer->transport.get(), raft::MessageType::kObserve, kObserver, kVoter);
    ASSERT_TRUE(observer->inbox.WaitForCount(20));
    ASSERT_TRUE(voter.inbox.WaitForCount(20));
    up.Stop();
  }
  const auto start = Clock::now();
  observer.reset();
  EXPECT_LT(std::chrono::duration_cast<milliseconds>(Clock::now() - start).count(), 5000);
  EXPECT_TRUE(WaitUntil([&] { return voter.transport->attached_observers() == 0; }));
  down.Stop();
}

}  // namespace
}  // namespace runnel::controllerd
