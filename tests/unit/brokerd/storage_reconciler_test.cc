// StorageReconciler against a real StorageService: a pass looks at what changed (a topic
// created, removed, created again, reconfigured; logs that appeared or went), a full pass
// comes after a reset of the partition view, a failed creation is reported and retried.
#include "brokerd/storage/storage_reconciler.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "brokerd/controller/metadata_cache.h"
#include "tests/unit/brokerd/metadata_records.h"
#include "tests/unit/brokerd/real_storage_fixture.h"
#include "tests/unit/storaged/log/file_faults.h"

namespace runnel::brokerd {
namespace {

using metadata_records::AddTopic;
using metadata_records::Id;
using runnel::controller::MetadataUpdate;

constexpr int32_t kNode = 1;
constexpr int32_t kOtherNode = 2;

std::string IdString(uint8_t b) { return UuidFromBytes(Id(b)).ToString(); }

class StorageReconcilerTest : public RealStorageTest {
 protected:
  void SetUp() override {
    StartStorage("reconciler");
    if (HasFatalFailure()) return;
    reconciler_ = std::make_unique<StorageReconciler>(
        loop_, cache_, view_, *storage_, kNode,
        [](const MetadataCache&, const TopicInfo& topic) { return topic.configs; });
    view_.OnLayoutChange([this] { reconciler_->Kick(); });
    StartLoop();
    OnLoop([this] {
      storage_->StartWatch(
          [this](const storage::PartitionChange& change, bool snapshot) {
            if (!feed_view_) {
              for (const auto& s : change.partitions()) dropped_.emplace(s.topic(), s.partition());
              return;
            }
            view_.Apply(change, snapshot);
          },
          [this] { view_.MarkLost(); });
    });
  }

  void TearDown() override {
    OnLoop([this] { reconciler_->Close(); });
    storage_->Stop();
    StopLoop();
    reconciler_.reset();
    StopStorage();
  }

  // A metadata update at the next offset (the first one an image).
  MetadataUpdate Next() {
    MetadataUpdate u;
    u.set_offset(next_offset_);
    u.set_is_snapshot(next_offset_ == 0);
    ++next_offset_;
    return u;
  }

  // Applies `u` on the loop and kicks the reconciler as the broker does; returns what the
  // pass it started looked at (the pass begins within Kick).
  size_t ApplyAndKick(const MetadataUpdate& u) {
    size_t examined = 0;
    OnLoop([&] {
      EXPECT_TRUE(cache_.Apply(u));
      reconciler_->Kick();
      examined = reconciler_->last_pass_examined();
    });
    return examined;
  }

