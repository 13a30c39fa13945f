// TxnMarkerWriter against a real StorageService: markers as coordinator-origin appends,
// Kafka's per-marker errors in order, observers, and the last stable offset brought to the
// partition view by the markers' answers.
#include "brokerd/txn/marker_writer.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <vector>

#include "brokerd/controller/metadata_cache.h"
#include "tests/unit/brokerd/metadata_records.h"
#include "tests/unit/brokerd/real_storage_fixture.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;

// A transactional batch of `count` records of producer `pid`, epoch 0, from sequence 0.
std::string TxnBatch(int64_t pid, int count) {
  record::BatchBuilder::Options o;
  o.producer_id = pid;
  o.producer_epoch = 0;
  o.base_sequence = 0;
  o.transactional = true;
  record::BatchBuilder b(o);
  for (int i = 0; i < count; ++i) b.Add(1000 + i, std::nullopt, record::ByteSpan());
  auto bytes = b.Build();
  EXPECT_TRUE(bytes.ok());
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : std::string();
}

class MarkerWriterTest : public RealStorageTest {
 protected:
  void SetUp() override {
    RealStorageTest::SetUp();
    if (HasFatalFailure()) return;
    CreateTopic(2);  // "t", on this node (1)
    runnel::controller::MetadataUpdate u;
    u.set_offset(0);
    u.set_is_snapshot(true);
    metadata_records::AddTopic(u, "t", 1, 2);
    metadata_records::AddTopic(u, "elsewhere", 2, 1, {2}, /*leader=*/2);
    auto ready = std::make_shared<std::promise<void>>();
    auto ready_set = std::make_shared<bool>(false);
    OnLoop([&] {
      EXPECT_TRUE(metadata_.Apply(u));
      storage_->StartWatch(
          [this, ready, ready_set](const storage::PartitionChange& c, bool snapshot) {
            view_.Apply(c, snapshot);
            if (!*ready_set && view_.all().size() == 2) {
              *ready_set = true;
              ready->set_value();
            }
          },
          [this] { view_.MarkLost(); });
    });
    ASSERT_EQ(ready->get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
    batcher_ = std::make_unique<AppendBatcher>(loop_, *storage_, view_);
    writer_ = std::make_unique<TxnMarkerWriter>(metadata_, view_, *batcher_, 1);
  }
  void TearDown() override {
    storage_->Stop();
    StopLoop();
    writer_.reset();
    batcher_.reset();
    StopStorage();
  }

  // Appends a client batch to t-`partition` and waits for its answer.
  int32_t Append(int32_t partition, std::string records) {
    std::promise<int32_t> done;
    OnLoop([&] {
      storage::AppendPartition a;
      a.set_topic("t");
      a.set_partition(partition);
      a.set_records(std::move(records));
      batcher_->Append(std::move(a), std::chrono::seconds(10),
                       [&](const grpc::Status& s, const storage::AppendPartitionResult& r) {
                         EXPECT_TRUE(s.ok()) << s.error_message();
                         done.set_value(r.error_code());
                       });
    });
    auto f = done.get_future();
    EXPECT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    return f.get();
  }

  std::vector<ErrorCode> Write(std::vector<TxnMarker> markers) {
    std::promise<std::vector<ErrorCode>> done;
    OnLoop(
        [&] { writer_->Write(std::move(markers), [&](auto errors) { done.set_value(errors); }); });
    auto f = done.get_future();
    EXPECT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    return f.get();
  }

  MetadataCache metadata_;
  std::unique_ptr<AppendBatcher> batcher_;
  std::unique_ptr<TxnMarkerWriter> writer_;
};

TEST_F(MarkerWriterTest, MarkersAreWrittenInOrderWithKafkasErrorsPerMarker) {
  ASSERT_EQ(Append(0, TxnBatch(7, 2)), 0);  // offsets 0..1: a transaction from 0
  OnLoop([&] { EXPECT_EQ(view_.Find("t", 0)->last_stable_offset, 0); });
  std::vector<TxnMarker> observed;
  OnLoop([&] { writer_->AddObserver([&](const TxnMarker& m) { observed.push_back(m); }); });
  std::vector<ErrorCode> errors = Write({
      {"t", 0, 7, 0, /*commit=*/false, 3},  // aborts it: marker at 2
      {"t", 9, 7, 0, true, 3},              // no such partition
      {"nope", 0, 7, 0, true, 3},           // no such topic
      {"elsewhere", 0, 7, 0, true, 3},      // led by another broker
      {"t", 1, 7, 0, true, 3},              // no transaction there: written, ends none
      {"t", 0, 7, 0, true, 2},              // an older coordinator epoch than the abort's
  });
  EXPECT_EQ(errors, (std::vector<ErrorCode>{ErrorCode::kNone, ErrorCode::kUnknownTopicOrPartition,
                                            ErrorCode::kUnknownTopicOrPartition,
                                            ErrorCode::kNotLeaderOrFollower, ErrorCode::kNone,
                                            ErrorCode::kTransactionCoordinatorFenced}));
  OnLoop([&] {
    ASSERT_EQ(observed.size(), 2u);
    EXPECT_EQ(observed[0].partition, 0);
    EXPECT_FALSE(observed[0].commit);
    EXPECT_EQ(observed[1].partition, 1);
    // The abort's answer moved the view: the end and the last stable offset past the marker.
    EXPECT_EQ(view_.Find("t", 0)->high_watermark, 3);
    EXPECT_EQ(view_.Find("t", 0)->last_stable_offset, 3);
  });
  // No marker at all: answered at once with nothing.
  EXPECT_TRUE(Write({}).empty());
}

}  // namespace
}  // namespace runnel::brokerd
