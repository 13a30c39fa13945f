#include "brokerd/broker.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "brokerd/controller/topic_configs.h"
#include "common/config/listeners.h"
#include "common/config/quorum_voters.h"
#include "common/grpc/unix_server.h"
#include "common/log/log.h"
#include "common/protocol/error_code.h"
#include "common/util/mutex.h"

namespace runnel::brokerd {
namespace {

// Where the controllers are, most preferred first: this node's own controllerd over its Unix
// socket when the node runs the controller role, then every voter of the quorum over TCP.
std::vector<std::string> ControllerTargets(const config::Config& config) {
  // The node's own controllerd first (a voter, or on a broker-only node the observer that
  // keeps a copy of the log), then the voters over TCP for while it restarts.
  std::vector<std::string> targets;
  targets.push_back(grpcutil::UnixTarget(
      grpcutil::SocketPath(config.GetString("runnel.run.dir"), "controllerd")));
  auto voters = config::ParseQuorumVoters(config.GetString("controller.quorum.voters"));
  if (voters.ok()) {  // validated when the config was loaded
    for (const config::QuorumVoter& v : *voters) targets.push_back(v.Address());
  }
  return targets;
}

const log::ModuleLogger kLog("brokerd");

}  // namespace

void Dispatcher::Dispatch(std::unique_ptr<RequestContext> request, Respond respond) {
  if (!broker_.metadata.ready()) {
    held_.emplace_back(std::move(request), std::move(respond));
    return;
  }
  const int16_t key = request->header.api_key;
  const int16_t version = request->header.api_version;
  const ApiEntry* api = FindSupportedApi(key);
  if (api != nullptr && version >= api->min_version && version <= api->max_version) {
    try {
      api->handler(broker_, std::move(request), respond);
    } catch (const std::exception& e) {
      KafkaLog()->error("handler for API {} v{} failed: {}; closing the connection", key, version,
                        e.what());
      respond(Response::Close());
    }
    return;
  }
  if (key == static_cast<int16_t>(protocol::ApiKey::kApiVersions)) {
    return respond(UnsupportedApiVersionsResponse(*request));
  }
  const protocol::ApiSchemaInfo* schema = protocol::FindApiSchema(key);
  KafkaLog()->warn("{} API {} ({}) v{} from {}; closing the connection",
                   api ? "unsupported version of" : "unsupported", key,
                   schema ? schema->name : "unknown", version, request->peer);
  respond(Response::Close());
}

void Dispatcher::Release() {
  auto held = std::move(held_);
  held_.clear();
  for (auto& [request, respond] : held) Dispatch(std::move(request), std::move(respond));
}

Broker::Broker(const config::Config& config)
    : config_(config),
      node_id_(config.GetInt("node.id")),
      controller_(loop_, ControllerTargets(config)),
      storage_(loop_, grpcutil::SocketPath(config.GetString("runnel.run.dir"), "storaged")),
      append_stream_(loop_,
                     grpcutil::SocketPath(config.GetString("runnel.run.dir"), "storaged-append")),
      appends_(loop_, storage_, partitions_, AppendBatcher::kDefaultCallsInFlight,
               AppendBatcher::kDefaultBytesPerCall,
               static_cast<uint64_t>(config.GetLong("runnel.broker.append.shared.bytes")),
               &append_stream_),
      producer_ids_([this](ProducerIdManager::Allocated done) {
        runnel::controller::AllocateProducerIdsRequest req;
        req.set_broker_id(node_id_);
        req.set_broker_epoch(broker_epoch_);
        controller_.AllocateProducerIds(req, std::chrono::seconds(10), std::move(done));
      }),
      txn_markers_(metadata_, partitions_, appends_, node_id_),
      context_{loop_,       config_,  metadata_, controller_,   node_id_,     storage_,
               partitions_, appends_, groups_,   producer_ids_, txn_markers_, txns_},
      groups_(context_),
      txns_(context_, txn_markers_),
      reconciler_(loop_, metadata_, partitions_, storage_, node_id_,
                  [](const MetadataCache& cache, const TopicInfo& topic) {
                    return StorageConfigsFor(cache, topic);
                  }),
      dispatcher_(context_),
      server_(
          loop_, dispatcher_,
          ServerLimits{config.GetInt("socket.request.max.bytes"), config.GetInt("max.connections"),
                       config.GetInt("max.connections.per.ip")},
          // Large produce requests are read into the memory shared with storaged.
          [this](int16_t api_key, size_t size) -> std::shared_ptr<PlacedFrame> {
            if (api_key != static_cast<int16_t>(protocol::ApiKey::kProduce)) return nullptr;
            return appends_.ReserveFrame(size);
          }),
      admin_(loop_, metadata_, server_, node_id_) {
  metadata_.set_local_node_id(node_id_);
  // A transaction's offsets (TxnOffsetCommit) become committed, or are dropped, once its
  // marker is stored in their __consumer_offsets partition.
  txn_markers_.AddObserver([this](const TxnMarker& marker) {
    if (marker.topic != group::kOffsetsTopic) return;
    groups_.CompleteTransaction(marker.partition, marker.producer_id, marker.commit);
  });
}

namespace {

constexpr const char* kLagFamily = "runnel_broker_consumer_group_lag";
constexpr const char* kCommittedFamily = "runnel_broker_consumer_group_committed_offset";
// How long a scrape waits for the loop to read the groups; a busier loop gives no lag.
constexpr auto kLoopScrapeWait = std::chrono::seconds(1);

// What the loop thread read for one scrape; shared, so a scrape that stopped waiting leaves
// the loop nothing dangling to write to.
struct GroupOffsets {
  Mutex mu;
  CondVar cv;
  bool done ABSL_GUARDED_BY(mu) = false;
  std::vector<metrics::Sample> lag ABSL_GUARDED_BY(mu);
  std::vector<metrics::Sample> committed ABSL_GUARDED_BY(mu);
};

}  // namespace

void Broker::RegisterLoopMetrics() {
  // Both families come from one read of the groups, done on the loop thread (the
  // coordinator's and the partition view's owner), which the scrape's thread waits for.
  auto read = [this](bool lag, std::vector<metrics::Sample>* out) {
    auto state = std::make_shared<GroupOffsets>();
    loop_.Post([this, state] {
      std::vector<metrics::Sample> lags;
      std::vector<metrics::Sample> committed;
      for (group::Shard* shard : groups_.shards()) {
        for (const auto& [group_id, slot] : shard->groups()) {
          for (const auto& [tp, offset] : slot.offsets) {
            std::vector<std::string> labels = {group_id, tp.first, std::to_string(tp.second)};
            committed.push_back({labels, static_cast<double>(offset.offset)});
            const StoredPartition* p = partitions_.Find(tp.first, tp.second);
            if (p == nullptr || offset.offset < 0) continue;  // not led here, or no offset
            lags.push_back({std::move(labels), static_cast<double>(std::max<int64_t>(
                                                   0, p->high_watermark - offset.offset))});
          }
        }
      }
      MutexLock lock(&state->mu);
      state->lag = std::move(lags);
      state->committed = std::move(committed);
      state->done = true;
      state->cv.SignalAll();
    });
    MutexLock lock(&state->mu);
    if (!state->cv.WaitFor(&state->mu, kLoopScrapeWait,
                           [&]()
                               ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->mu) { return state->done; })) {
      return;
    }
    *out = std::move(lag ? state->lag : state->committed);
  };
  metrics::Registry& r = metrics::ProcessRegistry();
  r.AddCallback(kLagFamily,
                "Records between a group's committed offset and the partition's high watermark "
                "(partitions led here).",
                metrics::Type::kGauge, {"group", "topic", "partition"},
                [read](std::vector<metrics::Sample>* out) { read(true, out); });
  r.AddCallback(kCommittedFamily, "A group's committed offset of the partition.",
                metrics::Type::kGauge, {"group", "topic", "partition"},
                [read](std::vector<metrics::Sample>* out) { read(false, out); });
}

