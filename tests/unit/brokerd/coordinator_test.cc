// The group coordinator's core: the group -> partition mapping Kafka uses, and a Shard
// writing to and loading from a real __consumer_offsets partition in an in-process
// StorageService (commits survive an unload and a load; expiry writes tombstones;
// transactional offsets stay pending until their marker, also across a reload).
#include "brokerd/group/coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

#include "brokerd/controller/controller_client.h"
#include "brokerd/controller/metadata_cache.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/storage/append_batcher.h"
#include "brokerd/storage/partition_view.h"
#include "brokerd/txn/marker_writer.h"
#include "brokerd/txn/producer_id_manager.h"
#include "brokerd/txn/txn_coordinator.h"
#include "common/protocol/uuid.h"
#include "common/record/control.h"
#include "tests/unit/brokerd/real_storage_fixture.h"

namespace runnel::brokerd::group {
namespace {

// Expected values computed with Java's String.hashCode (UTF-16 code units) and Kafka's
// Utils.abs.
TEST(OffsetsPartitionForTest, MatchesKafka) {
  EXPECT_EQ(OffsetsPartitionFor("my-group", 50), 12);  // hash -1906497762
  EXPECT_EQ(OffsetsPartitionFor("my-group", 7), 1);
  EXPECT_EQ(OffsetsPartitionFor("", 50), 0);
  EXPECT_EQ(OffsetsPartitionFor("test", 50), 48);              // hash 3556498
  EXPECT_EQ(OffsetsPartitionFor("consumer-group-1", 50), 20);  // hash 147483020
  EXPECT_EQ(OffsetsPartitionFor("connect-cluster", 7), 5);     // hash 1440343063
  // Non-ASCII: one UTF-16 unit per BMP character, a surrogate pair above it.
  EXPECT_EQ(OffsetsPartitionFor("gr\xc3\xbcppe", 50), 12);      // "grüppe", -1233264812
  EXPECT_EQ(OffsetsPartitionFor("\xe7\xbb\x84", 50), 2);        // U+7EC4, 32452
  EXPECT_EQ(OffsetsPartitionFor("g\xf0\x9f\x98\x80", 50), 32);  // g + U+1F600, 1871882
  // Hash Integer.MIN_VALUE: Utils.abs gives 0 (a plain abs would give a negative index).
  EXPECT_EQ(OffsetsPartitionFor("polygenelubricants", 7), 0);
  // Bytes that are not UTF-8 count one code unit each: 'a', 0xFF, 'b' -> 101220.
  EXPECT_EQ(OffsetsPartitionFor("a\xff\x62", 50), 20);
  EXPECT_EQ(OffsetsPartitionFor("anything", 1), 0);
}

TEST(GroupConfigTest, FromConfigReadsTheKeys) {
  auto config = config::Config::FromMap({{"offsets.retention.minutes", "2"},
                                         {"offsets.commit.timeout.ms", "1234"},
                                         {"group.coordinator.rebalance.protocols", "classic"},
                                         {"group.consumer.assignors",
                                          "org.apache.kafka.coordinator.group.assignor."
                                          "RangeAssignor,uniform"}});
  ASSERT_TRUE(config.ok()) << config.status();
  GroupConfig c = GroupConfig::FromConfig(*config);
  EXPECT_EQ(c.offsets_retention_ms, 120000);
  EXPECT_EQ(c.offsets_commit_timeout_ms, 1234);
  EXPECT_FALSE(c.consumer_enabled);
  EXPECT_EQ(c.consumer_assignors, (std::vector<std::string>{"range", "uniform"}));
  EXPECT_EQ(c.offset_metadata_max_bytes, 4096);
}

class ShardTest : public RealStorageTest {
 protected:
  void SetUp() override { Start({}); }

  void Start(std::map<std::string, std::string> overrides) {
    StartStorage("coord");
    if (HasFatalFailure()) return;
    overrides["runnel.run.dir"] = root_;
    auto config = config::Config::FromMap(overrides);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = std::make_unique<config::Config>(std::move(*config));
    controller_ = std::make_unique<ControllerClient>(
        loop_, std::vector<std::string>{"unix:" + root_ + "/no-controller.sock"});
    appends_ = std::make_unique<AppendBatcher>(loop_, *storage_, partitions_);
    wiring_ = std::make_unique<Wiring>(loop_, *config_, metadata_, *controller_, *storage_,
                                       partitions_, *appends_);
    StartLoop();
    CreatePartition();
    group_config_ = GroupConfig::FromConfig(*config_);
  }

