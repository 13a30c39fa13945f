// Three controllers (Quorum + Controller + RaftService + ControllerService) in one process,
// talking real gRPC over 127.0.0.1: election, forwarding of writes from a follower, a leader
// crash and the next leader, a restarted node catching up from the log or from a snapshot.
#include "controllerd/quorum.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <set>
#include <thread>

#include "common/log/log.h"
#include "common/protocol/error_code.h"
#include "controllerd/controller.h"
#include "controllerd/controller_service.h"
#include "controllerd/raft_log_store.h"
#include "controllerd/raft_transport.h"
#include "proto/runnel/controller.grpc.pb.h"
#include "tests/unit/controllerd/controller_test_util.h"
#include "tests/unit/controllerd/test_util.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace runnel::controllerd {
namespace {

using runnel::testing::TempDir;
using runnel::testing::WaitUntil;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::FreePort;
using testing::In;

class Cluster {
 public:
  explicit Cluster(int64_t snapshot_interval_bytes = 20 << 20)
      : snapshot_interval_bytes_(snapshot_interval_bytes) {
    for (int32_t id : ids_) addresses_[id] = fmt::format("127.0.0.1:{}", FreePort());
  }
  ~Cluster() {
    for (int32_t id : ids_) Crash(id);
  }

  const std::vector<int32_t>& ids() const { return ids_; }

  // broker.session.timeout.ms of the nodes started from now on: long by default, so brokers
  // the tests register without heartbeating stay unfenced however slow the run.
  int64_t session_timeout_ms = 600000;
  bool running(int32_t id) const { return nodes_.count(id) > 0; }
  Controller& controller(int32_t id) { return *nodes_.at(id).controller; }
  Quorum& quorum(int32_t id) { return nodes_.at(id).controller->quorum(); }