void Broker::RemoveLoopMetrics() {
  metrics::ProcessRegistry().RemoveCallback(kLagFamily);
  metrics::ProcessRegistry().RemoveCallback(kCommittedFamily);
}

Broker::~Broker() {
  // Also after a failed Start(): close every handle before the members they point into go.
  StopLoop();
  loop_.Run();
  http_.reset();
  controller_.Stop();
  storage_.Stop();
  if (grpc_server_) {
    grpcutil::ShutdownUnixServer(*grpc_server_, socket_path_, std::chrono::system_clock::now());
  }
  // No scrape runs now (both servers are gone): the callbacks may go with this broker.
  RemoveLoopMetrics();
}

void Broker::StopLoop() {
  loop_.Stop([this] {
    if (grpc_server_) grpcutil::SetServing(*grpc_server_, false);
    // Long polls answer now (their connections are closing anyway) and close their timers.
    auto pending = std::move(context_.cancel_on_stop);
    context_.cancel_on_stop.clear();
    for (auto& [id, cancel] : pending) cancel();
    // Coordinator shards answer their parked requests and close their timers.
    groups_.Stop();
    txns_.Stop();
    server_.Close();
    // Calls in flight on the append socket are dropped unanswered (their connections are
    // closing).
    append_stream_.Close();
    reconciler_.Close();
    heartbeat_timer_.Close();
    sigterm_.Close();
    sigint_.Close();
  });
}

