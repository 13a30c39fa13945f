#include "controllerd/controller.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <thread>

#include "common/config/topic_config.h"
#include "common/protocol/error_code.h"
#include "tests/unit/controllerd/controller_test_util.h"
#include "tests/unit/controllerd/test_util.h"
#include "tests/util/temp_dir.h"

namespace runnel::controllerd {
namespace {

using protocol::ErrorCode;
using runnel::testing::TempDir;
using testing::FaultyFileSystem;

constexpr int32_t kNone = 0;

int32_t Code(ErrorCode c) { return static_cast<int32_t>(c); }

// The image a restarted single voter has: the one it had when it stopped, plus the new
// term's no-op (an empty entry) at the next offset.
MetadataImage AfterRestart(const MetadataImage& before) {
  MetadataImage image;
  EXPECT_TRUE(image.Load(before.offset(), before.ToRecords()).ok());
  EXPECT_TRUE(image.Apply(before.offset() + 1, {}).ok());
  return image;
}

class ControllerTest : public ::testing::Test {
 protected:
  ControllerTest() {
    options_.node_id = 7;
    options_.default_num_partitions = 3;
    options_.default_replication_factor = 2;
    options_.seed = 1234;
  }

  std::unique_ptr<Controller> Open(FileSystem& fs = PosixFileSystem()) {
    return testing::OpenSingleVoter(options_, dir_.path(), fs);
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

  TempDir dir_{"ctl"};
  ControllerOptions options_;
};

TEST_F(ControllerTest, FirstStartGeneratesAStableClusterId) {
  std::string id;
  {
    auto c = Open();
    id = c->Image().cluster_id();
    EXPECT_EQ(id.size(), 22u);
    EXPECT_EQ(c->Image().features().at("metadata.version"), 1);
    EXPECT_EQ(c->Image().features().at("transaction.version"), 2);
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
    // Only the leader is in sync until followers replicate.
    EXPECT_EQ(std::vector<int32_t>(part.isr().begin(), part.isr().end()),
              std::vector<int32_t>{part.replicas(0)});
    EXPECT_EQ(part.leader_epoch(), 0);
    ++leaders[part.leader()];
  }
  // Round-robin: leaders spread evenly over the brokers.
  EXPECT_EQ(leaders, (std::map<int32_t, int>{{1, 2}, {2, 2}, {3, 2}}));
}

TEST_F(ControllerTest, BrokersWithRacksGetEachPartitionOnEveryRack) {
  auto c = Open();
  const std::map<int32_t, std::string> racks = {{1, "a"}, {2, "a"}, {3, "b"}, {4, "b"}};
  for (const auto& [id, rack] : racks) Register(*c, id, rack.c_str());
  auto r = Create(*c, Topic("racked", 8, 2));
  ASSERT_EQ(r.error_code(), kNone) << r.error_message();
  MetadataImage image = c->Image();
  const auto* topic = image.TopicByName("racked");
  ASSERT_NE(topic, nullptr);
  ASSERT_EQ(topic->partitions.size(), 8u);
  std::map<int32_t, int> leaders;
  for (const auto& [p, part] : topic->partitions) {
    ASSERT_EQ(part.replicas_size(), 2);
    EXPECT_NE(racks.at(part.replicas(0)), racks.at(part.replicas(1))) << "partition " << p;
    ++leaders[part.leader()];
  }
  EXPECT_EQ(leaders, (std::map<int32_t, int>{{1, 2}, {2, 2}, {3, 2}, {4, 2}}));
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
              "Invalid value sometimes for configuration cleanup.policy: String must be one "
              "of: compact, delete");
  ExpectError(Create(*c, with_config("retention.ms", std::nullopt)), ErrorCode::kInvalidConfig,
              "Null value not supported for topic configs: retention.ms");
  // A config error wins over a partition error, as in Kafka (configs are checked first).
  controller::CreatableTopic both = with_config("segment.ms", "0");
  both.set_num_partitions(0);
  ExpectError(Create(*c, both), ErrorCode::kInvalidConfig,
              "Invalid value 0 for configuration segment.ms: Value must be at least 1");
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
  EXPECT_TRUE(c->Image() == AfterRestart(before));
  EXPECT_NE(c->Image().TopicByName("keep"), nullptr);
  EXPECT_EQ(c->Image().TopicByName("gone"), nullptr);
  EXPECT_EQ(Create(*c, Topic("keep", 1, 1)).error_code(), Code(ErrorCode::kTopicAlreadyExists));
}

// Producer id blocks follow one another, are checked against the broker's registration and
// are never handed twice, across restarts (and the snapshots they load from).
TEST_F(ControllerTest, ProducerIdBlocksAreUniqueAcrossRestarts) {
  options_.snapshot_interval_bytes = 1;  // a snapshot after nearly every entry
  auto allocate = [](Controller& c, int32_t broker, int64_t epoch) {
    controller::AllocateProducerIdsRequest req;
    req.set_broker_id(broker);
    req.set_broker_epoch(epoch);
    auto resp = c.AllocateProducerIds(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : controller::AllocateProducerIdsResponse();
  };
  std::set<int64_t> starts;
  {
    auto c = Open();
    Register(*c, 1);
    Register(*c, 2);
    const int64_t epoch1 = c->Image().brokers().at(1).broker_epoch();
    const int64_t epoch2 = c->Image().brokers().at(2).broker_epoch();
    for (int i = 0; i < 3; ++i) {
      for (auto [broker, epoch] : {std::pair{1, epoch1}, std::pair{2, epoch2}}) {
        controller::AllocateProducerIdsResponse r = allocate(*c, broker, epoch);
        ASSERT_EQ(r.error_code(), kNone) << r.error_message();
        EXPECT_EQ(r.producer_id_len(), Controller::kProducerIdBlockSize);
        EXPECT_EQ(r.producer_id_start() % Controller::kProducerIdBlockSize, 0);
        EXPECT_GE(r.metadata_offset(), 0);
        EXPECT_TRUE(starts.insert(r.producer_id_start()).second) << r.producer_id_start();
      }
    }
    EXPECT_EQ(*starts.begin(), 0);
    EXPECT_EQ(c->Image().next_producer_id(), 6 * Controller::kProducerIdBlockSize);

    controller::AllocateProducerIdsResponse stale = allocate(*c, 1, epoch1 + 100);
    EXPECT_EQ(stale.error_code(), Code(ErrorCode::kStaleBrokerEpoch)) << stale.error_message();
    EXPECT_EQ(stale.producer_id_start(), -1);
    controller::AllocateProducerIdsResponse unknown = allocate(*c, 9, 0);
    EXPECT_EQ(unknown.error_code(), Code(ErrorCode::kBrokerIdNotRegistered));
    EXPECT_EQ(c->Image().next_producer_id(), 6 * Controller::kProducerIdBlockSize)
        << "a refused request hands out nothing";
  }
  auto c = Open();
  EXPECT_EQ(c->Image().next_producer_id(), 6 * Controller::kProducerIdBlockSize);
  controller::AllocateProducerIdsResponse r =
      allocate(*c, 2, c->Image().brokers().at(2).broker_epoch());
  ASSERT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_EQ(r.producer_id_start(), 6 * Controller::kProducerIdBlockSize);
}

// The same operations with snapshots after nearly every entry and with none give the same
// image, before and after a restart: a snapshot plus the log after it equals the whole log.
TEST_F(ControllerTest, SnapshotsAndReplayGiveTheSameImage) {
  auto run = [&](int64_t snapshot_bytes, TempDir& dir) {
    ControllerOptions o = options_;
    o.snapshot_interval_bytes = snapshot_bytes;
    auto open = [&] { return testing::OpenSingleVoter(o, dir.path()); };
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
    EXPECT_TRUE(c->Image() == AfterRestart(live));
    return live;
  };
  TempDir with_snapshots{"ctl"}, without{"ctl"};
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
  // Every update names the active controller: this single voter, in its first term.
  ASSERT_TRUE((*first)->has_leader_id());
  EXPECT_EQ((*first)->leader_id(), 7);
  EXPECT_EQ((*first)->leader_epoch(), 1);
  int64_t last = (*first)->offset();

  ASSERT_EQ(Create(*c, Topic("w", 2, 1)).error_code(), kNone);
  auto delta = (*w)->Next(std::chrono::milliseconds(0));
  ASSERT_TRUE(delta.ok() && *delta);
  EXPECT_FALSE((*delta)->is_snapshot());
  EXPECT_EQ((*delta)->offset(), last + 1);
  ASSERT_EQ((*delta)->records_size(), 3);
  EXPECT_EQ((*delta)->records(0).topic().name(), "w");
  EXPECT_EQ((*delta)->leader_id(), 7);
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
    EXPECT_EQ((*u)->leader_id(), 7);
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

// ---- CreatePartitions -------------------------------------------------------------------

controller::CreatePartitionsTopic Grow(
    const std::string& name, int32_t count,
    std::optional<std::vector<std::vector<int32_t>>> manual = std::nullopt) {
  controller::CreatePartitionsTopic t;
  t.set_name(name);
  t.set_count(count);
  if (manual) {
    t.set_manual(true);
    for (const auto& replicas : *manual) {
      auto* a = t.add_assignments();
      for (int32_t b : replicas) a->add_broker_ids(b);
    }
  }
  return t;
}

controller::CreatePartitionsResponse GrowAll(Controller& c,
                                             std::vector<controller::CreatePartitionsTopic> ts,
                                             bool validate_only = false) {
  controller::CreatePartitionsRequest req;
  for (auto& t : ts) *req.add_topics() = std::move(t);
  req.set_validate_only(validate_only);
  auto resp = c.CreatePartitions(req);
  EXPECT_TRUE(resp.ok()) << resp.status();
  return resp.ok() ? *resp : controller::CreatePartitionsResponse();
}

void ExpectGrowError(const controller::CreatePartitionsTopicResult& r, ErrorCode code,
                     std::optional<std::string> message) {
  EXPECT_EQ(r.error_code(), Code(code)) << r.name() << ": " << r.error_message();
  EXPECT_EQ(r.has_error_message(), message.has_value()) << r.name();
  if (message) {
    EXPECT_EQ(r.error_message(), *message) << r.name();
  }
}

TEST_F(ControllerTest, CreatePartitionsAddsPlacedPartitions) {
  auto c = Open();
  for (int id : {1, 2, 3}) Register(*c, id);
  ASSERT_EQ(Create(*c, Topic("grow", 2, 2)).error_code(), kNone);
  const std::string id = c->Image().TopicByName("grow")->id;

  auto resp = GrowAll(*c, {Grow("grow", 5)});
  ASSERT_EQ(resp.topics_size(), 1);
  EXPECT_EQ(resp.topics(0).name(), "grow");
  EXPECT_EQ(resp.topics(0).error_code(), kNone) << resp.topics(0).error_message();
  EXPECT_FALSE(resp.topics(0).has_error_message());
  EXPECT_EQ(resp.metadata_offset(), c->Image().offset());

  MetadataImage image = c->Image();
  const auto* t = image.TopicByName("grow");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->id, id) << "same topic, not a new one";
  ASSERT_EQ(t->partitions.size(), 5u);
  for (int32_t p = 0; p < 5; ++p) {
    const auto& part = t->partitions.at(p);
    EXPECT_EQ(part.partition_id(), p);
    ASSERT_EQ(part.replicas_size(), 2) << "the topic's replication factor";
    EXPECT_NE(part.replicas(0), part.replicas(1));
    EXPECT_EQ(part.isr_size(), 1);
    EXPECT_EQ(part.leader(), part.replicas(0));
  }

  // Manual placement of the new ones, honoured as given.
  resp = GrowAll(*c, {Grow("grow", 7, std::vector<std::vector<int32_t>>{{3, 1}, {2, 3}})});
  ASSERT_EQ(resp.topics(0).error_code(), kNone) << resp.topics(0).error_message();
  image = c->Image();
  t = image.TopicByName("grow");
  ASSERT_EQ(t->partitions.size(), 7u);
  EXPECT_EQ(t->partitions.at(5).replicas(0), 3);
  EXPECT_EQ(t->partitions.at(5).replicas(1), 1);
  EXPECT_EQ(t->partitions.at(5).leader(), 3);
  EXPECT_EQ(t->partitions.at(6).replicas(0), 2);

  // Survives a restart.
  c.reset();
  c = Open();
  EXPECT_EQ(c->Image().TopicByName("grow")->partitions.size(), 7u);
}

TEST_F(ControllerTest, CreatePartitionsErrors) {
  auto c = Open();
  for (int id : {1, 2}) Register(*c, id);
  ASSERT_EQ(Create(*c, Topic("four", 4, 2)).error_code(), kNone);
  ASSERT_EQ(Create(*c, Topic("two", 2, 1)).error_code(), kNone);
  const int64_t before = c->Image().offset();

  auto resp = GrowAll(*c, {Grow("four", 4), Grow("four-less", 1), Grow("nope", 3)});
  ExpectGrowError(resp.topics(0), ErrorCode::kInvalidPartitions,
                  "Topic already has 4 partition(s).");
  ExpectGrowError(resp.topics(2), ErrorCode::kUnknownTopicOrPartition, std::nullopt);
  resp = GrowAll(*c, {Grow("four", 3)});
  ExpectGrowError(resp.topics(0), ErrorCode::kInvalidPartitions,
                  "The topic four currently has 4 partition(s); 3 would not be an increase.");
  resp = GrowAll(*c, {Grow("two", 3), Grow("two", 4)});
  ExpectGrowError(resp.topics(0), ErrorCode::kInvalidRequest, "Duplicate topic name.");
  ExpectGrowError(resp.topics(1), ErrorCode::kInvalidRequest, "Duplicate topic name.");
  resp = GrowAll(*c, {Grow("two", 200000)});
  ExpectGrowError(resp.topics(0), ErrorCode::kInvalidPartitions,
                  "Number of partitions 200000 is more than the 100000 a topic may have.");

  using Manual = std::vector<std::vector<int32_t>>;
  resp = GrowAll(*c, {Grow("four", 6, Manual{{1, 2}})});
  ExpectGrowError(resp.topics(0), ErrorCode::kInvalidReplicaAssignment,
                  "Attempted to add 2 additional partition(s), but only 1 assignment(s) were "
                  "specified.");
  resp = GrowAll(*c, {Grow("four", 5, Manual{})});
  ExpectGrowError(resp.topics(0), ErrorCode::kInvalidReplicaAssignment,
                  "Attempted to add 1 additional partition(s), but only 0 assignment(s) were "
                  "specified.");
  resp = GrowAll(*c, {Grow("four", 5, Manual{{1}})});
  ExpectGrowError(resp.topics(0), ErrorCode::kInvalidReplicaAssignment,
                  "The manual partition assignment includes a partition with 1 replica(s), but "
                  "this is not consistent with previous partitions, which have 2 replica(s).");
  resp = GrowAll(*c, {Grow("four", 5, Manual{{1, 7}})});
  ExpectGrowError(resp.topics(0), ErrorCode::kInvalidReplicaAssignment,
                  "The manual partition assignment includes broker 7, but no such broker is "
                  "registered.");
  resp = GrowAll(*c, {Grow("four", 5, Manual{{2, 2}})});
  ExpectGrowError(resp.topics(0), ErrorCode::kInvalidReplicaAssignment,
                  "The manual partition assignment includes the broker 2 more than once.");
  resp = GrowAll(*c, {Grow("four", 5, Manual{{}})});
  ExpectGrowError(resp.topics(0), ErrorCode::kInvalidReplicaAssignment,
                  "The manual partition assignment includes an empty replica list.");

  EXPECT_EQ(c->Image().offset(), before) << "no error writes anything";
  EXPECT_EQ(resp.metadata_offset(), -1);
  EXPECT_EQ(c->Image().TopicByName("four")->partitions.size(), 4u);

  // A deleted topic is gone at once: UNKNOWN_TOPIC_OR_PARTITION.
  controller::DeleteTopicsRequest del;
  del.add_topics()->set_name("two");
  ASSERT_EQ(c->DeleteTopics(del)->topics(0).error_code(), kNone);
  ExpectGrowError(GrowAll(*c, {Grow("two", 3)}).topics(0), ErrorCode::kUnknownTopicOrPartition,
                  std::nullopt);
}

TEST_F(ControllerTest, CreatePartitionsValidateOnlyWritesNothing) {
  auto c = Open();
  Register(*c, 1);
  ASSERT_EQ(Create(*c, Topic("dry", 1, 1)).error_code(), kNone);
  const int64_t before = c->Image().offset();
  auto resp = GrowAll(*c, {Grow("dry", 8), Grow("dry-missing", 2)}, /*validate_only=*/true);
  EXPECT_EQ(resp.topics(0).error_code(), kNone);
  EXPECT_EQ(resp.topics(1).error_code(), Code(ErrorCode::kUnknownTopicOrPartition));
  EXPECT_EQ(resp.metadata_offset(), -1);
  EXPECT_EQ(c->Image().offset(), before);
  EXPECT_EQ(c->Image().TopicByName("dry")->partitions.size(), 1u);
}

// ---- AlterConfigs -----------------------------------------------------------------------

constexpr int32_t kTopicType = 2;
constexpr int32_t kBrokerType = 4;
constexpr int32_t kSet = 0, kDelete = 1, kAppend = 2, kSubtract = 3;

struct Op {
  std::string name;
  int32_t op;
  std::optional<std::string> value;
};

controller::AlterConfigsResource Resource(int32_t type, const std::string& name,
                                          std::vector<Op> ops) {
  controller::AlterConfigsResource r;
  r.set_resource_type(type);
  r.set_resource_name(name);
  for (const Op& o : ops) {
    auto* c = r.add_configs();
    c->set_name(o.name);
    c->set_operation(o.op);
    if (o.value) c->set_value(*o.value);
  }
  return r;
}

controller::AlterConfigsResponse Alter(Controller& c,
                                       std::vector<controller::AlterConfigsResource> resources,
                                       bool incremental = true, bool validate_only = false) {
  controller::AlterConfigsRequest req;
  for (auto& r : resources) *req.add_resources() = std::move(r);
  req.set_incremental(incremental);
  req.set_validate_only(validate_only);
  auto resp = c.AlterConfigs(req);
  EXPECT_TRUE(resp.ok()) << resp.status();
  return resp.ok() ? *resp : controller::AlterConfigsResponse();
}

// The one result of altering `resource` alone.
controller::AlterConfigsResult AlterOne(Controller& c, controller::AlterConfigsResource resource,
                                        bool incremental = true) {
  auto resp = Alter(c, {std::move(resource)}, incremental);
  EXPECT_EQ(resp.results_size(), 1);
  return resp.results_size() == 1 ? resp.results(0) : controller::AlterConfigsResult();
}

void ExpectAlterError(const controller::AlterConfigsResult& r, ErrorCode code,
                      const std::string& message) {
  EXPECT_EQ(r.error_code(), Code(code)) << r.resource_name() << ": " << r.error_message();
  EXPECT_EQ(r.error_message(), message) << r.resource_name();
}

using Configs = std::map<std::string, std::string>;

TEST_F(ControllerTest, IncrementalAlterConfigsOfATopic) {
  auto c = Open();
  Register(*c, 1);
  ASSERT_EQ(Create(*c, Topic("t", 1, 1)).error_code(), kNone);

  auto r =
      AlterOne(*c, Resource(kTopicType, "t",
                            {{"retention.ms", kSet, "1000"}, {"segment.bytes", kSet, "16384"}}));
  EXPECT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_FALSE(r.has_error_message());
  EXPECT_EQ(r.resource_type(), kTopicType);
  EXPECT_EQ(r.resource_name(), "t");
  EXPECT_EQ(c->Image().TopicByName("t")->configs,
            (Configs{{"retention.ms", "1000"}, {"segment.bytes", "16384"}}));

  // DELETE returns a key to its default; SET of another keeps the rest.
  r = AlterOne(*c, Resource(kTopicType, "t",
                            {{"retention.ms", kDelete, std::nullopt},
                             {"max.message.bytes", kSet, "2000000"}}));
  EXPECT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_EQ(c->Image().TopicByName("t")->configs,
            (Configs{{"max.message.bytes", "2000000"}, {"segment.bytes", "16384"}}));

  // APPEND / SUBTRACT on a list start from the default (delete) when not set.
  r = AlterOne(*c, Resource(kTopicType, "t", {{"cleanup.policy", kAppend, "compact"}}));
  EXPECT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_EQ(c->Image().TopicByName("t")->configs.at("cleanup.policy"), "delete,compact");
  r = AlterOne(*c, Resource(kTopicType, "t", {{"cleanup.policy", kAppend, "compact"}}));
  EXPECT_EQ(c->Image().TopicByName("t")->configs.at("cleanup.policy"), "delete,compact")
      << "an item already there is not added twice";
  r = AlterOne(*c, Resource(kTopicType, "t", {{"cleanup.policy", kSubtract, "delete"}}));
  EXPECT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_EQ(c->Image().TopicByName("t")->configs.at("cleanup.policy"), "compact");
  ExpectAlterError(AlterOne(*c, Resource(kTopicType, "t", {{"retention.ms", kAppend, "5"}})),
                   ErrorCode::kInvalidConfig,
                   "Can't APPEND to key retention.ms because its type is not LIST.");
  ExpectAlterError(AlterOne(*c, Resource(kTopicType, "t", {{"retention.ms", kSubtract, "5"}})),
                   ErrorCode::kInvalidConfig,
                   "Can't SUBTRACT to key retention.ms because its type is not LIST.");

  // Unchanged values write nothing.
  const int64_t offset = c->Image().offset();
  auto resp = Alter(*c, {Resource(kTopicType, "t", {{"segment.bytes", kSet, "16384"}})});
  EXPECT_EQ(resp.results(0).error_code(), kNone);
  EXPECT_EQ(resp.metadata_offset(), -1);
  EXPECT_EQ(c->Image().offset(), offset);
}

TEST_F(ControllerTest, LegacyAlterConfigsReplacesTheWholeSet) {
  auto c = Open();
  Register(*c, 1);
  controller::CreatableTopic t = Topic("legacy", 1, 1);
  for (auto [k, v] : Configs{{"retention.ms", "5"}, {"cleanup.policy", "compact"}}) {
    auto* conf = t.add_configs();
    conf->set_name(k);
    conf->set_value(v);
  }
  ASSERT_EQ(Create(*c, t).error_code(), kNone);
  auto resp = Alter(*c, {Resource(kTopicType, "legacy", {{"segment.ms", kSet, "60000"}})},
                    /*incremental=*/false);
  ASSERT_EQ(resp.results(0).error_code(), kNone) << resp.results(0).error_message();
  EXPECT_EQ(resp.metadata_offset(), c->Image().offset());
  EXPECT_EQ(c->Image().TopicByName("legacy")->configs, (Configs{{"segment.ms", "60000"}}));
  // An empty set clears everything.
  ASSERT_EQ(AlterOne(*c, Resource(kTopicType, "legacy", {}), false).error_code(), kNone);
  EXPECT_TRUE(c->Image().TopicByName("legacy")->configs.empty());
}

TEST_F(ControllerTest, AlterConfigsTopicErrors) {
  auto c = Open();
  Register(*c, 1);
  ASSERT_EQ(Create(*c, Topic("t", 1, 1)).error_code(), kNone);
  const int64_t before = c->Image().offset();

  ExpectAlterError(AlterOne(*c, Resource(kTopicType, "t", {{"retention.ms", kSet, "soon"}})),
                   ErrorCode::kInvalidConfig,
                   "Invalid value soon for configuration retention.ms: Not a number of type "
                   "LONG");
  ExpectAlterError(AlterOne(*c, Resource(kTopicType, "t", {{"retention.mss", kSet, "1"}})),
                   ErrorCode::kInvalidConfig, "Unknown topic config name: retention.mss");
  // A resource fails whole: the good key next to the bad one is not written either.
  ExpectAlterError(
      AlterOne(*c, Resource(kTopicType, "t",
                            {{"retention.ms", kSet, "1000"}, {"segment.bytes", kSet, "1"}})),
      ErrorCode::kInvalidConfig,
      "Invalid value 1 for configuration segment.bytes: Value must be at least 14");
  ExpectAlterError(AlterOne(*c, Resource(kTopicType, "nope", {{"retention.ms", kSet, "1"}})),
                   ErrorCode::kUnknownTopicOrPartition, "The topic 'nope' does not exist.");
  ExpectAlterError(AlterOne(*c, Resource(kTopicType, "", {{"retention.ms", kSet, "1"}})),
                   ErrorCode::kInvalidRequest, "Default topic resources are not allowed.");
  EXPECT_EQ(
      AlterOne(*c, Resource(kTopicType, "bad name", {{"retention.ms", kSet, "1"}})).error_code(),
      Code(ErrorCode::kInvalidTopicException));
  ExpectAlterError(
      AlterOne(*c, Resource(kTopicType, "t",
                            {{"retention.ms", kSet, "1"}, {"retention.ms", kSet, "2"}})),
      ErrorCode::kInvalidRequest, "Error due to duplicate config keys");
  ExpectAlterError(AlterOne(*c, Resource(kTopicType, "t",
                                         {{"retention.ms", kSet, std::nullopt},
                                          {"segment.ms", kAppend, std::nullopt}})),
                   ErrorCode::kInvalidRequest,
                   "Null value not supported for : retention.ms, segment.ms");
  ExpectAlterError(
      AlterOne(*c, Resource(kTopicType, "t", {{"retention.ms", kSet, std::nullopt}}), false),
      ErrorCode::kInvalidRequest, "Null value not supported for : retention.ms");
  ExpectAlterError(AlterOne(*c, Resource(kTopicType, "t", {{"retention.ms", 7, "1"}})),
                   ErrorCode::kInvalidRequest, "Unknown operations type 7");
  ExpectAlterError(AlterOne(*c, Resource(8, "1", {{"kafka", kSet, "DEBUG"}})),
                   ErrorCode::kInvalidRequest, "Unknown resource type 8");
  auto resp = Alter(*c, {Resource(kTopicType, "t", {{"retention.ms", kSet, "1"}}),
                         Resource(kTopicType, "t", {{"segment.ms", kSet, "1"}})});
  ExpectAlterError(resp.results(0), ErrorCode::kInvalidRequest,
                   "Each resource must appear at most once.");
  ExpectAlterError(resp.results(1), ErrorCode::kInvalidRequest,
                   "Each resource must appear at most once.");

  EXPECT_EQ(c->Image().offset(), before);
  EXPECT_TRUE(c->Image().TopicByName("t")->configs.empty());
}

TEST_F(ControllerTest, AlterConfigsOfBrokers) {
  auto c = Open();
  Register(*c, 1);
  // Cluster-wide default and one broker's own value, in one request.
  auto resp = Alter(
      *c,
      {Resource(kBrokerType, "",
                {{"log.retention.ms", kSet, "3600000"}, {"log.cleanup.policy", kSet, "compact"}}),
       Resource(kBrokerType, "1", {{"log.segment.bytes", kSet, "1048576"}})});
  ASSERT_EQ(resp.results_size(), 2);
  EXPECT_EQ(resp.results(0).error_code(), kNone) << resp.results(0).error_message();
  EXPECT_EQ(resp.results(1).error_code(), kNone) << resp.results(1).error_message();
  EXPECT_EQ(resp.metadata_offset(), c->Image().offset());
  // min.insync.replicas=1 comes with the new cluster, as Kafka's format writes it.
  EXPECT_EQ(c->Image().broker_configs().at(""), (Configs{{"log.cleanup.policy", "compact"},
                                                         {"log.retention.ms", "3600000"},
                                                         {"min.insync.replicas", "1"}}));
  EXPECT_EQ(c->Image().broker_configs().at("1"), (Configs{{"log.segment.bytes", "1048576"}}));

  auto r = AlterOne(*c, Resource(kBrokerType, "", {{"log.cleanup.policy", kAppend, "delete"}}));
  EXPECT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_EQ(c->Image().broker_configs().at("").at("log.cleanup.policy"), "compact,delete");

  // Deleting the last key of a resource removes the resource.
  r = AlterOne(*c, Resource(kBrokerType, "1", {{"log.segment.bytes", kDelete, std::nullopt}}));
  EXPECT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_EQ(c->Image().broker_configs().count("1"), 0u);

  // Kafka's answers for keys that cannot change at runtime and for bad values.
  const int64_t before = c->Image().offset();
  ExpectAlterError(AlterOne(*c, Resource(kBrokerType, "1",
                                         {{"log.dirs", kSet, "/x"},
                                          {"node.id", kSet, "3"},
                                          {"log.retention.ms", kSet, "5"}})),
                   ErrorCode::kInvalidRequest,
                   "Cannot update these configs dynamically: Set(log.dirs, node.id)");
  ExpectAlterError(AlterOne(*c, Resource(kBrokerType, "", {{"no.such.key", kSet, "1"}})),
                   ErrorCode::kInvalidRequest,
                   "Cannot update these configs dynamically: Set(no.such.key)");
  ExpectAlterError(AlterOne(*c, Resource(kBrokerType, "", {{"log.retention.ms", kSet, "soon"}})),
                   ErrorCode::kInvalidRequest,
                   "Invalid value soon for configuration log.retention.ms: not a whole number "
                   "(expected long)");
  ExpectAlterError(AlterOne(*c, Resource(kBrokerType, "", {{"log.retention.ms", kAppend, "1"}})),
                   ErrorCode::kInvalidConfig,
                   "Can't APPEND to key log.retention.ms because its type is not LIST.");
  ExpectAlterError(AlterOne(*c, Resource(kBrokerType, "9", {{"log.retention.ms", kSet, "1"}})),
                   ErrorCode::kBrokerIdNotRegistered, "No node with id 9 found.");
  ExpectAlterError(AlterOne(*c, Resource(kBrokerType, "one", {{"log.retention.ms", kSet, "1"}})),
                   ErrorCode::kInvalidRequest, "Unable to parse broker name as a base 10 number.");
  ExpectAlterError(AlterOne(*c, Resource(kBrokerType, "-2", {{"log.retention.ms", kSet, "1"}})),
                   ErrorCode::kInvalidRequest, "Invalid negative broker ID.");
  EXPECT_EQ(c->Image().offset(), before);

  // Legacy AlterConfigs replaces a broker resource's set too.
  r = AlterOne(*c, Resource(kBrokerType, "", {{"log.retention.hours", kSet, "2"}}), false);
  EXPECT_EQ(r.error_code(), kNone) << r.error_message();
  EXPECT_EQ(c->Image().broker_configs().at(""), (Configs{{"log.retention.hours", "2"}}));

  // Restart keeps them (log replay), and so does a snapshot (ToRecords).
  MetadataImage live = c->Image();
  c.reset();
  c = Open();
  EXPECT_TRUE(c->Image() == AfterRestart(live));
  MetadataImage loaded;
  ASSERT_TRUE(loaded.Load(live.offset(), live.ToRecords()).ok());
  EXPECT_EQ(loaded.broker_configs(), live.broker_configs());
}

TEST_F(ControllerTest, AlterConfigsValidateOnlyWritesNothing) {
  auto c = Open();
  Register(*c, 1);
  ASSERT_EQ(Create(*c, Topic("t", 1, 1)).error_code(), kNone);
  const int64_t before = c->Image().offset();
  auto resp = Alter(*c,
                    {Resource(kTopicType, "t", {{"retention.ms", kSet, "1"}}),
                     Resource(kBrokerType, "", {{"log.retention.ms", kSet, "1"}}),
                     Resource(kTopicType, "missing", {{"retention.ms", kSet, "1"}})},
                    /*incremental=*/true, /*validate_only=*/true);
  EXPECT_EQ(resp.results(0).error_code(), kNone);
  EXPECT_EQ(resp.results(1).error_code(), kNone);
  EXPECT_EQ(resp.results(2).error_code(), Code(ErrorCode::kUnknownTopicOrPartition));
  EXPECT_EQ(resp.metadata_offset(), -1);
  EXPECT_EQ(c->Image().offset(), before);
  EXPECT_TRUE(c->Image().TopicByName("t")->configs.empty());
  EXPECT_EQ(c->Image().broker_configs(),
            (std::map<std::string, Configs>{{"", {{"min.insync.replicas", "1"}}}}));
}

TEST_F(ControllerTest, WatcherSeesConfigChanges) {
  auto c = Open();
  Register(*c, 1);
  auto w = c->Watch(0);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Next(std::chrono::milliseconds(0)).ok());  // the image
  ASSERT_EQ(AlterOne(*c, Resource(kBrokerType, "", {{"log.retention.ms", kSet, "7"}})).error_code(),
            kNone);
  auto update = (*w)->Next(std::chrono::milliseconds(0));
  ASSERT_TRUE(update.ok() && *update);
  ASSERT_EQ((*update)->records_size(), 1);
  const auto& rec = (*update)->records(0).config();
  EXPECT_EQ(rec.resource_type(), metadata::CONFIG_RESOURCE_BROKER);
  EXPECT_EQ(rec.resource_name(), "");
  EXPECT_EQ(rec.name(), "log.retention.ms");
  EXPECT_EQ(rec.value(), "7");
}

// ---- Broker sessions: heartbeats, fencing, leader moves ---------------------------------

class SessionTest : public ControllerTest {
 protected:
  SessionTest() {
    options_.session_timeout_ms = 300;
    options_.session_check_interval_ms = 20;
  }

