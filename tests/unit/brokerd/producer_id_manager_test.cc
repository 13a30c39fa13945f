#include "brokerd/txn/producer_id_manager.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;

// A controller that answers only when the test says so.
class FakeController {
 public:
  ProducerIdManager::Allocate Allocator() {
    return [this](ProducerIdManager::Allocated done) { calls_.push_back(std::move(done)); };
  }
  size_t outstanding() const { return calls_.size(); }
  void Grant(int64_t start, int32_t len = 1000) {
    runnel::controller::AllocateProducerIdsResponse r;
    r.set_producer_id_start(start);
    r.set_producer_id_len(len);
    Answer(grpc::Status::OK, r);
  }
  void Refuse(ErrorCode code) {
    runnel::controller::AllocateProducerIdsResponse r;
    r.set_error_code(static_cast<int32_t>(code));
    r.set_producer_id_start(-1);
    Answer(grpc::Status::OK, r);
  }
  void Fail() { Answer(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down"), {}); }

 private:
  void Answer(const grpc::Status& status,
              const runnel::controller::AllocateProducerIdsResponse& r) {
    ASSERT_FALSE(calls_.empty());
    auto done = std::move(calls_.front());
    calls_.erase(calls_.begin());
    done(status, r);
  }
  std::vector<ProducerIdManager::Allocated> calls_;
};

struct Result {
  ErrorCode error = ErrorCode::kUnknownServerError;
  int64_t id = -2;
  bool answered = false;
};

ProducerIdManager::Done Into(Result* r) {
  return [r](ErrorCode error, int64_t id) {
    r->error = error;
    r->id = id;
    r->answered = true;
  };
}

TEST(ProducerIdManagerTest, WaitsForTheFirstBlockThenHandsOutItsIdsInOrder) {
  FakeController controller;
  ProducerIdManager ids(controller.Allocator());
  Result a, b;
  ids.Next(Into(&a));
  ids.Next(Into(&b));
  EXPECT_FALSE(a.answered);
  EXPECT_EQ(controller.outstanding(), 1u) << "one fetch for every waiter";
  controller.Grant(3000, 10);
  ASSERT_TRUE(a.answered && b.answered);
  EXPECT_EQ(a.error, ErrorCode::kNone);
  EXPECT_EQ(a.id, 3000);
  EXPECT_EQ(b.id, 3001);
  Result c;
  ids.Next(Into(&c));
  EXPECT_EQ(c.id, 3002) << "answered at once from the block";
  EXPECT_EQ(controller.outstanding(), 0u);
}

TEST(ProducerIdManagerTest, FetchesTheNextBlockAheadAndMovesOnWithoutAGap) {
  FakeController controller;
  ProducerIdManager ids(controller.Allocator());
  Result first;
  ids.Next(Into(&first));
  controller.Grant(0, 10);
  std::vector<int64_t> got = {first.id};
  for (int i = 1; i < 9; ++i) {
    Result r;
    ids.Next(Into(&r));
    ASSERT_TRUE(r.answered);
    got.push_back(r.id);
  }
  EXPECT_EQ(controller.outstanding(), 1u) << "asked for the next block at 90% used";
  controller.Grant(5000, 10);
  for (int i = 0; i < 3; ++i) {
    Result r;
    ids.Next(Into(&r));
    ASSERT_TRUE(r.answered);
    got.push_back(r.id);
  }
  EXPECT_EQ(got, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 5000, 5001}));
}

TEST(ProducerIdManagerTest, AFailedFetchAnswersTheWaitersRetriablyAndTheNextRequestAsksAgain) {
  FakeController controller;
  ProducerIdManager ids(controller.Allocator());
  Result a;
  ids.Next(Into(&a));
  controller.Fail();
  ASSERT_TRUE(a.answered);
  EXPECT_EQ(a.error, ErrorCode::kCoordinatorLoadInProgress);
  EXPECT_EQ(a.id, -1);
  EXPECT_TRUE(protocol::IsRetriable(a.error));

  Result b;
  ids.Next(Into(&b));
  controller.Refuse(ErrorCode::kStaleBrokerEpoch);
  EXPECT_EQ(b.error, ErrorCode::kCoordinatorLoadInProgress);

  Result c;
  ids.Next(Into(&c));
  controller.Grant(1000, 1000);
  EXPECT_EQ(c.error, ErrorCode::kNone);
  EXPECT_EQ(c.id, 1000);
}

TEST(ProducerIdManagerTest, MoreWaitersThanABlockFetchAgain) {
  FakeController controller;
  ProducerIdManager ids(controller.Allocator());
  std::vector<Result> results(5);
  for (Result& r : results) ids.Next(Into(&r));
  controller.Grant(0, 3);
  EXPECT_EQ(ids.waiters(), 2u);
  EXPECT_EQ(controller.outstanding(), 1u);
  controller.Grant(100, 3);
  std::set<int64_t> seen;
  for (const Result& r : results) {
    ASSERT_TRUE(r.answered);
    EXPECT_EQ(r.error, ErrorCode::kNone);
    seen.insert(r.id);
  }
  EXPECT_EQ(seen, (std::set<int64_t>{0, 1, 2, 100, 101}));
}

}  // namespace
}  // namespace runnel::brokerd