Status Broker::Start(const std::atomic<bool>& stop) {
  stop_requested_ = &stop;
  RUNNEL_ASSIGN_OR_RETURN(std::vector<config::Listener> listeners,
                          config::ParseListeners(config_.Raw("listeners")));
  RUNNEL_RETURN_IF_ERROR(server_.Listen(listeners));
  // Answering from now on, so the supervisor sees a broker waiting for its controllers
  // rather than one that does not start.
  socket_path_ = grpcutil::SocketPath(config_.GetString("runnel.run.dir"), "brokerd");
  RUNNEL_ASSIGN_OR_RETURN(grpc_server_, grpcutil::StartUnixServer(
                                            socket_path_, {&admin_, &metrics_}, /*serving=*/false));
  RegisterLoopMetrics();
  RUNNEL_ASSIGN_OR_RETURN(http_, metrics::MaybeServeRoleHttp(config_, &metrics_, socket_path_));

  // Advertise `advertised.listeners`, else `listeners` with the ports actually bound.
  std::vector<config::Listener> advertised = listeners;
  if (!config_.Raw("advertised.listeners").empty()) {
    RUNNEL_ASSIGN_OR_RETURN(advertised,
                            config::ParseListeners(config_.Raw("advertised.listeners")));
  }
  runnel::controller::RegisterBrokerRequest reg;
  reg.set_broker_id(node_id_);
  std::string incarnation(16, '\0');
  std::random_device rd;
  for (char& c : incarnation) c = static_cast<char>(rd());
  reg.set_incarnation_id(incarnation);
  for (const config::Listener& l : advertised) {
    auto* ep = reg.add_endpoints();
    ep->set_name(l.name);
    std::string host = l.host;
    if (host.empty() || host == "0.0.0.0" || host == "::") {
      char name[256] = {0};
      host = gethostname(name, sizeof(name) - 1) == 0 ? name : "localhost";
    }
    ep->set_host(host);
    auto bound = server_.bound_ports().find(l.name);
    ep->set_port(l.port == 0 && bound != server_.bound_ports().end() ? bound->second : l.port);
    ep->set_security_protocol(0);  // PLAINTEXT
  }
  if (std::string rack = config_.GetString("broker.rack"); !rack.empty()) reg.set_rack(rack);

  runnel::controller::RegisterBrokerResponse reg_resp;
  grpc::Status st = controller_.RegisterBrokerBlocking(reg, stop, &reg_resp);
  if (stop.load()) return absl::OkStatus();  // Run() stops at once
  if (!st.ok()) {
    return absl::UnavailableError(
        fmt::format("cannot register with the controller: {}", st.error_message()));
  }
  if (reg_resp.error_code() != 0) {
    return absl::FailedPreconditionError(
        fmt::format("the controller refused the registration: {}", reg_resp.error_message()));
  }
  kLog()->info("registered as broker {} (epoch {}) in cluster {}", node_id_,
               reg_resp.broker_epoch(), reg_resp.cluster_id());
  registration_ = std::move(reg);
  broker_epoch_ = reg_resp.broker_epoch();

  // Both follow which logs exist (the reconciler: which to create or delete; the group
  // shards: which __consumer_offsets logs there are), not their offsets, which move with every
  // append. The reconciler has heard which logs changed (OnLayoutKeys) by then, and looks at
  // those; config changes reach it through the metadata.
  partitions_.OnLayoutChange([this] {
    reconciler_.Kick();
    groups_.Reconcile();
    txns_.Reconcile();
  });
  append_stream_.Start();
  storage_.StartWatch(
      [this](const storage::PartitionChange& change, bool snapshot) {
        if (snapshot) {
          kLog()->info("storaged holds {} partition(s)", change.partitions_size());
        }
        partitions_.Apply(change, snapshot);
      },
      [this] {
        kLog()->warn("lost storaged's partition stream; partitions unavailable until it is back");
        partitions_.MarkLost();
      });
  controller_.StartWatch(
      [this](const runnel::controller::MetadataUpdate& update) { OnMetadata(update); });

  heartbeat_timer_.Init(loop_.raw());
  const uint64_t interval = static_cast<uint64_t>(config_.GetInt("broker.heartbeat.interval.ms"));
  heartbeat_timer_.Start(interval, interval, [this] { SendHeartbeat(); });
  return absl::OkStatus();
}