  static int64_t RegisterEpoch(Controller& c, int32_t id) {
    controller::RegisterBrokerRequest req;
    req.set_broker_id(id);
    auto* e = req.add_endpoints();
    e->set_name("PLAINTEXT");
    e->set_host("127.0.0.1");
    e->set_port(9092 + id);
    auto resp = c.RegisterBroker(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return -1;
    EXPECT_EQ(resp->error_code(), kNone) << resp->error_message();
    return resp->broker_epoch();
  }

  static controller::BrokerHeartbeatResponse Heartbeat(Controller& c, int32_t id, int64_t epoch) {
    controller::BrokerHeartbeatRequest req;
    req.set_broker_id(id);
    req.set_broker_epoch(epoch);
    auto resp = c.BrokerHeartbeat(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : controller::BrokerHeartbeatResponse();
  }

  // Creates topic `name` with the given replicas per partition; returns its id.
  static std::string CreatePlaced(Controller& c, const std::string& name,
                                  const std::vector<std::vector<int32_t>>& placement) {
    controller::CreatableTopic t = Topic(name);
    for (size_t p = 0; p < placement.size(); ++p) {
      auto* a = t.add_assignments();
      a->set_partition_index(static_cast<int32_t>(p));
      for (int32_t b : placement[p]) a->add_broker_ids(b);
    }
    auto r = Create(c, t);
    EXPECT_EQ(r.error_code(), kNone) << r.error_message();
    return r.topic_id();
  }

  static bool Fenced(Controller& c, int32_t id) { return c.Image().brokers().at(id).fenced(); }

  static metadata::PartitionRecord Partition(Controller& c, const std::string& topic, int32_t p) {
    return c.Image().TopicByName(topic)->partitions.at(p);
  }

  // Polls `done` (every 10 ms, `polls` times) while heartbeating `beating` brokers {id, epoch}.
  static bool WaitWhileBeating(Controller& c, const std::map<int32_t, int64_t>& beating,
                               const std::function<bool()>& done, int polls = 500) {
    for (int i = 0; i < polls; ++i) {
      for (const auto& [id, epoch] : beating) {
        if (Heartbeat(c, id, epoch).error_code() != kNone) return false;
      }
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  static std::vector<int32_t> Isr(const metadata::PartitionRecord& p) {
    return {p.isr().begin(), p.isr().end()};
  }
};

TEST_F(SessionTest, HeartbeatsKeepABrokerUnfenced) {
  auto c = Open();
  const int64_t epoch = RegisterEpoch(*c, 1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  while (std::chrono::steady_clock::now() < until) {
    auto r = Heartbeat(*c, 1, epoch);
    EXPECT_EQ(r.error_code(), kNone) << r.error_message();
    EXPECT_FALSE(r.is_fenced());
    EXPECT_EQ(r.metadata_offset(), -1) << "a heartbeat of an unfenced broker writes nothing";
    // A sleep: heartbeats 50 ms apart for a second, over three sessions.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(Fenced(*c, 1)) << "fenced despite heartbeats 6 times per session";
}

TEST_F(SessionTest, HeartbeatErrors) {
  auto c = Open();
  const int64_t epoch = RegisterEpoch(*c, 1);
  auto unknown = Heartbeat(*c, 2, epoch);
  EXPECT_EQ(unknown.error_code(), Code(ErrorCode::kBrokerIdNotRegistered));
  EXPECT_TRUE(unknown.is_fenced());
  auto stale = Heartbeat(*c, 1, epoch - 1);
  EXPECT_EQ(stale.error_code(), Code(ErrorCode::kStaleBrokerEpoch));
  EXPECT_EQ(stale.error_message(),
            fmt::format("Expected broker epoch {} of broker 1, but got {}.", epoch, epoch - 1));
  // A re-registration makes the old epoch stale.
  const int64_t again = RegisterEpoch(*c, 1);
  EXPECT_GT(again, epoch);
  EXPECT_EQ(Heartbeat(*c, 1, epoch).error_code(), Code(ErrorCode::kStaleBrokerEpoch));
  EXPECT_EQ(Heartbeat(*c, 1, again).error_code(), kNone);
}

TEST_F(SessionTest, SilentBrokerIsFencedAndThePartitionsItLeadsWaitForIt) {
  auto c = Open();
  const int64_t e1 = RegisterEpoch(*c, 1);
  const int64_t e2 = RegisterEpoch(*c, 2);
  // p0 led by 1 (replica 2), p1 led by 2 (replica 1). Followers do not replicate yet, so each
  // ISR is its leader alone and no other replica may take over.
  CreatePlaced(*c, "t", {{1, 2}, {2, 1}});
  ASSERT_EQ(Partition(*c, "t", 0).leader(), 1);
  ASSERT_EQ(Isr(Partition(*c, "t", 0)), std::vector<int32_t>({1}));

  // Only broker 2 heartbeats.
  ASSERT_TRUE(WaitWhileBeating(*c, {{2, e2}}, [&] { return Fenced(*c, 1); }))
      << "broker 1 was not fenced";
  EXPECT_FALSE(Fenced(*c, 2));
  EXPECT_EQ(c->Image().brokers().at(1).broker_epoch(), e1) << "fencing keeps the epoch";
  metadata::PartitionRecord p0 = Partition(*c, "t", 0);
  EXPECT_EQ(p0.leader(), -1) << "replica 2 holds none of p0's data";
  EXPECT_EQ(Isr(p0), std::vector<int32_t>({1})) << "the last ISR member stays";
  EXPECT_EQ((std::vector<int32_t>{p0.replicas().begin(), p0.replicas().end()}),
            std::vector<int32_t>({1, 2}));
  EXPECT_EQ(p0.leader_epoch(), 1);
  EXPECT_EQ(p0.partition_epoch(), 1);
  // A partition the fenced broker only holds a replica of is unchanged.
  metadata::PartitionRecord p1 = Partition(*c, "t", 1);
  EXPECT_EQ(p1.leader(), 2);
  EXPECT_EQ(Isr(p1), std::vector<int32_t>({2}));
  EXPECT_EQ(p1.leader_epoch(), 0);
  EXPECT_EQ(p1.partition_epoch(), 0);

  // New replicas avoid the fenced broker.
  auto r = Create(*c, Topic("u", 4, 2));
  EXPECT_EQ(r.error_code(), Code(ErrorCode::kInvalidReplicationFactor)) << r.error_message();

  // Broker 1 comes back: unfenced by its heartbeat, it leads p0 again in a new epoch.
  auto back = Heartbeat(*c, 1, e1);
  EXPECT_EQ(back.error_code(), kNone);
  EXPECT_FALSE(back.is_fenced());
  EXPECT_GE(back.metadata_offset(), 0);
  EXPECT_FALSE(Fenced(*c, 1));
  EXPECT_EQ(Partition(*c, "t", 0).leader(), 1);
  EXPECT_EQ(Partition(*c, "t", 0).leader_epoch(), 2);
  EXPECT_EQ(Heartbeat(*c, 1, e1).metadata_offset(), -1) << "unfenced once";
}

TEST_F(SessionTest, SoleReplicaPartitionGoesLeaderlessAndComesBackWithItsBroker) {
  auto c = Open();
  const int64_t e1 = RegisterEpoch(*c, 1);
  const int64_t e2 = RegisterEpoch(*c, 2);
  CreatePlaced(*c, "solo", {{1}, {2}});
  ASSERT_TRUE(WaitWhileBeating(*c, {{2, e2}}, [&] { return Fenced(*c, 1); }));
  metadata::PartitionRecord p0 = Partition(*c, "solo", 0);
  EXPECT_EQ(p0.leader(), -1);
  EXPECT_EQ(Isr(p0), std::vector<int32_t>({1})) << "the last ISR member stays";
  EXPECT_EQ(p0.leader_epoch(), 1);
  EXPECT_EQ(p0.partition_epoch(), 1);
  EXPECT_EQ(Partition(*c, "solo", 1).leader(), 2);

  auto back = Heartbeat(*c, 1, e1);
  EXPECT_EQ(back.error_code(), kNone);
  EXPECT_FALSE(back.is_fenced());
  p0 = Partition(*c, "solo", 0);
  EXPECT_EQ(p0.leader(), 1);
  EXPECT_EQ(p0.leader_epoch(), 2);
  EXPECT_EQ(p0.partition_epoch(), 2);
  EXPECT_EQ(Isr(p0), std::vector<int32_t>({1}));
}

TEST_F(SessionTest, ReRegistrationUnfencesAndLeadsAgain) {
  auto c = Open();
  RegisterEpoch(*c, 1);
  CreatePlaced(*c, "solo", {{1}});
  ASSERT_TRUE(WaitWhileBeating(*c, {}, [&] { return Fenced(*c, 1); }));
  ASSERT_EQ(Partition(*c, "solo", 0).leader(), -1);
  const int64_t again = RegisterEpoch(*c, 1);
  EXPECT_FALSE(Fenced(*c, 1));
  EXPECT_EQ(Partition(*c, "solo", 0).leader(), 1);
  EXPECT_EQ(Partition(*c, "solo", 0).leader_epoch(), 2);
  // And the new session is kept by heartbeats with the new epoch.
  EXPECT_FALSE(WaitWhileBeating(
      *c, {{1, again}}, [&] { return Fenced(*c, 1); }, /*polls=*/100));
}

TEST_F(SessionTest, TwoBrokersFencedLeaveTheLastIsrMemberWithoutALeader) {
  auto c = Open();
  RegisterEpoch(*c, 1);
  RegisterEpoch(*c, 2);
  const int64_t e3 = RegisterEpoch(*c, 3);
  CreatePlaced(*c, "t", {{1, 2}});
  ASSERT_TRUE(WaitWhileBeating(*c, {{3, e3}}, [&] { return Fenced(*c, 1) && Fenced(*c, 2); }));
  // Whichever was fenced first, the partition ends leaderless with one ISR member left (the
  // one that led last), never with a fenced leader.
  metadata::PartitionRecord p = Partition(*c, "t", 0);
  EXPECT_EQ(p.leader(), -1);
  ASSERT_EQ(p.isr_size(), 1);
  EXPECT_FALSE(Fenced(*c, 3));
}

TEST_F(SessionTest, RestartedLeaderGivesEveryBrokerAFullSession) {
  int64_t epoch = -1;
  {
    auto c = Open();
    epoch = RegisterEpoch(*c, 1);
  }
  // Down for longer than a session: without grace the broker would be fenced at once. (A
  // sleep: that time passing is what the restarted leader must not hold against the broker.)
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * options_.session_timeout_ms));
  auto c = Open();
  const auto ready = std::chrono::steady_clock::now();
  ASSERT_FALSE(Fenced(*c, 1));
  // A sleep: the broker must not be fenced during it.
  std::this_thread::sleep_for(std::chrono::milliseconds(options_.session_timeout_ms / 2));
  EXPECT_FALSE(Fenced(*c, 1)) << "fenced before a session passed since the leader started";
  ASSERT_TRUE(WaitWhileBeating(*c, {}, [&] { return Fenced(*c, 1); }));
  EXPECT_GE(std::chrono::steady_clock::now() - ready,
            std::chrono::milliseconds(options_.session_timeout_ms));
  EXPECT_EQ(Heartbeat(*c, 1, epoch).error_code(), kNone);
  EXPECT_FALSE(Fenced(*c, 1));
}

// ---- UpdateFeatures ---------------------------------------------------------------------

constexpr int32_t kUpgrade = 1;
constexpr int32_t kSafeDowngrade = 2;
constexpr int32_t kUnsafeDowngrade = 3;

controller::FeatureUpdate Feature(const std::string& name, int32_t level, int32_t type) {
  controller::FeatureUpdate u;
  u.set_feature(name);
  u.set_max_version_level(level);
  u.set_upgrade_type(type);
  return u;
}

controller::UpdateFeaturesResponse Update(Controller& c,
                                          std::vector<controller::FeatureUpdate> updates,
                                          bool validate_only = false) {
  controller::UpdateFeaturesRequest req;
  for (auto& u : updates) *req.add_updates() = std::move(u);
  req.set_validate_only(validate_only);
  auto resp = c.UpdateFeatures(req);
  EXPECT_TRUE(resp.ok()) << resp.status();
  return resp.ok() ? *resp : controller::UpdateFeaturesResponse();
}

int32_t Level(const Controller& c, const std::string& name) {
  auto features = c.Image().features();
  auto it = features.find(name);
  return it == features.end() ? 0 : it->second;
}

// The whole-request refusal Kafka's QuorumController gives, around FeatureControlManager's
// per-feature message.
void ExpectRefused(const controller::UpdateFeaturesResponse& r, const std::string& message) {
  EXPECT_EQ(r.error_code(), Code(ErrorCode::kInvalidUpdateVersion)) << r.error_message();
  EXPECT_EQ(
      r.error_message(),
      "The update failed for all features since the following feature had an error: " + message);
  EXPECT_EQ(r.metadata_offset(), -1);
}

TEST_F(ControllerTest, UpdateFeaturesUpgradesAndDowngradesTransactionVersion) {
  options_.transaction_version = 0;
  auto c = Open();
  EXPECT_EQ(c->Image().features().count("transaction.version"), 0u) << "level 0 is no feature";

  auto up = Update(*c, {Feature("transaction.version", 2, kUpgrade)});
  EXPECT_EQ(up.error_code(), kNone) << up.error_message();
  EXPECT_FALSE(up.has_error_message());
  EXPECT_EQ(up.metadata_offset(), c->Image().offset());
  EXPECT_EQ(Level(*c, "transaction.version"), 2);

  ExpectRefused(Update(*c, {Feature("transaction.version", 1, kUpgrade)}),
                "Invalid update version 1 for feature transaction.version. Can't downgrade the "
                "version of this feature without setting the upgrade type to either safe or "
                "unsafe downgrade.");
  auto down = Update(*c, {Feature("transaction.version", 1, kSafeDowngrade)});
  EXPECT_EQ(down.error_code(), kNone) << down.error_message();
  EXPECT_GT(down.metadata_offset(), up.metadata_offset());
  EXPECT_EQ(Level(*c, "transaction.version"), 1);
  ExpectRefused(Update(*c, {Feature("transaction.version", 2, kSafeDowngrade)}),
                "Invalid update version 2 for feature transaction.version. Can't downgrade to a "
                "newer version.");
  // The same level again is allowed and written, as Kafka does.
  auto same = Update(*c, {Feature("transaction.version", 1, kUpgrade)});
  EXPECT_EQ(same.error_code(), kNone) << same.error_message();
  EXPECT_GT(same.metadata_offset(), down.metadata_offset());

  // Level 0 removes the feature, and the removal survives a restart.
  auto off = Update(*c, {Feature("transaction.version", 0, kUnsafeDowngrade)});
  EXPECT_EQ(off.error_code(), kNone) << off.error_message();
  EXPECT_EQ(c->Image().features().count("transaction.version"), 0u);
  c.reset();
  c = Open();
  EXPECT_EQ(c->Image().features().count("transaction.version"), 0u);
  EXPECT_EQ(Level(*c, "metadata.version"), 1);
}

TEST_F(ControllerTest, UpdateFeaturesRefusesWithKafkasMessages) {
  auto c = Open();
  ASSERT_EQ(Level(*c, "transaction.version"), 2);
  const int64_t offset = c->Image().offset();
  ExpectRefused(Update(*c, {Feature("transaction.version", 3, kUpgrade)}),
                "Invalid update version 3 for feature transaction.version. Local controller 7 "
                "only supports versions 0-2");
  ExpectRefused(Update(*c, {Feature("transaction.version", -1, kSafeDowngrade)}),
                "Invalid update version -1 for feature transaction.version. A feature version "
                "cannot be less than 0.");
  for (int32_t type : {0, 4, -1}) {
    ExpectRefused(Update(*c, {Feature("transaction.version", 1, type)}),
                  "Invalid update version 1 for feature transaction.version. The controller does "
                  "not support the given upgrade type.");
  }
  ExpectRefused(Update(*c, {Feature("group.version", 1, kUpgrade)}),
                "Invalid update version 1 for feature group.version. Local controller 7 does not "
                "support this feature.");
  ExpectRefused(Update(*c, {Feature("no.such.feature", 0, kUpgrade)}),
                "Invalid update version 0 for feature no.such.feature. Feature no.such.feature "
                "not found.");
  // Runnel's own metadata.version is not Kafka's and is not changed through UpdateFeatures.
  ExpectRefused(Update(*c, {Feature("metadata.version", 1, kUpgrade)}),
                "Invalid update version 1 for feature metadata.version. Local controller 7 does "
                "not support this feature.");
  EXPECT_EQ(c->Image().offset(), offset) << "nothing written";
  EXPECT_EQ(Level(*c, "transaction.version"), 2);
  EXPECT_EQ(Level(*c, "metadata.version"), 1);
}

TEST_F(ControllerTest, UpdateFeaturesIsAllOrNothingAndValidateOnlyWritesNothing) {
  auto c = Open();
  const int64_t offset = c->Image().offset();
  ExpectRefused(Update(*c, {Feature("transaction.version", 1, kSafeDowngrade),
                            Feature("kraft.version", 1, kUpgrade)}),
                "Invalid update version 1 for feature kraft.version. Local controller 7 does not "
                "support this feature.");
  EXPECT_EQ(Level(*c, "transaction.version"), 2);

  auto check = Update(*c, {Feature("transaction.version", 1, kSafeDowngrade)}, true);
  EXPECT_EQ(check.error_code(), kNone) << check.error_message();
  EXPECT_EQ(check.metadata_offset(), -1);
  EXPECT_EQ(Level(*c, "transaction.version"), 2);
  // validate_only still refuses what a real update would.
  ExpectRefused(Update(*c, {Feature("transaction.version", 1, kUpgrade)}, true),
                "Invalid update version 1 for feature transaction.version. Can't downgrade the "
                "version of this feature without setting the upgrade type to either safe or "
                "unsafe downgrade.");
  EXPECT_EQ(c->Image().offset(), offset);

  // A feature named twice: the last one counts.
  auto twice = Update(*c, {Feature("transaction.version", 1, kUpgrade),
                           Feature("transaction.version", 0, kSafeDowngrade)});
  EXPECT_EQ(twice.error_code(), kNone) << twice.error_message();
  EXPECT_EQ(c->Image().features().count("transaction.version"), 0u);
  // No updates: nothing to write, no error.
  auto none = Update(*c, {});
  EXPECT_EQ(none.error_code(), kNone);
  EXPECT_EQ(none.metadata_offset(), -1);
}

}  // namespace
}  // namespace runnel::controllerd
