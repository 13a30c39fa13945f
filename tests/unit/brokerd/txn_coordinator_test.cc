// The transaction coordinator's shard against a real __transaction_state partition in an
// in-process StorageService: transactions end in two phases (Prepare stored, markers, then
// Complete), survive an unload and a load (a Prepare state loaded is completed), fence the
// previous producer instance, abort at their timeout, and ids expire. The markers go to a
// fake writer that records them and answers as the test says.
#include "brokerd/txn/txn_coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <future>

#include "brokerd/controller/controller_client.h"
#include "brokerd/controller/metadata_cache.h"
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/storage/append_batcher.h"
#include "brokerd/storage/partition_view.h"
#include "brokerd/txn/marker_writer.h"
#include "brokerd/txn/producer_id_manager.h"
#include "tests/unit/brokerd/real_storage_fixture.h"

namespace runnel::brokerd::txn {
namespace {

using protocol::ErrorCode;

// Records each Write; answers it at once with the next scripted errors (NONE when the script
// is empty), or holds it while `hold` is set.
class FakeMarkers final : public TxnMarkerWriter {
 public:
  using TxnMarkerWriter::TxnMarkerWriter;
  void Write(std::vector<TxnMarker> markers, Done done) override {
    written.push_back(markers);
    if (hold) {
      held.push_back(std::move(done));
      return;
    }
    std::vector<ErrorCode> errors(markers.size(), ErrorCode::kNone);
    if (!script.empty()) {
      errors = script.front();
      script.pop_front();
    }
    done(errors);
  }
  std::vector<std::vector<TxnMarker>> written;
  std::deque<std::vector<ErrorCode>> script;
  bool hold = false;
  std::vector<Done> held;
};

struct Init {
  ErrorCode error = ErrorCode::kUnknownServerError;
  int64_t producer_id = -2;
  int16_t epoch = -2;
};

class TxnShardTest : public RealStorageTest {
 protected:
  void SetUp() override { Start({}); }

