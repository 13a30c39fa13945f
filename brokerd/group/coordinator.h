// The group coordinator: consumer groups and their committed offsets.
//
// A group lives on partition abs(hash(group.id)) % offsets.topic.num.partitions of the
// internal compacted topic __consumer_offsets (Java's String.hashCode, so a group maps to
// the same partition as on a Kafka cluster). Each partition of that topic led by this node
// is a Shard: the groups and offsets whose records are in it, rebuilt by replaying the
// partition's log when the shard loads, and changed only by writing records to it.
//
//   Coordinator ── Shard (one per led __consumer_offsets partition)
//                   ├── groups: ClassicGroup (JoinGroup/SyncGroup) or ConsumerGroup (KIP-848)
//                   └── offsets: group -> topic/partition -> committed offset
//
// Loading: a shard reads its partition from the log start to the end it saw when it began,
// replaying each record; until then requests for its groups get
// COORDINATOR_LOAD_IN_PROGRESS. A shard whose partition moves away is unloaded: its
// pending requests are answered NOT_COORDINATOR and its timers stop.
//
// Offsets expire as in Kafka (KIP-211): every offsets.retention.check.interval.ms each shard
// writes tombstones for the offsets of groups without members that are older than
// offsets.retention.minutes, counted from when the group became empty (classic groups) or
// from the commit (groups that only hold offsets, KIP-848 groups); an expire timestamp
// given by an old OffsetCommit (v2-v4 retention_time_ms) wins. A group left with no members
// and no offsets is removed, with its tombstone.
//
// Transactional offsets (TxnOffsetCommit, KIP-98) are written as a transactional batch of the
// producer and stay pending, per group and producer id, until the transaction's marker is in
// the partition: a COMMIT makes them the committed offsets (unless a later record in the log
// committed the partition since), an ABORT drops them. Replay does the same with the batches
// and markers it meets; OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for a
// partition with a pending transactional offset.
//
// Runs on the broker's loop thread only.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "brokerd/controller/internal_topic.h"
#include "brokerd/group/classic_group.h"
#include "brokerd/group/consumer_group.h"
#include "brokerd/group/group_env.h"
#include "brokerd/group/records.h"
#include "brokerd/net/uv_handle.h"
#include "common/util/status.h"
#include "proto/runnel/storage.grpc.pb.h"

namespace runnel::brokerd {
struct BrokerContext;
}

namespace runnel::brokerd::group {

inline constexpr std::string_view kOffsetsTopic = "__consumer_offsets";

// Kafka's partition of `group_id` in __consumer_offsets: Java's String.hashCode over the
// UTF-16 code units, then Utils.abs (MIN_VALUE maps to 0), modulo `partitions`.
int32_t OffsetsPartitionFor(std::string_view group_id, int32_t partitions);

// One committed offset as the coordinator holds it.
struct CommittedOffset {
  int64_t offset = -1;
  int32_t leader_epoch = -1;
  std::string metadata;
  int64_t commit_timestamp_ms = 0;
  int64_t expire_timestamp_ms = -1;
  // The log offset of the record holding it, -1 when unknown: a committed transaction's offset
  // replaces the committed one only when its record is later in the log (Kafka's rule, which
  // keeps the latest commit of a mix of plain and transactional ones whatever the order of
  // their completions).
  int64_t record_offset = -1;
};

using TopicPartition = std::pair<std::string, int32_t>;

// A group id's entry in a shard. At most one of `classic`/`consumer` is set; neither is set
// for a group that only has offsets (committed by a consumer using assign(), or by admin
// tools), which Kafka lists as an Empty classic group with no protocol type.
struct GroupSlot {
  std::unique_ptr<ClassicGroup> classic;
  std::unique_ptr<ConsumerGroup> consumer;
  std::map<TopicPartition, CommittedOffset> offsets;
  // Commits written but not yet acknowledged by storage: the whole group's count and per
  // partition (OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for these).
  int pending_commits = 0;
  std::map<TopicPartition, int> pending_partitions;
  // Transactional offsets stored but not yet ended by a marker, by producer id (Kafka's
  // pendingTransactionalOffsets of this group). Not visible to OffsetFetch.
  std::map<int64_t, std::map<TopicPartition, CommittedOffset>> pending_txn_offsets;

  // Some open transaction has an offset for `tp`.
  bool HasPendingTxnOffset(const TopicPartition& tp) const;
  // No group object, no offsets, nothing in flight or pending: the slot can go.
  bool Unused() const;
};

// TopicLookup (consumer_group.h) over the broker's metadata cache.
class MetadataTopicLookup final : public TopicLookup {
 public:
  explicit MetadataTopicLookup(BrokerContext& broker) : broker_(broker) {}
  std::optional<TopicInfo> FindByName(const std::string& name) const override;
  std::optional<TopicInfo> FindById(const protocol::Uuid& id) const override;
  std::vector<std::string> AllNames() const override;

 private:
  BrokerContext& broker_;
};

// One led __consumer_offsets partition (see the top of this file). Defined in shard.cc,
// shard_loading.cc (Load) and shard_offsets.cc (the offsets part).
class Shard final : public GroupEnv {
 public:
  enum class State { kLoading, kActive, kUnloaded };