  // Polls `pred` on the loop every 10 ms, 10 s at most; true once it holds.
  bool WaitFor(const std::function<bool()>& pred) {
    for (int i = 0; i < 1000; ++i) {
      bool done = false;
      OnLoop([&] { done = pred(); });
      if (done) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // Whether storaged holds topic-partition under the topic id ending in `id`.
  bool Stored(const std::string& topic, int32_t partition, uint8_t id) const {
    std::shared_ptr<storaged::Log> log = logs_->GetLog({topic, partition});
    return log != nullptr && log->topic_id() == IdString(id);
  }
  bool Absent(const std::string& topic, int32_t partition) const {
    return logs_->GetLog({topic, partition}) == nullptr;
  }

  // Waits until no pass runs and one found nothing to do (kicking passes to see).
  void Settle() {
    EXPECT_TRUE(WaitFor([&] {
      reconciler_->Kick();
      return reconciler_->in_sync();
    }));
  }

  // Waits until storaged holds partitions 0..count-1 of `topic` under `id`, the view knows
  // it, and the reconciler has settled.
  void WaitStored(const std::string& topic, int count, uint8_t id) {
    EXPECT_TRUE(WaitFor([&] {
      for (int p = 0; p < count; ++p) {
        const StoredPartition* known = view_.Find(topic, p);
        if (!Stored(topic, p, id) || known == nullptr || known->topic_id != IdString(id)) {
          return false;
        }
      }
      return true;
    })) << topic;
    Settle();
  }

  MetadataCache cache_;
  std::unique_ptr<StorageReconciler> reconciler_;
  int64_t next_offset_ = 0;
  bool feed_view_ = true;  // loop thread
  // The partitions of the stream's messages dropped while !feed_view_ (loop thread).
  std::set<PartitionKey> dropped_;
};

TEST_F(StorageReconcilerTest, APassLooksOnlyAtTheTopicCreated) {
  MetadataUpdate image = Next();
  for (int t = 0; t < 20; ++t)
    AddTopic(image, "t" + std::to_string(t), static_cast<uint8_t>(t + 1), 10, {kNode});
  AddTopic(image, "elsewhere", 100, 50, {kOtherNode});
  ApplyAndKick(image);
  for (int t = 0; t < 20; ++t) WaitStored("t" + std::to_string(t), 10, t + 1);
  EXPECT_TRUE(Absent("elsewhere", 0));

  MetadataUpdate create = Next();
  AddTopic(create, "new", 50, 5, {kNode});
  // Its 5 partitions, not the 250 of the others.
  EXPECT_EQ(ApplyAndKick(create), 5u);
  OnLoop([&] { EXPECT_FALSE(reconciler_->last_pass_full()); });
  WaitStored("new", 5, 50);
  // The passes after its logs appeared looked at them alone (each as a stored log and as a
  // placed partition).
  OnLoop([&] { EXPECT_LE(reconciler_->last_pass_examined(), 10u); });

  // A partition moved here alone: that partition.
  MetadataUpdate move = Next();
  auto* p = move.add_records()->mutable_partition();
  p->set_topic_id(Id(100));
  p->set_partition_id(7);
  p->add_replicas(kNode);
  p->add_isr(kNode);
  p->set_leader(kNode);
  EXPECT_EQ(ApplyAndKick(move), 1u);
  EXPECT_TRUE(WaitFor([&] { return Stored("elsewhere", 7, 100); }));
  Settle();
  EXPECT_TRUE(Absent("elsewhere", 6));
}

TEST_F(StorageReconcilerTest, ATopicRemovedAndCreatedAgainGetsNewLogs) {
  MetadataUpdate image = Next();
  AddTopic(image, "t", 1, 3, {kNode});
  AddTopic(image, "gone", 2, 2, {kNode});
  AddTopic(image, "other", 3, 20, {kNode});
  ApplyAndKick(image);
  WaitStored("t", 3, 1);
  WaitStored("gone", 2, 2);
  WaitStored("other", 20, 3);

  MetadataUpdate remove = Next();
  remove.add_records()->mutable_remove_topic()->set_topic_id(Id(2));
  EXPECT_EQ(ApplyAndKick(remove), 2u);
  EXPECT_TRUE(WaitFor([&] { return Absent("gone", 0) && Absent("gone", 1); }));
  Settle();

  // The same name under a new id in one update: the old logs go, then new ones come.
  MetadataUpdate again = Next();
  again.add_records()->mutable_remove_topic()->set_topic_id(Id(1));
  AddTopic(again, "t", 4, 3, {kNode});
  EXPECT_EQ(ApplyAndKick(again), 6u);  // 3 stored, 3 placed
  WaitStored("t", 3, 4);
  WaitStored("other", 20, 3);
}

TEST_F(StorageReconcilerTest, ATopicConfigChangeReachesStoraged) {
  MetadataUpdate image = Next();
  AddTopic(image, "c", 1, 2, {kNode});
  AddTopic(image, "other", 2, 30, {kNode});
  ApplyAndKick(image);
  WaitStored("c", 2, 1);
  WaitStored("other", 30, 2);

  MetadataUpdate alter = Next();
  auto* config = alter.add_records()->mutable_config();
  config->set_resource_type(runnel::metadata::CONFIG_RESOURCE_TOPIC);
  config->set_resource_name("c");
  config->set_name("retention.ms");
  config->set_value("123456");
  EXPECT_EQ(ApplyAndKick(alter), 4u);  // c's 2 logs, each stored and placed
  EXPECT_TRUE(WaitFor([&] {
    for (int p = 0; p < 2; ++p) {
      std::shared_ptr<storaged::Log> log = logs_->GetLog({"c", p});
      if (log == nullptr || log->config().retention_ms != 123456) return false;
    }
    return true;
  }));
  EXPECT_NE(logs_->GetLog({"other", 0})->config().retention_ms, 123456);
  Settle();

  // Another broker's dynamic configs are not inherited here; the cluster-wide default's are:
  // a full pass.
  MetadataUpdate theirs = Next();
  config = theirs.add_records()->mutable_config();
  config->set_resource_type(runnel::metadata::CONFIG_RESOURCE_BROKER);
  config->set_resource_name(std::to_string(kOtherNode));
  config->set_name("log.retention.ms");
  config->set_value("1000");
  EXPECT_EQ(ApplyAndKick(theirs), 0u);
  MetadataUpdate cluster = Next();
  config = cluster.add_records()->mutable_config();
  config->set_resource_type(runnel::metadata::CONFIG_RESOURCE_BROKER);
  config->set_resource_name("");
  config->set_name("log.retention.ms");
  config->set_value("1000");
  EXPECT_EQ(ApplyAndKick(cluster), 64u);
  OnLoop([&] { EXPECT_TRUE(reconciler_->last_pass_full()); });
}

TEST_F(StorageReconcilerTest, AFailedCreationIsReportedAndRetried) {
  storaged::testing::FaultInjector faults;
  faults.Fail(storaged::FileOp::kCreate, "/f-1", ENOSPC);
  MetadataUpdate image = Next();
  AddTopic(image, "f", 1, 3, {kNode});
  ApplyAndKick(image);
  EXPECT_TRUE(WaitFor([&] { return view_.CreateFailure("f", 1) != nullptr; }));
  EXPECT_TRUE(Stored("f", 0, 1));
  EXPECT_TRUE(Stored("f", 2, 1));
  // The retry timer tries again, nothing else having changed.
  EXPECT_TRUE(WaitFor([&] { return faults.Calls(storaged::FileOp::kCreate, "/f-1") >= 2; }));

  // Another topic meanwhile: f-1 stays reported.
  MetadataUpdate create = Next();
  AddTopic(create, "g", 2, 2, {kNode});
  ApplyAndKick(create);
  EXPECT_TRUE(
      WaitFor([&] { return view_.Find("g", 0) != nullptr && view_.Find("g", 1) != nullptr; }));
  OnLoop([&] { EXPECT_NE(view_.CreateFailure("f", 1), nullptr); });

  // Room again: the next pass (here a kick, as any metadata change gives, rather than the
  // retry timer, now seconds away) creates it.
  faults.Clear();
  OnLoop([&] { reconciler_->Kick(); });
  WaitStored("f", 3, 1);
  OnLoop([&] { EXPECT_EQ(view_.CreateFailure("f", 1), nullptr); });
}

TEST_F(StorageReconcilerTest, AFullPassAfterAResetDeletesLogsNotPlacedHere) {
  MetadataUpdate image = Next();
  AddTopic(image, "keep", 1, 2, {kNode});
  ApplyAndKick(image);
  WaitStored("keep", 2, 1);

  // Logs the view does not hear of (as when storaged's stream broke), then a fresh snapshot
  // of what storaged holds, as a restarted stream gives.
  OnLoop([&] { feed_view_ = false; });
  storage::PartitionsRequest stray;
  for (int p = 0; p < 2; ++p) {
    auto* spec = stray.add_partitions();
    spec->set_topic("stray");
    spec->set_partition(p);
    spec->set_topic_id(IdString(9));
  }
  CreatePartitions(stray);
  EXPECT_TRUE(WaitFor([&] {
    return dropped_.count({"stray", 0}) + dropped_.count({"stray", 1}) == 2;
  }));
  storage::PartitionChange snapshot;
  for (const std::shared_ptr<storaged::Log>& log : logs_->AllLogs()) {
    storage::PartitionState* s = snapshot.add_partitions();
    s->set_topic(log->tp().topic);
    s->set_partition(log->tp().partition);
    s->set_topic_id(log->topic_id());
  }
  ASSERT_EQ(snapshot.partitions_size(), 4);
  OnLoop([&] {
    feed_view_ = true;
    view_.Apply(snapshot, /*snapshot=*/true);
    EXPECT_TRUE(reconciler_->last_pass_full());
  });
  EXPECT_TRUE(WaitFor([&] { return Absent("stray", 0) && Absent("stray", 1); }));
  EXPECT_TRUE(Stored("keep", 0, 1));
  EXPECT_TRUE(Stored("keep", 1, 1));
}

}  // namespace
}  // namespace runnel::brokerd