  void TearDown() override {
    OnLoop([this] { shard_.reset(); });
    storage_->Stop();
    controller_->Stop();
    StopLoop();
    wiring_.reset();
    appends_.reset();
    controller_.reset();
    StopStorage();
  }

  // Runs `start(finish)` on the loop and waits until `finish` was called.
  void Await(std::function<void(std::function<void()>)> start) {
    auto done = std::make_shared<std::promise<void>>();
    loop_.Post([&start, done] { start([done] { done->set_value(); }); });
    ASSERT_EQ(done->get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  }

  // Creates __consumer_offsets partition 0.
  void CreatePartition() {
    storage::PartitionsRequest req;
    auto* spec = req.add_partitions();
    spec->set_topic(std::string(kOffsetsTopic));
    spec->set_partition(0);
    spec->set_topic_id(protocol::Uuid::Random().ToString());
    (*spec->mutable_configs())["cleanup.policy"] = "compact";
    CreatePartitions(req);
  }

  // A new shard for partition 0, loaded.
  void LoadShard() {
    OnLoop([this] {
      shard_.reset();
      shard_ = std::make_unique<Shard>(wiring_->context, 0, 0, group_config_);
      shard_->SetClockForTest([this] { return now_ms_.load(); });
    });
    Await([this](std::function<void()> finish) { shard_->Load(finish); });
    OnLoop([this] { ASSERT_EQ(shard_->state(), Shard::State::kActive); });
  }

  ErrorCode Commit(const std::string& group, std::vector<Shard::Commit> commits) {
    ErrorCode error = ErrorCode::kUnknownServerError;
    Await([&](std::function<void()> finish) {
      for (auto& c : commits) c.value.commit_timestamp_ms = now_ms_.load();
      shard_->CommitOffsets(group, commits, [&error, finish](ErrorCode e) {
        error = e;
        finish();
      });
    });
    return error;
  }

  ErrorCode TxnCommit(const std::string& group, int64_t producer_id, int16_t epoch,
                      std::vector<Shard::Commit> commits) {
    ErrorCode error = ErrorCode::kUnknownServerError;
    Await([&](std::function<void()> finish) {
      for (auto& c : commits) c.value.commit_timestamp_ms = now_ms_.load();
      shard_->CommitTxnOffsets(group, producer_id, epoch, commits, [&error, finish](ErrorCode e) {
        error = e;
        finish();
      });
    });
    return error;
  }

  // Stores a COMMIT or ABORT marker of the producer in the partition, as the transaction
  // marker writer does (a coordinator-origin append); with `notify`, then tells the shard as
  // the writer's observer does.
  ErrorCode Marker(int64_t producer_id, int16_t epoch, bool commit, bool notify = true) {
    std::vector<uint8_t> batch =
        record::BuildEndTxnMarkerBatch(producer_id, epoch, {commit, 0}, now_ms_.load());
    storage::AppendPartition a;
    a.set_topic(std::string(kOffsetsTopic));
    a.set_partition(0);
    a.set_leader_epoch(0);
    a.set_coordinator_origin(true);
    a.set_records(batch.data(), batch.size());
    ErrorCode error = ErrorCode::kUnknownServerError;
    Await([&](std::function<void()> finish) {
      appends_->Append(std::move(a), std::chrono::seconds(10),
                       [&, finish](const grpc::Status& s, const storage::AppendPartitionResult& r) {
                         error = s.ok() ? protocol::ErrorFromWire(r.error_code())
                                        : ErrorCode::kUnknownServerError;
                         if (error == ErrorCode::kNone && notify && shard_) {
                           shard_->EndTransaction(producer_id, commit);
                         }
                         finish();
                       });
    });
    return error;
  }

  // The offsets of `group` pending in transactions, by producer id.
  std::map<int64_t, std::map<TopicPartition, CommittedOffset>> Pending(const std::string& group) {
    std::map<int64_t, std::map<TopicPartition, CommittedOffset>> out;
    OnLoop([&] {
      if (GroupSlot* slot = shard_->Find(group)) out = slot->pending_txn_offsets;
    });
    return out;
  }

  ErrorCode Write(std::vector<LogRecord> records) {
    ErrorCode error = ErrorCode::kUnknownServerError;
    Await([&](std::function<void()> finish) {
      shard_->Write(records, [&error, finish](ErrorCode e) {
        error = e;
        finish();
      });
    });
    return error;
  }

  // The shard's offsets of `group` (empty when it has no slot), read on the loop.
  std::map<TopicPartition, CommittedOffset> Offsets(const std::string& group) {
    std::map<TopicPartition, CommittedOffset> out;
    OnLoop([&] {
      if (GroupSlot* slot = shard_->Find(group)) out = slot->offsets;
    });
    return out;
  }

  bool HasSlot(const std::string& group) {
    bool has = false;
    OnLoop([&] { has = shard_->Find(group) != nullptr; });
    return has;
  }

  static Shard::Commit C(const std::string& topic, int32_t partition, int64_t offset,
                         std::string metadata = "", int64_t expire_at = -1) {
    Shard::Commit c;
    c.topic = topic;
    c.partition = partition;
    c.value.offset = offset;
    c.value.leader_epoch = 3;
    c.value.metadata = std::move(metadata);
    c.value.expire_timestamp_ms = expire_at;
    return c;
  }

  std::unique_ptr<config::Config> config_;
  GroupConfig group_config_;
  MetadataCache metadata_;
  PartitionView partitions_;
  std::unique_ptr<ControllerClient> controller_;
  std::unique_ptr<AppendBatcher> appends_;
  // The context and its coordinator, built as Broker builds them (these tests drive a Shard
  // directly; the coordinator stays idle).
  struct Wiring {
    Wiring(EventLoop& loop, const config::Config& config, MetadataCache& metadata,
           ControllerClient& controller, StorageClient& storage, PartitionView& partitions,
           AppendBatcher& appends)
        : producer_ids([](ProducerIdManager::Allocated) {}),
          txn_markers(metadata, partitions, appends, 1),
          context{loop,       config,  metadata, controller,   1,           storage,
                  partitions, appends, groups,   producer_ids, txn_markers, txns},
          groups(context),
          txns(context, txn_markers) {}
    ProducerIdManager producer_ids;  // unused: no InitProducerId here
    TxnMarkerWriter txn_markers;     // unused: no transactions here
    BrokerContext context;
    Coordinator groups;
    txn::TxnCoordinator txns;  // idle
  };
  std::unique_ptr<Wiring> wiring_;
  std::unique_ptr<Shard> shard_;
  std::atomic<int64_t> now_ms_{1'000'000};
};

TEST_F(ShardTest, CommittedOffsetsSurviveUnloadAndLoad) {
  LoadShard();
  EXPECT_TRUE(Offsets("g1").empty());
  ASSERT_EQ(Commit("g1", {C("orders", 0, 42, "meta"), C("orders", 1, 7)}), ErrorCode::kNone);
  ASSERT_EQ(Commit("g2", {C("payments", 3, 100)}), ErrorCode::kNone);
  ASSERT_EQ(Commit("g1", {C("orders", 0, 50, "newer")}), ErrorCode::kNone);  // last one wins
  ASSERT_EQ(Commit("g3", {C("x", 0, 1)}), ErrorCode::kNone);
  ASSERT_EQ(Write({OffsetTombstone(OffsetKey{"g3", "x", 0})}),
            ErrorCode::kNone);  // g3 deleted again
  ClassicGroupValue classic;
  classic.protocol_type = "consumer";
  classic.generation = 4;
  classic.protocol = "range";
  classic.current_state_timestamp_ms = 12345;
  ASSERT_EQ(Write({ClassicGroupRecord("g1", classic)}), ErrorCode::kNone);

  auto before = Offsets("g1");
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before.at({"orders", 0}).offset, 50);
  EXPECT_EQ(before.at({"orders", 0}).metadata, "newer");

