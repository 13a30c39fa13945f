// runnel-controllerd as a process: starts, serves, stops on SIGTERM, keeps its metadata.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "common/grpc/unix_server.h"
#include "proto/runnel/controller.grpc.pb.h"
#include "tests/unit/controllerd/test_util.h"
#include "tests/util/temp_dir.h"

extern char** environ;

namespace runnel::controllerd {
namespace {

using runnel::testing::TempDir;
using testing::FreePort;
using testing::WriteAll;

class Daemon {
 public:
  explicit Daemon(const std::string& config) {
    std::string bin = RUNNEL_CONTROLLERD_BIN;
    std::vector<char*> argv = {bin.data(), const_cast<char*>("--config"),
                               const_cast<char*>(config.c_str()), nullptr};
    EXPECT_EQ(posix_spawn(&pid_, bin.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  }
  ~Daemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Sends SIGTERM and returns the exit status (-1 if it did not exit within 15 s).
  int Stop() {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 150; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
  bool Exited(int* code) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = -1;
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return true;
  }

 private:
  pid_t pid_ = -1;
};

bool WaitServing(const std::string& socket) {
  for (int i = 0; i < 150; ++i) {
    if (grpcutil::CheckServing(socket, std::chrono::milliseconds(500)).ok()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

TEST(DaemonTest, ServesStopsOnSigtermAndKeepsMetadata) {
  TempDir dir{"ctld"};
  std::string config = dir.path() + "/node.properties";
  WriteAll(config, "node.id=9\nmetadata.log.dir=" + dir.path() +
                       "/meta\nrunnel.run.dir=" + dir.path() + "/run\nrunnel.log.level=warn\n");
  std::string socket = grpcutil::SocketPath(dir.path() + "/run", "controllerd");
  std::string cluster_id;
  {
    Daemon d(config);
    ASSERT_TRUE(WaitServing(socket));
    auto stub = controller::ControllerService::NewStub(grpcutil::UnixChannel(socket));
    grpc::ClientContext c1;
    controller::RegisterBrokerRequest reg;
    reg.set_broker_id(9);
    auto* e = reg.add_endpoints();
    e->set_name("PLAINTEXT");
    e->set_host("127.0.0.1");
    e->set_port(9092);
    controller::RegisterBrokerResponse reg_resp;
    ASSERT_TRUE(stub->RegisterBroker(&c1, reg, &reg_resp).ok());
    ASSERT_EQ(reg_resp.error_code(), 0);
    cluster_id = reg_resp.cluster_id();

    grpc::ClientContext c2;
    controller::CreateTopicsRequest req;
    auto* t = req.add_topics();
    t->set_name("durable");
    t->set_num_partitions(2);
    t->set_replication_factor(1);
    controller::CreateTopicsResponse resp;
    ASSERT_TRUE(stub->CreateTopics(&c2, req, &resp).ok());
    ASSERT_EQ(resp.topics(0).error_code(), 0);

    // An open watch stream must not hold up the shutdown.
    grpc::ClientContext c3;
    auto reader = stub->WatchMetadata(&c3, controller::WatchRequest());
    controller::MetadataUpdate u;
    ASSERT_TRUE(reader->Read(&u));
    EXPECT_EQ(d.Stop(), 0);
    EXPECT_FALSE(reader->Read(&u));
    EXPECT_FALSE(::access(socket.c_str(), F_OK) == 0) << "socket removed at exit";
  }
  {
    Daemon d(config);
    ASSERT_TRUE(WaitServing(socket));
    auto stub = controller::ControllerService::NewStub(grpcutil::UnixChannel(socket));
    grpc::ClientContext c1;
    controller::DescribeClusterResponse desc;
    ASSERT_TRUE(stub->DescribeCluster(&c1, {}, &desc).ok());
    EXPECT_EQ(desc.cluster_id(), cluster_id);
    EXPECT_EQ(desc.controller_id(), 9);
    ASSERT_EQ(desc.brokers_size(), 1);
    grpc::ClientContext c2;
    controller::CreateTopicsRequest req;
    auto* t = req.add_topics();
    t->set_name("durable");
    t->set_num_partitions(1);
    t->set_replication_factor(1);
    controller::CreateTopicsResponse resp;
    ASSERT_TRUE(stub->CreateTopics(&c2, req, &resp).ok());
    EXPECT_EQ(resp.topics(0).error_code(), 36) << "TOPIC_ALREADY_EXISTS after a restart";
    EXPECT_EQ(d.Stop(), 0);
  }
}

int32_t LeaderSeenBy(const std::string& socket) {
  auto stub = controller::ControllerService::NewStub(grpcutil::UnixChannel(socket));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  controller::DescribeClusterResponse desc;
  if (!stub->DescribeCluster(&ctx, {}, &desc).ok()) return -2;
  return desc.controller_id();
}

TEST(DaemonTest, ThreeControllersFormAQuorumAndHandOverOnSigterm) {
  TempDir dir{"ctld"};
  std::string voters;
  for (int id = 1; id <= 3; ++id) {
    voters += fmt::format("{}{}@127.0.0.1:{}", id == 1 ? "" : ",", id, FreePort());
  }
  std::vector<std::string> sockets;
  std::vector<std::unique_ptr<Daemon>> daemons;
  for (int id = 1; id <= 3; ++id) {
    std::string base = fmt::format("{}/n{}", dir.path(), id);
    std::string config = base + ".properties";
    WriteAll(config,
             fmt::format("node.id={}\nprocess.roles=controller\ncontroller.quorum.voters={}\n"
                         "controller.quorum.election.timeout.ms=500\n"
                         "metadata.log.dir={}/meta\nrunnel.run.dir={}/run\n"
                         "runnel.log.level=warn\n",
                         id, voters, base, base));
    sockets.push_back(grpcutil::SocketPath(base + "/run", "controllerd"));
    daemons.push_back(std::make_unique<Daemon>(config));
  }
  for (const std::string& s : sockets) ASSERT_TRUE(WaitServing(s)) << s;

  // Every node names the same leader; a write on any node's socket is done by it.
  int32_t leader = -1;
  for (int i = 0; i < 100; ++i) {
    leader = LeaderSeenBy(sockets[0]);
    if (leader > 0 && LeaderSeenBy(sockets[1]) == leader && LeaderSeenBy(sockets[2]) == leader) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(leader, 1);
  ASSERT_LE(leader, 3);
  const int32_t other = leader == 1 ? 2 : 1;
  auto create = [&](const std::string& socket, const std::string& name) {
    auto stub = controller::ControllerService::NewStub(grpcutil::UnixChannel(socket));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    controller::CreateTopicsRequest req;
    auto* t = req.add_topics();
    t->set_name(name);
    t->set_num_partitions(1);
    t->set_replication_factor(1);
    controller::CreateTopicsResponse resp;
    grpc::Status st = stub->CreateTopics(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    // No broker is registered: the leader's answer is a Kafka error, not a transport one.
    EXPECT_EQ(resp.topics_size(), 1);
    if (resp.topics_size() == 1) {
      EXPECT_EQ(resp.topics(0).error_code(), 38) << "INVALID_REPLICATION_FACTOR";
    }
  };
  create(sockets[other - 1], "via-follower");

  // SIGTERM to the leader: it hands the leadership over and exits 0; the others go on.
  EXPECT_EQ(daemons[leader - 1]->Stop(), 0);
  int32_t next = -1;
  for (int i = 0; i < 100; ++i) {
    next = LeaderSeenBy(sockets[other - 1]);
    if (next > 0 && next != leader) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(next, 0);
  EXPECT_NE(next, leader);
  create(sockets[other - 1], "after-handover");
  for (int id = 1; id <= 3; ++id) {
    if (id != leader) {
      EXPECT_EQ(daemons[id - 1]->Stop(), 0) << id;
    }
  }
}

TEST(DaemonTest, BadConfigStopsStartupWithTheKey) {
  TempDir dir{"ctld"};
  std::string config = dir.path() + "/bad.properties";
  WriteAll(config, "node.id=-4\n");
  Daemon d(config);
  int code = 0;
  for (int i = 0; i < 100 && !d.Exited(&code); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(code, 2) << "a config error exits with 2 (LoadRoleConfig)";
}

}  // namespace
}  // namespace runnel::controllerd
