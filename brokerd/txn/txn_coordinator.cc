#include "brokerd/txn/txn_coordinator.h"

#include <algorithm>
#include <chrono>

#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"
#include "brokerd/txn/producer_id_manager.h"
#include "common/log/log.h"
#include "common/record/batch.h"

namespace runnel::brokerd::txn {

namespace {

const log::ModuleLogger kLog("brokerd.txn");

// Kafka's request.timeout.ms default, which its coordinator's log appends wait at most.
constexpr std::chrono::milliseconds kWriteTimeout{30000};
// Markers and completions that failed are retried after this, growing to the maximum.
constexpr int64_t kRetryMs = 100;
constexpr int64_t kMaxRetryMs = 2000;
// Shard loads are polled this often by FindCoordinator's wait.
constexpr int64_t kLoadPollMs = 20;

int64_t RetryDelay(int attempt) {
  return std::min<int64_t>(kRetryMs * (int64_t{1} << std::min(attempt, 5)), kMaxRetryMs);
}

}  // namespace

TxnConfig TxnConfig::FromConfig(const config::Config& config) {
  TxnConfig c;
  c.max_timeout_ms = config.GetInt("transaction.max.timeout.ms");
  c.id_expiration_ms = config.GetInt("transactional.id.expiration.ms");
  c.abort_check_interval_ms =
      config.GetInt("transaction.abort.timed.out.transaction.cleanup.interval.ms");
  c.expiration_check_interval_ms =
      config.GetInt("transaction.remove.expired.transaction.cleanup.interval.ms");
  return c;
}

// ---- TxnShard ------------------------------------------------------------------------------

TxnShard::TxnShard(TxnCoordinator& coordinator, BrokerContext& broker, int32_t partition,
                   int32_t leader_epoch)
    : coordinator_(coordinator),
      broker_(broker),
      partition_(partition),
      log_(broker, std::string(kTxnTopic), partition, leader_epoch) {}

TxnShard::~TxnShard() { Unload(); }

int64_t TxnShard::NowMs() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TxnShard::Entry* TxnShard::Find(const std::string& id) {
  auto it = txns_.find(id);
  return it == txns_.end() ? nullptr : &it->second;
}

void TxnShard::Load() {
  kLog()->debug("loading {}-{} (leader epoch {})", kTxnTopic, partition_, leader_epoch());
  log_.Load([this](const record::BatchView& batch) { OnBatch(batch); },
            [this](int64_t) { FinishLoad(); });
}

void TxnShard::OnBatch(const record::BatchView& batch) {
  if (batch.is_control()) return;
  Status st = record::ForEachRecord(batch, [&](const record::Record& rec) {
    if (!rec.key.has_value()) return true;
    StatusOr<ParsedTxnRecord> parsed = ParseTxnRecord(*rec.key, rec.value);
    if (!parsed.ok()) {
      if (parsed.status().code() != absl::StatusCode::kNotFound) {
        kLog()->warn("{}-{}: skipping a record at {}: {}", kTxnTopic, partition_,
                     batch.base_offset() + rec.offset_delta, parsed.status().ToString());
      }
      return true;
    }
    if (!parsed->value.has_value()) {
      txns_.erase(parsed->transactional_id);
    } else {
      txns_[parsed->transactional_id] = Entry{std::move(*parsed->value), std::nullopt};
    }
    return true;
  });
  if (!st.ok()) {
    kLog()->warn("{}-{}: skipping the batch at {}: {}", kTxnTopic, partition_, batch.base_offset(),
                 st.ToString());
  }
}

void TxnShard::FinishLoad() {
  state_ = State::kActive;
  std::vector<std::string> unfinished;
  for (const auto& [id, e] : txns_) {
    if (e.meta.state == TxnState::kPrepareCommit || e.meta.state == TxnState::kPrepareAbort) {
      unfinished.push_back(id);
    }
  }
  kLog()->log(txns_.empty() ? spdlog::level::debug : spdlog::level::info,
              "loaded {}-{}: {} transactional id(s), {} transaction(s) to complete", kTxnTopic,
              partition_, txns_.size(), unfinished.size());
  const TxnConfig& c = coordinator_.config();
  abort_timer_.Init(broker_.loop.raw());
  abort_timer_.Start(static_cast<uint64_t>(c.abort_check_interval_ms),
                     static_cast<uint64_t>(c.abort_check_interval_ms), [this] { AbortTimedOut(); });
  expire_timer_.Init(broker_.loop.raw());
  expire_timer_.Start(static_cast<uint64_t>(c.expiration_check_interval_ms),
                      static_cast<uint64_t>(c.expiration_check_interval_ms),
                      [this] { RemoveExpired(); });
  for (const std::string& id : unfinished) SendMarkers(id, txns_[id].meta.partitions, 0);
}

void TxnShard::Unload() {
  if (state_ == State::kUnloaded) return;
  state_ = State::kUnloaded;
  alive_.reset();
  abort_timer_.Close();
  expire_timer_.Close();
  retries_.clear();  // their destructors close the timers
  log_.Close();      // answers the pending writes NOT_COORDINATOR
  txns_.clear();
  kLog()->debug("unloaded {}-{}", kTxnTopic, partition_);
}

void TxnShard::After(int64_t delay_ms, std::function<void()> fn) {
  if (state_ != State::kActive) return;
  const uint64_t id = next_retry_++;
  UvTimer& timer = retries_[id];
  timer.Init(broker_.loop.raw());
  timer.Start(static_cast<uint64_t>(delay_ms), 0, [this, id, fn = std::move(fn)] {
    std::function<void()> run = fn;
    retries_.erase(id);  // closes this timer; `run` is our own copy
    run();
  });
}

void TxnShard::WriteTransition(const std::string& id, TxnMetadata target, const Done& done) {
  Entry* e = Find(id);
  if (e == nullptr) return done(ErrorCode::kConcurrentTransactions);
  e->pending = target;
  std::vector<group::LogRecord> records;
  records.push_back(target.state == TxnState::kDead ? EncodeTxnTombstone(id)
                                                    : EncodeTxnRecord(target));
  std::weak_ptr<bool> alive = alive_;
  log_.Write(records, NowMs(), kWriteTimeout,
             [this, alive, id, target = std::move(target), done](ErrorCode error) {
               if (!alive.expired()) {
                 if (Entry* e = Find(id)) {
                   e->pending.reset();
                   if (error == ErrorCode::kNone && target.state == TxnState::kDead) {
                     txns_.erase(id);
                   } else if (error == ErrorCode::kNone) {
                     e->meta = target;
                   }
                 }
               }
               done(error);
             });
}

// ---- InitProducerId ------------------------------------------------------------------------

void TxnShard::InitProducerId(const std::string& id, int32_t timeout_ms,
                              std::optional<ProducerIdAndEpoch> expected, const InitDone& done) {
  Entry* e = Find(id);
  if (e == nullptr || (NeedsNewProducerId(e->meta, expected) && !e->pending.has_value())) {
    // A new id, or an exhausted epoch: a new producer id first.
    std::weak_ptr<bool> alive = alive_;
    broker_.producer_ids.Next(
        [this, alive, id, timeout_ms, expected, done](ErrorCode error, int64_t producer_id) {
          if (alive.expired()) return done(ErrorCode::kNotCoordinator, kNoProducerId, -1);
          if (error != ErrorCode::kNone) return done(error, kNoProducerId, kNoProducerEpoch);
          if (Find(id) == nullptr) {
            txns_[id] = Entry{NewTxnMetadata(id, producer_id, timeout_ms, NowMs()), std::nullopt};
          }
          InitWith(id, timeout_ms, expected, producer_id, done);
        });
    return;
  }
  InitWith(id, timeout_ms, expected, kNoProducerId, done);
}

void TxnShard::InitWith(const std::string& id, int32_t timeout_ms,
                        std::optional<ProducerIdAndEpoch> expected, int64_t new_producer_id,
                        const InitDone& done) {
  Entry* e = Find(id);
  if (e == nullptr) return done(ErrorCode::kConcurrentTransactions, kNoProducerId, -1);
  if (new_producer_id < 0 && NeedsNewProducerId(e->meta, expected)) {
    return InitProducerId(id, timeout_ms, expected, done);
  }
  Transition t = PrepareInitProducerId(e->meta, e->pending.has_value(), timeout_ms, expected,
                                       new_producer_id, NowMs());
  if (t.error != ErrorCode::kNone) return done(t.error, kNoProducerId, kNoProducerEpoch);
  if (t.target->state == TxnState::kPrepareEpochFence) {
    // The previous instance's transaction is aborted under the bumped epoch; the client
    // retries and then finds it complete.
    const int16_t epoch = t.target->producer_epoch;
    const int64_t producer_id = t.target->producer_id;
    e->pending = std::move(*t.target);
    kLog()->info(
        "transactional id {}: aborting the ongoing transaction of producer {} to fence "
        "epoch {}",
        id, producer_id, epoch - 1);
    return EndTxnInternal(
        id, producer_id, epoch, /*commit=*/false, /*from_client=*/false,
        e->meta.client_transaction_version, kNoProducerId,
        [done](ErrorCode error, int64_t, int16_t) {
          done(error == ErrorCode::kNone ? ErrorCode::kConcurrentTransactions : error,
               kNoProducerId, kNoProducerEpoch);
        });
  }
  const int64_t producer_id = t.target->producer_id;
  const int16_t epoch = t.target->producer_epoch;
  WriteTransition(id, std::move(*t.target), [done, producer_id, epoch](ErrorCode error) {
    if (error != ErrorCode::kNone) return done(error, kNoProducerId, kNoProducerEpoch);
    done(ErrorCode::kNone, producer_id, epoch);
  });
}

// ---- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------------

void TxnShard::AddPartitions(const std::string& id, int64_t producer_id, int16_t producer_epoch,
                             const TxnPartitions& partitions, int16_t client_transaction_version,
                             const Done& done) {
  Entry* e = Find(id);
  if (e == nullptr) return done(ErrorCode::kInvalidProducerIdMapping);
  Transition t = PrepareAddPartitions(e->meta, e->pending.has_value(), producer_id, producer_epoch,
                                      partitions, client_transaction_version, NowMs());
  if (t.error != ErrorCode::kNone || !t.target.has_value()) return done(t.error);
  WriteTransition(id, std::move(*t.target), done);
}

ErrorCode TxnShard::Verify(const std::string& id, int64_t producer_id, int16_t producer_epoch,
                           const TxnPartition& partition) const {
  auto it = txns_.find(id);
  if (it == txns_.end()) return ErrorCode::kInvalidProducerIdMapping;
  return VerifyPartition(it->second.meta, producer_id, producer_epoch, partition);
}

// ---- EndTxn and the markers -----------------------------------------------------------------

void TxnShard::EndTxn(const std::string& id, int64_t producer_id, int16_t producer_epoch,
                      bool commit, int16_t client_transaction_version, const EndDone& done) {
  EndTxnInternal(id, producer_id, producer_epoch, commit, /*from_client=*/true,
                 client_transaction_version, kNoProducerId, done);
}

void TxnShard::EndTxnInternal(const std::string& id, int64_t producer_id, int16_t producer_epoch,
                              bool commit, bool from_client, int16_t client_transaction_version,
                              int64_t new_producer_id, const EndDone& done) {
  Entry* e = Find(id);
  if (e == nullptr) return done(ErrorCode::kInvalidProducerIdMapping, kNoProducerId, -1);
  // Only the coordinator's own abort carries out a pending fence; a client meets it as any
  // pending transition.
  const bool fence =
      !from_client && e->pending.has_value() && e->pending->state == TxnState::kPrepareEpochFence;
  const bool v2 = client_transaction_version >= kTransactionVersion2;
  if (v2 && new_producer_id == kNoProducerId && NeedsNewProducerIdAtEnd(e->meta) &&
      (fence || !e->pending.has_value())) {
    // The end moves an exhausted epoch to a new producer id: get it first.
    std::weak_ptr<bool> alive = alive_;
    broker_.producer_ids.Next([this, alive, id, producer_id, producer_epoch, commit, from_client,
                               client_transaction_version, done](ErrorCode error, int64_t next) {
      if (alive.expired()) return done(ErrorCode::kNotCoordinator, kNoProducerId, -1);
      if (error != ErrorCode::kNone) return done(error, kNoProducerId, kNoProducerEpoch);
      EndTxnInternal(id, producer_id, producer_epoch, commit, from_client,
                     client_transaction_version, next, done);
    });
    return;
  }
  Transition t = v2 ? PrepareEndTxnV2(e->meta, e->pending.has_value(), fence, producer_id,
                                      producer_epoch, commit, from_client, new_producer_id, NowMs())
                    : PrepareEndTxn(e->meta, e->pending.has_value(), fence, producer_id,
                                    producer_epoch, commit, from_client, NowMs());
  if (t.error != ErrorCode::kNone || !t.target.has_value()) {
    if (fence) e->pending.reset();
    if (t.error == ErrorCode::kNone) {
      // A retry of the end already made: the id and epoch the producer goes on with.
      return done(t.error, e->meta.producer_id, e->meta.producer_epoch);
    }
    return done(t.error, kNoProducerId, kNoProducerEpoch);
  }
  // What the producer continues with once this end completes (v2: the bumped epoch, or
  // the rotated id at epoch 0).
  const TxnMetadata after = PrepareComplete(*t.target, NowMs());
  std::weak_ptr<bool> alive = alive_;
  WriteTransition(id, std::move(*t.target),
                  [this, alive, id, done, producer_id = after.producer_id,
                   epoch = after.producer_epoch](ErrorCode error) {
                    // The client hears of the transaction's end once its Prepare state is
                    // stored; the markers follow.
                    if (error != ErrorCode::kNone) {
                      done(error, kNoProducerId, kNoProducerEpoch);
                    } else {
                      done(error, producer_id, epoch);
                    }
                    if (error != ErrorCode::kNone || alive.expired() || state_ != State::kActive) {
                      return;
                    }
                    if (Entry* e = Find(id)) SendMarkers(id, e->meta.partitions, 0);
                  });
}

void TxnShard::SendMarkers(const std::string& id, const TxnPartitions& remaining, int attempt) {
  Entry* e = Find(id);
  if (e == nullptr || state_ != State::kActive) return;
  const TxnMetadata& m = e->meta;
  if (m.state != TxnState::kPrepareCommit && m.state != TxnState::kPrepareAbort) return;
  if (remaining.empty()) return WriteCompletion(id, 0);
  std::vector<TxnMarker> markers;
  markers.reserve(remaining.size());
  for (const auto& [topic, partition] : remaining) {
    // Under transaction.version 2 the marker's epoch is the bumped one, above the data's.
    markers.push_back(TxnMarker{
        topic, partition, m.producer_id, m.producer_epoch, m.state == TxnState::kPrepareCommit,
        leader_epoch(),
        static_cast<int8_t>(m.client_transaction_version >= kTransactionVersion2 ? 2 : 0)});
  }
  std::weak_ptr<bool> alive = alive_;
  coordinator_.markers().Write(
      markers, [this, alive, id, markers, attempt](std::vector<ErrorCode> errors) {
        if (alive.expired() || state_ != State::kActive) return;
        TxnPartitions retry;
        for (size_t i = 0; i < markers.size(); ++i) {
          const TxnMarker& mk = markers[i];
          const ErrorCode error = i < errors.size() ? errors[i] : ErrorCode::kUnknownServerError;
          if (error == ErrorCode::kNone) continue;
          const TopicInfo* topic = broker_.metadata.FindTopic(mk.topic);
          if (error == ErrorCode::kUnknownTopicOrPartition &&
              (topic == nullptr || topic->partitions.count(mk.partition) == 0)) {
            // Kafka's rule: a deleted partition needs no marker.
            kLog()->info("transactional id {}: {}-{} is gone; no marker for it", id, mk.topic,
                         mk.partition);
            continue;
          }
          if (error == ErrorCode::kInvalidProducerEpoch ||
              error == ErrorCode::kTransactionCoordinatorFenced) {
            // The partition has seen a newer epoch or coordinator: nothing to end there.
            kLog()->error("transactional id {}: the marker for {}-{} was refused ({}); skipping it",
                          id, mk.topic, mk.partition, protocol::ErrorName(error));
            continue;
          }
          if (attempt == 10 || attempt == 100) {
            kLog()->warn("transactional id {}: the marker for {}-{} still fails ({}), retrying", id,
                         mk.topic, mk.partition, protocol::ErrorName(error));
          }
          retry.emplace(mk.topic, mk.partition);
        }
        if (retry.empty()) return WriteCompletion(id, 0);
        After(RetryDelay(attempt), [this, id, retry = std::move(retry), attempt] {
          SendMarkers(id, retry, attempt + 1);
        });
      });
}

void TxnShard::WriteCompletion(const std::string& id, int attempt) {
  Entry* e = Find(id);
  if (e == nullptr || state_ != State::kActive) return;
  std::weak_ptr<bool> alive = alive_;
  WriteTransition(
      id, PrepareComplete(e->meta, NowMs()), [this, alive, id, attempt](ErrorCode error) {
        if (error == ErrorCode::kNone || alive.expired() || state_ != State::kActive) return;
        // NOT_COORDINATOR: the partition moved; its next coordinator completes the transaction
        // when it loads the Prepare state.
        if (error == ErrorCode::kNotCoordinator) return;
        After(RetryDelay(attempt), [this, id, attempt] { WriteCompletion(id, attempt + 1); });
      });
}

// ---- Timers --------------------------------------------------------------------------------

void TxnShard::AbortTimedOut() {
  if (state_ != State::kActive) return;
  const int64_t now = NowMs();
  std::vector<std::string> ids;
  for (const auto& [id, e] : txns_) {
    if (e.meta.state == TxnState::kOngoing && !e.pending.has_value() &&
        e.meta.start_timestamp_ms + e.meta.timeout_ms < now) {
      ids.push_back(id);
    }
  }
  for (const std::string& id : ids) {
    Entry* e = Find(id);
    if (e == nullptr || e->meta.producer_epoch == INT16_MAX) continue;
    TxnMetadata fence = e->meta;
    fence.state = TxnState::kPrepareEpochFence;
    fence.producer_epoch = static_cast<int16_t>(e->meta.producer_epoch + 1);
    const int64_t producer_id = fence.producer_id;
    const int16_t epoch = fence.producer_epoch;
    e->pending = std::move(fence);
    kLog()->info(
        "transactional id {}: aborting the transaction of producer {} open longer than "
        "its timeout ({} ms)",
        id, producer_id, e->meta.timeout_ms);
    EndTxnInternal(id, producer_id, epoch, /*commit=*/false, /*from_client=*/false,
                   e->meta.client_transaction_version, kNoProducerId,
                   [id](ErrorCode error, int64_t, int16_t) {
                     if (error != ErrorCode::kNone) {
                       kLog()->warn(
                           "transactional id {}: aborting the timed out transaction "
                           "failed: {}",
                           id, protocol::ErrorName(error));
                     }
                   });
  }
}

void TxnShard::RemoveExpired() {
  if (state_ != State::kActive) return;
  const int64_t now = NowMs();
  const int64_t expiration = coordinator_.config().id_expiration_ms;
  std::vector<std::string> ids;
  for (const auto& [id, e] : txns_) {
    const TxnState s = e.meta.state;
    if ((s == TxnState::kEmpty || s == TxnState::kCompleteCommit ||
         s == TxnState::kCompleteAbort) &&
        !e.pending.has_value() && e.meta.last_update_timestamp_ms + expiration <= now) {
      ids.push_back(id);
    }
  }
  for (const std::string& id : ids) {
    TxnMetadata dead = txns_[id].meta;
    dead.state = TxnState::kDead;
    WriteTransition(id, std::move(dead), [id](ErrorCode error) {
      if (error == ErrorCode::kNone) {
        kLog()->info("transactional id {} expired", id);
      }
    });
  }
}

std::optional<TxnView> TxnShard::Describe(const std::string& id) const {
  auto it = txns_.find(id);
  if (it == txns_.end()) return std::nullopt;
  return TxnView{it->second.meta, it->second.pending.has_value()};
}

std::vector<TxnView> TxnShard::List() const {
  std::vector<TxnView> out;
  out.reserve(txns_.size());
  for (const auto& [id, e] : txns_) out.push_back(TxnView{e.meta, e.pending.has_value()});
  return out;
}

// ---- TxnCoordinator ------------------------------------------------------------------------

TxnCoordinator::TxnCoordinator(BrokerContext& broker, TxnMarkerWriter& markers)
    : broker_(broker),
      markers_(markers),
      config_(TxnConfig::FromConfig(broker.config)),
      topic_(broker, std::string(kTxnTopic), [&broker] {
        const config::Config& c = broker.config;
        return InternalTopic::Spec{
            c.GetInt("transaction.state.log.num.partitions"),
            c.GetInt("transaction.state.log.replication.factor"),
            {{"cleanup.policy", "compact"},
             {"compression.type", "uncompressed"},
             {"unclean.leader.election.enable", "false"},
             {"min.insync.replicas", std::to_string(c.GetInt("transaction.state.log.min.isr"))},
             {"segment.bytes", std::to_string(c.GetInt("transaction.state.log.segment.bytes"))}}};
      }) {}

TxnCoordinator::~TxnCoordinator() { Stop(); }

int32_t TxnCoordinator::PartitionFor(std::string_view transactional_id) const {
  const TopicInfo* topic = broker_.metadata.FindTopic(std::string(kTxnTopic));
  const int32_t count = topic != nullptr && !topic->partitions.empty()
                            ? static_cast<int32_t>(topic->partitions.size())
                            : broker_.config.GetInt("transaction.state.log.num.partitions");
  // Kafka maps transactional ids as it maps group ids: Utils.abs(String.hashCode) % count.
  return group::OffsetsPartitionFor(transactional_id, count);
}

TxnCoordinator::Route TxnCoordinator::RouteId(std::string_view transactional_id) {
  const TopicInfo* topic = broker_.metadata.FindTopic(std::string(kTxnTopic));
  if (topic == nullptr || topic->partitions.empty()) return {ErrorCode::kNotCoordinator, nullptr};
  const int32_t partition = PartitionFor(transactional_id);
  auto it = shards_.find(partition);
  if (it == shards_.end()) {
    auto p = topic->partitions.find(partition);
    if (p != topic->partitions.end() && p->second.leader == broker_.node_id) {
      return {ErrorCode::kCoordinatorLoadInProgress, nullptr};
    }
    return {ErrorCode::kNotCoordinator, nullptr};
  }
  if (it->second->state() == TxnShard::State::kLoading) {
    return {ErrorCode::kCoordinatorLoadInProgress, nullptr};
  }
  return {ErrorCode::kNone, it->second.get()};
}

void TxnCoordinator::EnsureTopic(std::function<void(ErrorCode)> done) {
  topic_.Ensure(std::move(done));
}

bool TxnCoordinator::AnyLoading(const std::vector<std::string>& ids) {
  for (const std::string& id : ids) {
    if (RouteId(id).error == ErrorCode::kCoordinatorLoadInProgress) return true;
  }
  return false;
}

void TxnCoordinator::WaitUntilLoaded(std::vector<std::string> ids, int64_t timeout_ms,
                                     std::function<void()> then) {
  if (stopped_) return then();
  WaitForMetadata(
      broker_, [this, ids = std::move(ids)] { return stopped_ || !AnyLoading(ids); }, timeout_ms,
      std::move(then), kLoadPollMs);
}

std::vector<TxnShard*> TxnCoordinator::shards() {
  std::vector<TxnShard*> out;
  for (auto& [p, shard] : shards_) out.push_back(shard.get());
  return out;
}

void TxnCoordinator::Reconcile() {
  if (stopped_) return;
  ReconcileShards(shards_, LedPartitions(broker_, std::string(kTxnTopic)),
                  [this](int32_t index, int32_t epoch) {
                    return std::make_unique<TxnShard>(*this, broker_, index, epoch);
                  });
}

void TxnCoordinator::Stop() {
  stopped_ = true;
  auto shards = std::move(shards_);
  shards_.clear();
  for (auto& [p, shard] : shards) shard->Unload();
}

}  // namespace runnel::brokerd::txn
