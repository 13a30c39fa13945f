// The declaration of every configuration key Runnel reads. Kafka's names wherever the
// concept is Kafka's; Runnel's own keys start with "runnel.".
#include <fmt/format.h>

#include <algorithm>

#include "common/config/config.h"
#include "common/config/listeners.h"
#include "common/config/quorum_voters.h"

namespace runnel::config {
namespace {

constexpr int64_t kLongMax = INT64_MAX;

std::string ValidateRoles(std::string_view v) {
  std::vector<std::string> roles = SplitList(v);
  if (roles.empty()) return "needs at least one of broker, controller";
  for (const std::string& r : roles) {
    if (r != "broker" && r != "controller") {
      return fmt::format("unknown role '{}' (known: broker, controller)", r);
    }
  }
  return "";
}

std::string ValidateListeners(std::string_view v) {
  auto parsed = ParseListeners(v);
  if (!parsed.ok())
    return std::string(parsed.status().message().data(), parsed.status().message().size());
  return "";
}

std::string ValidateHttpListener(std::string_view v) {
  if (v.empty()) return "";
  auto parsed = ParseHttpListener(v);
  if (!parsed.ok()) return std::string(parsed.status().message());
  return "";
}

std::string ValidateRequiredListeners(std::string_view v) {
  if (SplitList(v).empty()) return "needs at least one listener";
  return ValidateListeners(v);
}

std::string ValidateVoters(std::string_view v) {
  auto parsed = ParseQuorumVoters(v);
  if (!parsed.ok()) return std::string(parsed.status().message());
  return "";
}

std::string ValidateNonEmptyList(std::string_view v) {
  return SplitList(v).empty() ? "must name at least one directory" : "";
}

std::string ValidateLogLevel(std::string_view v) {
  return OneOf(v, {"trace", "debug", "info", "warn", "error", "off"});
}

std::string ValidateGroupProtocols(std::string_view v) {
  std::vector<std::string> protocols = SplitList(v);
  if (protocols.empty()) return "needs at least one of classic, consumer";
  for (const std::string& p : protocols) {
    if (p != "classic" && p != "consumer") {
      return fmt::format("unknown group protocol '{}' (known: classic, consumer)", p);
    }
  }
  // As in Kafka: classic groups cannot be turned off, only the consumer protocol added.
  if (std::find(protocols.begin(), protocols.end(), "classic") == protocols.end()) {
    return "must include classic (disabling the classic protocol is not supported)";
  }
  return "";
}

std::string ValidateAssignors(std::string_view v) {
  std::vector<std::string> names = SplitList(v);
  if (names.empty()) return "needs at least one assignor";
  for (const std::string& n : names) {
    if (n != "uniform" && n != "range" &&
        n != "org.apache.kafka.coordinator.group.assignor.UniformAssignor" &&
        n != "org.apache.kafka.coordinator.group.assignor.RangeAssignor") {
      return fmt::format("unknown assignor '{}' (known: uniform, range)", n);
    }
  }
  return "";
}

std::vector<KeyDef> Declare() {
  std::vector<KeyDef> keys = {
      {"node.id", KeyType::kInt, "1", 0, INT32_MAX,
       "The id of this node; clients see it as the broker id."},
      {"process.roles", KeyType::kList, "broker,controller", 0, 0,
       "Roles this node runs: broker (runnel-storaged + runnel-brokerd), controller "
       "(runnel-controllerd).",
       true, ValidateRoles},
      {"listeners", KeyType::kList, "PLAINTEXT://127.0.0.1:9092", 0, 0,
       "Kafka listeners, NAME://host:port, comma-separated.", true, ValidateRequiredListeners},
      {"advertised.listeners", KeyType::kList, "", 0, 0,
       "Addresses given to clients in Metadata; empty means `listeners`.", true, ValidateListeners},
      {"broker.rack", KeyType::kString, "", 0, 0, "Rack of this broker, shown in Metadata."},
      {"log.dirs", KeyType::kList, "./data/logs", 0, 0,
       "Directories holding partition logs, comma-separated.", true, ValidateNonEmptyList},
      // The storage engine's node-wide defaults. Each log.* key is the default of the topic
      // config named in its description, as in Kafka.
      {"log.segment.bytes", KeyType::kInt, "1073741824", 14, INT32_MAX,
       "Size of a log segment file (topic: segment.bytes)."},
      {"log.roll.ms", KeyType::kLong, "604800000", 1, kLongMax,
       "Time after which a segment is rolled even if not full (topic: segment.ms); takes "
       "precedence over log.roll.hours when set."},
      {"log.roll.hours", KeyType::kInt, "168", 1, INT32_MAX,
       "log.roll.ms in hours, used when log.roll.ms is not set."},
      {"log.index.size.max.bytes", KeyType::kInt, "10485760", 4, INT32_MAX,
       "Size of the offset index of a segment (topic: segment.index.bytes)."},
      {"log.index.interval.bytes", KeyType::kInt, "4096", 0, INT32_MAX,
       "Bytes between entries of the offset index (topic: index.interval.bytes)."},
      {"log.retention.ms", KeyType::kLong, "604800000", -1, kLongMax,
       "Longest time a segment is kept, -1 = no limit (topic: retention.ms); takes precedence "
       "over log.retention.minutes and log.retention.hours when set."},
      {"log.retention.minutes", KeyType::kInt, "10080", -1, INT32_MAX,
       "log.retention.ms in minutes, used when log.retention.ms is not set."},
      {"log.retention.hours", KeyType::kInt, "168", -1, INT32_MAX,
       "log.retention.ms in hours, used when neither log.retention.ms nor "
       "log.retention.minutes is set."},
      {"log.retention.bytes", KeyType::kLong, "-1", INT64_MIN, kLongMax,
       "Largest size of a partition before old segments are deleted, -1 = no limit (topic: "
       "retention.bytes)."},
      {"log.cleanup.policy", KeyType::kList, "delete", 0, 0,
       "delete, compact or compact,delete (topic: cleanup.policy).", true, ValidateCleanupPolicy},
      {"log.flush.interval.messages", KeyType::kLong, "9223372036854775807", 1, kLongMax,
       "Messages appended to a partition after which it is fsync'ed (topic: flush.messages)."},
      {"log.flush.interval.ms", KeyType::kLong, "9223372036854775807", 0, kLongMax,
       "Time after which a partition's unflushed appends are fsync'ed (topic: flush.ms); 0 = "
       "before every append is answered."},
      {"log.flush.scheduler.interval.ms", KeyType::kLong, "1000", 1, kLongMax,
       "How often the flusher checks flush.ms. Kafka's default (Long.MAX) would make flush.ms "
       "inert, so Runnel checks every second."},
      {"log.flush.offset.checkpoint.interval.ms", KeyType::kInt, "60000", 0, INT32_MAX,
       "How often the recovery points (offsets known flushed) are written to disk."},
      {"min.insync.replicas", KeyType::kInt, "1", 1, INT32_MAX,
       "Fewest in-sync replicas for an acks=all produce (topic: min.insync.replicas); a new "
       "cluster stores it as its cluster-wide dynamic default, as Kafka's format does."},
      {"message.max.bytes", KeyType::kInt, "1048588", 0, INT32_MAX,
       "Largest record batch size allowed (topic: max.message.bytes)."},
      {"log.message.timestamp.type", KeyType::kString, "CreateTime", 0, 0,
       "CreateTime or LogAppendTime (topic: message.timestamp.type).", true, ValidateTimestampType},
      {"log.message.timestamp.before.max.ms", KeyType::kLong, "9223372036854775807", 0, kLongMax,
       "How far in the past a CreateTime timestamp may be (topic: "
       "message.timestamp.before.max.ms)."},
      {"log.message.timestamp.after.max.ms", KeyType::kLong, "3600000", 0, kLongMax,
       "How far in the future a CreateTime timestamp may be (topic: "
       "message.timestamp.after.max.ms)."},
      {"log.cleaner.enable", KeyType::kBool, "true", 0, 0,
       "Run the log cleaner, which compacts topics with cleanup.policy=compact."},
      {"log.cleaner.delete.retention.ms", KeyType::kLong, "86400000", 0, kLongMax,
       "How long tombstones are kept in a compacted topic (topic: delete.retention.ms)."},
      {"log.cleaner.min.cleanable.ratio", KeyType::kString, "0.5", 0, 0,
       "Dirty fraction above which a log is compacted, a double in [0, 1] (topic: "
       "min.cleanable.dirty.ratio).",
       true, ValidateRatio},
      {"log.cleaner.min.compaction.lag.ms", KeyType::kLong, "0", 0, kLongMax,
       "Shortest time a record stays uncompacted (topic: min.compaction.lag.ms)."},
      {"log.cleaner.max.compaction.lag.ms", KeyType::kLong, "9223372036854775807", 1, kLongMax,
       "Longest time a record stays ineligible for compaction (topic: max.compaction.lag.ms)."},
      {"log.cleaner.backoff.ms", KeyType::kLong, "15000", 0, kLongMax,
       "Sleep of the cleaner when no log needs compacting."},
      {"log.segment.delete.delay.ms", KeyType::kLong, "60000", 0, kLongMax,
       "Time a deleted segment's files are kept before unlinking (topic: file.delete.delay.ms)."},
      {"log.preallocate", KeyType::kBool, "false", 0, 0,
       "Preallocate the file of a new segment (topic: preallocate)."},
      {"log.retention.check.interval.ms", KeyType::kLong, "300000", 1, kLongMax,
       "How often logs are checked for segments to delete by retention."},
      {"num.recovery.threads.per.data.dir", KeyType::kInt, "1", 1, INT32_MAX,
       "Threads per log directory that load (and recover) partitions at startup."},
      {"producer.id.expiration.ms", KeyType::kInt, "86400000", 1, INT32_MAX,
       "A producer id's state is removed from a partition this long after its last batch's "
       "timestamp, unless it has an ongoing transaction."},
      {"producer.id.expiration.check.interval.ms", KeyType::kInt, "600000", 1, INT32_MAX,
       "How often partitions are checked for expired producer ids."},
      {"runnel.storage.max.open.files", KeyType::kInt, "1024", 1, INT32_MAX,
       "Segment files storaged keeps open at once; the least recently used are closed."},
      {"metadata.log.dir", KeyType::kPath, "./data/metadata", 0, 0,
       "Directory of the cluster metadata log and its snapshots."},
      {"metadata.log.max.record.bytes.between.snapshots", KeyType::kLong, "20971520", 1, INT64_MAX,
       "Bytes of metadata records appended after which a new snapshot is written."},
      {"controller.quorum.voters", KeyType::kString, "", 0, 0,
       "The voters of the controller quorum (the Raft group of the metadata log), "
       "id@host:port comma-separated; a controller serves the quorum and ControllerService "
       "on the host:port of its own entry. Empty: this node is the only voter, with no TCP "
       "listener.",
       true, ValidateVoters},
      {"controller.quorum.election.timeout.ms", KeyType::kInt, "1000", 10, INT32_MAX,
       "A follower that hears nothing from a leader for this long (randomized up to twice "
       "it) starts an election; a leader that hears from no majority for this long steps "
       "down."},
      {"controller.quorum.fetch.timeout.ms", KeyType::kInt, "2000", 10, INT32_MAX,
       "A leader drops an observer (a non-voting follower of the log) it has not heard from "
       "for this long."},
      {"controller.quorum.request.timeout.ms", KeyType::kInt, "2000", 10, INT32_MAX,
       "Deadline of one message batch sent to another controller of the quorum."},
      {"broker.session.timeout.ms", KeyType::kInt, "9000", 10, INT32_MAX,
       "The active controller fences a broker it has not heard a heartbeat from for this "
       "long: its partitions get another leader from their ISR, or none. Must be more than "
       "broker.heartbeat.interval.ms."},
      {"broker.heartbeat.interval.ms", KeyType::kInt, "2000", 10, INT32_MAX,
       "How often a broker sends a heartbeat to the active controller."},
      {"num.partitions", KeyType::kInt, "1", 1, INT32_MAX,
       "Default number of partitions of a topic created without a count."},
      {"default.replication.factor", KeyType::kInt, "1", 1, 32767,
       "Default replication factor of a topic created without one."},
      {"auto.create.topics.enable", KeyType::kBool, "true", 0, 0,
       "Create a topic when a client asks for metadata of an unknown one."},
      {"offsets.topic.num.partitions", KeyType::kInt, "50", 1, INT32_MAX,
       "Partitions of __consumer_offsets; a group lives on partition abs(hash(group.id)) % this. "
       "Read when the topic is created; changing it later moves groups away from their state."},
      {"offsets.topic.replication.factor", KeyType::kInt, "3", 1, 32767,
       "Replication factor of __consumer_offsets. As in Kafka, the topic is not created (and "
       "FindCoordinator answers COORDINATOR_NOT_AVAILABLE) until this many brokers are alive."},
      {"offsets.topic.segment.bytes", KeyType::kInt, "104857600", 1, INT32_MAX,
       "segment.bytes of __consumer_offsets, kept small for fast compaction and loading."},
      {"offsets.topic.compression.codec", KeyType::kInt, "0", 0, 4,
       "Compression of the batches the group coordinator writes: 0 none, 1 gzip, 2 snappy, "
       "3 lz4, 4 zstd."},
      {"offsets.retention.minutes", KeyType::kInt, "10080", 1, INT32_MAX,
       "Committed offsets of a group with no members are deleted this long after the group "
       "became empty (or after their commit, for groups that never had members)."},
      {"offsets.retention.check.interval.ms", KeyType::kLong, "600000", 1, kLongMax,
       "How often the coordinator looks for expired offsets."},
      {"offsets.commit.timeout.ms", KeyType::kInt, "5000", 1, INT32_MAX,
       "Longest an offset commit or group write waits to be stored before it fails with "
       "COORDINATOR_NOT_AVAILABLE (the client retries)."},
      {"offset.metadata.max.bytes", KeyType::kInt, "4096", 0, INT32_MAX,
       "Largest metadata string of one committed offset; a longer one is "
       "OFFSET_METADATA_TOO_LARGE."},
      {"transaction.state.log.num.partitions", KeyType::kInt, "50", 1, INT32_MAX,
       "Partitions of __transaction_state; a transactional id lives on partition "
       "abs(hash(transactional.id)) % this. Read when the topic is created."},
      {"transaction.state.log.replication.factor", KeyType::kInt, "3", 1, 32767,
       "Replication factor of __transaction_state. As in Kafka, the topic is not created (and "
       "FindCoordinator answers COORDINATOR_NOT_AVAILABLE) until this many brokers are alive."},
      {"transaction.state.log.min.isr", KeyType::kInt, "2", 1, INT32_MAX,
       "min.insync.replicas of __transaction_state, set when the topic is created."},
      {"transaction.state.log.segment.bytes", KeyType::kInt, "104857600", 1, INT32_MAX,
       "segment.bytes of __transaction_state, kept small for fast compaction and loading."},
      {"transaction.max.timeout.ms", KeyType::kInt, "900000", 1, INT32_MAX,
       "Largest transaction.timeout.ms a producer may ask for; a longer one is "
       "INVALID_TRANSACTION_TIMEOUT."},
      {"transactional.id.expiration.ms", KeyType::kInt, "604800000", 1, INT32_MAX,
       "A transactional id with no transaction is forgotten this long after its last update."},
      {"runnel.bootstrap.transaction.version", KeyType::kInt, "2", 0, 2,
       "The transaction.version feature level a new cluster starts at (as Kafka's storage "
       "format --feature transaction.version=N): 2 ends every transaction with an epoch bump "
       "(KIP-890 part 2: EndTxn v5, Produce v12 and TxnOffsetCommit v5 add partitions), 0 and "
       "1 keep the classic protocol. Read once, when the controller quorum writes the "
       "cluster's first records."},
      {"transaction.abort.timed.out.transaction.cleanup.interval.ms", KeyType::kInt, "10000", 1,
       INT32_MAX, "How often the coordinator aborts transactions open longer than their timeout."},
      {"transaction.remove.expired.transaction.cleanup.interval.ms", KeyType::kInt, "3600000", 1,
       INT32_MAX, "How often the coordinator looks for expired transactional ids."},
      {"group.min.session.timeout.ms", KeyType::kInt, "6000", 0, INT32_MAX,
       "Smallest session.timeout.ms a classic-protocol member may ask for."},
      {"group.max.session.timeout.ms", KeyType::kInt, "1800000", 0, INT32_MAX,
       "Largest session.timeout.ms a classic-protocol member may ask for."},
      {"group.initial.rebalance.delay.ms", KeyType::kInt, "3000", 0, INT32_MAX,
       "How long the first rebalance of an empty classic group waits for more members, "
       "growing by this much per new member up to the rebalance timeout."},
      {"group.max.size", KeyType::kInt, "2147483647", 1, INT32_MAX,
       "Most members of one classic group; a join beyond it gets GROUP_MAX_SIZE_REACHED."},
      {"group.coordinator.rebalance.protocols", KeyType::kList, "classic,consumer", 0, 0,
       "Group protocols served: classic (JoinGroup/SyncGroup, always on) and consumer "
       "(KIP-848 ConsumerGroupHeartbeat).",
       true, ValidateGroupProtocols},
      {"group.consumer.session.timeout.ms", KeyType::kInt, "45000", 1, INT32_MAX,
       "KIP-848 consumer groups: a member that does not heartbeat for this long is removed."},
      {"group.consumer.min.session.timeout.ms", KeyType::kInt, "45000", 1, INT32_MAX,
       "Smallest group.consumer.session.timeout.ms allowed."},
      {"group.consumer.max.session.timeout.ms", KeyType::kInt, "60000", 1, INT32_MAX,
       "Largest group.consumer.session.timeout.ms allowed."},
      {"group.consumer.heartbeat.interval.ms", KeyType::kInt, "5000", 1, INT32_MAX,
       "KIP-848 consumer groups: the heartbeat interval given to members."},
      {"group.consumer.min.heartbeat.interval.ms", KeyType::kInt, "5000", 1, INT32_MAX,
       "Smallest group.consumer.heartbeat.interval.ms allowed."},
      {"group.consumer.max.heartbeat.interval.ms", KeyType::kInt, "15000", 1, INT32_MAX,
       "Largest group.consumer.heartbeat.interval.ms allowed."},
      {"group.consumer.max.size", KeyType::kInt, "2147483647", 1, INT32_MAX,
       "Most members of one KIP-848 consumer group; a join beyond it gets "
       "GROUP_MAX_SIZE_REACHED."},
      {"group.consumer.assignors", KeyType::kList, "uniform,range", 0, 0,
       "Server-side assignors of KIP-848 consumer groups, the first being the default: "
       "uniform and range (Kafka's class names are accepted too).",
       true, ValidateAssignors},
      {"fetch.max.bytes", KeyType::kInt, "16777216", 1024, INT32_MAX,
       "Most record bytes one Fetch answer carries, whatever larger max_bytes the consumer "
       "asks for (a first batch bigger than it still goes out alone, as with the consumer's "
       "own limit). Kafka's default is 55 MiB; Runnel's 16 MiB keeps each answer small "
       "enough that clients reuse their receive buffers instead of mapping fresh memory for "
       "every answer, which doubles librdkafka's consume rate (see the README's Speed)."},
      {"max.incremental.fetch.session.cache.slots", KeyType::kInt, "1000", 0, INT32_MAX,
       "Most incremental fetch sessions (KIP-227) the broker keeps; 0 answers every Fetch "
       "without one. A consumer with a session sends and is sent only the partitions that "
       "changed."},
      {"socket.request.max.bytes", KeyType::kInt, "104857600", 1, INT32_MAX,
       "Largest request frame accepted; a bigger size prefix closes the connection."},
      {"max.request.partition.size.limit", KeyType::kInt, "2000", 1, INT32_MAX,
       "Most partitions one DescribeTopicPartitions answer lists; the client pages through "
       "the rest with the answer's cursor."},
      {"max.connections", KeyType::kInt, "2147483647", 1, INT32_MAX,
       "Most client connections the broker accepts at once."},
      {"max.connections.per.ip", KeyType::kInt, "2147483647", 1, INT32_MAX,
       "Most client connections accepted from one IP address."},
      {"runnel.broker.append.shared.bytes", KeyType::kLong, "67108864", 0, int64_t{1} << 36,
       "Size of each of the two shared memory regions that carry produced record bytes from "
       "brokerd to storaged (the call then names them instead of holding them): one that "
       "large produce requests are read into, one for copies of the rest. Appends that do "
       "not fit go in the call. 0: always in the call."},
      {"runnel.run.dir", KeyType::kPath, "./data/run", 0, 0,
       "Directory of the roles' Unix sockets (mode 0660) and pid files."},
      {"runnel.http.listener", KeyType::kString, "", 0, 0,
       "The node's HTTP port, http://host:port, serving Prometheus /metrics of every role, "
       "/healthz and /readyz (the supervisor's, or a role's own when run alone). Empty: none.",
       true, ValidateHttpListener},
      {"runnel.log.level", KeyType::kString, "info", 0, 0,
       "Log level: trace, debug, info, warn, error or off.", false, ValidateLogLevel},
      {"runnel.log.dir", KeyType::kString, "", 0, 0,
       "When set, each role also logs to <dir>/<role>.log, rotated by size."},
      {"runnel.log.file.max.bytes", KeyType::kLong, "104857600", 1024, INT64_MAX,
       "Size at which a log file is rotated."},
      {"runnel.log.file.count", KeyType::kInt, "10", 1, 1000, "Rotated log files kept."},
      {"runnel.supervisor.restart.backoff.initial.ms", KeyType::kInt, "200", 1, 3600000,
       "First delay before restarting a role that died; doubles each time."},
      {"runnel.supervisor.restart.backoff.max.ms", KeyType::kInt, "30000", 1, 3600000,
       "Cap of the restart delay."},
      {"runnel.supervisor.stop.timeout.ms", KeyType::kInt, "10000", 1, 3600000,
       "Time a role has to exit after SIGTERM before it gets SIGKILL."},
      {"runnel.supervisor.ready.timeout.ms", KeyType::kInt, "30000", 1, 3600000,
       "Time a role has to answer grpc.health.v1 at start. One that answers NOT_SERVING "
       "(waiting for its controller quorum) is waited for as long as it takes."},
  };
  std::sort(keys.begin(), keys.end(),
            [](const KeyDef& a, const KeyDef& b) { return a.name < b.name; });
  return keys;
}

}  // namespace

const std::vector<KeyDef>& AllKeys() {
  static const std::vector<KeyDef> kKeys = Declare();
  return kKeys;
}

}  // namespace runnel::config
