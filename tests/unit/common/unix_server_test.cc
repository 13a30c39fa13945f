// StartUnixServer's health at start: a server started NOT_SERVING never answers SERVING
// before it is told to (the supervisor would take a waiting role for a ready one).

#include "common/grpc/unix_server.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>

#include "proto/runnel/raft.grpc.pb.h"
#include "tests/util/temp_dir.h"

namespace runnel::grpcutil {
namespace {

using namespace std::chrono_literals;

class UnixServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_.emplace("unix");
    socket_ = root_->path() + "/role.sock";
  }
  void TearDown() override { root_.reset(); }

  std::optional<runnel::testing::TempDir> root_;
  std::string socket_;
  // Any service will do: the server needs one besides health.
  runnel::raftpb::RaftService::Service service_;
};

TEST_F(UnixServerTest, StartsServingByDefault) {
  auto server = StartUnixServer(socket_, {&service_});
  ASSERT_TRUE(server.ok()) << server.status();
  auto serving = HealthCheck(socket_, 5s);
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  (*server)->Shutdown();
}

TEST_F(UnixServerTest, StartedNotServingAnswersNotServingUntilSet) {
  auto server = StartUnixServer(socket_, {&service_}, /*serving=*/false);
  ASSERT_TRUE(server.ok()) << server.status();
  // Bound under the final name, with the temporary one gone.
  EXPECT_TRUE(std::filesystem::is_socket(socket_));
  EXPECT_FALSE(std::filesystem::exists(socket_ + ".new"));
  auto serving = HealthCheck(socket_, 5s);
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_FALSE(*serving);
  EXPECT_FALSE(CheckServing(socket_, 5s).ok());
  SetServing(**server, true);
  EXPECT_TRUE(CheckServing(socket_, 5s).ok());
  (*server)->Shutdown();
}

// gRPC removes a socket it bound, but not one renamed into place: ShutdownUnixServer does.
TEST_F(UnixServerTest, ShutdownRemovesTheSocketEitherWay) {
  for (bool serving : {true, false}) {
    auto server = StartUnixServer(socket_, {&service_}, serving);
    ASSERT_TRUE(server.ok()) << server.status();
    ASSERT_TRUE(std::filesystem::is_socket(socket_));
    ShutdownUnixServer(**server, socket_, std::chrono::system_clock::now());
    EXPECT_FALSE(std::filesystem::exists(socket_)) << "serving=" << serving;
    EXPECT_FALSE(HealthCheck(socket_, 500ms).ok());
  }
}

TEST_F(UnixServerTest, NoServerIsNoAnswer) {
  auto serving = HealthCheck(socket_, 500ms);
  EXPECT_FALSE(serving.ok());
}

}  // namespace
}  // namespace runnel::grpcutil
