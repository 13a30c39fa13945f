// ControllerService over a real Unix socket, in process.
#include "controllerd/controller_service.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/grpc/unix_server.h"
#include "common/protocol/error_code.h"
#include "tests/unit/controllerd/controller_test_util.h"
#include "tests/unit/controllerd/test_util.h"
#include "tests/util/temp_dir.h"

namespace runnel::controllerd {
namespace {

using protocol::ErrorCode;
using runnel::testing::TempDir;

class ControllerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ControllerOptions options;
    options.node_id = 5;
    options.seed = 7;
    controller_ = testing::OpenSingleVoter(options, dir_.path() + "/meta");
    ASSERT_NE(controller_, nullptr);
    service_ = std::make_unique<ControllerServiceImpl>(*controller_);
    socket_ = grpcutil::SocketPath(dir_.path(), "controllerd");
    auto server = grpcutil::StartUnixServer(socket_, {service_.get()});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    stub_ = controller::ControllerService::NewStub(grpcutil::UnixChannel(socket_));
  }

  void TearDown() override {
    if (controller_) controller_->Shutdown();
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
      server_->Wait();
    }
  }

  static std::unique_ptr<grpc::ClientContext> Ctx() {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return ctx;
  }

  void RegisterBroker(int32_t id) {
    controller::RegisterBrokerRequest req;
    req.set_broker_id(id);
    auto* e = req.add_endpoints();
    e->set_name("PLAINTEXT");
    e->set_host("127.0.0.1");
    e->set_port(9092);
    controller::RegisterBrokerResponse resp;
    ASSERT_TRUE(stub_->RegisterBroker(Ctx().get(), req, &resp).ok());
    ASSERT_EQ(resp.error_code(), 0) << resp.error_message();
  }

  controller::CreateTopicsResponse CreateTopic(const std::string& name, int32_t partitions) {
    controller::CreateTopicsRequest req;
    auto* t = req.add_topics();
    t->set_name(name);
    t->set_num_partitions(partitions);
    t->set_replication_factor(1);
    controller::CreateTopicsResponse resp;
    grpc::Status st = stub_->CreateTopics(Ctx().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  TempDir dir_{"ctlsvc"};
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<ControllerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string socket_;
  std::unique_ptr<controller::ControllerService::Stub> stub_;
};

TEST_F(ControllerServiceTest, HealthIsServing) {
  EXPECT_TRUE(grpcutil::CheckServing(socket_, std::chrono::seconds(5)).ok());
}

TEST_F(ControllerServiceTest, KafkaErrorsComeInsideAnOkResponse) {
  auto resp = CreateTopic("no-brokers", 1);
  ASSERT_EQ(resp.topics_size(), 1);
  EXPECT_EQ(resp.topics(0).error_code(),
            static_cast<int32_t>(ErrorCode::kInvalidReplicationFactor));
  RegisterBroker(1);
  resp = CreateTopic("bad name", 1);
  EXPECT_EQ(resp.topics(0).error_code(), static_cast<int32_t>(ErrorCode::kInvalidTopicException));
  resp = CreateTopic("good", 2);
  EXPECT_EQ(resp.topics(0).error_code(), 0);
  EXPECT_EQ(resp.topics(0).num_partitions(), 2);

  controller::DescribeClusterResponse d;
  ASSERT_TRUE(stub_->DescribeCluster(Ctx().get(), {}, &d).ok());
  EXPECT_EQ(d.controller_id(), 5);
  EXPECT_EQ(d.cluster_id(), controller_->Image().cluster_id());
  ASSERT_EQ(d.brokers_size(), 1);

  controller::DeleteTopicsRequest del;
  del.add_topics()->set_name("good");
  del.add_topics()->set_name("never");
  controller::DeleteTopicsResponse dr;
  ASSERT_TRUE(stub_->DeleteTopics(Ctx().get(), del, &dr).ok());
  EXPECT_EQ(dr.topics(0).error_code(), 0);
  EXPECT_EQ(dr.topics(1).error_code(), static_cast<int32_t>(ErrorCode::kUnknownTopicOrPartition));
}

TEST_F(ControllerServiceTest, CreatePartitionsAndAlterConfigsOverGrpc) {
  RegisterBroker(1);
  ASSERT_EQ(CreateTopic("grow", 1).topics(0).error_code(), 0);

  controller::CreatePartitionsRequest grow;
  auto* t = grow.add_topics();
  t->set_name("grow");
  t->set_count(3);
  grow.add_topics()->set_name("never");
  grow.mutable_topics(1)->set_count(2);
  controller::CreatePartitionsResponse gr;
  ASSERT_TRUE(stub_->CreatePartitions(Ctx().get(), grow, &gr).ok());
  ASSERT_EQ(gr.topics_size(), 2);
  EXPECT_EQ(gr.topics(0).error_code(), 0);
  EXPECT_EQ(gr.topics(1).error_code(), static_cast<int32_t>(ErrorCode::kUnknownTopicOrPartition));
  EXPECT_EQ(gr.metadata_offset(), controller_->Image().offset());
  EXPECT_EQ(controller_->Image().TopicByName("grow")->partitions.size(), 3u);

  controller::AlterConfigsRequest alter;
  alter.set_incremental(true);
  auto* r = alter.add_resources();
  r->set_resource_type(2);
  r->set_resource_name("grow");
  auto* c = r->add_configs();
  c->set_name("retention.ms");
  c->set_operation(0);
  c->set_value("soon");
  controller::AlterConfigsResponse ar;
  ASSERT_TRUE(stub_->AlterConfigs(Ctx().get(), alter, &ar).ok());
  ASSERT_EQ(ar.results_size(), 1);
  EXPECT_EQ(ar.results(0).error_code(), static_cast<int32_t>(ErrorCode::kInvalidConfig));
  EXPECT_NE(ar.results(0).error_message().find("retention.ms"), std::string::npos);
  c->set_value("60000");
  ASSERT_TRUE(stub_->AlterConfigs(Ctx().get(), alter, &ar).ok());
  EXPECT_EQ(ar.results(0).error_code(), 0) << ar.results(0).error_message();
  EXPECT_EQ(controller_->Image().TopicByName("grow")->configs.at("retention.ms"), "60000");
}

TEST_F(ControllerServiceTest, UpdateFeaturesOverGrpc) {
  controller::UpdateFeaturesRequest req;
  auto* u = req.add_updates();
  u->set_feature("transaction.version");
  u->set_max_version_level(1);
  u->set_upgrade_type(1);  // UPGRADE cannot lower the new cluster's level 2
  controller::UpdateFeaturesResponse resp;
  ASSERT_TRUE(stub_->UpdateFeatures(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.error_code(), static_cast<int32_t>(ErrorCode::kInvalidUpdateVersion));
  EXPECT_EQ(resp.metadata_offset(), -1);
  u->set_upgrade_type(2);  // SAFE_DOWNGRADE
  ASSERT_TRUE(stub_->UpdateFeatures(Ctx().get(), req, &resp).ok());
  EXPECT_EQ(resp.error_code(), 0) << resp.error_message();
  EXPECT_EQ(resp.metadata_offset(), controller_->Image().offset());
  EXPECT_EQ(controller_->Image().features().at("transaction.version"), 1);
}

TEST_F(ControllerServiceTest, WatchDeliversImageThenEveryDeltaInOrder) {
  RegisterBroker(1);
  grpc::ClientContext ctx;
  controller::WatchRequest req;
  req.set_from_offset(0);
  auto reader = stub_->WatchMetadata(&ctx, req);
  controller::MetadataUpdate u;
  ASSERT_TRUE(reader->Read(&u));
  EXPECT_TRUE(u.is_snapshot());
  int64_t last = u.offset();
  bool saw_broker = false;
  for (const auto& r : u.records()) saw_broker |= r.has_register_broker();
  EXPECT_TRUE(saw_broker);

  // Changes made from another thread while the stream is open.
  std::thread writer([&] {
    for (int i = 0; i < 10; ++i) CreateTopic("topic" + std::to_string(i), 1 + i % 3);
    controller::DeleteTopicsRequest del;
    del.add_topics()->set_name("topic3");
    controller::DeleteTopicsResponse dr;
    stub_->DeleteTopics(Ctx().get(), del, &dr);
  });
  std::set<std::string> live;
  for (int i = 0; i < 11; ++i) {
    ASSERT_TRUE(reader->Read(&u)) << "update " << i;
    EXPECT_FALSE(u.is_snapshot());
    EXPECT_EQ(u.offset(), last + 1) << "deltas are consecutive";
    last = u.offset();
    for (const auto& r : u.records()) {
      if (r.has_topic()) live.insert(r.topic().name());
      if (r.has_remove_topic()) {
        EXPECT_EQ(controller_->Image().TopicByName("topic3"), nullptr);
        live.erase("topic3");
      }
    }
  }
  writer.join();
  EXPECT_EQ(live.size(), 9u);
  EXPECT_EQ(last, controller_->Image().offset());
  ctx.TryCancel();
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED);

  // Reconnecting from the last applied offset + 1 gets only what came after.
  CreateTopic("later", 1);
  grpc::ClientContext ctx2;
  req.set_from_offset(last + 1);
  auto reader2 = stub_->WatchMetadata(&ctx2, req);
  ASSERT_TRUE(reader2->Read(&u));
  EXPECT_FALSE(u.is_snapshot());
  EXPECT_EQ(u.offset(), last + 1);
  EXPECT_EQ(u.records(0).topic().name(), "later");
  ctx2.TryCancel();
  reader2->Finish();
}

TEST_F(ControllerServiceTest, ShutdownEndsTheStreamWithUnavailable) {
  grpc::ClientContext ctx;
  controller::WatchRequest req;
  auto reader = stub_->WatchMetadata(&ctx, req);
  controller::MetadataUpdate u;
  ASSERT_TRUE(reader->Read(&u));
  controller_->Shutdown();
  EXPECT_FALSE(reader->Read(&u));
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  controller::CreateTopicsResponse resp;
  EXPECT_EQ(stub_->CreateTopics(Ctx().get(), {}, &resp).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace runnel::controllerd
