#include "controllerd/controller.h"

#include <gtest/gtest.h>

#include "common/config/topic_config.h"
#include "common/protocol/error_code.h"
#include "controllerd/local_metadata_log.h"
#include "tests/unit/controllerd/test_util.h"

namespace runnel::controllerd {
namespace {

using protocol::ErrorCode;
using testing::FaultyFileSystem;
using testing::TempDir;

constexpr int32_t kNone = 0;

int32_t Code(ErrorCode c) { return static_cast<int32_t>(c); }

class ControllerTest : public ::testing::Test {
 protected:
  ControllerTest() {
    options_.node_id = 7;
    options_.default_num_partitions = 3;
    options_.default_replication_factor = 2;
    options_.seed = 1234;
  }

  std::unique_ptr<Controller> Open(FileSystem& fs = PosixFileSystem()) {
    auto log = LocalMetadataLog::Open(fs, dir_.path());
    EXPECT_TRUE(log.ok()) << log.status();
    if (!log.ok()) return nullptr;
    auto c = Controller::Open(options_, std::move(*log));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  static void Register(Controller& c, int32_t id, const char* rack = nullptr) {
    controller::RegisterBrokerRequest req;
    req.set_broker_id(id);
    auto* e = req.add_endpoints();
    e->set_name("PLAINTEXT");
    e->set_host("127.0.0.1");
    e->set_port(9092 + id);
    if (rack) req.set_rack(rack);
    auto resp = c.RegisterBroker(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    ASSERT_EQ(resp->error_code(), kNone) << resp->error_message();
  }

  static controller::CreatableTopic Topic(const std::string& name, int32_t partitions = -1,
                                          int32_t rf = -1) {
    controller::CreatableTopic t;
    t.set_name(name);
    t.set_num_partitions(partitions);
    t.set_replication_factor(rf);
    return t;
  }

  // Creates one topic and returns its result.
  static controller::CreatableTopicResult Create(Controller& c, const controller::CreatableTopic& t,
                                                 bool validate_only = false) {
    controller::CreateTopicsRequest req;
    *req.add_topics() = t;
    req.set_validate_only(validate_only);
    auto resp = c.CreateTopics(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok() || resp->topics_size() != 1) return {};
    return resp->topics(0);
  }

  static void ExpectError(const controller::CreatableTopicResult& r, ErrorCode code,
                          const std::string& message) {
    EXPECT_EQ(r.error_code(), Code(code)) << r.name() << ": " << r.error_message();
    EXPECT_EQ(r.error_message(), message) << r.name();
    EXPECT_EQ(r.num_partitions(), -1);
    EXPECT_EQ(r.replication_factor(), -1);
    EXPECT_EQ(r.topic_id(), std::string(16, '\0'));
    EXPECT_EQ(r.configs_size(), 0);
  }

  TempDir dir_;
  ControllerOptions options_;
};

TEST_F(ControllerTest, FirstStartGeneratesAStableClusterId) {
  std::string id;
  {
    auto c = Open();
    id = c->Image().cluster_id();
    EXPECT_EQ(id.size(), 22u);
    EXPECT_EQ(c->Image().features().at("metadata.version"), 1);
    EXPECT_EQ(c->term(), 1);
  }
  auto c = Open();
  EXPECT_EQ(c->Image().cluster_id(), id);
  EXPECT_EQ(c->term(), 2) << "each start of the single voter is a new term";
  auto d = c->DescribeCluster();
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->cluster_id(), id);
  EXPECT_EQ(d->controller_id(), 7);
}

TEST_F(ControllerTest, CreateTopicPlacesReplicasAndReturnsConfigs) {
  auto c = Open();
  for (int id : {1, 2, 3}) Register(*c, id);
  controller::CreatableTopic t = Topic("orders", 6, 3);
  auto* cfg = t.add_configs();
  cfg->set_name("retention.ms");
  cfg->set_value("1000");
  auto r = Create(*c, t);
  ASSERT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_FALSE(r.has_error_message());
  EXPECT_TRUE(IsValidUuid(r.topic_id()));
  EXPECT_EQ(r.num_partitions(), 6);
  EXPECT_EQ(r.replication_factor(), 3);
  ASSERT_EQ(static_cast<size_t>(r.configs_size()), config::AllTopicKeys().size());
  for (const auto& conf : r.configs()) {
    if (conf.name() == "retention.ms") {
      EXPECT_EQ(conf.value(), "1000");
      EXPECT_EQ(conf.config_source(), controller::DYNAMIC_TOPIC_CONFIG);
    } else {
      EXPECT_EQ(conf.config_source(), controller::DEFAULT_CONFIG) << conf.name();
      EXPECT_EQ(conf.value(), config::FindTopicKey(conf.name())->default_value);
    }
    EXPECT_FALSE(conf.read_only());
    EXPECT_FALSE(conf.is_sensitive());
  }

  MetadataImage image = c->Image();
  const auto* topic = image.TopicByName("orders");
  ASSERT_NE(topic, nullptr);
  EXPECT_EQ(topic->id, r.topic_id());
  EXPECT_EQ(topic->configs.at("retention.ms"), "1000");
  ASSERT_EQ(topic->partitions.size(), 6u);
  std::map<int32_t, int> leaders;
  for (const auto& [p, part] : topic->partitions) {
    ASSERT_EQ(part.replicas_size(), 3);
    std::set<int32_t> distinct(part.replicas().begin(), part.replicas().end());
    EXPECT_EQ(distinct.size(), 3u);
    EXPECT_EQ(part.leader(), part.replicas(0));
    EXPECT_EQ(std::vector<int32_t>(part.isr().begin(), part.isr().end()),
              std::vector<int32_t>(part.replicas().begin(), part.replicas().end()));
    EXPECT_EQ(part.leader_epoch(), 0);
    ++leaders[part.leader()];
  }
  // Round-robin: leaders spread evenly over the brokers.
  EXPECT_EQ(leaders, (std::map<int32_t, int>{{1, 2}, {2, 2}, {3, 2}}));
}

TEST_F(ControllerTest, DefaultsAreUsedForMinusOne) {
  auto c = Open();
  for (int id : {1, 2}) Register(*c, id);
  auto r = Create(*c, Topic("defaults"));
  ASSERT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_EQ(r.num_partitions(), 3);
  EXPECT_EQ(r.replication_factor(), 2);
}

TEST_F(ControllerTest, TopicNameRules) {
  auto c = Open();
  Register(*c, 1);
  ExpectError(Create(*c, Topic("")), ErrorCode::kInvalidTopicException,
              "Topic name is illegal, it can't be empty");
  ExpectError(Create(*c, Topic(".")), ErrorCode::kInvalidTopicException,
              "Topic name cannot be \".\" or \"..\"");
  ExpectError(Create(*c, Topic("..")), ErrorCode::kInvalidTopicException,
              "Topic name cannot be \".\" or \"..\"");
  std::string long_name(250, 'x');
  ExpectError(
      Create(*c, Topic(long_name)), ErrorCode::kInvalidTopicException,
      "Topic name is illegal, it can't be longer than 249 characters, topic name: " + long_name);
  for (const char* bad : {"a b", "a/b", "caf\xc3\xa9", "a\nb", "x:y"}) {
    ExpectError(Create(*c, Topic(bad)), ErrorCode::kInvalidTopicException,
                std::string("Topic name \"") + bad +
                    "\" is illegal, it contains a character other than ASCII alphanumerics, '.', "
                    "'_' and '-'");
  }
  EXPECT_EQ(Create(*c, Topic(std::string(249, 'y'), 1, 1)).error_code(), kNone);
  EXPECT_EQ(Create(*c, Topic("Ok_name-1.2", 1, 1)).error_code(), kNone);
  EXPECT_EQ(Create(*c, Topic("...", 1, 1)).error_code(), kNone);
}

TEST_F(ControllerTest, AlreadyExistsAndCollisions) {
  auto c = Open();
  Register(*c, 1);
  ASSERT_EQ(Create(*c, Topic("a.b", 1, 1)).error_code(), kNone);
  ExpectError(Create(*c, Topic("a.b", 1, 1)), ErrorCode::kTopicAlreadyExists,
              "Topic 'a.b' already exists.");
  ExpectError(Create(*c, Topic("a_b", 1, 1)), ErrorCode::kInvalidTopicException,
              "Topic 'a_b' collides with existing topic: a.b");
  // Within one request too.
  controller::CreateTopicsRequest req;
  *req.add_topics() = Topic("x.y", 1, 1);
  *req.add_topics() = Topic("x_y", 1, 1);
  auto resp = c->CreateTopics(req);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->topics(0).error_code(), kNone);
  ExpectError(resp->topics(1), ErrorCode::kInvalidTopicException,
              "Topic 'x_y' collides with existing topic: x.y");
}

TEST_F(ControllerTest, PartitionAndReplicationFactorErrors) {
  auto c = Open();
  ExpectError(Create(*c, Topic("t", 1, 1)), ErrorCode::kInvalidReplicationFactor,
              "Unable to replicate the partition 1 time(s): All brokers are currently fenced.");
  for (int id : {1, 2, 3}) Register(*c, id);
  for (int32_t p : {0, -2, -100}) {
    ExpectError(Create(*c, Topic("t", p, 1)), ErrorCode::kInvalidPartitions,
                "Number of partitions was set to an invalid non-positive value.");
  }
  for (int32_t rf : {0, -2}) {
    ExpectError(Create(*c, Topic("t", 1, rf)), ErrorCode::kInvalidReplicationFactor,
                "Replication factor must be larger than 0, or -1 to use the default value.");
  }
  ExpectError(Create(*c, Topic("t", 1, 4)), ErrorCode::kInvalidReplicationFactor,
              "Unable to replicate the partition 4 time(s): The target replication factor of 4 "
              "cannot be reached because only 3 broker(s) are registered.");
  ExpectError(Create(*c, Topic("t", 1000000, 1)), ErrorCode::kInvalidPartitions,
              "Number of partitions 1000000 is more than the 100000 a topic may have.");
  options_.default_replication_factor = 5;
  auto c2 = (c.reset(), Open());
  ExpectError(Create(*c2, Topic("t", 1, -1)), ErrorCode::kInvalidReplicationFactor,
              "Unable to replicate the partition 5 time(s): The target replication factor of 5 "
              "cannot be reached because only 3 broker(s) are registered.");
  EXPECT_TRUE(c2->Image().topics().empty());
}

controller::CreatableReplicaAssignment Assign(int32_t p, std::vector<int32_t> brokers) {
  controller::CreatableReplicaAssignment a;
  a.set_partition_index(p);
  for (int32_t b : brokers) a.add_broker_ids(b);
  return a;
}

TEST_F(ControllerTest, ManualAssignments) {
  auto c = Open();
  for (int id : {1, 2, 3}) Register(*c, id);
  auto with = [](controller::CreatableTopic t,
                 std::vector<controller::CreatableReplicaAssignment> as) {
    for (auto& a : as) *t.add_assignments() = a;
    return t;
  };
  ExpectError(Create(*c, with(Topic("m", -1, 2), {Assign(0, {1, 2})})), ErrorCode::kInvalidRequest,
              "A manual partition assignment was specified, but replication factor was not set "
              "to -1.");
  ExpectError(Create(*c, with(Topic("m", 1, -1), {Assign(0, {1, 2})})), ErrorCode::kInvalidRequest,
              "A manual partition assignment was specified, but numPartitions was not set to -1.");
  ExpectError(Create(*c, with(Topic("m"), {Assign(0, {1}), Assign(0, {2})})),
              ErrorCode::kInvalidReplicaAssignment,
              "Found multiple manual partition assignments for partition 0");
  ExpectError(Create(*c, with(Topic("m"), {Assign(0, {1}), Assign(2, {2})})),
              ErrorCode::kInvalidReplicaAssignment,
              "partitions should be a consecutive 0-based integer sequence");
  ExpectError(Create(*c, with(Topic("m"), {Assign(1, {1})})), ErrorCode::kInvalidReplicaAssignment,
              "partitions should be a consecutive 0-based integer sequence");
  ExpectError(Create(*c, with(Topic("m"), {Assign(0, {1, 9})})),
              ErrorCode::kInvalidReplicaAssignment,
              "The manual partition assignment includes broker 9, but no such broker is "
              "registered.");
  ExpectError(Create(*c, with(Topic("m"), {Assign(0, {2, 1, 2})})),
              ErrorCode::kInvalidReplicaAssignment,
              "The manual partition assignment includes the broker 2 more than once.");
  ExpectError(Create(*c, with(Topic("m"), {Assign(0, {1, 2}), Assign(1, {3})})),
              ErrorCode::kInvalidReplicaAssignment,
              "The manual partition assignment includes a partition with 1 replica(s), but this "
              "is not consistent with previous partitions, which have 2 replica(s).");
  ExpectError(Create(*c, with(Topic("m"), {Assign(0, {})})), ErrorCode::kInvalidReplicaAssignment,
              "The manual partition assignment includes an empty replica list.");
  EXPECT_TRUE(c->Image().topics().empty());

  auto r = Create(*c, with(Topic("m"), {Assign(1, {3, 1}), Assign(0, {2, 3})}));
  ASSERT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_EQ(r.num_partitions(), 2);
  EXPECT_EQ(r.replication_factor(), 2);
  MetadataImage image = c->Image();
  const auto* t = image.TopicByName("m");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->partitions.at(0).replicas(0), 2);
  EXPECT_EQ(t->partitions.at(0).leader(), 2);
  EXPECT_EQ(t->partitions.at(1).replicas(0), 3);
  EXPECT_EQ(t->partitions.at(1).replicas(1), 1);
}

TEST_F(ControllerTest, ConfigErrors) {
  auto c = Open();
  Register(*c, 1);
  auto with_config = [](const std::string& key, std::optional<std::string> value) {
    controller::CreatableTopic t = Topic("cfg", 1, 1);
    auto* conf = t.add_configs();
    conf->set_name(key);
    if (value) conf->set_value(*value);
    return t;
  };
  ExpectError(Create(*c, with_config("retention.mss", "1")), ErrorCode::kInvalidConfig,
              "Unknown topic config name: retention.mss");
  ExpectError(Create(*c, with_config("cleanup.policy", "sometimes")), ErrorCode::kInvalidConfig,
              "Invalid value sometimes for configuration cleanup.policy: 'sometimes' is not one "
              "of compact, delete");
  ExpectError(Create(*c, with_config("retention.ms", std::nullopt)), ErrorCode::kInvalidConfig,
              "Null value not supported for topic configs: retention.ms");
  // A config error wins over a partition error, as in Kafka (configs are checked first).
  controller::CreatableTopic both = with_config("segment.ms", "0");
  both.set_num_partitions(0);
  ExpectError(Create(*c, both), ErrorCode::kInvalidConfig,
              "Invalid value 0 for configuration segment.ms: must be between 1 and "
              "9223372036854775807");
  EXPECT_TRUE(c->Image().topics().empty());
}

TEST_F(ControllerTest, SameTopicTwiceInOneRequest) {
  auto c = Open();
  Register(*c, 1);
  controller::CreateTopicsRequest req;
  *req.add_topics() = Topic("dup", 1, 1);
  *req.add_topics() = Topic("fine", 1, 1);
  *req.add_topics() = Topic("dup", 2, 1);
  auto resp = c->CreateTopics(req);
  ASSERT_TRUE(resp.ok());
  ASSERT_EQ(resp->topics_size(), 3);
  ExpectError(resp->topics(0), ErrorCode::kInvalidRequest, "Duplicate topic name.");
  EXPECT_EQ(resp->topics(1).error_code(), kNone);
  ExpectError(resp->topics(2), ErrorCode::kInvalidRequest, "Duplicate topic name.");
  EXPECT_EQ(c->Image().TopicByName("dup"), nullptr);
  EXPECT_NE(c->Image().TopicByName("fine"), nullptr);
}

TEST_F(ControllerTest, ValidateOnlyChecksEverythingAndWritesNothing) {
  auto c = Open();
  for (int id : {1, 2}) Register(*c, id);
  int64_t before = c->Image().offset();
  controller::CreateTopicsRequest req;
  req.set_validate_only(true);
  *req.add_topics() = Topic("v1", 4, 2);
  *req.add_topics() = Topic("v2", 1, 3);
  auto resp = c->CreateTopics(req);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->topics(0).error_code(), kNone);
  EXPECT_EQ(resp->topics(0).num_partitions(), 4);
  EXPECT_EQ(resp->topics(0).replication_factor(), 2);
  EXPECT_EQ(resp->topics(0).topic_id(), std::string(16, '\0'));
  EXPECT_FALSE(resp->topics(0).configs().empty());
  EXPECT_EQ(resp->topics(1).error_code(), Code(ErrorCode::kInvalidReplicationFactor));
  EXPECT_EQ(c->Image().offset(), before);
  EXPECT_TRUE(c->Image().topics().empty());
  // And the name is still free.
  EXPECT_EQ(Create(*c, Topic("v1", 4, 2)).error_code(), kNone);
}

