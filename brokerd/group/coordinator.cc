// The coordinator's public side: GroupConfig, Kafka's group-to-partition mapping, routing a
// group to its shard, creating __consumer_offsets, and making and dropping shards as
// leadership moves. The shards are in shard.cc, shard_loading.cc and shard_offsets.cc.
#include "brokerd/group/coordinator.h"

#include <fmt/format.h>

#include <algorithm>

#include "brokerd/group/coordinator_internal.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/storage/internal_partition.h"
#include "common/protocol/error_code.h"

namespace runnel::brokerd::group {

namespace {

// Decodes one UTF-8 sequence at `s[*i]` into a code point, advancing *i; nullopt (advancing
// by one byte) when the bytes there are not a valid, shortest-form sequence.
std::optional<uint32_t> DecodeUtf8(std::string_view s, size_t* i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(*i);
  int len;
  uint32_t cp;
  uint32_t min;
  if (b0 < 0x80) {
    ++*i;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    ++*i;
    return std::nullopt;
  }
  if (*i + len > s.size()) {
    ++*i;
    return std::nullopt;
  }
  for (int k = 1; k < len; ++k) {
    const uint8_t b = byte(*i + k);
    if ((b & 0xC0) != 0x80) {
      ++*i;
      return std::nullopt;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++*i;
    return std::nullopt;
  }
  *i += len;
  return cp;
}

std::string ShortAssignorName(const std::string& name) {
  if (name == "org.apache.kafka.coordinator.group.assignor.UniformAssignor") return "uniform";
  if (name == "org.apache.kafka.coordinator.group.assignor.RangeAssignor") return "range";
  return name;
}
}  // namespace

// ---- GroupConfig / partitioning ------------------------------------------------------------

GroupConfig GroupConfig::FromConfig(const config::Config& config) {
  GroupConfig c;
  c.min_session_timeout_ms = config.GetInt("group.min.session.timeout.ms");
  c.max_session_timeout_ms = config.GetInt("group.max.session.timeout.ms");
  c.initial_rebalance_delay_ms = config.GetInt("group.initial.rebalance.delay.ms");
  c.max_size = config.GetInt("group.max.size");
  std::vector<std::string> protocols = config.GetList("group.coordinator.rebalance.protocols");
  c.consumer_enabled = std::find(protocols.begin(), protocols.end(), "consumer") != protocols.end();
  c.consumer_session_timeout_ms = config.GetInt("group.consumer.session.timeout.ms");
  c.consumer_heartbeat_interval_ms = config.GetInt("group.consumer.heartbeat.interval.ms");
  c.consumer_max_size = config.GetInt("group.consumer.max.size");
  c.consumer_assignors.clear();
  for (const std::string& name : config.GetList("group.consumer.assignors")) {
    c.consumer_assignors.push_back(ShortAssignorName(name));
  }
  c.offsets_retention_ms = int64_t{config.GetInt("offsets.retention.minutes")} * 60 * 1000;
  c.offsets_retention_check_interval_ms = config.GetLong("offsets.retention.check.interval.ms");
  c.offset_metadata_max_bytes = config.GetInt("offset.metadata.max.bytes");
  c.offsets_commit_timeout_ms = config.GetInt("offsets.commit.timeout.ms");
  c.offsets_compression_codec = config.GetInt("offsets.topic.compression.codec");
  return c;
}

int32_t OffsetsPartitionFor(std::string_view group_id, int32_t partitions) {
  if (partitions <= 0) return 0;
  // Java's String.hashCode: h = 31 * h + c over the UTF-16 code units, wrapping at 32 bits.
  uint32_t h = 0;
  auto add = [&h](uint32_t unit) { h = h * 31 + unit; };
  for (size_t i = 0; i < group_id.size();) {
    size_t at = i;
    std::optional<uint32_t> cp = DecodeUtf8(group_id, &i);
    if (!cp.has_value()) {
      add(static_cast<uint8_t>(group_id[at]));
    } else if (*cp >= 0x10000) {
      const uint32_t v = *cp - 0x10000;
      add(0xD800 + (v >> 10));
      add(0xDC00 + (v & 0x3FF));
    } else {
      add(*cp);
    }
  }
  const int32_t hash = static_cast<int32_t>(h);
  // Kafka's Utils.abs: MIN_VALUE maps to 0 rather than to itself.
  const int32_t abs = hash == INT32_MIN ? 0 : (hash < 0 ? -hash : hash);
  return abs % partitions;
}

std::optional<TopicInfo> MetadataTopicLookup::FindByName(const std::string& name) const {
  const brokerd::TopicInfo* t = broker_.metadata.FindTopic(name);
  if (t == nullptr) return std::nullopt;
  return TopicInfo{t->id, t->name, static_cast<int32_t>(t->partitions.size())};
}

std::optional<TopicInfo> MetadataTopicLookup::FindById(const protocol::Uuid& id) const {
  const brokerd::TopicInfo* t = broker_.metadata.FindTopicById(id);
  if (t == nullptr) return std::nullopt;
  return TopicInfo{t->id, t->name, static_cast<int32_t>(t->partitions.size())};
}

std::vector<std::string> MetadataTopicLookup::AllNames() const {
  std::vector<std::string> names;
  for (const auto& [name, t] : broker_.metadata.topics()) names.push_back(name);
  return names;
}

bool GroupSlot::HasPendingTxnOffset(const TopicPartition& tp) const {
  for (const auto& [producer_id, txn] : pending_txn_offsets) {
    if (txn.count(tp) > 0) return true;
  }
  return false;
}

bool GroupSlot::Unused() const {
  return !classic && !consumer && offsets.empty() && pending_commits == 0 &&
         pending_txn_offsets.empty();
}
// ---- Coordinator ---------------------------------------------------------------------------

Coordinator::Coordinator(BrokerContext& broker)
    : broker_(broker),
      config_(GroupConfig::FromConfig(broker.config)),
      offsets_topic_(broker, std::string(kOffsetsTopic), [&broker] {
        const config::Config& c = broker.config;
        return InternalTopic::Spec{
            c.GetInt("offsets.topic.num.partitions"),
            c.GetInt("offsets.topic.replication.factor"),
            {{"cleanup.policy", "compact"},
             {"compression.type", "producer"},
             {"segment.bytes", std::to_string(c.GetInt("offsets.topic.segment.bytes"))}}};
      }) {}

Coordinator::~Coordinator() { Stop(); }

int32_t Coordinator::PartitionFor(std::string_view group_id) const {
  const brokerd::TopicInfo* topic = broker_.metadata.FindTopic(std::string(kOffsetsTopic));
  int32_t count = topic != nullptr && !topic->partitions.empty()
                      ? static_cast<int32_t>(topic->partitions.size())
                      : broker_.config.GetInt("offsets.topic.num.partitions");
  return OffsetsPartitionFor(group_id, count);
}

Coordinator::Route Coordinator::RouteGroup(std::string_view group_id) {
  // Kafka refuses an empty id. Records hold the id as an int16-length string: a longer one
  // (possible in flexible request versions) could not be written back as it came.
  if (group_id.empty() || group_id.size() > static_cast<size_t>(INT16_MAX)) {
    return {ErrorCode::kInvalidGroupId, nullptr};
  }
  const brokerd::TopicInfo* topic = broker_.metadata.FindTopic(std::string(kOffsetsTopic));
  if (topic == nullptr || topic->partitions.empty()) {
    return {ErrorCode::kNotCoordinator, nullptr};
  }
  const int32_t partition = PartitionFor(group_id);
  auto it = shards_.find(partition);
  if (it == shards_.end()) {
    auto p = topic->partitions.find(partition);
    if (p != topic->partitions.end() && p->second.leader == broker_.node_id) {
      // Led here, but the log is not ready yet: the shard loads soon.
      return {ErrorCode::kCoordinatorLoadInProgress, nullptr};
    }
    return {ErrorCode::kNotCoordinator, nullptr};
  }
  if (it->second->state() == Shard::State::kLoading) {
    return {ErrorCode::kCoordinatorLoadInProgress, nullptr};
  }
  return {ErrorCode::kNone, it->second.get()};
}

void Coordinator::EnsureOffsetsTopic(std::function<void(ErrorCode error)> done) {
  offsets_topic_.Ensure(std::move(done));
}

struct Coordinator::LoadWait {
  UvTimer timer;
  std::vector<std::string> group_ids;
  int64_t deadline_ms = 0;
  std::function<void()> then;
};

bool Coordinator::AnyLoading(const std::vector<std::string>& group_ids) {
  for (const std::string& id : group_ids) {
    if (RouteGroup(id).error == ErrorCode::kCoordinatorLoadInProgress) return true;
  }
  return false;
}

void Coordinator::WaitUntilLoaded(std::vector<std::string> group_ids, int64_t timeout_ms,
                                  std::function<void()> then) {
  if (stopped_ || !AnyLoading(group_ids)) return then();
  const uint64_t id = next_load_wait_++;
  auto w = std::make_unique<LoadWait>();
  w->group_ids = std::move(group_ids);
  w->deadline_ms = static_cast<int64_t>(uv_now(broker_.loop.raw())) + timeout_ms;
  w->then = std::move(then);
  w->timer.Init(broker_.loop.raw());
  // Loads finish within a few reads; polling keeps the shard free of waiter bookkeeping.
  constexpr uint64_t kPollMs = 20;
  w->timer.Start(kPollMs, kPollMs, [this, id] {
    auto it = load_waits_.find(id);
    if (it == load_waits_.end()) return;
    if (AnyLoading(it->second->group_ids) &&
        static_cast<int64_t>(uv_now(broker_.loop.raw())) < it->second->deadline_ms) {
      return;
    }
    EndLoadWait(id);
  });
  load_waits_.emplace(id, std::move(w));
}

void Coordinator::EndLoadWait(uint64_t id) {
  auto it = load_waits_.find(id);
  if (it == load_waits_.end()) return;
  std::function<void()> then = std::move(it->second->then);
  load_waits_.erase(it);  // the timer's destructor closes it
  then();
}

void Coordinator::CompleteTransaction(int32_t offsets_partition, int64_t producer_id, bool commit) {
  auto it = shards_.find(offsets_partition);
  if (it == shards_.end()) return;
  Shard& shard = *it->second;
  switch (shard.state()) {
    case Shard::State::kLoading:
      shard.NoteMarkerDuringLoad();
      return;
    case Shard::State::kActive:
      shard.EndTransaction(producer_id, commit);
      return;
    case Shard::State::kUnloaded:
      return;
  }
}

std::vector<Shard*> Coordinator::shards() {
  std::vector<Shard*> out;
  for (auto& [p, shard] : shards_) out.push_back(shard.get());
  return out;
}

void Coordinator::Reconcile() {
  if (stopped_) return;
  ReconcileShards(shards_, LedPartitions(broker_, std::string(kOffsetsTopic)),
                  [this](int32_t index, int32_t epoch) {
                    return std::make_unique<Shard>(broker_, index, epoch, config_);
                  });
}

void Coordinator::Stop() {
  stopped_ = true;
  while (!load_waits_.empty()) EndLoadWait(load_waits_.begin()->first);
  auto shards = std::move(shards_);
  shards_.clear();
  for (auto& [p, shard] : shards) shard->Unload();
}

}  // namespace runnel::brokerd::group
