// The controller: owns the cluster metadata, the state machine over the Raft-replicated
// metadata log (Quorum). Every change goes the same way, on the quorum's leader:
//   (writer mutex) wait until this node leads with its term's no-op applied -> validate
//   against the image -> build records -> propose -> wait until committed and applied ->
//   answer.
// Every node (leader or not) applies committed entries on the quorum's driver thread:
//   (image mutex) apply to the image -> publish to watchers -> maybe snapshot (CompactTo).
// The writer mutex serializes writers only; applying never takes it, so a writer waiting for
// its entry never blocks the apply that completes it. Since a writer waits for its own entry
// to be applied before the next one validates, each validates against an image holding every
// earlier write. Client mistakes are Kafka error codes in the responses; a non-OK Status
// means the controller could not do the work: FailedPrecondition = this node does not lead
// (nothing was written; IsNotLeader), Unavailable = shut down, a fatal log error, or a lost
// leadership, DeadlineExceeded = not committed in time.
//
// Defined in controller.cc (the core: apply, commit, watchers) and beside it by concern:
// controller_topics.cc, controller_brokers.cc, controller_configs.cc, controller_features.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/util/mutex.h"
#include "common/util/status.h"
#include "controllerd/metadata_image.h"
#include "controllerd/quorum.h"
#include "controllerd/uuid.h"
#include "proto/runnel/controller.pb.h"

namespace runnel::config {
class Config;
}

namespace runnel::controllerd {

struct ControllerOptions {
  int32_t node_id = 1;                     // node.id: reported as the controller id
  int32_t default_num_partitions = 1;      // num.partitions
  int32_t default_replication_factor = 1;  // default.replication.factor
  // min.insync.replicas: written as the cluster-wide dynamic default when this controller
  // starts a new cluster, as Kafka's storage format does.
  int32_t min_insync_replicas = 1;
  // metadata.log.max.record.bytes.between.snapshots
  int64_t snapshot_interval_bytes = 20 << 20;
  // Updates a watcher may have undelivered before its stream is ended (it then reconnects).
  size_t watcher_queue_capacity = 4096;
  // The deadline of a write called without one (tests, a gRPC call without a deadline).
  int64_t default_timeout_ms = 30000;
  // broker.session.timeout.ms: the leader fences a broker silent for this long.
  int64_t session_timeout_ms = 9000;
  // The transaction.version a new cluster starts at (runnel.bootstrap.transaction.version).
  int32_t transaction_version = 2;
  // How often the leader looks for brokers whose session expired.
  int64_t session_check_interval_ms = 500;
  // Seeds topic ids, cluster id and replica placement; random when unset (tests set it).
  std::optional<uint64_t> seed;

  static ControllerOptions FromConfig(const config::Config& config);
};

using UpdatePtr = std::shared_ptr<const controller::MetadataUpdate>;

// One WatchMetadata stream's queue. The controller pushes without ever blocking; the
// stream's thread pops and writes to the network at the watcher's pace.
class Watcher {
 public:
  explicit Watcher(size_t capacity) : capacity_(capacity) {}

  // Queues `update`; when the queue is full the watcher is closed with RESOURCE_EXHAUSTED
  // instead and false is returned.
  bool Push(UpdatePtr update);
  // Ends the stream with `why` once what is queued has been taken.
  void Close(Status why);
  // The next update, waiting up to `timeout`: nullptr on timeout; the close status once
  // closed and drained.
  StatusOr<UpdatePtr> Next(std::chrono::milliseconds timeout);
  bool closed() const;

 private:
  const size_t capacity_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<UpdatePtr> queue_ ABSL_GUARDED_BY(mu_);
  std::optional<Status> closed_ ABSL_GUARDED_BY(mu_);
};

// True for the error a write gets on a node that does not lead the quorum (nothing was
// written): the caller may send it to the leader instead.
bool IsNotLeader(const Status& status);

class Controller final : private Quorum::StateMachine {
 public:
  // Starts `quorum` with this controller as its state machine: the stored snapshot (if any)
  // is loaded now; the entries after it are applied once the quorum knows they are committed
  // (a single voter: at its first election, right away). The first leader of a new cluster
  // commits the cluster id. The quorum is owned from here on.
  static StatusOr<std::unique_ptr<Controller>> Open(const ControllerOptions& options,
                                                    std::unique_ptr<Quorum> quorum);
  ~Controller() override;

  // Writes. `deadline` bounds the wait for leadership and commit; {} = default_timeout_ms.
  StatusOr<controller::CreateTopicsResponse> CreateTopics(
      const controller::CreateTopicsRequest& request, Deadline deadline = {});
  StatusOr<controller::DeleteTopicsResponse> DeleteTopics(
      const controller::DeleteTopicsRequest& request, Deadline deadline = {});
  StatusOr<controller::RegisterBrokerResponse> RegisterBroker(
      const controller::RegisterBrokerRequest& request, Deadline deadline = {});
  StatusOr<controller::CreatePartitionsResponse> CreatePartitions(
      const controller::CreatePartitionsRequest& request, Deadline deadline = {});
  StatusOr<controller::AlterConfigsResponse> AlterConfigs(
      const controller::AlterConfigsRequest& request, Deadline deadline = {});

