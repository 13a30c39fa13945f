#include "controllerd/metadata_image.h"

#include <gtest/gtest.h>

#include "controllerd/uuid.h"

namespace runnel::controllerd {
namespace {

metadata::MetadataRecord TopicRec(const std::string& name, const std::string& id) {
  metadata::MetadataRecord r;
  r.mutable_topic()->set_name(name);
  r.mutable_topic()->set_topic_id(id);
  return r;
}

metadata::MetadataRecord PartitionRec(const std::string& id, int32_t p,
                                      std::vector<int32_t> replicas) {
  metadata::MetadataRecord r;
  auto* pr = r.mutable_partition();
  pr->set_topic_id(id);
  pr->set_partition_id(p);
  for (int32_t b : replicas) {
    pr->add_replicas(b);
    pr->add_isr(b);
  }
  pr->set_leader(replicas.front());
  return r;
}

metadata::MetadataRecord ConfigRec(const std::string& topic, const std::string& key,
                                   std::optional<std::string> value) {
  metadata::MetadataRecord r;
  auto* c = r.mutable_config();
  c->set_resource_type(metadata::CONFIG_RESOURCE_TOPIC);
  c->set_resource_name(topic);
  c->set_name(key);
  if (value) c->set_value(*value);
  return r;
}

metadata::MetadataRecord BrokerRec(int32_t id, int64_t epoch) {
  metadata::MetadataRecord r;
  auto* b = r.mutable_register_broker();
  b->set_broker_id(id);
  b->set_broker_epoch(epoch);
  auto* e = b->add_endpoints();
  e->set_name("PLAINTEXT");
  e->set_host("127.0.0.1");
  e->set_port(9092 + id);
  return r;
}

metadata::MetadataRecordBatch BatchOf(std::vector<metadata::MetadataRecord> records) {
  metadata::MetadataRecordBatch b;
  for (auto& r : records) *b.add_records() = std::move(r);
  return b;
}

// A history with every record type, deletes and overwrites.
std::vector<metadata::MetadataRecordBatch> History(UuidGenerator& ids) {
  std::string a = ids.Next(), b = ids.Next(), c = ids.Next();
  metadata::MetadataRecord cluster;
  cluster.mutable_cluster_id()->set_cluster_id("abcdefghijklmnopqrstuv");
  metadata::MetadataRecord feature;
  feature.mutable_feature_level()->set_name("metadata.version");
  feature.mutable_feature_level()->set_feature_level(1);
  metadata::MetadataRecord remove_b;
  remove_b.mutable_remove_topic()->set_topic_id(b);
  metadata::MetadataRecord broker_config;
  broker_config.mutable_config()->set_resource_type(metadata::CONFIG_RESOURCE_BROKER);
  broker_config.mutable_config()->set_resource_name("1");
  broker_config.mutable_config()->set_name("log.retention.ms");
  broker_config.mutable_config()->set_value("1000");
  return {
      BatchOf({cluster, feature}),
      BatchOf({BrokerRec(1, 1), BrokerRec(2, 1)}),
      BatchOf({TopicRec("a", a), ConfigRec("a", "retention.ms", "5"), PartitionRec(a, 0, {1, 2}),
               PartitionRec(a, 1, {2, 1})}),
      BatchOf({TopicRec("b", b), PartitionRec(b, 0, {1})}),
      BatchOf({BrokerRec(1, 4), broker_config}),
      BatchOf({ConfigRec("a", "cleanup.policy", "compact"), ConfigRec("a", "retention.ms", {})}),
      BatchOf({remove_b}),
      BatchOf({TopicRec("c", c), PartitionRec(c, 0, {2})}),
      BatchOf({PartitionRec(a, 1, {1, 2})}),
  };
}

TEST(MetadataImageTest, AppliesEveryRecordType) {
  UuidGenerator ids(1);
  MetadataImage image;
  auto history = History(ids);
  for (size_t i = 0; i < history.size(); ++i) {
    ASSERT_TRUE(image.Apply(static_cast<int64_t>(i), history[i]).ok()) << i;
  }
  EXPECT_EQ(image.offset(), static_cast<int64_t>(history.size()) - 1);
  EXPECT_EQ(image.cluster_id(), "abcdefghijklmnopqrstuv");
  EXPECT_EQ(image.features().at("metadata.version"), 1);
  ASSERT_EQ(image.brokers().size(), 2u);
  EXPECT_EQ(image.brokers().at(1).broker_epoch(), 4);
  ASSERT_EQ(image.topics().size(), 2u);
  EXPECT_EQ(image.TopicByName("b"), nullptr);
  const auto* a = image.TopicByName("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(image.TopicById(a->id), a);
  EXPECT_EQ(a->partitions.size(), 2u);
  EXPECT_EQ(a->partitions.at(1).replicas(0), 1);
  EXPECT_EQ(a->configs, (std::map<std::string, std::string>{{"cleanup.policy", "compact"}}));
}

TEST(MetadataImageTest, SnapshotThenLoadEqualsReplayAtEveryPoint) {
  UuidGenerator ids(2);
  auto history = History(ids);
  MetadataImage replayed;
  for (size_t i = 0; i < history.size(); ++i) {
    ASSERT_TRUE(replayed.Apply(static_cast<int64_t>(i), history[i]).ok());
    MetadataImage loaded;
    ASSERT_TRUE(loaded.Load(replayed.offset(), replayed.ToRecords()).ok());
    EXPECT_TRUE(loaded == replayed) << "after entry " << i;
    // Snapshot then the rest of the log equals the whole log.
    MetadataImage resumed = loaded;
    MetadataImage full = replayed;
    for (size_t j = i + 1; j < history.size(); ++j) {
      ASSERT_TRUE(resumed.Apply(static_cast<int64_t>(j), history[j]).ok());
      ASSERT_TRUE(full.Apply(static_cast<int64_t>(j), history[j]).ok());
    }
    EXPECT_TRUE(resumed == full) << "snapshot after entry " << i;
  }
}

TEST(MetadataImageTest, ToRecordsOrderIsFixed) {
  UuidGenerator ids(3);
  MetadataImage image;
  auto history = History(ids);
  for (size_t i = 0; i < history.size(); ++i) {
    ASSERT_TRUE(image.Apply(static_cast<int64_t>(i), history[i]).ok());
  }
  auto records = image.ToRecords();
  using R = metadata::MetadataRecord;
  std::vector<R::RecordCase> kinds;
  for (const auto& r : records.records()) kinds.push_back(r.record_case());
  std::vector<R::RecordCase> want = {R::kClusterId,      R::kFeatureLevel, R::kRegisterBroker,
                                     R::kRegisterBroker, R::kConfig,       R::kTopic,
                                     R::kConfig,         R::kPartition,    R::kPartition,
                                     R::kTopic,          R::kPartition};
  EXPECT_EQ(kinds, want);
  EXPECT_EQ(records.records(5).topic().name(), "a");
  EXPECT_EQ(records.records(9).topic().name(), "c");
}

TEST(MetadataImageTest, InconsistentRecordsAreErrors) {
  UuidGenerator ids(4);
  std::string id = ids.Next();
  std::string other = ids.Next();
  MetadataImage image;
  ASSERT_TRUE(image.Apply(0, BatchOf({TopicRec("t", id)})).ok());
  EXPECT_FALSE(image.Apply(0, BatchOf({})).ok()) << "offsets must grow";
  MetadataImage copy = image;
  EXPECT_FALSE(copy.Apply(1, BatchOf({TopicRec("t", other)})).ok()) << "name in use";
  copy = image;
  EXPECT_FALSE(copy.Apply(1, BatchOf({TopicRec("u", id)})).ok()) << "id in use";
  copy = image;
  EXPECT_FALSE(copy.Apply(1, BatchOf({TopicRec("u", std::string(16, '\0'))})).ok());
  copy = image;
  EXPECT_FALSE(copy.Apply(1, BatchOf({TopicRec("u", "short")})).ok());
  copy = image;
  EXPECT_FALSE(copy.Apply(1, BatchOf({PartitionRec(other, 0, {1})})).ok());
  copy = image;
  EXPECT_FALSE(copy.Apply(1, BatchOf({ConfigRec("nope", "retention.ms", "1")})).ok());
  copy = image;
  metadata::MetadataRecord remove;
  remove.mutable_remove_topic()->set_topic_id(other);
  EXPECT_FALSE(copy.Apply(1, BatchOf({remove})).ok());
  copy = image;
  EXPECT_FALSE(copy.Apply(1, BatchOf({metadata::MetadataRecord()})).ok()) << "empty record";
  copy = image;
  metadata::MetadataRecord c1, c2;
  c1.mutable_cluster_id()->set_cluster_id("one");
  c2.mutable_cluster_id()->set_cluster_id("two");
  EXPECT_FALSE(copy.Apply(1, BatchOf({c1, c2})).ok()) << "cluster id never changes";
}

TEST(UuidTest, RandomIdsAreVersion4AndPrintAsKafkaBase64) {
  UuidGenerator gen(5);
  for (int i = 0; i < 1000; ++i) {
    std::string id = gen.Next();
    ASSERT_TRUE(IsValidUuid(id));
    EXPECT_EQ(static_cast<uint8_t>(id[6]) >> 4, 4);
    std::string text = UuidToBase64(id);
    EXPECT_EQ(text.size(), 22u);
    EXPECT_NE(text.front(), '-');
    EXPECT_EQ(
        text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
        std::string::npos);
  }
  // Kafka: Uuid(0, 1).toString() == "AAAAAAAAAAAAAAAAAAAAAQ".
  std::string one(16, '\0');
  one[15] = 1;
  EXPECT_EQ(UuidToBase64(one), "AAAAAAAAAAAAAAAAAAAAAQ");
  EXPECT_TRUE(IsZeroUuid(std::string(16, '\0')));
  EXPECT_FALSE(IsValidUuid(std::string(16, '\0')));
}

metadata::MetadataRecord ProducerIdsRec(int32_t broker, int64_t next) {
  metadata::MetadataRecord r;
  r.mutable_producer_ids()->set_broker_id(broker);
  r.mutable_producer_ids()->set_broker_epoch(7);
  r.mutable_producer_ids()->set_next_producer_id(next);
  return r;
}

TEST(MetadataImageTest, ProducerIdBlocksOnlyMoveForwardAndSurviveASnapshot) {
  MetadataImage image;
  EXPECT_EQ(image.next_producer_id(), 0);
  ASSERT_TRUE(image.Apply(0, BatchOf({BrokerRec(1, 0)})).ok());
  ASSERT_TRUE(image.Apply(1, BatchOf({ProducerIdsRec(1, 1000)})).ok());
  ASSERT_TRUE(image.Apply(2, BatchOf({ProducerIdsRec(1, 2000)})).ok());
  EXPECT_EQ(image.next_producer_id(), 2000);

  MetadataImage resumed;
  ASSERT_TRUE(resumed.Load(2, image.ToRecords()).ok());
  EXPECT_EQ(resumed.next_producer_id(), 2000);
  EXPECT_TRUE(resumed == image);

  MetadataImage back = image;
  EXPECT_FALSE(back.Apply(3, BatchOf({ProducerIdsRec(1, 2000)})).ok()) << "a block handed twice";
  back = image;
  EXPECT_FALSE(back.Apply(3, BatchOf({ProducerIdsRec(1, 1000)})).ok()) << "ids moving back";
}

}  // namespace
}  // namespace runnel::controllerd
