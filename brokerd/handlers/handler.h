// What every Kafka API handler shares: the broker's state it reads, the table of supported
// APIs, and decoding/encoding helpers.
//
// A handler reads top to bottom: decode, whole-request checks, per-item validation as a
// flat list of "error and continue", the work, the response. It calls `respond` exactly
// once, on the loop thread (possibly later, after an async controller call).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "brokerd/controller/controller_client.h"
#include "brokerd/controller/metadata_cache.h"
#include "brokerd/error_mapping.h"
#include "brokerd/fetch_sessions.h"
#include "brokerd/net/event_loop.h"
#include "brokerd/net/request.h"
#include "brokerd/storage/append_batcher.h"
#include "brokerd/storage/partition_view.h"
#include "brokerd/storage/storage_client.h"
#include "common/config/config.h"
#include "common/config/listeners.h"
#include "common/log/log.h"
#include "common/protocol/error_code.h"
#include "common/protocol/messages.h"

namespace runnel::brokerd {

namespace group {
class Coordinator;  // brokerd/group/coordinator.h
}
class ProducerIdManager;  // brokerd/txn/producer_id_manager.h
class TxnMarkerWriter;    // brokerd/txn/marker_writer.h
namespace txn {
class TxnCoordinator;  // brokerd/txn/txn_coordinator.h
}

struct BrokerContext {
  EventLoop& loop;
  const config::Config& config;
  MetadataCache& metadata;
  ControllerClient& controller;
  int32_t node_id;
  StorageClient& storage;
  PartitionView& partitions;
  AppendBatcher& appends;
  // The group coordinator (FindCoordinator, OffsetCommit, JoinGroup, ...).
  group::Coordinator& groups;
  // Producer ids for InitProducerId, from the controller's blocks.
  ProducerIdManager& producer_ids;
  // Transaction markers to partitions led here (WriteTxnMarkers, the transaction coordinator).
  TxnMarkerWriter& txn_markers;
  // The transaction coordinator (InitProducerId with a transactional id, AddPartitionsToTxn,
  // EndTxn, ...).
  txn::TxnCoordinator& txns;
  // Work waiting on the loop (long-poll fetches, WaitForMetadata) registers how to end it
  // early, and is owned by its entry until it ends; the broker runs these when it stops,
  // before the listeners and connections close, so each ends as at its timeout.
  std::unordered_map<uint64_t, std::function<void()>> cancel_on_stop = {};
  uint64_t next_cancel_id = 1;
  // fetch.max.bytes (a restart key), read once rather than on every Fetch.
  const int32_t fetch_max_bytes = config.GetInt("fetch.max.bytes");
  // Incremental fetch sessions (KIP-227), on the loop thread like every handler.
  FetchSessionCache fetch_sessions{config.GetInt("max.incremental.fetch.session.cache.slots")};
  // Each topic's min.insync.replicas as this node resolves it (Produce's acks=all check), as
  // of metadata offset min_isr_offset: its levels change only with the metadata.
  int64_t min_isr_offset = -1;
  std::unordered_map<std::string, int64_t> min_isr = {};
};

using HandlerFn = void (*)(BrokerContext&, std::unique_ptr<RequestContext>, Respond);

struct ApiEntry {
  protocol::ApiKey key;
  int16_t min_version;
  int16_t max_version;
  HandlerFn handler;
};

// The one table of the APIs Runnel serves: dispatch and the ApiVersions answer both read it.
std::span<const ApiEntry> SupportedApis();
const ApiEntry* FindSupportedApi(int16_t api_key);

void HandleApiVersions(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleProduce(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleFetch(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleListOffsets(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDeleteRecords(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDescribeLogDirs(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleOffsetForLeaderEpoch(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleWriteTxnMarkers(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleMetadata(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleCreateTopics(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDeleteTopics(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDescribeCluster(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDescribeQuorum(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDescribeTopicPartitions(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleCreatePartitions(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDescribeConfigs(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleAlterConfigs(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleIncrementalAlterConfigs(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleFindCoordinator(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleOffsetCommit(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleOffsetFetch(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleOffsetDelete(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleTxnOffsetCommit(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleListGroups(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDescribeGroups(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDeleteGroups(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleConsumerGroupHeartbeat(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleConsumerGroupDescribe(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleJoinGroup(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleSyncGroup(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleHeartbeat(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleLeaveGroup(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleInitProducerId(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleAddPartitionsToTxn(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleAddOffsetsToTxn(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleEndTxn(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDescribeTransactions(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleListTransactions(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleDescribeProducers(BrokerContext&, std::unique_ptr<RequestContext>, Respond);
void HandleUpdateFeatures(BrokerContext&, std::unique_ptr<RequestContext>, Respond);

// AlterConfigs and IncrementalAlterConfigs (alter_configs.cc): answers here the broker
// resources naming another node, as Kafka's broker does, sends the rest to the controller,
// and once the change is in this broker's metadata cache calls `done` with one outcome per
// resource of `call`, in order.
void AlterConfigsThroughController(BrokerContext& broker,
                                   runnel::controller::AlterConfigsRequest call,
                                   std::function<void(std::vector<protocol::KafkaError>)> done);

// The ApiVersions answer to a version we do not serve: v0-shaped, UNSUPPORTED_VERSION,
// with the advertised list, so the client can pick a version and retry.
Response UnsupportedApiVersionsResponse(const RequestContext& ctx);

std::shared_ptr<spdlog::logger> KafkaLog();

// Operations allowed with no authorizer configured: every operation the resource type has,
// as Kafka's bit set (1 << AclOperation code).
constexpr int32_t kAllTopicOperations =
    (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 10) | (1 << 11);
constexpr int32_t kAllClusterOperations =
    (1 << 5) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12);

// A registered broker as clients reach it through one listener.
struct BrokerAddress {
  int32_t id;
  std::string host;
  int32_t port;
  std::optional<std::string> rack;
  bool fenced = false;
};
// Every unfenced broker's endpoint for the listener named `listener`, by broker id; with
// `include_fenced`, the fenced ones too (DescribeCluster v2's IncludeFencedBrokers).
std::vector<BrokerAddress> BrokersOnListener(const MetadataCache& cache,
                                             const std::string& listener,
                                             bool include_fenced = false);
// The controller id Metadata and DescribeCluster give clients: the active controller when it
// is one of `brokers` (a node with both roles), else this broker. Any broker takes the admin
// requests a client sends to "the controller" and forwards them to the active one.
int32_t ControllerIdForClients(const MetadataCache& cache,
                               const std::vector<BrokerAddress>& brokers, int32_t self);

// A broker that clients of `listener` reach: registered, unfenced, with an endpoint of that
// name. Kafka's metadata cache lists a partition's other replicas as offline.
inline bool BrokerReachable(const MetadataCache& cache, int32_t id, const std::string& listener) {
  auto it = cache.brokers().find(id);
  if (it == cache.brokers().end() || it->second.fenced) return false;
  for (const auto& ep : it->second.endpoints) {
    if (ep.name() == listener) return true;
  }
  return false;
}

// What this broker knows of its own logs beyond the metadata: a partition placed here whose
// log storaged does not hold is not there to serve, so Metadata and DescribeTopicPartitions
// give it no leader here rather than claim it (the log is not created yet, or its creation
// failed: then this broker is also one of its offline replicas). With nothing known of
// storaged (`view` null, or storaged restarting) the metadata is taken as it is.
// TODO(replication issue): other nodes' failures reach clients only once brokers report
// offline replicas to the controller.
struct LocalLogs {
  const PartitionView* view = nullptr;
  int32_t node_id = -1;

  // True when the partition is placed here and its log is missing; `*failed` says whether
  // storaged refused to create it.
  bool Missing(const std::string& topic, const PartitionInfo& p, bool* failed) const {
    *failed = false;
    if (view == nullptr || !view->ready()) return false;
    if (!p.HostedOn(node_id)) return false;
    if (view->Find(topic, p.id) != nullptr) return false;
    *failed = view->CreateFailure(topic, p.id) != nullptr;
    return true;
  }
};

// What Metadata and DescribeTopicPartitions both say of a partition: its index, leader epoch,
// replicas and ISR as placed, and the replicas offline to clients of `listener` (and this
// broker when it could not create the partition's log). Returns whether the leader may be
// given (the leader's log is not missing here); the leader and the partition's error are
// each API's own.
template <typename Part>
bool FillPartitionReplicas(const MetadataCache& cache, const std::string& topic,
                           const PartitionInfo& p, const std::string& listener,
                           const LocalLogs& local, Part* out) {
  out->partition_index = p.id;
  out->leader_epoch = p.leader_epoch;
  bool failed = false;
  const bool missing = local.Missing(topic, p, &failed);
  for (int32_t r : p.replicas) {
    out->replica_nodes.push_back(NodeId(r));
    if (!BrokerReachable(cache, r, listener) || (failed && r == local.node_id)) {
      out->offline_replicas.push_back(NodeId(r));
    }
  }
  for (int32_t r : p.isr) out->isr_nodes.push_back(NodeId(r));
  return !(missing && p.leader == local.node_id);
}

// Decodes the request body as `Req`; false (after logging one line) when it is malformed,
// in which case the handler answers Response::Close(), as Kafka closes the connection.
// `borrow_records`: records stay in ctx's frame (Records::borrowed), not copied out, so
// `out` is used only while ctx lives.
template <typename Req>
bool DecodeRequest(const RequestContext& ctx, Req* out, bool borrow_records = false) {
  protocol::Reader reader(ctx.body());
  if (borrow_records) reader.BorrowRecords();
  Status st = out->Decode(reader, ctx.header.api_version);
  if (!st.ok()) {
    KafkaLog()->warn("malformed {} v{} request from {} (client {}): {}; closing the connection",
                     protocol::FindApiSchema(ctx.header.api_key)->name, ctx.header.api_version,
                     ctx.peer, ctx.header.client_id.value_or(""), std::string(st.message()));
    return false;
  }
  return true;
}

// Encodes the response header (v0 or v1, as the API and `version` require) and `body`.
template <typename Resp>
Response EncodeResponseAt(const RequestContext& ctx, const Resp& body, int16_t version) {
  Response r;
  protocol::Writer writer(r.bytes, &r.inserts);
  protocol::ResponseHeader header;
  header.correlation_id = ctx.header.correlation_id;
  header.Encode(writer, protocol::ResponseHeaderVersion(ctx.header.api_key, version));
  body.Encode(writer, version);
  if constexpr (requires { body.error_code; }) {
    if constexpr (std::is_same_v<std::decay_t<decltype(body.error_code)>, protocol::ErrorCode>) {
      r.error = body.error_code;
    }
  }
  return r;
}

// The same at the request's version.
template <typename Resp>
Response EncodeResponse(const RequestContext& ctx, const Resp& body) {
  return EncodeResponseAt(ctx, body, ctx.header.api_version);
}

}  // namespace runnel::brokerd
