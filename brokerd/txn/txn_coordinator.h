// The transaction coordinator: transactional ids, their producer ids and epochs, and the
// two-phase end of their transactions (Kafka's TransactionCoordinator and
// TransactionStateManager).
//
// A transactional id lives on partition abs(hash(transactional.id)) % partitions of the
// internal compacted topic __transaction_state (Java's String.hashCode, as for groups), so
// an id maps to the same partition as on a Kafka cluster. Each partition of that topic led
// by this node is a TxnShard: the ids whose records are in it, rebuilt by replaying the
// partition when the shard loads, changed only by writing records to it
// (txn_metadata.h: states, transitions, record format).
//
// A transaction's end: EndTxn writes PrepareCommit (or PrepareAbort) and answers the client;
// the shard then writes a COMMIT (ABORT) marker to every partition of the transaction
// (TxnMarkerWriter), retrying those that fail, and once all are stored writes
// CompleteCommit (CompleteAbort). Until then the id answers CONCURRENT_TRANSACTIONS to the
// next AddPartitionsToTxn or InitProducerId, which clients retry. A shard that loads an id in
// PrepareCommit or PrepareAbort finishes its markers.
//
// Timers per shard: every transaction.abort.timed.out.transaction.cleanup.interval.ms, the
// transactions open longer than their timeout are aborted with the producer's epoch bumped
// (fencing it); every transaction.remove.expired.transaction.cleanup.interval.ms, ids with no
// transaction and no update for transactional.id.expiration.ms are removed (tombstone).
//
// Markers go to partitions led by this broker. A partition led elsewhere (a cluster) is
// retried until it is led here: sending markers to other brokers is not built yet.
//
// Runs on the broker's loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "brokerd/controller/internal_topic.h"
#include "brokerd/net/uv_handle.h"
#include "brokerd/storage/internal_partition.h"
#include "brokerd/txn/marker_writer.h"
#include "brokerd/txn/txn_metadata.h"
#include "common/config/config.h"

namespace runnel::brokerd {
struct BrokerContext;
}

namespace runnel::brokerd::txn {

inline constexpr std::string_view kTxnTopic = "__transaction_state";

// The transaction.* keys of the node config (common/config/keys.cc has their meaning).
struct TxnConfig {
  int32_t max_timeout_ms = 900000;
  int64_t id_expiration_ms = 604800000;
  int64_t abort_check_interval_ms = 10000;
  int64_t expiration_check_interval_ms = 3600000;
  static TxnConfig FromConfig(const config::Config& config);
};

// One transactional id as DescribeTransactions and ListTransactions show it.
struct TxnView {
  TxnMetadata metadata;
  bool pending = false;
};

class TxnCoordinator;

// One led __transaction_state partition (see the top of this file).
class TxnShard {
 public:
  enum class State { kLoading, kActive, kUnloaded };
  using InitDone = std::function<void(ErrorCode, int64_t producer_id, int16_t producer_epoch)>;
  using Done = std::function<void(ErrorCode)>;
  // The id and epoch the producer continues with (EndTxn v5+); -1, -1 on an error.
  using EndDone = std::function<void(ErrorCode, int64_t producer_id, int16_t producer_epoch)>;

  TxnShard(TxnCoordinator& coordinator, BrokerContext& broker, int32_t partition,
           int32_t leader_epoch);
  ~TxnShard();

  int32_t partition() const { return partition_; }
  int32_t leader_epoch() const { return log_.leader_epoch(); }
  State state() const { return state_; }

  void Load();
  // Answers pending writes NOT_COORDINATOR, stops the timers and markers; unusable after.
  void Unload();

  void InitProducerId(const std::string& id, int32_t timeout_ms,
                      std::optional<ProducerIdAndEpoch> expected, const InitDone& done);
  // `client_transaction_version`: see PrepareAddPartitions.
  void AddPartitions(const std::string& id, int64_t producer_id, int16_t producer_epoch,
                     const TxnPartitions& partitions, int16_t client_transaction_version,
                     const Done& done);
  ErrorCode Verify(const std::string& id, int64_t producer_id, int16_t producer_epoch,
                   const TxnPartition& partition) const;
  // `client_transaction_version` 2 (EndTxn v5+): PrepareEndTxnV2's rules, else PrepareEndTxn's.
  void EndTxn(const std::string& id, int64_t producer_id, int16_t producer_epoch, bool commit,
              int16_t client_transaction_version, const EndDone& done);

