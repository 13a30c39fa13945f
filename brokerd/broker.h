// runnel-brokerd's application object: the Kafka listeners, the request dispatcher, the
// metadata cache and the controller client, wired together. Built in this order and torn
// down in reverse.
//
// Threads: the libuv loop thread owns the listeners, connections, handlers and the
// metadata cache; gRPC threads run controller-call completions and only post to the loop;
// one thread follows controllerd's metadata stream and posts each update to the loop.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <vector>

#include "brokerd/admin_service.h"
#include "brokerd/controller/controller_client.h"
#include "brokerd/controller/metadata_cache.h"
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/net/event_loop.h"
#include "brokerd/net/kafka_server.h"
#include "brokerd/net/uv_handle.h"
#include "brokerd/storage/append_batcher.h"
#include "brokerd/storage/partition_view.h"
#include "brokerd/storage/storage_client.h"
#include "brokerd/storage/storage_reconciler.h"
#include "brokerd/txn/marker_writer.h"
#include "brokerd/txn/producer_id_manager.h"
#include "brokerd/txn/txn_coordinator.h"
#include "common/config/config.h"
#include "common/metrics/http_server.h"
#include "common/metrics/metrics_service.h"

namespace runnel::brokerd {

class Dispatcher final : public RequestDispatcher {
 public:
  explicit Dispatcher(BrokerContext& broker) : broker_(broker) {}
  void Dispatch(std::unique_ptr<RequestContext> request, Respond respond) override;
  // Dispatches the requests held back while the metadata cache was empty.
  void Release();

 private:
  BrokerContext& broker_;
  std::vector<std::pair<std::unique_ptr<RequestContext>, Respond>> held_;
};

class Broker {
 public:
  explicit Broker(const config::Config& config);
  ~Broker();

  // Listens, starts the gRPC health service (NOT_SERVING), registers with the controller
  // (waiting as long as it takes for a quorum, unless `stop` is set: a signal during
  // start-up), and starts following the metadata. Blocking; call before Run().
  Status Start(const std::atomic<bool>& stop);
  // Runs the loop until SIGTERM/SIGINT (or `stop` of Start() is set), then shuts down.
  // Returns the exit code.
  int Run();

  // For tests: the port bound for each listener.
  const std::map<std::string, int>& bound_ports() const { return server_.bound_ports(); }

 private:
  void OnMetadata(const runnel::controller::MetadataUpdate& update);
  // Broker heartbeats (loop thread): every broker.heartbeat.interval.ms one BrokerHeartbeat,
  // unless the last one (or a re-registration) is still out. A controller that no longer
  // knows this registration (STALE_BROKER_EPOCH, BROKER_ID_NOT_REGISTERED) gets a new one.
  void SendHeartbeat();
  void OnHeartbeat(const grpc::Status& status,
                   const runnel::controller::BrokerHeartbeatResponse& response);
  void Reregister();
  // Thread-safe: ends what waits on the loop and closes every handle of the broker's pieces
  // (each piece closes its own); Run() then returns.
  void StopLoop();
  // Scrape-time metrics read on the loop thread: consumer lag per group and partition.
  void RegisterLoopMetrics();
  void RemoveLoopMetrics();

  const config::Config& config_;
  const std::atomic<bool>* stop_requested_ = nullptr;  // Start()'s `stop`
  int32_t node_id_;
  EventLoop loop_;
  MetadataCache metadata_;
  ControllerClient controller_;
  StorageClient storage_;
  PartitionView partitions_;
  AppendStream append_stream_;
  AppendBatcher appends_;
  ProducerIdManager producer_ids_;
  TxnMarkerWriter txn_markers_;
  BrokerContext context_;
  group::Coordinator groups_;  // built after context_ (whose config it reads), which names it
  txn::TxnCoordinator txns_;   // as groups_
  StorageReconciler reconciler_;
  Dispatcher dispatcher_;
  KafkaServer server_;
  BrokerAdminImpl admin_;
  metrics::MetricsService metrics_{"brokerd"};
  std::string socket_path_;  // of grpc_server_
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<metrics::HttpServer> http_;  // run alone with runnel.http.listener set
  runnel::controller::RegisterBrokerRequest registration_;
  int64_t broker_epoch_ = -1;
  bool heartbeat_out_ = false;      // a heartbeat or re-registration is in flight
  bool heartbeat_failing_ = false;  // the last heartbeat failed (logged once per outage)
  UvTimer heartbeat_timer_;
  UvHandle<uv_signal_t> sigterm_;  // its `data` is this
  UvHandle<uv_signal_t> sigint_;
};

}  // namespace runnel::brokerd