  void Start(int32_t id) {
    Node& n = nodes_[id];
    auto store = RaftLogStore::Open(PosixFileSystem(), dir_.path() + "/" + std::to_string(id));
    ASSERT_TRUE(store.ok()) << store.status();
    RaftTransportOptions t;
    t.self = id;
    t.peers = addresses_;
    t.request_timeout_ms = 1000;
    QuorumOptions q;
    q.id = id;
    q.voters = ids_;
    q.election_timeout_ms = kElectionTimeoutMs;
    q.observer_timeout_ms = 2 * kElectionTimeoutMs;
    q.seed = 1000 + id + 10 * starts_++;
    ControllerOptions o;
    o.node_id = id;
    o.seed = 77 + id;
    o.snapshot_interval_bytes = snapshot_interval_bytes_;
    o.default_timeout_ms = 20000;
    o.session_timeout_ms = session_timeout_ms;
    o.session_check_interval_ms = 20;
    auto c = Controller::Open(
        o, std::make_unique<Quorum>(q, std::move(*store),
                                    std::make_unique<GrpcRaftTransport>(std::move(t))));
    ASSERT_TRUE(c.ok()) << c.status();
    n.controller = std::move(*c);
    Quorum* quorum = &n.controller->quorum();
    n.raft = std::make_unique<RaftServiceImpl>(
        id, [quorum](std::vector<raft::Message> m) { quorum->Deliver(std::move(m)); });
    n.service = std::make_unique<ControllerServiceImpl>(*n.controller, addresses_);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort(addresses_[id], grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(n.raft.get());
    builder.RegisterService(n.service.get());
    n.server = builder.BuildAndStart();
    ASSERT_NE(n.server, nullptr);
    ASSERT_NE(port, 0) << addresses_[id];
  }

  // Stops a node without any leadership transfer, as a crash would (its disk keeps what it
  // synced).
  void Crash(int32_t id) {
    auto it = nodes_.find(id);
    if (it == nodes_.end()) return;
    Node& n = it->second;
    n.server->Shutdown(std::chrono::system_clock::now());
    n.server->Wait();
    n.controller.reset();
    nodes_.erase(it);
  }

  // The leader every running node agrees on, once it is ready; kNoNode after `wait`.
  raft::NodeId WaitForLeader(milliseconds wait = milliseconds(30000)) {
    const Deadline deadline = In(wait);
    while (std::chrono::steady_clock::now() < deadline) {
      raft::NodeId leader = raft::kNoNode;
      for (auto& [id, n] : nodes_) {
        if (n.controller->quorum().IsLeaderReady()) leader = id;
      }
      bool agreed = leader != raft::kNoNode;
      for (auto& [id, n] : nodes_) agreed &= n.controller->quorum().Leader() == leader;
      if (agreed) return leader;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return raft::kNoNode;
  }

  raft::NodeId AnyFollower(raft::NodeId leader) {
    for (int32_t id : ids_) {
      if (id != leader && running(id)) return id;
    }
    return raft::kNoNode;
  }

  std::unique_ptr<controller::ControllerService::Stub> Stub(int32_t id) {
    return controller::ControllerService::NewStub(PeerChannel(addresses_.at(id)));
  }

  // Waits until every running node has applied everything the leader has committed, and
  // checks they hold the same image.
  void ExpectSameImages(raft::NodeId leader) {
    const int64_t target = quorum(leader).State().commit_offset;
    for (auto& [id, n] : nodes_) {
      EXPECT_TRUE(n.controller->quorum().WaitApplied(target, In(seconds(20))))
          << "controller " << id << " did not apply up to " << target;
    }
    MetadataImage reference = controller(leader).Image();
    for (auto& [id, n] : nodes_) {
      // Compared at the same offset: an idle quorum appends nothing more.
      EXPECT_TRUE(n.controller->Image() == reference) << "controller " << id;
    }
  }

  static constexpr int64_t kElectionTimeoutMs = 500;

 private:
  struct Node {
    std::unique_ptr<Controller> controller;
    std::unique_ptr<RaftServiceImpl> raft;
    std::unique_ptr<ControllerServiceImpl> service;
    std::unique_ptr<grpc::Server> server;
  };

  TempDir dir_{"quorum"};
  const int64_t snapshot_interval_bytes_;
  const std::vector<int32_t> ids_ = {1, 2, 3};
  std::map<int32_t, std::string> addresses_;
  std::map<int32_t, Node> nodes_;
  int starts_ = 0;
};

std::unique_ptr<grpc::ClientContext> Ctx(seconds deadline = seconds(30)) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + deadline);
  return ctx;
}

void RegisterBroker(controller::ControllerService::Stub& stub, int32_t broker) {
  controller::RegisterBrokerRequest req;
  req.set_broker_id(broker);
  auto* e = req.add_endpoints();
  e->set_name("PLAINTEXT");
  e->set_host("127.0.0.1");
  e->set_port(9092 + broker);
  controller::RegisterBrokerResponse resp;
  grpc::Status st = stub.RegisterBroker(Ctx().get(), req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.error_code(), 0) << resp.error_message();
  EXPECT_EQ(resp.broker_epoch(), resp.metadata_offset());
}

controller::CreateTopicsResponse CreateTopic(controller::ControllerService::Stub& stub,
                                             const std::string& name) {
  controller::CreateTopicsRequest req;
  auto* t = req.add_topics();
  t->set_name(name);
  t->set_num_partitions(2);
  t->set_replication_factor(1);
  controller::CreateTopicsResponse resp;
  grpc::Status st = stub.CreateTopics(Ctx().get(), req, &resp);
  EXPECT_TRUE(st.ok()) << name << ": " << st.error_message();
  EXPECT_EQ(resp.topics_size(), 1);
  if (resp.topics_size() == 1) {
    EXPECT_EQ(resp.topics(0).error_code(), 0) << name;
  }
  return resp;
}

TEST(QuorumTest, ElectsForwardsFailsOverAndCatchesUp) {
  Cluster cluster;
  for (int32_t id : cluster.ids()) cluster.Start(id);
  const raft::NodeId leader = cluster.WaitForLeader();
  ASSERT_NE(leader, raft::kNoNode) << "no leader elected";
  for (int32_t id : cluster.ids()) {
    ASSERT_TRUE(cluster.controller(id).WaitForClusterId(In(seconds(20))).ok()) << id;
  }
  const std::string cluster_id = cluster.controller(leader).Image().cluster_id();
  for (int32_t id : cluster.ids())
    EXPECT_EQ(cluster.controller(id).Image().cluster_id(), cluster_id);

  // Writes on a follower's ControllerService go to the leader; the follower answers once it
  // has applied them itself.
  const raft::NodeId follower = cluster.AnyFollower(leader);
  auto stub = cluster.Stub(follower);
  RegisterBroker(*stub, 1);
  controller::CreateTopicsResponse created = CreateTopic(*stub, "forwarded");
  ASSERT_GE(created.metadata_offset(), 0);
  EXPECT_NE(cluster.controller(follower).Image().TopicByName("forwarded"), nullptr)
      << "the forwarding follower answers after applying the write";
  EXPECT_GE(cluster.quorum(follower).State().applied_offset, created.metadata_offset());
  for (int32_t id : cluster.ids()) {
    EXPECT_TRUE(cluster.quorum(id).WaitApplied(created.metadata_offset(), In(seconds(20))));
    EXPECT_NE(cluster.controller(id).Image().TopicByName("forwarded"), nullptr) << id;
  }
  // A Kafka error from the leader comes back through the follower unchanged.
  controller::CreateTopicsRequest dup;
  dup.add_topics()->set_name("forwarded");
  dup.mutable_topics(0)->set_num_partitions(1);
  dup.mutable_topics(0)->set_replication_factor(1);
  controller::CreateTopicsResponse dup_resp;
  ASSERT_TRUE(stub->CreateTopics(Ctx().get(), dup, &dup_resp).ok());
  EXPECT_EQ(dup_resp.topics(0).error_code(),
            static_cast<int32_t>(protocol::ErrorCode::kTopicAlreadyExists));
  EXPECT_EQ(dup_resp.metadata_offset(), -1);

  // The controller itself refuses a write on a follower (the service forwards it instead),
  // and the quorum refuses a follower's proposal; neither writes anything.
  auto refused = cluster.controller(follower).CreateTopics(dup, In(seconds(5)));
  EXPECT_TRUE(IsNotLeader(refused.status())) << refused.status();
  StatusOr<int64_t> proposed = cluster.quorum(follower).Propose("").get();
  EXPECT_TRUE(IsNotLeader(proposed.status())) << proposed.status();
  EXPECT_TRUE(IsNotLeader(cluster.controller(follower).DescribeQuorum().status()));

  // Reads: DescribeCluster names the leader; DescribeQuorum is the leader's view.
  controller::DescribeClusterResponse described;
  ASSERT_TRUE(stub->DescribeCluster(Ctx().get(), {}, &described).ok());
  EXPECT_EQ(described.controller_id(), leader);
  EXPECT_EQ(described.cluster_id(), cluster_id);
  // It is linearizable: the leader answers after a read-index round, the follower forwards
  // and answers once its own image has what the answer shows.
  EXPECT_GE(described.metadata_offset(), created.metadata_offset());
  EXPECT_GE(cluster.quorum(follower).State().applied_offset, described.metadata_offset());
  EXPECT_TRUE(IsNotLeader(
      cluster.controller(follower).DescribeClusterLinearizable(In(seconds(5))).status()));
  auto on_leader = cluster.controller(leader).DescribeClusterLinearizable(In(seconds(5)));
  ASSERT_TRUE(on_leader.ok()) << on_leader.status();
  EXPECT_GE(on_leader->metadata_offset(), created.metadata_offset());
  EXPECT_EQ(on_leader->controller_id(), leader);
  controller::DescribeQuorumResponse q;
  ASSERT_TRUE(stub->DescribeQuorum(Ctx().get(), {}, &q).ok());
  EXPECT_EQ(q.leader_id(), leader);
  EXPECT_EQ(q.leader_epoch(), cluster.quorum(leader).Term());
  EXPECT_GE(q.high_watermark(), created.metadata_offset() + 1);
  ASSERT_EQ(q.voters_size(), 3);
  EXPECT_EQ(q.observers_size(), 0);
  for (const auto& v : q.voters()) {
    EXPECT_GE(v.log_end_offset(), 0) << v.replica_id();
    EXPECT_GT(v.last_fetch_timestamp(), 0) << v.replica_id();
  }
  cluster.ExpectSameImages(leader);

  // The leader crashes: the others elect a new one, and a write started on a node that still
  // believes in the old leader is retried until the new one takes it.
  const int64_t old_term = cluster.quorum(leader).Term();
  cluster.Crash(leader);
  auto survivor_stub = cluster.Stub(cluster.AnyFollower(leader));
  controller::CreateTopicsResponse after = CreateTopic(*survivor_stub, "after-crash");
  const raft::NodeId next = cluster.WaitForLeader();
  ASSERT_NE(next, raft::kNoNode);
  EXPECT_NE(next, leader);
  EXPECT_GT(cluster.quorum(next).Term(), old_term);
  for (int32_t id : cluster.ids()) {
    if (!cluster.running(id)) continue;
    EXPECT_TRUE(cluster.quorum(id).WaitApplied(after.metadata_offset(), In(seconds(20))));
    EXPECT_NE(cluster.controller(id).Image().TopicByName("after-crash"), nullptr) << id;
  }

  // The old leader restarts and catches up from the log.
  cluster.Start(leader);
  EXPECT_TRUE(cluster.quorum(leader).WaitApplied(after.metadata_offset(), In(seconds(30))));
  EXPECT_NE(cluster.controller(leader).Image().TopicByName("after-crash"), nullptr);
  EXPECT_NE(cluster.controller(leader).Image().TopicByName("forwarded"), nullptr);
  const raft::NodeId final_leader = cluster.WaitForLeader();
  ASSERT_NE(final_leader, raft::kNoNode);
  cluster.ExpectSameImages(final_leader);
}

// A write that reached no majority stays in the leader's log and may commit later, so a retry
// must not be validated without it: the same topic would be written twice under one name,
// which no controller could apply.
TEST(QuorumTest, ARetryNeverWritesAChangeTwice) {
  Cluster cluster;
  for (int32_t id : cluster.ids()) cluster.Start(id);
  const raft::NodeId leader = cluster.WaitForLeader();
  ASSERT_NE(leader, raft::kNoNode) << "no leader elected";
  ASSERT_TRUE(cluster.controller(leader).WaitForClusterId(In(seconds(20))).ok());
  RegisterBroker(*cluster.Stub(leader), 1);
  for (int32_t id : cluster.ids()) {
    if (id != leader) cluster.Crash(id);
  }
  controller::CreateTopicsRequest req;
  req.add_topics()->set_name("twice");
  req.mutable_topics(0)->set_num_partitions(1);
  req.mutable_topics(0)->set_replication_factor(1);
  // Both well within one election timeout, so the leader still leads for the retry.
  auto first = cluster.controller(leader).CreateTopics(req, In(milliseconds(100)));
  EXPECT_FALSE(first.ok()) << "committed without a majority";
  auto retry = cluster.controller(leader).CreateTopics(req, In(milliseconds(100)));
  EXPECT_FALSE(retry.ok()) << "committed without a majority";
  for (int32_t id : cluster.ids()) {
    if (id != leader) cluster.Start(id);
  }
  const raft::NodeId next = cluster.WaitForLeader();
  ASSERT_NE(next, raft::kNoNode) << "no leader after the followers came back";
  // The first attempt may have committed or been cut by a new leader; one more try creates the
  // topic or finds it, and every controller ends with the same image.
  controller::CreateTopicsResponse again;
  ASSERT_TRUE(cluster.Stub(next)->CreateTopics(Ctx().get(), req, &again).ok());
  ASSERT_EQ(again.topics_size(), 1);
  EXPECT_TRUE(again.topics(0).error_code() == 0 ||
              again.topics(0).error_code() ==
                  static_cast<int32_t>(protocol::ErrorCode::kTopicAlreadyExists))
      << again.topics(0).error_message();
  cluster.ExpectSameImages(next);
  for (int32_t id : cluster.ids()) {
    EXPECT_NE(cluster.controller(id).Image().TopicByName("twice"), nullptr) << id;
  }
}

TEST(QuorumTest, RestartedNodeCatchesUpFromASnapshot) {
  // A snapshot after every entry, so the leader's log soon starts past a stopped follower's end.
  Cluster cluster(/*snapshot_interval_bytes=*/1);
  for (int32_t id : cluster.ids()) cluster.Start(id);
  const raft::NodeId leader = cluster.WaitForLeader();
  ASSERT_NE(leader, raft::kNoNode);
  auto stub = cluster.Stub(leader);
  RegisterBroker(*stub, 1);

  const raft::NodeId lagging = cluster.AnyFollower(leader);
  const int64_t lagging_end = cluster.quorum(lagging).State().end_offset;
  cluster.Crash(lagging);
  int64_t last = -1;
  for (int i = 0; i < 8; ++i) last = CreateTopic(*stub, "s" + std::to_string(i)).metadata_offset();
  ASSERT_GE(last, 0);
  // Only a snapshot can bring the lagging node up to date now.
  int64_t leader_start = -1;
  ASSERT_TRUE(cluster.quorum(leader)
                  .RunOnDriver([&](const raft::Storage& s) {
                    leader_start = s.start_offset();
                    return absl::OkStatus();
                  })
                  .get()
                  .ok());
  ASSERT_GT(leader_start, lagging_end) << "the test needs the leader's log compacted";

  cluster.Start(lagging);
  ASSERT_TRUE(cluster.quorum(lagging).WaitApplied(last, In(seconds(30))));
  MetadataImage image = cluster.controller(lagging).Image();
  for (int i = 0; i < 8; ++i) {
    EXPECT_NE(image.TopicByName("s" + std::to_string(i)), nullptr) << i;
  }
  cluster.ExpectSameImages(cluster.WaitForLeader());

  // And it keeps following: a later write reaches it as an entry.
  int64_t later = CreateTopic(*cluster.Stub(lagging), "later").metadata_offset();
  EXPECT_GE(cluster.quorum(lagging).State().applied_offset, later);
}

TEST(RaftTransportTest, MessagesSurviveTheProtoRoundTrip) {
  raft::Message m;
  m.type = raft::MessageType::kSnapshot;
  m.from = 3;
  m.to = 1;
  m.term = 9;
  m.last_offset = 41;
  m.last_term = 8;
  m.transfer = true;
  m.granted = true;
  m.prev_offset = 40;
  m.prev_term = 7;
  m.entries = {raft::Entry{41, 8, "abc"}, raft::Entry{42, 9, ""}};
  m.commit = 39;
  m.seq = 1234567890123ull;
  m.success = true;
  m.match_offset = 38;
  m.hint_offset = 12;
  m.snapshot = raft::SnapshotId{30, 6};
  m.chunk_offset = 4096;
  m.chunk = std::string("\0\1\2", 3);
  m.done = true;
  m.leader = 2;
  auto back = FromProto(ToProto(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->type, m.type);
  EXPECT_EQ(back->from, m.from);
  EXPECT_EQ(back->to, m.to);
  EXPECT_EQ(back->term, m.term);
  EXPECT_EQ(back->last_offset, m.last_offset);
  EXPECT_EQ(back->last_term, m.last_term);
  EXPECT_EQ(back->transfer, m.transfer);
  EXPECT_EQ(back->granted, m.granted);
  EXPECT_EQ(back->prev_offset, m.prev_offset);
  EXPECT_EQ(back->prev_term, m.prev_term);
  EXPECT_EQ(back->entries, m.entries);
  EXPECT_EQ(back->commit, m.commit);
  EXPECT_EQ(back->seq, m.seq);
  EXPECT_EQ(back->success, m.success);
  EXPECT_EQ(back->match_offset, m.match_offset);
  EXPECT_EQ(back->hint_offset, m.hint_offset);
  EXPECT_EQ(back->snapshot, m.snapshot);
  EXPECT_EQ(back->chunk_offset, m.chunk_offset);
  EXPECT_EQ(back->chunk, m.chunk);
  EXPECT_EQ(back->done, m.done);
  EXPECT_EQ(back->leader, m.leader);

  // Every type maps to a distinct wire value and back.
  std::set<int> wire;
  for (raft::MessageType t :
       {raft::MessageType::kPreVote, raft::MessageType::kPreVoteResponse, raft::MessageType::kVote,
        raft::MessageType::kVoteResponse, raft::MessageType::kAppend,
        raft::MessageType::kAppendResponse, raft::MessageType::kSnapshot,
        raft::MessageType::kSnapshotResponse, raft::MessageType::kTimeoutNow,
        raft::MessageType::kObserve, raft::MessageType::kObserveResponse}) {
    raft::Message one;
    one.type = t;
    raftpb::Message p = ToProto(one);
    EXPECT_NE(p.type(), raftpb::MESSAGE_TYPE_UNKNOWN);
    wire.insert(p.type());
    auto decoded = FromProto(p);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(decoded->type, t);
  }
  EXPECT_EQ(wire.size(), 11u);
  raftpb::Message unknown;
  unknown.set_type(static_cast<raftpb::MessageType>(99));
  EXPECT_FALSE(FromProto(unknown).ok());
}

TEST(QuorumTest, GracefulStopHandsTheLeadershipOver) {
  Cluster cluster;
  for (int32_t id : cluster.ids()) cluster.Start(id);
  const raft::NodeId leader = cluster.WaitForLeader();
  ASSERT_NE(leader, raft::kNoNode);
  cluster.quorum(leader).TransferLeadershipAndStop(milliseconds(Cluster::kElectionTimeoutMs * 4));
  // It stopped only once another node led: no election timeout without a leader.
  QuorumState stopped = cluster.quorum(leader).State();
  EXPECT_TRUE(stopped.stopped.has_value());
  EXPECT_NE(stopped.leader, raft::kNoNode);
  EXPECT_NE(stopped.leader, leader);
  cluster.Crash(leader);
  const raft::NodeId next = cluster.WaitForLeader(milliseconds(10000));
  ASSERT_NE(next, raft::kNoNode);
  EXPECT_EQ(next, stopped.leader);
}

// A new leader does not fence brokers for the time no controller could hear them: every
// broker's session starts over when a controller becomes leader.
TEST(QuorumTest, NewLeaderGivesBrokersAFullSession) {
  Cluster cluster;
  cluster.session_timeout_ms = 1500;
  for (int32_t id : cluster.ids()) cluster.Start(id);
  const raft::NodeId leader = cluster.WaitForLeader();
  ASSERT_NE(leader, raft::kNoNode);
  const raft::NodeId follower = cluster.AnyFollower(leader);
  auto stub = cluster.Stub(follower);

  controller::RegisterBrokerRequest reg;
  reg.set_broker_id(1);
  auto* e = reg.add_endpoints();
  e->set_name("PLAINTEXT");
  e->set_host("127.0.0.1");
  e->set_port(9093);
  controller::RegisterBrokerResponse registered;
  ASSERT_TRUE(stub->RegisterBroker(Ctx().get(), reg, &registered).ok());
  ASSERT_EQ(registered.error_code(), 0);
  controller::BrokerHeartbeatRequest beat;
  beat.set_broker_id(1);
  beat.set_broker_epoch(registered.broker_epoch());
  auto fenced = [&](int32_t node) {
    return cluster.controller(node).Image().brokers().at(1).fenced();
  };

  // Heartbeats sent to a follower reach the leader: the broker outlives a session. (A sleep
  // between them: they are to span 2 s, longer than the 1.5 s session.)
  for (int i = 0; i < 20; ++i) {
    controller::BrokerHeartbeatResponse r;
    grpc::Status st = stub->BrokerHeartbeat(Ctx().get(), beat, &r);
    ASSERT_TRUE(st.ok()) << st.error_message();
    ASSERT_EQ(r.error_code(), 0) << r.error_message();
    EXPECT_FALSE(r.is_fenced());
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_FALSE(fenced(leader));

  // The heartbeats stop and the quorum loses its majority for longer than a session (a
  // sleep: that time passing is what the new leader must not hold against the broker).
  cluster.Crash(leader);
  cluster.Crash(follower);
  std::this_thread::sleep_for(milliseconds(cluster.session_timeout_ms + 500));
  cluster.Start(follower);
  const raft::NodeId next = cluster.WaitForLeader();
  ASSERT_NE(next, raft::kNoNode);
  const auto ready = std::chrono::steady_clock::now();
  // Not fenced within (most of) a session of the new leader, though silent for longer: checked
  // every 20 ms all through that time.
  while (std::chrono::steady_clock::now() - ready < milliseconds(cluster.session_timeout_ms / 2)) {
    ASSERT_FALSE(fenced(next)) << "fenced without a session's grace after the failover";
    std::this_thread::sleep_for(milliseconds(20));
  }
  // Then fenced, as nothing heartbeats; and a heartbeat unfences it.
  EXPECT_TRUE(WaitUntil([&] { return fenced(next); }, seconds(5), milliseconds(10)))
      << "not fenced within 5 s of the new leader though nothing heartbeats";
  controller::BrokerHeartbeatResponse back;
  ASSERT_TRUE(cluster.Stub(next)->BrokerHeartbeat(Ctx().get(), beat, &back).ok());
  EXPECT_EQ(back.error_code(), 0);
  EXPECT_FALSE(back.is_fenced());
  EXPECT_GE(back.metadata_offset(), 0);
  EXPECT_FALSE(fenced(next));
}

}  // namespace
}  // namespace runnel::controllerd