TEST_F(ControllerTest, DeleteTopics) {
  auto c = Open();
  Register(*c, 1);
  auto a = Create(*c, Topic("a", 1, 1));
  auto b = Create(*c, Topic("b", 1, 1));
  controller::CreatableTopic with_cfg = Topic("cfg", 1, 1);
  auto* conf = with_cfg.add_configs();
  conf->set_name("retention.ms");
  conf->set_value("5");
  auto cfg = Create(*c, with_cfg);
  ASSERT_EQ(cfg.error_code(), kNone);

  controller::DeleteTopicsRequest req;
  req.add_topics()->set_name("a");               // 0: by name
  req.add_topics()->set_topic_id(b.topic_id());  // 1: by id
  req.add_topics()->set_name("missing");         // 2
  UuidGenerator gen(99);
  req.add_topics()->set_topic_id(gen.Next());  // 3
  auto* both = req.add_topics();               // 4
  both->set_name("cfg");
  both->set_topic_id(cfg.topic_id());
  req.add_topics();                                       // 5: neither
  req.add_topics()->set_topic_id(std::string(16, '\0'));  // 6: zero id is "not given"
  req.add_topics()->set_topic_id("short");                // 7
  auto resp = c->DeleteTopics(req);
  ASSERT_TRUE(resp.ok()) << resp.status();
  ASSERT_EQ(resp->topics_size(), 8);
  EXPECT_EQ(resp->topics(0).error_code(), kNone);
  EXPECT_EQ(resp->topics(0).topic_id(), a.topic_id());
  EXPECT_EQ(resp->topics(1).error_code(), kNone);
  EXPECT_EQ(resp->topics(1).name(), "b");
  EXPECT_EQ(resp->topics(2).error_code(), Code(ErrorCode::kUnknownTopicOrPartition));
  EXPECT_EQ(resp->topics(2).error_message(), "This server does not host this topic-partition.");
  EXPECT_EQ(resp->topics(3).error_code(), Code(ErrorCode::kUnknownTopicId));
  EXPECT_EQ(resp->topics(3).error_message(), "This server does not host this topic ID.");
  EXPECT_EQ(resp->topics(4).error_code(), Code(ErrorCode::kInvalidRequest));
  EXPECT_EQ(resp->topics(5).error_code(), Code(ErrorCode::kInvalidRequest));
  EXPECT_EQ(resp->topics(6).error_code(), Code(ErrorCode::kInvalidRequest));
  EXPECT_EQ(resp->topics(7).error_code(), Code(ErrorCode::kInvalidRequest));

  MetadataImage image = c->Image();
  EXPECT_EQ(image.TopicByName("a"), nullptr);
  EXPECT_EQ(image.TopicByName("b"), nullptr);
  EXPECT_EQ(image.TopicById(b.topic_id()), nullptr);
  ASSERT_NE(image.TopicByName("cfg"), nullptr);

  // Same topic twice, by name and by id: neither is deleted.
  controller::DeleteTopicsRequest dup;
  dup.add_topics()->set_name("cfg");
  dup.add_topics()->set_topic_id(cfg.topic_id());
  resp = c->DeleteTopics(dup);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->topics(0).error_code(), Code(ErrorCode::kInvalidRequest));
  EXPECT_EQ(resp->topics(0).error_message(), "Duplicate topic name.");
  EXPECT_EQ(resp->topics(1).error_message(), "Duplicate topic id.");
  EXPECT_NE(c->Image().TopicByName("cfg"), nullptr);

  // Deleting takes the topic's configs along; the name can be created again, with a new id.
  controller::DeleteTopicsRequest del_cfg;
  del_cfg.add_topics()->set_name("cfg");
  ASSERT_EQ(c->DeleteTopics(del_cfg)->topics(0).error_code(), kNone);
  auto again = Create(*c, Topic("cfg", 1, 1));
  ASSERT_EQ(again.error_code(), kNone);
  EXPECT_NE(again.topic_id(), cfg.topic_id());
  EXPECT_TRUE(c->Image().TopicByName("cfg")->configs.empty());
}

