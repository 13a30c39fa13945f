// The controller: owns the cluster metadata. Every change goes the same way:
//   validate against the image -> build records -> append to the log (durable, committed)
//   -> apply to the image -> publish to watchers -> maybe snapshot.
// One mutex serializes changes, so the image, the log and the watchers' streams always
// agree on the order of batches. Client mistakes are Kafka error codes in the responses;
// a non-OK Status means the controller itself could not do the work.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/protocol/error_code.h"
#include "common/util/status.h"
#include "controllerd/metadata_image.h"
#include "controllerd/metadata_log.h"
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
  // metadata.log.max.record.bytes.between.snapshots
  int64_t snapshot_interval_bytes = 20 << 20;
  // Updates a watcher may have undelivered before its stream is ended (it then reconnects).
  size_t watcher_queue_capacity = 4096;
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
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<UpdatePtr> queue_;
  std::optional<Status> closed_;
};

class Controller {
 public:
  // Loads the newest snapshot and replays the log after it; on the very first start
  // commits the cluster id. The log is owned from here on.
  static StatusOr<std::unique_ptr<Controller>> Open(const ControllerOptions& options,
                                                    std::unique_ptr<MetadataLog> log);
  ~Controller();

  StatusOr<controller::CreateTopicsResponse> CreateTopics(
      const controller::CreateTopicsRequest& request);
  StatusOr<controller::DeleteTopicsResponse> DeleteTopics(
      const controller::DeleteTopicsRequest& request);
  StatusOr<controller::RegisterBrokerResponse> RegisterBroker(
      const controller::RegisterBrokerRequest& request);
  StatusOr<controller::DescribeClusterResponse> DescribeCluster();
  StatusOr<controller::CreatePartitionsResponse> CreatePartitions(
      const controller::CreatePartitionsRequest& request);
  StatusOr<controller::AlterConfigsResponse> AlterConfigs(
      const controller::AlterConfigsRequest& request);

  // Starts a watch (see WatchRequest in controller.proto): the returned watcher already
  // holds the snapshot or the catch-up deltas and then gets every new batch.
  StatusOr<std::shared_ptr<Watcher>> Watch(int64_t from_offset);
  void Unwatch(const std::shared_ptr<Watcher>& watcher);

  // Ends every watch (UNAVAILABLE), refuses further calls and closes the log. Idempotent.
  void Shutdown();

  // Called (under the controller's lock; must not block or call back) when the log can
  // no longer be written: the process should exit and be restarted to recover.
  void SetFatalErrorHandler(std::function<void(const Status&)> handler);

  // A copy of the current image (for tests and diagnostics).
  MetadataImage Image() const;
  int64_t term() const { return term_; }
  int32_t node_id() const { return options_.node_id; }

 private:
  Controller(const ControllerOptions& options, std::unique_ptr<MetadataLog> log);
  Status Replay();
  Status CheckUsableLocked() const;
  // Appends, applies and publishes one batch; returns its offset.
  StatusOr<int64_t> CommitLocked(metadata::MetadataRecordBatch batch);
  void Fail(const Status& why);
  UpdatePtr SnapshotUpdateLocked() const;
  std::vector<int32_t> UnfencedBrokersLocked() const;

  // Replica placement shared by CreateTopics and CreatePartitions.
  // Kafka's checks of one manually placed partition (`partition` names it in messages):
  // "" when fine, else INVALID_REPLICA_ASSIGNMENT's message. `replica_count`, when set, is the
  // replica count the other partitions have.
  std::string ManualAssignmentErrorLocked(const std::vector<int32_t>& replicas, int32_t partition,
                                          std::optional<size_t> replica_count) const;
  // `partitions` partitions of `rf` replicas each, round-robin over `unfenced` from a random
  // start; empty with INVALID_REPLICATION_FACTOR's message in `error` when it cannot be done.
  std::vector<std::vector<int32_t>> PlaceReplicasLocked(int32_t partitions, int32_t rf,
                                                        const std::vector<int32_t>& unfenced,
                                                        std::string* error);
  // PartitionRecords for `placement`, numbered from `first_partition`: every unfenced replica
  // is in the ISR and the first of them leads.
  void AddPartitionRecordsLocked(const std::string& topic_id, int32_t first_partition,
                                 const std::vector<std::vector<int32_t>>& placement,
                                 metadata::MetadataRecordBatch* batch) const;

  // One AlterConfigs resource: its ConfigRecords appended to `records`, or the Kafka error
  // (code, message) that refuses the whole resource.
  struct ConfigError {
    protocol::ErrorCode code;
    std::string message;
  };
  std::optional<ConfigError> AlterResourceLocked(
      const controller::AlterConfigsResource& resource, bool incremental,
      std::vector<metadata::ConfigRecord>* records) const;

  const ControllerOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<MetadataLog> log_;
  MetadataImage image_;
  int64_t term_ = 1;
  UuidGenerator uuids_;
  std::mt19937_64 rng_;
  std::vector<std::shared_ptr<Watcher>> watchers_;
  bool shut_down_ = false;
  Status fatal_;
  std::function<void(const Status&)> fatal_handler_;
};

}  // namespace runnel::controllerd