  void Start(std::map<std::string, std::string> overrides) {
    StartStorage("txn");
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
    storage::PartitionsRequest req;
    auto* spec = req.add_partitions();
    spec->set_topic(std::string(kTxnTopic));
    spec->set_partition(0);
    spec->set_topic_id(protocol::Uuid::Random().ToString());
    (*spec->mutable_configs())["cleanup.policy"] = "compact";
    CreatePartitions(req);
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

  void Await(std::function<void(std::function<void()>)> start) {
    auto done = std::make_shared<std::promise<void>>();
    loop_.Post([&start, done] { start([done] { done->set_value(); }); });
    ASSERT_EQ(done->get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  }

  // A new shard for partition 0 with coordinator epoch 3, loaded.
  void LoadShard() {
    OnLoop([this] {
      shard_.reset();
      shard_ = std::make_unique<TxnShard>(wiring_->txns, wiring_->context, 0, 3);
      shard_->Load();
    });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool active = false;
    while (!active && std::chrono::steady_clock::now() < deadline) {
      OnLoop([&] { active = shard_->state() == TxnShard::State::kActive; });
      if (!active) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(active);
  }

  Init InitId(const std::string& id, int32_t timeout_ms = 60000,
              std::optional<ProducerIdAndEpoch> expected = std::nullopt) {
    Init out;
    Await([&](std::function<void()> finish) {
      shard_->InitProducerId(id, timeout_ms, expected,
                             [&out, finish](ErrorCode e, int64_t pid, int16_t epoch) {
                               out = {e, pid, epoch};
                               finish();
                             });
    });
    return out;
  }

  ErrorCode Add(const std::string& id, const Init& p, TxnPartitions partitions,
                int16_t client_version = 0) {
    ErrorCode error = ErrorCode::kUnknownServerError;
    Await([&](std::function<void()> finish) {
      shard_->AddPartitions(id, p.producer_id, p.epoch, partitions, client_version,
                            [&error, finish](ErrorCode e) {
                              error = e;
                              finish();
                            });
    });
    return error;
  }

  // EndTxn as a client of `client_version`; the answer with the id and epoch to go on with.
  Init EndV(const std::string& id, const Init& p, bool commit, int16_t client_version) {
    Init out;
    Await([&](std::function<void()> finish) {
      shard_->EndTxn(id, p.producer_id, p.epoch, commit, client_version,
                     [&out, finish](ErrorCode e, int64_t pid, int16_t epoch) {
                       out = {e, pid, epoch};
                       finish();
                     });
    });
    return out;
  }

  ErrorCode End(const std::string& id, const Init& p, bool commit) {
    return EndV(id, p, commit, /*client_version=*/0).error;
  }

  // The id's state as the shard holds it; Dead when it has none.
  TxnMetadata State(const std::string& id) {
    TxnMetadata m;
    m.state = TxnState::kDead;
    OnLoop([&] {
      if (auto v = shard_->Describe(id)) m = v->metadata;
    });
    return m;
  }

  // Waits until `id` reaches `state` (its markers and completion are asynchronous).
  void WaitFor(const std::string& id, TxnState state) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (State(id).state != state && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_EQ(TxnStateName(State(id).state), TxnStateName(state));
  }

  FakeMarkers& markers() { return wiring_->markers; }

  std::unique_ptr<config::Config> config_;
  MetadataCache metadata_;
  PartitionView partitions_;
  std::unique_ptr<ControllerClient> controller_;
  std::unique_ptr<AppendBatcher> appends_;
  struct Wiring {
    Wiring(EventLoop& loop, const config::Config& config, MetadataCache& metadata,
           ControllerClient& controller, StorageClient& storage, PartitionView& partitions,
           AppendBatcher& appends)
        : producer_ids([this](ProducerIdManager::Allocated done) {
            runnel::controller::AllocateProducerIdsResponse r;
            r.set_producer_id_start(next_block);
            r.set_producer_id_len(1000);
            next_block += 1000;
            done(grpc::Status::OK, r);
          }),
          markers(metadata, partitions, appends, 1),
          context{loop,       config,  metadata, controller,   1,       storage,
                  partitions, appends, groups,   producer_ids, markers, txns},
          groups(context),
          txns(context, markers) {}
    int64_t next_block = 5000;
    ProducerIdManager producer_ids;
    FakeMarkers markers;
    BrokerContext context;
    group::Coordinator groups;  // idle
    TxnCoordinator txns;        // its config; the shards are the test's
  };
  std::unique_ptr<Wiring> wiring_;
  std::unique_ptr<TxnShard> shard_;
};

TEST_F(TxnShardTest, ATransactionCommitsInTwoPhasesAndSurvivesAReload) {
  LoadShard();
  Init p = InitId("tx");
  ASSERT_EQ(p.error, ErrorCode::kNone);
  EXPECT_EQ(p.producer_id, 5000);
  EXPECT_EQ(p.epoch, 0);
  ASSERT_EQ(Add("tx", p, {{"orders", 0}, {"orders", 1}}), ErrorCode::kNone);
  ASSERT_EQ(Add("tx", p, {{"__consumer_offsets", 7}}), ErrorCode::kNone);
  EXPECT_EQ(State("tx").state, TxnState::kOngoing);
  ASSERT_EQ(End("tx", p, /*commit=*/true), ErrorCode::kNone);
  WaitFor("tx", TxnState::kCompleteCommit);
  ASSERT_EQ(markers().written.size(), 1u);
  ASSERT_EQ(markers().written[0].size(), 3u);
  for (const TxnMarker& m : markers().written[0]) {
    EXPECT_TRUE(m.commit);
    EXPECT_EQ(m.producer_id, 5000);
    EXPECT_EQ(m.producer_epoch, 0);
    EXPECT_EQ(m.coordinator_epoch, 3);
  }
  EXPECT_TRUE(State("tx").partitions.empty());
  // A retried commit is answered from the state; an abort now is refused.
  EXPECT_EQ(End("tx", p, true), ErrorCode::kNone);
  EXPECT_EQ(End("tx", p, false), ErrorCode::kInvalidTxnState);

  LoadShard();  // replays __transaction_state
  TxnMetadata m = State("tx");
  EXPECT_EQ(m.state, TxnState::kCompleteCommit);
  EXPECT_EQ(m.producer_id, 5000);
  EXPECT_EQ(m.producer_epoch, 0);
  // A new instance of the producer: same id, next epoch.
  Init again = InitId("tx");
  EXPECT_EQ(again.error, ErrorCode::kNone);
  EXPECT_EQ(again.producer_id, 5000);
  EXPECT_EQ(again.epoch, 1);
  EXPECT_EQ(markers().written.size(), 1u);  // loading a completed transaction writes nothing
}

TEST_F(TxnShardTest, V2EndsBumpTheEpochAndAnExhaustedOneMovesToANewProducerId) {
  LoadShard();
  Init p = InitId("tx");
  ASSERT_EQ(p.error, ErrorCode::kNone);
  ASSERT_EQ(Add("tx", p, {{"orders", 0}}, kTransactionVersion2), ErrorCode::kNone);
  Init next = EndV("tx", p, /*commit=*/true, kTransactionVersion2);
  ASSERT_EQ(next.error, ErrorCode::kNone);
  EXPECT_EQ(next.producer_id, p.producer_id);
  EXPECT_EQ(next.epoch, p.epoch + 1);
  WaitFor("tx", TxnState::kCompleteCommit);
  ASSERT_EQ(markers().written.size(), 1u);
  EXPECT_EQ(markers().written[0].at(0).producer_epoch, p.epoch + 1);
  EXPECT_EQ(markers().written[0].at(0).transaction_version, 2);
  // The lost answer's retry gets the same id and epoch; the old epoch cannot start anew.
  Init retry = EndV("tx", p, true, kTransactionVersion2);
  EXPECT_EQ(retry.error, ErrorCode::kNone);
  EXPECT_EQ(retry.epoch, next.epoch);
  EXPECT_EQ(Add("tx", p, {{"orders", 0}}, kTransactionVersion2), ErrorCode::kProducerFenced);
  // An abort with nothing added still ends a transaction (and bumps).
  Init aborted = EndV("tx", next, false, kTransactionVersion2);
  ASSERT_EQ(aborted.error, ErrorCode::kNone);
  EXPECT_EQ(aborted.epoch, next.epoch + 1);
  WaitFor("tx", TxnState::kCompleteAbort);
  EXPECT_EQ(markers().written.size(), 1u);  // no partitions, no markers

  // An epoch at the limit (a stored Ongoing state at 32766, as written by another shard):
  // the end gets a new producer id, moves the id to it at epoch 0, and a reload agrees.
  TxnMetadata limit = State("tx");
  limit.state = TxnState::kOngoing;
  limit.producer_epoch = INT16_MAX - 1;
  limit.partitions = {{"orders", 1}};
  limit.start_timestamp_ms = limit.last_update_timestamp_ms;
  limit.client_transaction_version = kTransactionVersion2;
  std::unique_ptr<InternalPartition> log;
  Await([&](std::function<void()> finish) {
    shard_.reset();
    log = std::make_unique<InternalPartition>(wiring_->context, std::string(kTxnTopic), 0, 3);
    log->Write({EncodeTxnRecord(limit)}, limit.last_update_timestamp_ms, std::chrono::seconds(10),
               [finish](ErrorCode e) {
                 EXPECT_EQ(e, ErrorCode::kNone);
                 finish();
               });
  });
  OnLoop([&] { log.reset(); });
  LoadShard();
  const Init at_limit{ErrorCode::kNone, limit.producer_id, INT16_MAX - 1};
  Init rotated = EndV("tx", at_limit, true, kTransactionVersion2);
  ASSERT_EQ(rotated.error, ErrorCode::kNone);
  EXPECT_NE(rotated.producer_id, limit.producer_id);
  EXPECT_GE(rotated.producer_id, 5000);
  EXPECT_EQ(rotated.epoch, 0);
  WaitFor("tx", TxnState::kCompleteCommit);
  EXPECT_EQ(markers().written.back().at(0).producer_id, limit.producer_id);
  EXPECT_EQ(markers().written.back().at(0).producer_epoch, INT16_MAX);
  LoadShard();
  TxnMetadata m = State("tx");
  EXPECT_EQ(m.producer_id, rotated.producer_id);
  EXPECT_EQ(m.producer_epoch, 0);
  EXPECT_EQ(m.previous_producer_id, limit.producer_id);
}

TEST_F(TxnShardTest, FailedMarkersAreRetriedAndAPrepareStateLoadedIsCompleted) {
  LoadShard();
  Init p = InitId("tx");
  ASSERT_EQ(Add("tx", p, {{"a", 0}, {"b", 0}, {"gone", 0}}), ErrorCode::kNone);
  // "gone" is not in the metadata: UNKNOWN_TOPIC_OR_PARTITION means it was deleted.
  markers().script = {
      {ErrorCode::kNotLeaderOrFollower, ErrorCode::kNone, ErrorCode::kUnknownTopicOrPartition},
      {ErrorCode::kRequestTimedOut}};
  ASSERT_EQ(End("tx", p, false), ErrorCode::kNone);
  WaitFor("tx", TxnState::kCompleteAbort);
  // The first write had all three; each retry only what still failed.
  ASSERT_EQ(markers().written.size(), 3u);
  EXPECT_EQ(markers().written[0].size(), 3u);
  ASSERT_EQ(markers().written[1].size(), 1u);
  EXPECT_EQ(markers().written[1][0].topic, "a");
  EXPECT_FALSE(markers().written[2][0].commit);

  // A shard unloaded while its markers are out: the next one finds PrepareCommit stored and
  // writes them again.
  Init q = InitId("ty");
  ASSERT_EQ(Add("ty", q, {{"c", 2}}), ErrorCode::kNone);
  markers().hold = true;
  ASSERT_EQ(End("ty", q, true), ErrorCode::kNone);
  EXPECT_EQ(State("ty").state, TxnState::kPrepareCommit);
  // Meanwhile the producer is told to wait.
  EXPECT_EQ(Add("ty", q, {{"c", 2}}), ErrorCode::kConcurrentTransactions);
  EXPECT_EQ(InitId("ty").error, ErrorCode::kConcurrentTransactions);
  markers().hold = false;
  const size_t before = markers().written.size();
  LoadShard();  // the held answer goes nowhere: its shard is gone
  WaitFor("ty", TxnState::kCompleteCommit);
  ASSERT_EQ(markers().written.size(), before + 1);
  EXPECT_EQ(markers().written.back()[0].topic, "c");
  EXPECT_TRUE(markers().written.back()[0].commit);
}

TEST_F(TxnShardTest, ASecondInstanceAbortsTheFirstsTransactionAndFencesIt) {
  LoadShard();
  Init first = InitId("tx");
  ASSERT_EQ(Add("tx", first, {{"a", 0}}), ErrorCode::kNone);
  // The new instance is told to retry while the old transaction is aborted with epoch + 1.
  EXPECT_EQ(InitId("tx").error, ErrorCode::kConcurrentTransactions);
  WaitFor("tx", TxnState::kCompleteAbort);
  ASSERT_EQ(markers().written.size(), 1u);
  EXPECT_FALSE(markers().written[0][0].commit);
  EXPECT_EQ(markers().written[0][0].producer_epoch, 1);
  Init second = InitId("tx");
  ASSERT_EQ(second.error, ErrorCode::kNone);
  EXPECT_EQ(second.epoch, 2);
  // The old instance is fenced.
  EXPECT_EQ(Add("tx", first, {{"a", 0}}), ErrorCode::kProducerFenced);
  EXPECT_EQ(End("tx", first, true), ErrorCode::kProducerFenced);
  // KIP-360: the new instance naming its epoch bumps it.
  Init bumped = InitId("tx", 60000, ProducerIdAndEpoch{second.producer_id, second.epoch});
  EXPECT_EQ(bumped.error, ErrorCode::kNone);
  EXPECT_EQ(bumped.epoch, 3);
}

TEST_F(TxnShardTest, ATransactionPastItsTimeoutIsAbortedAndItsProducerFenced) {
  LoadShard();
  Init p = InitId("slow", /*timeout_ms=*/1);
  ASSERT_EQ(Add("slow", p, {{"a", 0}}), ErrorCode::kNone);
  Init q = InitId("quick", 60000);
  ASSERT_EQ(Add("quick", q, {{"a", 1}}), ErrorCode::kNone);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  OnLoop([&] { shard_->AbortTimedOut(); });
  WaitFor("slow", TxnState::kCompleteAbort);
  EXPECT_EQ(State("slow").producer_epoch, 1);
  EXPECT_EQ(State("quick").state, TxnState::kOngoing);
  EXPECT_EQ(End("slow", p, true), ErrorCode::kProducerFenced);
}

class TxnExpiryTest : public TxnShardTest {
 protected:
  void SetUp() override { Start({{"transactional.id.expiration.ms", "1"}}); }
};

TEST_F(TxnExpiryTest, IdsWithoutATransactionExpireAndStayGone) {
  LoadShard();
  Init p = InitId("idle");
  ASSERT_EQ(p.error, ErrorCode::kNone);
  Init q = InitId("busy");
  ASSERT_EQ(Add("busy", q, {{"a", 0}}), ErrorCode::kNone);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  OnLoop([&] { shard_->RemoveExpired(); });
  WaitFor("idle", TxnState::kDead);
  EXPECT_EQ(State("busy").state, TxnState::kOngoing);
  LoadShard();
  EXPECT_EQ(State("idle").state, TxnState::kDead);
  EXPECT_EQ(State("busy").state, TxnState::kOngoing);
  // The id starts over with a new producer id.
  Init again = InitId("idle");
  EXPECT_EQ(again.error, ErrorCode::kNone);
  EXPECT_NE(again.producer_id, p.producer_id);
  EXPECT_EQ(again.epoch, 0);
}

}  // namespace
}  // namespace runnel::brokerd::txn