TEST_F(ControllerTest, RegisterBrokerValidatesAndReRegisters) {
  auto c = Open();
  std::string cluster = c->Image().cluster_id();
  controller::RegisterBrokerRequest req;
  req.set_broker_id(4);
  auto* e = req.add_endpoints();
  e->set_name("PLAINTEXT");
  e->set_host("localhost");
  e->set_port(9092);

  auto expect_code = [&](const controller::RegisterBrokerRequest& r, ErrorCode code) {
    auto resp = c->RegisterBroker(r);
    ASSERT_TRUE(resp.ok());
    EXPECT_EQ(resp->error_code(), Code(code)) << resp->error_message();
    EXPECT_EQ(resp->broker_epoch(), -1);
  };
  auto bad = req;
  bad.set_broker_id(-1);
  expect_code(bad, ErrorCode::kInvalidRegistration);
  bad = req;
  bad.clear_endpoints();
  expect_code(bad, ErrorCode::kInvalidRegistration);
  bad = req;
  bad.mutable_endpoints(0)->set_port(70000);
  expect_code(bad, ErrorCode::kInvalidRegistration);
  bad = req;
  *bad.add_endpoints() = req.endpoints(0);
  expect_code(bad, ErrorCode::kInvalidRegistration);
  bad = req;
  bad.set_incarnation_id("xyz");
  expect_code(bad, ErrorCode::kInvalidRegistration);
  bad = req;
  bad.set_cluster_id("someOtherClusterIdXXXX");
  {
    auto resp = c->RegisterBroker(bad);
    ASSERT_TRUE(resp.ok());
    EXPECT_EQ(resp->error_code(), Code(ErrorCode::kInconsistentClusterId));
    EXPECT_EQ(resp->error_message(),
              "Expected cluster ID " + cluster + ", but got cluster ID someOtherClusterIdXXXX.");
  }
  EXPECT_TRUE(c->Image().brokers().empty());

  req.set_cluster_id(cluster);
  auto first = c->RegisterBroker(req);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->error_code(), kNone);
  EXPECT_EQ(first->broker_epoch(), c->Image().offset());
  EXPECT_EQ(first->cluster_id(), cluster);

  req.mutable_endpoints(0)->set_port(19092);
  req.set_rack("r1");
  auto second = c->RegisterBroker(req);
  ASSERT_TRUE(second.ok());
  EXPECT_GT(second->broker_epoch(), first->broker_epoch());
  auto d = c->DescribeCluster();
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->brokers_size(), 1);
  EXPECT_EQ(d->brokers(0).broker_id(), 4);
  EXPECT_EQ(d->brokers(0).broker_epoch(), second->broker_epoch());
  EXPECT_EQ(d->brokers(0).endpoints(0).port(), 19092);
  EXPECT_EQ(d->brokers(0).rack(), "r1");
  EXPECT_FALSE(d->brokers(0).fenced());
  EXPECT_EQ(d->metadata_offset(), c->Image().offset());
  EXPECT_EQ(c->Image().brokers().at(4).incarnation_id().size(), 16u);
}