  // A broker's heartbeat, on the leader only (FailedPrecondition elsewhere, nothing done): its
  // session is renewed, and a fenced broker is unfenced (a write: its registration with
  // fenced = false, and it leads again every leaderless partition whose ISR has it).
  StatusOr<controller::BrokerHeartbeatResponse> BrokerHeartbeat(
      const controller::BrokerHeartbeatRequest& request, Deadline deadline = {});
  // Hands a registered broker (of the epoch it gives) the next kProducerIdBlockSize producer
  // ids (Kafka's AllocateProducerIds): a write of the ProducerIdsRecord, so a block is never
  // handed twice, whatever restarts or leader changes come between.
  StatusOr<controller::AllocateProducerIdsResponse> AllocateProducerIds(
      const controller::AllocateProducerIdsRequest& request, Deadline deadline = {});
  static constexpr int32_t kProducerIdBlockSize = 1000;  // Kafka's block size
  // Changes finalized feature levels with Kafka's rules (FeatureControlManager): each update
  // checked against the levels Runnel supports (common/util/features.h) and the direction its
  // upgrade type allows; the first refused one (by name) refuses all, with Kafka's message.
  // Otherwise one batch of FeatureLevelRecords (level 0 removes a feature), unless
  // validate_only.
  StatusOr<controller::UpdateFeaturesResponse> UpdateFeatures(
      const controller::UpdateFeaturesRequest& request, Deadline deadline = {});

  // Reads of this node's image (any node); controller_id is the known leader (-1 none).
  StatusOr<controller::DescribeClusterResponse> DescribeCluster();
  // The same, linearizable: on the leader only (FailedPrecondition elsewhere), after a
  // read-index round confirmed the leadership and the image has everything committed before
  // the call. DeadlineExceeded when that takes past `deadline`.
  StatusOr<controller::DescribeClusterResponse> DescribeClusterLinearizable(Deadline deadline = {});
  // The quorum as its leader sees it; FailedPrecondition on a node that does not lead.
  StatusOr<controller::DescribeQuorumResponse> DescribeQuorum();

  // Waits until this node's image has the cluster id (it has applied the cluster's first
  // entries): OK, or Unavailable at the deadline or once shut down.
  Status WaitForClusterId(Deadline deadline);

  // Starts a watch (see WatchRequest in controller.proto): the returned watcher already
  // holds the snapshot or the catch-up deltas and then gets every new batch.
  StatusOr<std::shared_ptr<Watcher>> Watch(int64_t from_offset);
  void Unwatch(const std::shared_ptr<Watcher>& watcher);

  // Ends every watch (UNAVAILABLE), refuses further calls and stops the quorum. Idempotent.
  void Shutdown();

  // Called (under the controller's lock; must not block or call back) when the log can
  // no longer be written: the process should exit and be restarted to recover.
  void SetFatalErrorHandler(std::function<void(const Status&)> handler);

  // A copy of the current image (for tests and diagnostics).
  MetadataImage Image() const;
  // The quorum's Raft term (each election is a new term; a single voter's every start is).
  int64_t term() const { return quorum_->Term(); }
  int32_t node_id() const { return options_.node_id; }
  Quorum& quorum() { return *quorum_; }