  Shard(BrokerContext& broker, int32_t partition, int32_t leader_epoch, const GroupConfig& config);
  ~Shard() override;

  int32_t partition() const { return partition_; }
  int32_t leader_epoch() const { return leader_epoch_; }
  State state() const { return state_; }

  // Reads the partition and replays it; `done` (optional) runs when the shard is active, or
  // not at all when it is unloaded first. Read failures are retried every second.
  void Load(std::function<void()> done = {});
  // Answers pending writes with NOT_COORDINATOR, shuts the groups down (their parked requests
  // get NOT_COORDINATOR), closes every timer. The shard is unusable afterwards.
  void Unload();

  // GroupEnv.
  int64_t NowMs() override;
  TimerId StartTimer(int64_t delay_ms, std::function<void()> fn) override;
  void CancelTimer(TimerId id) override;
  void Write(std::vector<LogRecord> records, std::function<void(ErrorCode error)> done) override;
  const GroupConfig& config() const override { return config_; }

  // The group's slot, or null when the shard has nothing for it.
  GroupSlot* Find(const std::string& group_id);
  // The slot, created empty when missing.
  GroupSlot& FindOrCreate(const std::string& group_id);
  // Drops the slot (after its tombstones were written), shutting down any group in it.
  void Remove(const std::string& group_id);
  const std::unordered_map<std::string, GroupSlot>& groups() const { return groups_; }

  TopicLookup& topics() { return topics_; }

  // ---- Offsets --------------------------------------------------------------------------
  struct Commit {
    std::string topic;
    int32_t partition = 0;
    OffsetValue value;
  };
  // Writes the commits as one batch; once durable (done(0)) they are the group's offsets.
  // `done` gets the Write error otherwise.
  void CommitOffsets(const std::string& group_id, std::vector<Commit> commits,
                     std::function<void(ErrorCode error)> done);
  // Writes the commits of the transaction of `producer_id` (at `producer_epoch`) as one
  // transactional batch with no sequence, a coordinator-origin append as Kafka's group
  // coordinator writes them; once stored they are pending offsets of the group until the
  // transaction ends (EndTransaction). `done` gets 0, the producer's error from storage
  // (INVALID_PRODUCER_EPOCH, ...) or the Write error.
  void CommitTxnOffsets(const std::string& group_id, int64_t producer_id, int16_t producer_epoch,
                        std::vector<Commit> commits, std::function<void(ErrorCode error)> done);
  // The transaction of `producer_id` ended with a marker stored in this partition: COMMIT
  // makes its pending offsets (of every group here) committed, except where the committed
  // offset's record is later in the log; ABORT drops them.
  void EndTransaction(int64_t producer_id, bool commit);
  // A marker was stored while the shard loads: the load reads on to the new log end, so the
  // marker is replayed rather than applied before the offsets it ends are.
  void NoteMarkerDuringLoad() { marker_during_load_ = true; }

  // Writes tombstones for those of `partitions` the group has offsets for (committed or
  // pending in a transaction), then forgets them.
  void DeleteOffsets(const std::string& group_id, const std::vector<TopicPartition>& partitions,
                     std::function<void(ErrorCode error)> done);
  // Removes the slot at once and writes tombstones for every offset of the group (those
  // still being committed and those pending in transactions included) and for the group
  // itself; `done` gets the write's
  // result. The caller checked the group has no members.
  void DeleteGroup(const std::string& group_id, std::function<void(ErrorCode error)> done);
  // One expiry pass now (the shard runs one every offsets.retention.check.interval.ms);
  // `done` runs once its writes (if any) finished.
  void ExpireOffsets(std::function<void()> done = {});

  // The topics a group's members are subscribed to, as Kafka's isSubscribedToTopic sees
  // them: nullopt when the group holds on to every topic (a "consumer" classic group whose
  // member metadata does not parse).
  std::optional<std::set<std::string>> SubscribedTopics(const GroupSlot& slot) const;

  // Tests: replaces the wall clock of NowMs().
  void SetClockForTest(std::function<int64_t()> now) { clock_ = std::move(now); }

 private:
  friend class Coordinator;

  // The producer of a transactional write.
  struct TxnProducer {
    int64_t id = -1;
    int16_t epoch = -1;
  };
  // A write's result: the coordinator's error (as Write gives it), the append's own error
  // (0 when the append did not answer) and the offset of the batch's first record (-1 on
  // error).
  using AppendDone =
      std::function<void(ErrorCode error, ErrorCode append_error, int64_t base_offset)>;
  // The records of `commits`, counted as in flight for the group until the write ends.
  std::vector<LogRecord> StartCommits(const std::string& group_id,
                                      const std::vector<Commit>& commits);
  // Write, transactional when `producer` is set.
  void Append(const std::vector<LogRecord>& records, std::optional<TxnProducer> producer,
              AppendDone done);