TEST_F(ControllerTest, RestartKeepsEverything) {
  MetadataImage before;
  {
    auto c = Open();
    for (int id : {1, 2, 3}) Register(*c, id, "rack-a");
    ASSERT_EQ(Create(*c, Topic("keep", 5, 2)).error_code(), kNone);
    ASSERT_EQ(Create(*c, Topic("gone", 1, 1)).error_code(), kNone);
    controller::DeleteTopicsRequest del;
    del.add_topics()->set_name("gone");
    ASSERT_EQ(c->DeleteTopics(del)->topics(0).error_code(), kNone);
    before = c->Image();
  }
  auto c = Open();
  EXPECT_TRUE(c->Image() == before);
  EXPECT_NE(c->Image().TopicByName("keep"), nullptr);
  EXPECT_EQ(c->Image().TopicByName("gone"), nullptr);
  EXPECT_EQ(Create(*c, Topic("keep", 1, 1)).error_code(), Code(ErrorCode::kTopicAlreadyExists));
}

// The same operations with snapshots after nearly every entry and with none give the same
// image, before and after a restart: a snapshot plus the log after it equals the whole log.
TEST_F(ControllerTest, SnapshotsAndReplayGiveTheSameImage) {
  auto run = [&](int64_t snapshot_bytes, TempDir& dir) {
    ControllerOptions o = options_;
    o.snapshot_interval_bytes = snapshot_bytes;
    auto open = [&] {
      auto log = LocalMetadataLog::Open(PosixFileSystem(), dir.path());
      EXPECT_TRUE(log.ok());
      auto c = Controller::Open(o, std::move(*log));
      EXPECT_TRUE(c.ok()) << c.status();
      return std::move(*c);
    };
    MetadataImage live;
    {
      auto c = open();
      for (int id : {1, 2, 3}) Register(*c, id);
      for (int i = 0; i < 20; ++i) {
        EXPECT_EQ(Create(*c, Topic("t" + std::to_string(i), 1 + i % 4, 1 + i % 3)).error_code(),
                  kNone);
        if (i % 3 == 2) {
          controller::DeleteTopicsRequest del;
          del.add_topics()->set_name("t" + std::to_string(i - 1));
          EXPECT_EQ(c->DeleteTopics(del)->topics(0).error_code(), kNone);
        }
      }
      Register(*c, 2);
      live = c->Image();
    }
    auto c = open();
    EXPECT_TRUE(c->Image() == live);
    return live;
  };
  TempDir with_snapshots, without;
  MetadataImage a = run(1, with_snapshots);
  MetadataImage b = run(INT64_MAX, without);
  EXPECT_TRUE(a == b);
  EXPECT_EQ(a.topics().size(), 14u);
  // Snapshots were really taken and old segments dropped.
  int checkpoints = 0, segments = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(with_snapshots.path() + "/__cluster_metadata-0")) {
    checkpoints += e.path().extension() == ".checkpoint";
    segments += e.path().extension() == ".log";
  }
  EXPECT_EQ(checkpoints, 2);
  EXPECT_LE(segments, 3);
}

