// A client's calls in flight when brokerd stops: Stop() cancels them and waits for their
// completions, so the loop they post to can be destroyed right after (ASan would report a
// completion that touched it later).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "brokerd/net/event_loop.h"
#include "brokerd/storage/storage_client.h"
#include "common/grpc/unix_server.h"
#include "proto/runnel/storage.grpc.pb.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace runnel::brokerd {
namespace {

using namespace std::chrono_literals;

// A storaged whose Append holds every call until the client cancels it, or for `hold`.
class HoldingStorage final : public storage::StorageService::Service {
 public:
  explicit HoldingStorage(std::chrono::milliseconds hold) : hold_(hold) {}

  grpc::Status Append(grpc::ServerContext* ctx, const storage::AppendRequest*,
                      storage::AppendResponse*) override {
    ++started_;
    auto until = std::chrono::steady_clock::now() + hold_;
    while (!ctx->IsCancelled() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(5ms);
    }
    ++finished_;
    return grpc::Status::OK;
  }

  std::atomic<int> started_{0};
  std::atomic<int> finished_{0};

 private:
  std::chrono::milliseconds hold_;
};

class UnaryCallsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_.emplace("calls");
    auto server = grpcutil::StartUnixServer(root_->path() + "/s.sock", {&service_});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    loop_ = std::make_unique<EventLoop>();
    client_ = std::make_unique<StorageClient>(*loop_, root_->path() + "/s.sock");
    loop_thread_ = std::thread([this] { loop_->Run(); });
  }

  void TearDown() override {
    StopLoop();
    client_.reset();
    loop_.reset();
    server_->Shutdown(std::chrono::system_clock::now() + 1s);
    server_->Wait();
    root_.reset();
  }

  void StopLoop() {
    if (!loop_thread_.joinable()) return;
    loop_->Stop([] {});
    loop_thread_.join();
  }

  // Starts an Append on the loop; `done` counts its completions.
  void StartAppend(std::atomic<int>* done) {
    loop_->Post([this, done] {
      client_->Append(storage::AppendRequest(), std::chrono::milliseconds(30000),
                      [done](const grpc::Status&, storage::AppendResponse&) { ++*done; });
    });
  }

  static bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds limit) {
    return runnel::testing::WaitUntil(pred, limit);
  }

  // Long enough that a completion the client did not cancel arrives after the loop is gone.
  HoldingStorage service_{std::chrono::milliseconds(1500)};
  std::optional<runnel::testing::TempDir> root_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<StorageClient> client_;
  std::thread loop_thread_;
};

TEST_F(UnaryCallsTest, StopCancelsCallsInFlightAndWaitsForThem) {
  std::atomic<int> done{0};
  StartAppend(&done);
  StartAppend(&done);
  ASSERT_TRUE(WaitFor([&] { return service_.started_ == 2; }, 10s));

  StopLoop();
  auto before = std::chrono::steady_clock::now();
  client_->Stop();
  // Cancelled, not waited out: the server held them for 1.5 s.
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1s);
  loop_.reset();
  // The server sees the cancellations; any completion that still came would find no loop.
  ASSERT_TRUE(WaitFor([&] { return service_.finished_ == 2; }, 10s));
  // A sleep: time for a late completion to show up; none may run.
  std::this_thread::sleep_for(100ms);
  // The loop had stopped, so the completions were dropped, not run.
  EXPECT_EQ(done, 0);
}

TEST_F(UnaryCallsTest, CompletionsRunOnTheLoopWhileItRuns) {
  std::atomic<int> done{0};
  StartAppend(&done);
  ASSERT_TRUE(WaitFor([&] { return service_.started_ == 1; }, 10s));
  // Stop() with the loop still running: the cancelled call's completion runs there.
  client_->Stop();
  ASSERT_TRUE(WaitFor([&] { return done == 1; }, 10s));
}

TEST_F(UnaryCallsTest, CallsAfterStopDoNotStart) {
  client_->Stop();
  std::atomic<int> done{0};
  StartAppend(&done);
  // Posted after it, so it ran on the loop once this did.
  auto posted = std::make_shared<std::atomic<bool>>(false);
  loop_->Post([posted] { *posted = true; });
  ASSERT_TRUE(WaitFor([&] { return posted->load(); }, 10s)) << "the loop did not run the Append";
  // A sleep: a call that started would reach the server in it.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(service_.started_, 0);
  EXPECT_EQ(done, 0);
}

// A call's ClientContext holds a reference to the channel. When Stop() returns (it ends with
// CancelAndWait, run here alone), every call must be gone: otherwise the last reference to
// the channel can go on a gRPC thread, whose ~Channel then joins and frees the completion
// queue that very thread is polling (the double free ASan found in a brokerd stopped
// mid-produce).
TEST_F(UnaryCallsTest, NoCallHoldsTheChannelOnceStopReturns) {
  auto channel = grpcutil::UnixChannel(root_->path() + "/s.sock");
  auto stub = storage::StorageService::NewStub(channel);
  const long idle_refs = channel.use_count();
  StopLoop();  // completions are dropped: only the gRPC side holds each call
  constexpr int kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    auto inflight = std::make_shared<InflightCalls>();
    StartUnaryCall<storage::AppendRequest, storage::AppendResponse>(
        *loop_, inflight, storage::AppendRequest(), std::chrono::milliseconds(30000),
        [](const grpc::Status&, storage::AppendResponse&) {},
        [&](auto&&... args) { stub->async()->Append(std::forward<decltype(args)>(args)...); });
    inflight->CancelAndWait();
    ASSERT_EQ(channel.use_count(), idle_refs) << "a call outlived Stop() in round " << round;
  }
}

}  // namespace
}  // namespace runnel::brokerd