  void ReadNext(int64_t offset);
  void OnRead(const grpc::Status& status, storage::ReadResponse& resp, int64_t offset);
  void RetryRead(int64_t offset);
  // `record_offset`: the record's offset in the log; `producer_id`: the batch's producer when
  // the batch is transactional, else -1.
  void Replay(const ParsedRecord& record, int64_t record_offset, int64_t producer_id);
  void ReplayOffset(const ParsedOffset& o, int64_t record_offset, int64_t producer_id);
  // Forgets the offsets `tp` of the group's open transactions (a tombstone replaces them).
  void DropPendingTxnOffsets(GroupSlot& slot, const TopicPartition& tp);
  void FinishLoad();
  void ScheduleExpiry();
  void PostWriteResult(uint64_t id, ErrorCode error);
  void CompleteWrite(uint64_t id, ErrorCode error, ErrorCode append_error, int64_t base_offset);
  void FailPendingWrites();
  std::vector<LogRecord> GroupTombstones(const std::string& group_id, const GroupSlot& slot);

  BrokerContext& broker_;
  int32_t partition_;
  int32_t leader_epoch_;
  GroupConfig config_;
  State state_ = State::kLoading;
  std::unordered_map<std::string, GroupSlot> groups_;
  MetadataTopicLookup topics_;
  std::function<int64_t()> clock_;

  // Loading.
  std::function<void()> load_done_;
  int64_t load_end_ = -1;  // log end offset seen by the first read
  int load_restarts_ = 0;
  std::map<std::string, ClassicGroupValue> loaded_classic_;
  bool marker_during_load_ = false;
  int load_extensions_ = 0;

  // The groups with pending offsets of each open transaction, by producer id (an index of
  // GroupSlot::pending_txn_offsets; a group listed may have none left).
  std::map<int64_t, std::set<std::string>> txn_groups_;

  // Writes not yet answered, by id.
  uint64_t next_write_ = 1;
  std::map<uint64_t, AppendDone> pending_writes_;

  TimerId next_timer_ = 1;
  std::map<TimerId, UvTimer> timers_;  // started and not yet run nor cancelled
  TimerId expiry_timer_ = 0;

  // Callbacks from storage hold a weak reference: the shard may be gone when they run.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

class Coordinator {
 public:
  explicit Coordinator(BrokerContext& broker);
  ~Coordinator();

  // Where a request for `group_id` goes. `shard` is set only when `error` is 0; otherwise
  // `error` is NOT_COORDINATOR (the partition is not led here, or __consumer_offsets does
  // not exist yet), COORDINATOR_LOAD_IN_PROGRESS, or INVALID_GROUP_ID for an empty id or one
  // longer than a record can hold (32767 bytes).
  struct Route {
    ErrorCode error = ErrorCode::kNone;
    Shard* shard = nullptr;
  };
  Route RouteGroup(std::string_view group_id);

  // The __consumer_offsets partition of `group_id` (the topic's partition count when it
  // exists, else offsets.topic.num.partitions).
  int32_t PartitionFor(std::string_view group_id) const;

  // FindCoordinator's side effect, as in Kafka: creates __consumer_offsets through the
  // controller when it does not exist. `done(error)` runs on the loop once the topic exists
  // in this broker's metadata (0) or creation failed (COORDINATOR_NOT_AVAILABLE, also when
  // fewer brokers than offsets.topic.replication.factor are alive). Runs `done` at once
  // when the topic exists.
  void EnsureOffsetsTopic(std::function<void(ErrorCode error)> done);

  // Runs `then` once none of `group_ids` is on a shard of this broker that is still loading
  // (or not created yet though this broker leads its partition), or after `timeout_ms`.
  // FindCoordinator waits so, so that a client's first request to the coordinator it
  // names is not answered COORDINATOR_LOAD_IN_PROGRESS right after the topic was created.
  void WaitUntilLoaded(std::vector<std::string> group_ids, int64_t timeout_ms,
                       std::function<void()> then);

  // A COMMIT (`commit`) or ABORT marker of `producer_id` was stored in partition
  // `offsets_partition` of __consumer_offsets (TxnMarkerWriter's observer): the shard makes
  // the transaction's offsets committed or drops them. A loading shard replays the marker
  // instead; a partition not led here has nothing to do.
  void CompleteTransaction(int32_t offsets_partition, int64_t producer_id, bool commit);

  // Shards currently led here (loading or active), for ListGroups.
  std::vector<Shard*> shards();

  // Called after every metadata update and partition-state change: loads shards for
  // partitions of __consumer_offsets now led here, unloads the others.
  void Reconcile();
  // Unloads every shard (broker stopping); Reconcile does nothing afterwards.
  void Stop();

  const GroupConfig& config() const { return config_; }

 private:
  struct LoadWait;
  bool AnyLoading(const std::vector<std::string>& group_ids);
  // Ends the wait `id` (if still there), then runs its `then`.
  void EndLoadWait(uint64_t id);

  BrokerContext& broker_;
  GroupConfig config_;
  std::map<int32_t, std::unique_ptr<Shard>> shards_;
  bool stopped_ = false;
  InternalTopic offsets_topic_;
  std::map<uint64_t, std::unique_ptr<LoadWait>> load_waits_;
  uint64_t next_load_wait_ = 1;
};

}  // namespace runnel::brokerd::group