TEST_F(ControllerTest, WatcherGetsImageThenDeltasAndCatchUp) {
  auto c = Open();
  Register(*c, 1);
  auto w = c->Watch(0);
  ASSERT_TRUE(w.ok());
  auto first = (*w)->Next(std::chrono::milliseconds(0));
  ASSERT_TRUE(first.ok() && *first);
  EXPECT_TRUE((*first)->is_snapshot());
  EXPECT_EQ((*first)->offset(), c->Image().offset());
  EXPECT_EQ((*first)->records(0).cluster_id().cluster_id(), c->Image().cluster_id());
  int64_t last = (*first)->offset();

  ASSERT_EQ(Create(*c, Topic("w", 2, 1)).error_code(), kNone);
  auto delta = (*w)->Next(std::chrono::milliseconds(0));
  ASSERT_TRUE(delta.ok() && *delta);
  EXPECT_FALSE((*delta)->is_snapshot());
  EXPECT_EQ((*delta)->offset(), last + 1);
  ASSERT_EQ((*delta)->records_size(), 3);
  EXPECT_EQ((*delta)->records(0).topic().name(), "w");
  auto none = (*w)->Next(std::chrono::milliseconds(1));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
  c->Unwatch(*w);

  // Reconnecting from an offset replays exactly the missed deltas.
  ASSERT_EQ(Create(*c, Topic("w2", 1, 1)).error_code(), kNone);
  ASSERT_EQ(Create(*c, Topic("w3", 1, 1)).error_code(), kNone);
  auto w2 = c->Watch(last + 2);
  ASSERT_TRUE(w2.ok());
  for (int64_t want = last + 2; want <= c->Image().offset(); ++want) {
    auto u = (*w2)->Next(std::chrono::milliseconds(0));
    ASSERT_TRUE(u.ok() && *u);
    EXPECT_FALSE((*u)->is_snapshot());
    EXPECT_EQ((*u)->offset(), want);
  }
  // From beyond the end: a fresh image.
  auto w3 = c->Watch(c->Image().offset() + 100);
  ASSERT_TRUE(w3.ok());
  auto snap = (*w3)->Next(std::chrono::milliseconds(0));
  ASSERT_TRUE(snap.ok() && *snap);
  EXPECT_TRUE((*snap)->is_snapshot());
}