  LoadShard();  // a fresh shard replays the partition
  auto g1 = Offsets("g1");
  ASSERT_EQ(g1.size(), 2u);
  EXPECT_EQ(g1.at({"orders", 0}).offset, 50);
  EXPECT_EQ(g1.at({"orders", 0}).metadata, "newer");
  EXPECT_EQ(g1.at({"orders", 0}).leader_epoch, 3);
  EXPECT_EQ(g1.at({"orders", 0}).commit_timestamp_ms, 1'000'000);
  EXPECT_EQ(g1.at({"orders", 1}).offset, 7);
  auto g2 = Offsets("g2");
  ASSERT_EQ(g2.size(), 1u);
  EXPECT_EQ(g2.at({"payments", 3}).offset, 100);
  EXPECT_FALSE(HasSlot("g3"));
  OnLoop([&] {
    GroupSlot* slot = shard_->Find("g1");
    ASSERT_NE(slot, nullptr);
    ASSERT_TRUE(slot->classic);
    EXPECT_EQ(slot->classic->generation(), 4);
    EXPECT_EQ(slot->classic->StateName(), "Empty");
    EXPECT_EQ(slot->classic->protocol_type(), "consumer");
    GroupSlot* g2slot = shard_->Find("g2");
    ASSERT_NE(g2slot, nullptr);
    EXPECT_FALSE(g2slot->classic);
    EXPECT_FALSE(g2slot->consumer);
  });
}

// Deleting offsets and a whole group writes tombstones that a reload honours.
TEST_F(ShardTest, DeletesAreDurable) {
  LoadShard();
  ASSERT_EQ(Commit("g1", {C("t", 0, 1), C("t", 1, 2), C("u", 0, 3)}), ErrorCode::kNone);
  ASSERT_EQ(Commit("g2", {C("t", 0, 9)}), ErrorCode::kNone);
  ErrorCode error = ErrorCode::kUnknownServerError;
  Await([&](std::function<void()> finish) {
    shard_->DeleteOffsets("g1", {{"t", 1}, {"nope", 0}}, [&error, finish](ErrorCode e) {
      error = e;
      finish();
    });
  });
  ASSERT_EQ(error, ErrorCode::kNone);
  Await([&](std::function<void()> finish) {
    shard_->DeleteGroup("g2", [&error, finish](ErrorCode e) {
      error = e;
      finish();
    });
  });
  ASSERT_EQ(error, ErrorCode::kNone);
  EXPECT_FALSE(HasSlot("g2"));
  EXPECT_EQ(Offsets("g1").size(), 2u);

  LoadShard();
  auto g1 = Offsets("g1");
  EXPECT_EQ(g1.size(), 2u);
  EXPECT_EQ(g1.count({"t", 1}), 0u);
  EXPECT_FALSE(HasSlot("g2"));
}

// A commit in flight at unload is answered NOT_COORDINATOR at once rather than dropped, and
// so are writes after it.
TEST_F(ShardTest, UnloadAnswersPendingWrites) {
  LoadShard();
  ErrorCode in_flight = ErrorCode::kUnknownServerError;
  ErrorCode after = ErrorCode::kUnknownServerError;
  auto done = std::make_shared<std::promise<void>>();
  OnLoop([&] {
    shard_->CommitOffsets("g", {C("t", 0, 1)}, [&in_flight](ErrorCode e) { in_flight = e; });
    shard_->Unload();
    EXPECT_EQ(in_flight, protocol::ErrorCode::kNotCoordinator);
    shard_->Write({OffsetTombstone(OffsetKey{"g", "t", 0})}, [&after, done](ErrorCode e) {
      after = e;
      done->set_value();
    });
  });
  ASSERT_EQ(done->get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(after, protocol::ErrorCode::kNotCoordinator);
}

// Kafka's expiry rules, with a 1 s retention on a virtual clock.
TEST_F(ShardTest, ExpiryFollowsKafkasRules) {
  group_config_.offsets_retention_ms = 1000;
  now_ms_ = 1000;
  LoadShard();
  // An Empty classic group that became empty at t=500: its offsets count from then.
  ClassicGroupValue classic;
  classic.protocol_type = "consumer";
  classic.generation = 2;
  classic.current_state_timestamp_ms = 500;
  ASSERT_EQ(Write({ClassicGroupRecord("classic-empty", classic)}), ErrorCode::kNone);
  ASSERT_EQ(Commit("simple", {C("t", 0, 1), C("t", 1, 2)}), ErrorCode::kNone);  // commit t=1000
  ASSERT_EQ(Commit("explicit", {C("t", 0, 5, "", /*expire_at=*/5000)}), ErrorCode::kNone);
  now_ms_ = 2000;
  ASSERT_EQ(Commit("classic-empty", {C("t", 0, 3)}), ErrorCode::kNone);  // commit t=2000
  ASSERT_EQ(Commit("fresh", {C("t", 0, 4)}), ErrorCode::kNone);
  LoadShard();  // the classic group is built from its record
  OnLoop([&] { ASSERT_TRUE(shard_->Find("classic-empty")->classic); });

  now_ms_ = 2500;
  Await([&](std::function<void()> finish) { shard_->ExpireOffsets(finish); });
  EXPECT_FALSE(HasSlot("simple"));            // 1500 ms after its commits
  EXPECT_FALSE(HasSlot("classic-empty"));     // 2000 ms after it became empty; group removed
  EXPECT_EQ(Offsets("explicit").size(), 1u);  // its own expire time (5000) wins
  EXPECT_EQ(Offsets("fresh").size(), 1u);     // 500 ms old

  LoadShard();  // the tombstones are in the log
  EXPECT_FALSE(HasSlot("simple"));
  EXPECT_FALSE(HasSlot("classic-empty"));
  EXPECT_EQ(Offsets("explicit").size(), 1u);
  EXPECT_EQ(Offsets("fresh").size(), 1u);

  now_ms_ = 5000;
  Await([&](std::function<void()> finish) { shard_->ExpireOffsets(finish); });
  EXPECT_FALSE(HasSlot("explicit"));
  EXPECT_FALSE(HasSlot("fresh"));
}

// Batches written compressed (offsets.topic.compression.codec) load back.
class CompressedShardTest : public ShardTest {
 protected:
  void SetUp() override { Start({{"offsets.topic.compression.codec", "4"}}); }
};

TEST_F(CompressedShardTest, LoadsCompressedBatches) {
  LoadShard();
  std::vector<Shard::Commit> commits;
  for (int p = 0; p < 50; ++p) commits.push_back(C("big", p, 1000 + p, std::string(100, 'm')));
  ASSERT_EQ(Commit("g", commits), ErrorCode::kNone);
  LoadShard();
  auto offsets = Offsets("g");
  ASSERT_EQ(offsets.size(), 50u);
  EXPECT_EQ(offsets.at({"big", 49}).offset, 1049);
  EXPECT_EQ(offsets.at({"big", 49}).metadata, std::string(100, 'm'));
}

// Transactional offsets are pending, invisible as committed offsets, until the COMMIT
// marker; then they are the group's offsets, also for a shard that replays the partition
// (transactional batch, then control batch).
TEST_F(ShardTest, TxnOffsetsCommitWithTheirMarker) {
  LoadShard();
  ASSERT_EQ(Commit("g", {C("t", 0, 5)}), ErrorCode::kNone);
  ASSERT_EQ(TxnCommit("g", 1000, 0, {C("t", 0, 10, "txn"), C("t", 1, 11)}), ErrorCode::kNone);
  EXPECT_EQ(Offsets("g").at({"t", 0}).offset, 5);
  EXPECT_EQ(Offsets("g").count({"t", 1}), 0u);
  ASSERT_EQ(Pending("g").size(), 1u);
  EXPECT_EQ(Pending("g").at(1000).at({"t", 0}).offset, 10);
  OnLoop([&] { EXPECT_TRUE(shard_->Find("g")->HasPendingTxnOffset({"t", 1})); });

  LoadShard();  // still pending after a replay: no marker yet
  EXPECT_EQ(Offsets("g").at({"t", 0}).offset, 5);
  ASSERT_EQ(Pending("g").size(), 1u);
  EXPECT_EQ(Pending("g").at(1000).size(), 2u);

  ASSERT_EQ(Marker(1000, 0, /*commit=*/true), ErrorCode::kNone);
  EXPECT_TRUE(Pending("g").empty());
  auto offsets = Offsets("g");
  EXPECT_EQ(offsets.at({"t", 0}).offset, 10);
  EXPECT_EQ(offsets.at({"t", 0}).metadata, "txn");
  EXPECT_EQ(offsets.at({"t", 1}).offset, 11);

  LoadShard();
  EXPECT_TRUE(Pending("g").empty());
  EXPECT_EQ(Offsets("g").at({"t", 0}).offset, 10);
  EXPECT_EQ(Offsets("g").at({"t", 1}).offset, 11);
}

// An ABORT drops them; a group holding nothing else goes; a replay agrees.
TEST_F(ShardTest, TxnOffsetsAbortWithTheirMarker) {
  LoadShard();
  ASSERT_EQ(Commit("kept", {C("t", 0, 5)}), ErrorCode::kNone);
  ASSERT_EQ(TxnCommit("kept", 7, 3, {C("t", 0, 10)}), ErrorCode::kNone);
  ASSERT_EQ(TxnCommit("only-txn", 7, 3, {C("t", 0, 20)}), ErrorCode::kNone);
  EXPECT_TRUE(HasSlot("only-txn"));
  ASSERT_EQ(Marker(7, 3, /*commit=*/false), ErrorCode::kNone);
  EXPECT_EQ(Offsets("kept").at({"t", 0}).offset, 5);
  EXPECT_TRUE(Pending("kept").empty());
  EXPECT_FALSE(HasSlot("only-txn"));

  LoadShard();
  EXPECT_EQ(Offsets("kept").at({"t", 0}).offset, 5);
  EXPECT_TRUE(Pending("kept").empty());
  EXPECT_FALSE(HasSlot("only-txn"));
}

// Kafka's rule for a mix of plain and transactional commits of one partition: the record
// later in the log wins, whatever ends first.
TEST_F(ShardTest, LaterRecordWinsBetweenPlainAndTxnCommits) {
  LoadShard();
  ASSERT_EQ(TxnCommit("g", 1, 0, {C("t", 0, 10), C("t", 1, 10)}), ErrorCode::kNone);
  ASSERT_EQ(Commit("g", {C("t", 0, 20)}), ErrorCode::kNone);  // after the txn's record
  ASSERT_EQ(Marker(1, 0, /*commit=*/true), ErrorCode::kNone);
  EXPECT_EQ(Offsets("g").at({"t", 0}).offset, 20);  // the plain commit is later
  EXPECT_EQ(Offsets("g").at({"t", 1}).offset, 10);

  ASSERT_EQ(Commit("g", {C("t", 1, 30)}), ErrorCode::kNone);  // before the txn's record
  ASSERT_EQ(TxnCommit("g", 1, 0, {C("t", 1, 40)}), ErrorCode::kNone);
  EXPECT_EQ(Offsets("g").at({"t", 1}).offset, 30);
  ASSERT_EQ(Marker(1, 0, /*commit=*/true), ErrorCode::kNone);
  EXPECT_EQ(Offsets("g").at({"t", 1}).offset, 40);

  LoadShard();
  EXPECT_EQ(Offsets("g").at({"t", 0}).offset, 20);
  EXPECT_EQ(Offsets("g").at({"t", 1}).offset, 40);
}

// Two producers' transactions on one group end independently.
TEST_F(ShardTest, TransactionsOfTwoProducersEndApart) {
  LoadShard();
  ASSERT_EQ(TxnCommit("g", 1, 0, {C("t", 0, 10)}), ErrorCode::kNone);
  ASSERT_EQ(TxnCommit("g", 2, 0, {C("t", 1, 20)}), ErrorCode::kNone);
  ASSERT_EQ(Marker(2, 0, /*commit=*/true), ErrorCode::kNone);
  EXPECT_EQ(Offsets("g").at({"t", 1}).offset, 20);
  EXPECT_EQ(Offsets("g").count({"t", 0}), 0u);
  ASSERT_EQ(Pending("g").size(), 1u);
  EXPECT_EQ(Pending("g").count(1), 1u);
  // A marker of a producer with nothing here changes nothing.
  ASSERT_EQ(Marker(3, 0, /*commit=*/true), ErrorCode::kNone);
  ASSERT_EQ(Pending("g").size(), 1u);

  LoadShard();
  EXPECT_EQ(Offsets("g").at({"t", 1}).offset, 20);
  ASSERT_EQ(Pending("g").size(), 1u);
  ASSERT_EQ(Marker(1, 0, /*commit=*/true), ErrorCode::kNone);
  EXPECT_EQ(Offsets("g").at({"t", 0}).offset, 10);
}

// OffsetDelete, DeleteGroups and expiry with open transactions, as Kafka: a tombstone ends
// the pending offsets of its partition; expiry leaves a partition with a pending offset and
// a group with open transactions alone.
TEST_F(ShardTest, TombstonesAndExpiryMeetPendingTxnOffsets) {
  group_config_.offsets_retention_ms = 1000;
  now_ms_ = 1000;
  LoadShard();
  ASSERT_EQ(TxnCommit("g", 5, 0, {C("t", 0, 10), C("t", 1, 11)}), ErrorCode::kNone);
  ErrorCode error = ErrorCode::kUnknownServerError;
  Await([&](std::function<void()> finish) {
    shard_->DeleteOffsets("g", {{"t", 0}}, [&error, finish](ErrorCode e) {
      error = e;
      finish();
    });
  });
  ASSERT_EQ(error, ErrorCode::kNone);
  ASSERT_EQ(Pending("g").at(5).size(), 1u);
  EXPECT_EQ(Pending("g").at(5).count({"t", 1}), 1u);

  // Expiry: the plain offset of t-1 is old, but a transaction has t-1 open.
  ASSERT_EQ(Commit("g", {C("t", 1, 1)}), ErrorCode::kNone);
  ASSERT_EQ(Commit("g", {C("u", 0, 1)}), ErrorCode::kNone);
  now_ms_ = 5000;
  Await([&](std::function<void()> finish) { shard_->ExpireOffsets(finish); });
  EXPECT_EQ(Offsets("g").count({"t", 1}), 1u);
  EXPECT_EQ(Offsets("g").count({"u", 0}), 0u);
  EXPECT_TRUE(HasSlot("g"));

  LoadShard();
  ASSERT_EQ(Pending("g").at(5).size(), 1u);
  EXPECT_EQ(Offsets("g").count({"t", 1}), 1u);

  // Deleting the group writes tombstones for pending offsets too.
  ASSERT_EQ(TxnCommit("h", 6, 0, {C("t", 2, 12)}), ErrorCode::kNone);
  Await([&](std::function<void()> finish) {
    shard_->DeleteGroup("h", [&error, finish](ErrorCode e) {
      error = e;
      finish();
    });
  });
  ASSERT_EQ(error, ErrorCode::kNone);
  EXPECT_FALSE(HasSlot("h"));
  ASSERT_EQ(Marker(6, 0, /*commit=*/true), ErrorCode::kNone);
  EXPECT_FALSE(HasSlot("h"));
  LoadShard();
  EXPECT_FALSE(HasSlot("h"));  // tombstone, then the marker: nothing to commit
}

// Storage checks the producer epoch of a transactional offset batch: an older epoch is
// INVALID_PRODUCER_EPOCH, given to the caller as is, and nothing becomes pending.
TEST_F(ShardTest, TxnCommitWithAnOldEpochIsFenced) {
  LoadShard();
  ASSERT_EQ(TxnCommit("g", 9, 4, {C("t", 0, 10)}), ErrorCode::kNone);
  ASSERT_EQ(Marker(9, 4, /*commit=*/true), ErrorCode::kNone);
  EXPECT_EQ(TxnCommit("g", 9, 3, {C("t", 0, 99)}), ErrorCode::kInvalidProducerEpoch);
  EXPECT_TRUE(Pending("g").empty());
  EXPECT_EQ(Offsets("g").at({"t", 0}).offset, 10);
}

// A shard told of a marker while it loads (the observer finds it loading) reads on to the log
// end once more before it is active: the marker is replayed, once, and the load finishes.
TEST_F(ShardTest, MarkerDuringLoadIsReplayed) {
  LoadShard();
  ASSERT_EQ(TxnCommit("g", 1, 0, {C("t", 0, 10)}), ErrorCode::kNone);
  OnLoop([this] {
    shard_.reset();
    shard_ = std::make_unique<Shard>(wiring_->context, 0, 0, group_config_);
    shard_->SetClockForTest([this] { return now_ms_.load(); });
  });
  // The marker goes in before the load's first read; the shard only hears of it.
  ASSERT_EQ(Marker(1, 0, /*commit=*/true, /*notify=*/false), ErrorCode::kNone);
  OnLoop([this] { shard_->NoteMarkerDuringLoad(); });
  Await([this](std::function<void()> finish) { shard_->Load(finish); });
  EXPECT_EQ(Offsets("g").at({"t", 0}).offset, 10);
  EXPECT_TRUE(Pending("g").empty());
}

}  // namespace
}  // namespace runnel::brokerd::group
