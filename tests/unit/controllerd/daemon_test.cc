// runnel-controllerd as a process: starts, serves, stops on SIGTERM, keeps its metadata.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "common/grpc/unix_server.h"
#include "proto/runnel/controller.grpc.pb.h"
#include "tests/unit/controllerd/test_util.h"

extern char** environ;

namespace runnel::controllerd {
namespace {

using testing::TempDir;
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
  TempDir dir;
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

TEST(DaemonTest, BadConfigStopsStartupWithTheKey) {
  TempDir dir;
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