TEST_F(ControllerTest, SlowWatcherIsCutOffWithoutBlockingCommits) {
  options_.watcher_queue_capacity = 3;
  auto c = Open();
  Register(*c, 1);
  auto w = c->Watch(0);  // holds the image: 1 of 3
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(Create(*c, Topic("s" + std::to_string(i), 1, 1)).error_code(), kNone);
  }
  // What was queued is still delivered, then the stream ends so the watcher reconnects.
  int delivered = 0;
  Status end;
  while (true) {
    auto u = (*w)->Next(std::chrono::milliseconds(0));
    if (!u.ok()) {
      end = u.status();
      break;
    }
    ASSERT_NE(*u, nullptr);
    ++delivered;
  }
  EXPECT_EQ(delivered, 3);
  EXPECT_EQ(end.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c->Image().topics().size(), 5u);
}

TEST_F(ControllerTest, ShutdownEndsWatchersAndRefusesWork) {
  auto c = Open();
  auto w = c->Watch(0);
  ASSERT_TRUE(w.ok());
  c->Shutdown();
  ASSERT_TRUE((*w)->Next(std::chrono::milliseconds(0)).ok());  // the image
  auto end = (*w)->Next(std::chrono::milliseconds(0));
  EXPECT_EQ(end.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(c->CreateTopics({}).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(c->Watch(0).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ControllerTest, LogWriteFailureIsFatalAndRecoveredByRestart) {
  FaultyFileSystem fs;
  Status fatal;
  {
    auto c = Open(fs);
    c->SetFatalErrorHandler([&](const Status& s) { fatal = s; });
    Register(*c, 1);
    auto w = c->Watch(0);
    ASSERT_TRUE(w.ok());
    fs.fail_sync = true;
    controller::CreateTopicsRequest req;
    *req.add_topics() = Topic("lost", 1, 1);
    auto resp = c->CreateTopics(req);
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_FALSE(fatal.ok());
    EXPECT_EQ(c->Image().TopicByName("lost"), nullptr) << "not applied when not durable";
    fs.fail_sync = false;
    EXPECT_FALSE(c->CreateTopics(req).ok()) << "stays failed until restart";
    ASSERT_TRUE((*w)->Next(std::chrono::milliseconds(0)).ok());  // the image
    EXPECT_FALSE((*w)->Next(std::chrono::milliseconds(0)).ok());
  }
  auto c = Open(fs);
  EXPECT_EQ(c->Image().brokers().size(), 1u);
  EXPECT_EQ(Create(*c, Topic("after", 1, 1)).error_code(), kNone);
}

}  // namespace
}  // namespace runnel::controllerd
