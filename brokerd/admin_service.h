// brokerd's BrokerAdmin gRPC service (proto/runnel/broker.proto). Calls arrive on gRPC
// threads; the state they report lives on the loop, so each call posts a read to the loop
// and waits (bounded) for it.
#pragma once

#include "brokerd/controller/metadata_cache.h"
#include "brokerd/net/event_loop.h"
#include "brokerd/net/kafka_server.h"
#include "proto/runnel/broker.grpc.pb.h"

namespace runnel::brokerd {

class BrokerAdminImpl final : public runnel::broker::BrokerAdmin::Service {
 public:
  BrokerAdminImpl(EventLoop& loop, const MetadataCache& metadata, const KafkaServer& server,
                  int32_t node_id)
      : loop_(loop), metadata_(metadata), server_(server), node_id_(node_id) {}

  grpc::Status DescribeBroker(grpc::ServerContext* ctx,
                              const runnel::broker::DescribeBrokerRequest* req,
                              runnel::broker::DescribeBrokerResponse* resp) override;

 private:
  EventLoop& loop_;
  const MetadataCache& metadata_;
  const KafkaServer& server_;
  int32_t node_id_;
};

}  // namespace runnel::brokerd
