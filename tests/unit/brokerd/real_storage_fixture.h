// A test fixture that runs a real StorageService in-process on a Unix socket under a temp
// dir, with a brokerd StorageClient on an EventLoop of the test's own, so brokerd pieces are
// tested against storaged's real code rather than a fake.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "brokerd/net/event_loop.h"
#include "brokerd/storage/append_batcher.h"
#include "brokerd/storage/partition_view.h"
#include "brokerd/storage/storage_client.h"
#include "common/grpc/unix_server.h"
#include "common/protocol/uuid.h"
#include "common/record/batch.h"
#include "storaged/storage_service.h"
#include "tests/util/temp_dir.h"

namespace runnel::brokerd {

// One v2 batch of `count` records, each with a null key and `value`.
inline std::string Batch(int count, const std::string& value) {
  record::BatchBuilder b({});
  for (int i = 0; i < count; ++i) {
    b.Add(1000 + i, record::ByteSpan(),
          record::ByteSpan(reinterpret_cast<const uint8_t*>(value.data()), value.size()));
  }
  auto bytes = b.Build();
  EXPECT_TRUE(bytes.ok());
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : std::string();
}

class RealStorageTest : public ::testing::Test {
 protected:
  // The default: storaged and the loop, nothing built on them. A fixture that builds more on
  // the loop calls StartStorage, builds its pieces, then StartLoop.
  void SetUp() override {
    StartStorage("storage");
    if (HasFatalFailure()) return;
    StartLoop();
  }

  // The reverse of SetUp. A fixture with more pieces stops its other clients beside storage_,
  // then calls StopLoop, destroys its pieces, and calls StopStorage last.
  void TearDown() override {
    storage_->Stop();
    StopLoop();
    StopStorage();
  }

  // Makes root_, a temp dir named after `tag`, opens one log dir under it, serves a
  // StorageService on socket_ (root_/`socket_name`) and makes storage_, a client of it on
  // loop_ (not running yet).
  void StartStorage(std::string_view tag, const std::string& socket_name = "s.sock") {
    root_ = tmp_.emplace(tag).path();
    auto dirs = storaged::LogDirs::Open({root_ + "/logs"}, 1);
    ASSERT_TRUE(dirs.ok()) << dirs.status();
    dirs_ = std::make_unique<storaged::LogDirs>(std::move(*dirs));
    storaged::LogManagerOptions options;
    options.dirs = {dirs_->dirs()[0].path};
    options.cleaner_enable = false;
    auto logs = storaged::LogManager::Open(options);
    ASSERT_TRUE(logs.ok()) << logs.status();
    logs_ = std::move(*logs);
    service_ = std::make_unique<storaged::StorageServiceImpl>(*dirs_, *logs_);
    socket_ = root_ + "/" + socket_name;
    auto server = grpcutil::StartUnixServer(socket_, {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    storage_ = std::make_unique<StorageClient>(loop_, socket_);
  }

  void StartLoop() {
    loop_thread_ = std::thread([this] { loop_.Run(); });
  }

  // Stops the loop and joins its thread; call after stopping the clients that post to it.
  void StopLoop() {
    loop_.Stop([] {});
    if (loop_thread_.joinable()) loop_thread_.join();
  }

  // Destroys storage_, shuts the service down and removes root_.
  void StopStorage() {
    storage_.reset();
    service_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_->Wait();
    service_.reset();
    ASSERT_TRUE(logs_->Shutdown().ok());
    logs_.reset();
    dirs_.reset();
    tmp_.reset();
  }

  // Runs `fn` on the loop and waits for it.
  template <typename Fn>
  void OnLoop(Fn fn) {
    std::promise<void> done;
    loop_.Post([&] {
      fn();
      done.set_value();
    });
    ASSERT_EQ(done.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  }

  // Creates the partitions `req` lists and expects each to be created.
  void CreatePartitions(const storage::PartitionsRequest& req) {
    std::promise<storage::PartitionsResponse> result;
    OnLoop([&] {
      storage_->CreatePartitions(req, std::chrono::seconds(10),
                                 [&](const grpc::Status& s, storage::PartitionsResponse& r) {
                                   EXPECT_TRUE(s.ok()) << s.error_message();
                                   result.set_value(r);
                                 });
    });
    auto f = result.get_future();
    ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    storage::PartitionsResponse resp = f.get();
    for (const auto& r : resp.partitions()) EXPECT_EQ(r.error_code(), 0) << r.error_message();
  }

  // Creates topic "t" with `partitions` partitions and expects them created.
  void CreateTopic(int partitions) {
    storage::PartitionsRequest req;
    std::string id = protocol::Uuid::Random().ToString();
    for (int p = 0; p < partitions; ++p) {
      auto* spec = req.add_partitions();
      spec->set_topic("t");
      spec->set_partition(p);
      spec->set_topic_id(id);
    }
    CreatePartitions(req);
  }

  // 60 appends of 2 records queued at once on the loop, to partitions 0-2 of "t" in turn
  // (created empty): each partition's appends get consecutive offsets in the order queued.
  // With a small byte bound per call in `batcher`, they take many calls.
  void ExpectOrderedAppends(AppendBatcher& batcher) {
    constexpr int kAppends = 60;
    std::promise<void> all_done;
    std::vector<std::pair<int, int64_t>> results(kAppends, {-1, -1});
    int finished = 0;
    OnLoop([&] {
      for (int i = 0; i < kAppends; ++i) {
        storage::AppendPartition a;
        a.set_topic("t");
        a.set_partition(i % 3);
        a.set_records(Batch(2, "value-" + std::to_string(i)));
        batcher.Append(std::move(a), std::chrono::seconds(10),
                       [&, i](const grpc::Status& s, const storage::AppendPartitionResult& r) {
                         EXPECT_TRUE(s.ok()) << s.error_message();
                         results[i] = {r.error_code(), r.base_offset()};
                         if (++finished == kAppends) all_done.set_value();
                       });
      }
    });
    ASSERT_EQ(all_done.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
    OnLoop([] {});  // the batcher's last callback has returned
    for (int i = 0; i < kAppends; ++i) {
      EXPECT_EQ(results[i].first, 0) << i;
      // The k-th append to a partition holds offsets 2k and 2k+1.
      EXPECT_EQ(results[i].second, 2 * (i / 3)) << "append " << i;
    }
  }

  std::optional<runnel::testing::TempDir> tmp_;
  std::string root_, socket_;
  std::unique_ptr<storaged::LogDirs> dirs_;
  std::unique_ptr<storaged::LogManager> logs_;
  std::unique_ptr<storaged::StorageServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  EventLoop loop_;
  std::unique_ptr<StorageClient> storage_;
  // The view the tests' batchers report their answers to (loop thread only).
  PartitionView view_;
  std::thread loop_thread_;
};

}  // namespace runnel::brokerd