 private:
  Controller(const ControllerOptions& options, std::unique_ptr<Quorum> quorum);
  Deadline Resolve(Deadline deadline) const;
  Status CheckUsableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (the writer mutex held) until this node may write: it leads, its no-op is applied
  // and the cluster has an id.
  Status BeginWrite(Deadline deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Proposes one batch and waits until it is applied; returns its offset.
  StatusOr<int64_t> Commit(const metadata::MetadataRecordBatch& batch, Deadline deadline,
                           std::optional<int64_t> expected_offset = std::nullopt);
  void Fail(const Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  UpdatePtr SnapshotUpdateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stamps `update` with the leader this node knows (see MetadataUpdate.leader_id).
  void SetLeaderLocked(controller::MetadataUpdate* update) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeProposeClusterIdLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Quorum::StateMachine, on the quorum's driver thread.
  void Apply(const raft::Entry& entry) override;
  void Restore(raft::SnapshotId id, const std::string& data) override;
  void RoleChanged(raft::Role role, int64_t term, raft::NodeId leader) override;
  void Fatal(const Status& why) override;
  std::vector<int32_t> UnfencedBrokersLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NONE when `broker_id` is registered with `broker_epoch`; else BROKER_ID_NOT_REGISTERED or
  // STALE_BROKER_EPOCH, with a message.
  protocol::KafkaError CheckBrokerEpochLocked(int32_t broker_id, int64_t broker_epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Broker sessions (KRaft's broker heartbeat manager), on the leader. The session thread
  // looks every session_check_interval_ms for registered, unfenced brokers not heard from for
  // session_timeout_ms and fences each in its own write (FenceBroker).
  void SessionLoop();
  void FenceExpiredBrokers();
  void FenceBroker(int32_t broker_id);
  bool SessionExpiredLocked(int32_t broker_id, std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The records of fencing `broker_id`: its registration with fenced = true; for each
  // partition it leads a new leader, the first unfenced other ISR member (the broker leaves
  // the ISR), or none (-1, the ISR kept: the broker leads again when it comes back); and each
  // partition it follows in the ISR without it.
  void AddFenceRecordsLocked(int32_t broker_id, metadata::MetadataRecordBatch* batch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PartitionRecords giving `broker_id` back every leaderless partition whose ISR has it.
  void AddLeaderReturnsLocked(int32_t broker_id, metadata::MetadataRecordBatch* batch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Replica placement shared by CreateTopics and CreatePartitions.
  // Kafka's checks of one manually placed partition (`partition` names it in messages):
  // "" when fine, else INVALID_REPLICA_ASSIGNMENT's message. `replica_count`, when set, is the
  // replica count the other partitions have.
  std::string ManualAssignmentErrorLocked(const std::vector<int32_t>& replicas, int32_t partition,
                                          std::optional<size_t> replica_count) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `partitions` partitions of `rf` replicas each, round-robin over `unfenced` from a random
  // start; empty with INVALID_REPLICATION_FACTOR's message in `error` when it cannot be done.
  std::vector<std::vector<int32_t>> PlaceReplicasLocked(int32_t partitions, int32_t rf,
                                                        const std::vector<int32_t>& unfenced,
                                                        std::string* error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PartitionRecords for `placement`, numbered from `first_partition`: the first unfenced
  // replica leads and is the whole ISR (followers do not replicate yet).
  void AddPartitionRecordsLocked(const std::string& topic_id, int32_t first_partition,
                                 const std::vector<std::vector<int32_t>>& placement,
                                 metadata::MetadataRecordBatch* batch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // CreateTopics' steps for one topic (controller_topics.cc). Each check gives the Kafka error
  // refusing the topic, or nullopt.
  // Its placement: the manual assignment when it has one, else num_partitions x
  // replication_factor (-1: the defaults) placed by PlaceReplicasLocked.
  std::optional<protocol::KafkaError> PlaceNewTopicLocked(
      const controller::CreatableTopic& topic, const std::vector<int32_t>& unfenced,
      std::vector<std::vector<int32_t>>* placement) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Its manual assignment checked with Kafka's rules and messages.
  std::optional<protocol::KafkaError> PlaceNewTopicManuallyLocked(
      const controller::CreatableTopic& topic, std::vector<std::vector<int32_t>>* placement) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Its TopicRecord, ConfigRecords and PartitionRecords under a new topic id, one neither in
  // the image nor in `new_ids` (which gets it); returns the id.
  std::string AddTopicRecordsLocked(const std::string& name,
                                    const std::map<std::string, std::string>& configs,
                                    const std::vector<std::vector<int32_t>>& placement,
                                    std::set<std::string>* new_ids,
                                    metadata::MetadataRecordBatch* batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One AlterConfigs resource: its ConfigRecords appended to `records`, or the Kafka error
  // that refuses the whole resource.
  std::optional<protocol::KafkaError> AlterResourceLocked(
      const controller::AlterConfigsResource& resource, bool incremental,
      std::vector<metadata::ConfigRecord>* records) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // One UpdateFeatures update: its FeatureLevelRecord appended to `batch`, or the
  // INVALID_UPDATE_VERSION refusing it.
  std::optional<protocol::KafkaError> UpdateFeatureLocked(
      const controller::FeatureUpdate& update, metadata::MetadataRecordBatch* batch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ControllerOptions options_;
  std::unique_ptr<Quorum> quorum_;
  Mutex write_mu_;    // serializes writers; never taken by the apply path
  mutable Mutex mu_;  // the image, the watchers and the flags below
  CondVar image_cv_;  // an entry was applied, or the role or flags changed
  MetadataImage image_ ABSL_GUARDED_BY(mu_);
  int64_t last_applied_term_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t leader_term_ ABSL_GUARDED_BY(mu_) =
      -1;  // the term this node leads in, -1 when it does not lead
  // The last leader this node heard of and its term (for watchers); -1 when none yet.
  int32_t known_leader_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t known_leader_term_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t cluster_id_term_ ABSL_GUARDED_BY(mu_) =
      -1;  // the term in which this node proposed the cluster id
  uint64_t bytes_since_snapshot_ ABSL_GUARDED_BY(mu_) = 0;
  UuidGenerator uuids_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Watcher>> watchers_ ABSL_GUARDED_BY(mu_);
  // The leader's last heartbeat time of each broker, since this node last became leader (a
  // broker missing here is given the time it is first looked at: a new leader's grace).
  std::map<int32_t, std::chrono::steady_clock::time_point> last_heartbeat_ ABSL_GUARDED_BY(mu_);
  CondVar session_cv_;  // shut_down_ set
  std::thread session_thread_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  Status fatal_ ABSL_GUARDED_BY(mu_);
  std::function<void(const Status&)> fatal_handler_ ABSL_GUARDED_BY(mu_);
};

}  // namespace runnel::controllerd