  std::optional<TxnView> Describe(const std::string& id) const;
  std::vector<TxnView> List() const;

  // Runs the timers' passes now (tests).
  void AbortTimedOut();
  void RemoveExpired();

 private:
  struct Entry {
    TxnMetadata meta;                    // as stored
    std::optional<TxnMetadata> pending;  // a transition being written (or a fence in memory)
    bool markers_in_flight = false;
  };

  int64_t NowMs() const;
  Entry* Find(const std::string& id);
  void OnBatch(const record::BatchView& batch);
  void FinishLoad();
  // Writes `target` as `id`'s state; on success it becomes the stored state.
  void WriteTransition(const std::string& id, TxnMetadata target, const Done& done);
  void InitWith(const std::string& id, int32_t timeout_ms,
                std::optional<ProducerIdAndEpoch> expected, int64_t new_producer_id,
                const InitDone& done);
  // The coordinator's own aborts (`from_client` false) follow the version the transaction
  // was begun with. `new_producer_id`: one got for an exhausted epoch (v2), else -1.
  void EndTxnInternal(const std::string& id, int64_t producer_id, int16_t producer_epoch,
                      bool commit, bool from_client, int16_t client_transaction_version,
                      int64_t new_producer_id, const EndDone& done);
  // Writes the markers of `id`'s PrepareCommit/PrepareAbort, then its completion.
  void SendMarkers(const std::string& id, const TxnPartitions& remaining, int attempt);
  void WriteCompletion(const std::string& id, int attempt);
  void After(int64_t delay_ms, std::function<void()> fn);

  TxnCoordinator& coordinator_;
  BrokerContext& broker_;
  int32_t partition_;
  InternalPartition log_;
  State state_ = State::kLoading;
  std::map<std::string, Entry> txns_;
  UvTimer abort_timer_;
  UvTimer expire_timer_;
  // One-shot retries (markers, completions), by id; closed at unload.
  uint64_t next_retry_ = 1;
  std::map<uint64_t, UvTimer> retries_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

class TxnCoordinator {
 public:
  TxnCoordinator(BrokerContext& broker, TxnMarkerWriter& markers);
  ~TxnCoordinator();

  // Where a request for `transactional_id` goes: its shard, or NOT_COORDINATOR (not led
  // here, or the topic does not exist yet) or COORDINATOR_LOAD_IN_PROGRESS.
  struct Route {
    ErrorCode error = ErrorCode::kNone;
    TxnShard* shard = nullptr;
  };
  Route RouteId(std::string_view transactional_id);
  int32_t PartitionFor(std::string_view transactional_id) const;

  // FindCoordinator's side effect: creates __transaction_state when missing (Kafka's
  // settings: transaction.state.log.*, compact, uncompressed). done(NONE) once the topic is
  // in this broker's metadata, else COORDINATOR_NOT_AVAILABLE.
  void EnsureTopic(std::function<void(ErrorCode)> done);
  // Runs `then` once none of the ids' shards is loading (or after `timeout_ms`).
  void WaitUntilLoaded(std::vector<std::string> ids, int64_t timeout_ms,
                       std::function<void()> then);

  // Loads shards for partitions of __transaction_state led here, unloads the others. Called
  // after every metadata update and partition-state change.
  void Reconcile();
  void Stop();

  std::vector<TxnShard*> shards();
  const TxnConfig& config() const { return config_; }
  TxnMarkerWriter& markers() { return markers_; }

 private:
  bool AnyLoading(const std::vector<std::string>& ids);
  BrokerContext& broker_;
  TxnMarkerWriter& markers_;
  TxnConfig config_;
  std::map<int32_t, std::unique_ptr<TxnShard>> shards_;
  bool stopped_ = false;
  InternalTopic topic_;
};

}  // namespace runnel::brokerd::txn