void Broker::SendHeartbeat() {
  if (heartbeat_out_) return;
  heartbeat_out_ = true;
  runnel::controller::BrokerHeartbeatRequest req;
  req.set_broker_id(node_id_);
  req.set_broker_epoch(broker_epoch_);
  // Bounded by the session so a call waiting for a new controller leader is not outlived by
  // the session it is meant to keep.
  controller_.BrokerHeartbeat(
      req, std::chrono::milliseconds(config_.GetInt("broker.session.timeout.ms")),
      [this](const grpc::Status& status,
             const runnel::controller::BrokerHeartbeatResponse& response) {
        OnHeartbeat(status, response);
      });
}

void Broker::OnHeartbeat(const grpc::Status& status,
                         const runnel::controller::BrokerHeartbeatResponse& response) {
  using protocol::ErrorCode;
  if (!status.ok()) {
    heartbeat_out_ = false;
    if (!heartbeat_failing_) {
      kLog()->warn("heartbeat to the controller failed: {}; retrying every interval",
                   status.error_message());
      heartbeat_failing_ = true;
    }
    return;
  }
  if (heartbeat_failing_) {
    kLog()->info("heartbeats reach the controller again");
    heartbeat_failing_ = false;
  }
  const auto code = static_cast<ErrorCode>(response.error_code());
  if (code == ErrorCode::kStaleBrokerEpoch || code == ErrorCode::kBrokerIdNotRegistered) {
    kLog()->warn("the controller does not know this registration (epoch {}): {}; registering again",
                 broker_epoch_, response.error_message());
    Reregister();  // keeps heartbeat_out_ until it is answered
    return;
  }
  heartbeat_out_ = false;
  if (code != ErrorCode::kNone) {
    kLog()->warn("heartbeat refused: error {} {}", response.error_code(), response.error_message());
  } else if (response.metadata_offset() >= 0) {
    kLog()->info("the controller unfenced this broker (offset {})", response.metadata_offset());
  }
}

void Broker::Reregister() {
  controller_.RegisterBroker(
      registration_, std::chrono::milliseconds(config_.GetInt("broker.session.timeout.ms")),
      [this](const grpc::Status& status,
             const runnel::controller::RegisterBrokerResponse& response) {
        heartbeat_out_ = false;
        if (!status.ok() || response.error_code() != 0) {
          kLog()->warn("registering again failed: {}",
                       status.ok() ? response.error_message() : status.error_message());
          return;  // the next heartbeat tells again
        }
        broker_epoch_ = response.broker_epoch();
        kLog()->info("registered again as broker {} (epoch {})", node_id_, broker_epoch_);
      });
}

void Broker::OnMetadata(const runnel::controller::MetadataUpdate& update) {
  bool was_ready = metadata_.ready();
  if (!metadata_.Apply(update)) {
    // Deltas arrive in order; an update at or before what we hold is a resend after a
    // reconnect and is skipped.
    if (update.offset() > metadata_.offset() + 1) {
      kLog()->warn("metadata delta at offset {} does not follow {}; skipped", update.offset(),
                   metadata_.offset());
    }
    return;
  }
  if (!was_ready) {
    kLog()->info("metadata loaded at offset {}: {} topic(s), {} broker(s)", metadata_.offset(),
                 metadata_.topics().size(), metadata_.brokers().size());
    grpcutil::SetServing(*grpc_server_, true);
    dispatcher_.Release();
  }
  reconciler_.Kick();
  groups_.Reconcile();
  txns_.Reconcile();
}

int Broker::Run() {
  auto on_signal = [](uv_signal_t* handle, int signum) {
    kLog()->info("signal {} received, shutting down", signum);
    static_cast<Broker*>(handle->data)->StopLoop();
  };
  for (auto [handle, signum] : {std::pair{&sigterm_, SIGTERM}, std::pair{&sigint_, SIGINT}}) {
    int rc = handle->Init([this](uv_signal_t* h) { return uv_signal_init(loop_.raw(), h); });
    if (rc == 0) {
      handle->get()->data = this;
      rc = uv_signal_start(handle->get(), on_signal, signum);
    }
    if (rc != 0) kLog()->error("cannot handle signal {}: {}", signum, uv_strerror(rc));
  }
  // A signal that came before these handlers took over.
  if (stop_requested_ != nullptr && stop_requested_->load()) {
    kLog()->info("stop requested during start-up, shutting down");
    StopLoop();
  }
  loop_.Run();
  http_.reset();
  controller_.Stop();
  storage_.Stop();
  grpcutil::ShutdownUnixServer(*grpc_server_, socket_path_,
                               std::chrono::system_clock::now() + std::chrono::seconds(2));
  kLog()->info("stopped");
  return 0;
}

}  // namespace runnel::brokerd
