#include "brokerd/group/coordinator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "brokerd/error_mapping.h"
#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"
#include "common/log/log.h"
#include "common/protocol/error_code.h"
#include "common/record/batch.h"
#include "common/util/big_endian.h"

namespace runnel::brokerd::group {
namespace {

using protocol::ErrorCode;

std::shared_ptr<spdlog::logger> Log() {
  static auto logger = log::Get("brokerd.group");
  return logger;
}

constexpr int32_t kLoadReadBytes = 4 << 20;
constexpr std::chrono::milliseconds kReadTimeout{30000};
constexpr int64_t kLoadRetryMs = 1000;
constexpr int kMaxLoadRestarts = 100;
constexpr std::chrono::milliseconds kCreateTopicTimeout{10000};
constexpr int64_t kTopicWaitMs = 10000;

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

record::Compression CompressionFor(int32_t codec) {
  switch (codec) {
    case 1:
      return record::Compression::kGzip;
    case 2:
      return record::Compression::kSnappy;
    case 3:
      return record::Compression::kLz4;
    case 4:
      return record::Compression::kZstd;
    default:
      return record::Compression::kNone;
  }
}

std::string ShortAssignorName(const std::string& name) {
  if (name == "org.apache.kafka.coordinator.group.assignor.UniformAssignor") return "uniform";
  if (name == "org.apache.kafka.coordinator.group.assignor.RangeAssignor") return "range";
  return name;
}

// The topics of a consumer-protocol subscription (ConsumerProtocolSubscription: version
// int16, then topics as an int32 count of int16-length strings; later versions only append
// fields). nullopt when the bytes do not parse.
std::optional<std::vector<std::string>> SubscriptionTopics(const std::vector<uint8_t>& b) {
  size_t pos = 0;
  auto need = [&](size_t n) { return pos + n <= b.size(); };
  if (!need(2)) return std::nullopt;
  const auto version = static_cast<int16_t>(LoadBigEndian16(b.data()));
  if (version < 0) return std::nullopt;
  pos = 2;
  if (!need(4)) return std::nullopt;
  const auto count = static_cast<int32_t>(LoadBigEndian32(&b[pos]));
  pos += 4;
  if (count < 0 || static_cast<size_t>(count) > (b.size() - pos) / 2) return std::nullopt;
  std::vector<std::string> topics;
  for (int32_t i = 0; i < count; ++i) {
    if (!need(2)) return std::nullopt;
    const auto len = static_cast<int16_t>(LoadBigEndian16(&b[pos]));
    pos += 2;
    if (len < 0 || !need(static_cast<size_t>(len))) return std::nullopt;
    topics.emplace_back(reinterpret_cast<const char*>(b.data() + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
  }
  return topics;
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

bool GroupSlot::Unused() const {
  return !classic && !consumer && offsets.empty() && pending_commits == 0;
}

// ---- Shard ---------------------------------------------------------------------------------

Shard::Shard(BrokerContext& broker, int32_t partition, int32_t leader_epoch,
             const GroupConfig& config)
    : broker_(broker),
      partition_(partition),
      leader_epoch_(leader_epoch),
      config_(config),
      topics_(broker) {}

Shard::~Shard() { Unload(); }

int64_t Shard::NowMs() {
  if (clock_) return clock_();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

GroupEnv::TimerId Shard::StartTimer(int64_t delay_ms, std::function<void()> fn) {
  const TimerId id = next_timer_++;
  if (state_ == State::kUnloaded) return id;  // never runs
  UvTimer& timer = timers_[id];
  timer.Init(broker_.loop.raw());
  timer.Start(static_cast<uint64_t>(std::max<int64_t>(delay_ms, 0)), 0,
              [this, id, fn = std::move(fn)] {
                CancelTimer(id);  // closes the timer; this runs on a copy of the callback
                fn();
              });
  return id;
}

void Shard::CancelTimer(TimerId id) {
  timers_.erase(id);  // the timer's destructor closes it
}

void Shard::Write(std::vector<LogRecord> records, std::function<void(ErrorCode error)> done) {
  const uint64_t id = next_write_++;
  pending_writes_.emplace(id, std::move(done));
  if (state_ != State::kActive) return PostWriteResult(id, ErrorCode::kNotCoordinator);
  if (records.empty()) return PostWriteResult(id, ErrorCode::kNone);

  record::BatchBuilder::Options options;
  options.compression = CompressionFor(config_.offsets_compression_codec);
  options.partition_leader_epoch = leader_epoch_;
  record::BatchBuilder builder(options);
  const int64_t now = NowMs();
  for (const LogRecord& r : records) {
    std::optional<record::ByteSpan> value;
    if (r.value.has_value()) value = record::ByteSpan(r.value->data(), r.value->size());
    builder.Add(now, record::ByteSpan(r.key.data(), r.key.size()), value);
  }
  StatusOr<std::vector<uint8_t>> batch = builder.Build();
  if (!batch.ok()) {
    Log()->error("__consumer_offsets-{}: cannot build a batch: {}", partition_,
                 batch.status().ToString());
    return PostWriteResult(id, ErrorCode::kCoordinatorNotAvailable);
  }
  storage::AppendPartition append;
  append.set_topic(std::string(kOffsetsTopic));
  append.set_partition(partition_);
  append.set_leader_epoch(leader_epoch_);
  append.set_records(batch->data(), batch->size());
  std::weak_ptr<bool> alive = alive_;
  broker_.appends.Append(
      std::move(append), std::chrono::milliseconds(config_.offsets_commit_timeout_ms),
      [this, alive, id](const grpc::Status& status, const storage::AppendPartitionResult& r) {
        if (alive.expired()) return;
        ErrorCode error = ErrorCode::kNone;
        if (!status.ok()) {
          error = CoordinatorWriteError(StorageCallError(status));
        } else {
          error = CoordinatorWriteError(protocol::ErrorFromWire(r.error_code()));
        }
        if (error != ErrorCode::kNone) {
          Log()->warn("__consumer_offsets-{}: write failed: {} {}", partition_,
                      status.ok() ? std::to_string(r.error_code()) : status.error_message(),
                      r.error_message());
        }
        CompleteWrite(id, error);
      });
}

void Shard::PostWriteResult(uint64_t id, ErrorCode error) {
  std::weak_ptr<bool> alive = alive_;
  broker_.loop.Post([this, alive, id, error] {
    if (!alive.expired()) CompleteWrite(id, error);
  });
}

void Shard::CompleteWrite(uint64_t id, ErrorCode error) {
  auto it = pending_writes_.find(id);
  if (it == pending_writes_.end()) return;  // answered at unload
  std::function<void(ErrorCode)> done = std::move(it->second);
  pending_writes_.erase(it);
  if (done) done(error);
}

void Shard::FailPendingWrites() {
  // A callback may write again (it gets NOT_COORDINATOR too); bounded rounds.
  for (int round = 0; round < 100 && !pending_writes_.empty(); ++round) {
    auto writes = std::move(pending_writes_);
    pending_writes_.clear();
    for (auto& [id, done] : writes) {
      if (done) done(ErrorCode::kNotCoordinator);
    }
  }
  pending_writes_.clear();
}

void Shard::Unload() {
  if (state_ == State::kUnloaded) return;
  state_ = State::kUnloaded;
  FailPendingWrites();
  for (auto& [id, slot] : groups_) {
    if (slot.classic) slot.classic->Shutdown(ErrorCode::kNotCoordinator);
    if (slot.consumer) slot.consumer->Shutdown(ErrorCode::kNotCoordinator);
  }
  FailPendingWrites();
  groups_.clear();  // the groups' destructors cancel their timers
  loaded_classic_.clear();
  timers_.clear();
  load_done_ = nullptr;
  Log()->debug("unloaded __consumer_offsets-{}", partition_);
}

GroupSlot* Shard::Find(const std::string& group_id) {
  auto it = groups_.find(group_id);
  return it == groups_.end() ? nullptr : &it->second;
}

GroupSlot& Shard::FindOrCreate(const std::string& group_id) { return groups_[group_id]; }

void Shard::Remove(const std::string& group_id) {
  auto it = groups_.find(group_id);
  if (it == groups_.end()) return;
  // Out of the map first: Shutdown answers parked requests, whose callbacks may look the
  // group up again.
  GroupSlot slot = std::move(it->second);
  groups_.erase(it);
  if (slot.classic) slot.classic->Shutdown(ErrorCode::kCoordinatorNotAvailable);
  if (slot.consumer) slot.consumer->Shutdown(ErrorCode::kCoordinatorNotAvailable);
}

// ---- Loading -------------------------------------------------------------------------------

void Shard::Load(std::function<void()> done) {
  load_done_ = std::move(done);
  Log()->debug("loading __consumer_offsets-{} (leader epoch {})", partition_, leader_epoch_);
  ReadNext(0);
}

void Shard::ReadNext(int64_t offset) {
  if (state_ != State::kLoading) return;
  storage::ReadRequest req;
  req.set_want_bytes(true);
  storage::ReadPartition* p = req.add_partitions();
  p->set_topic(std::string(kOffsetsTopic));
  p->set_partition(partition_);
  p->set_offset(offset);
  p->set_max_bytes(kLoadReadBytes);
  p->set_min_one_batch(true);
  std::weak_ptr<bool> alive = alive_;
  broker_.storage.Read(
      std::move(req), kReadTimeout,
      [this, alive, offset](const grpc::Status& status, storage::ReadResponse& resp) {
        if (alive.expired()) return;
        OnRead(status, resp, offset);
      });
}

void Shard::RetryRead(int64_t offset) {
  StartTimer(kLoadRetryMs, [this, offset] { ReadNext(offset); });
}

void Shard::OnRead(const grpc::Status& status, storage::ReadResponse& resp, int64_t offset) {
  if (state_ != State::kLoading) return;
  if (!status.ok() || resp.partitions_size() != 1) {
    Log()->warn("__consumer_offsets-{}: load read failed: {}; retrying", partition_,
                status.ok() ? "no result" : status.error_message());
    return RetryRead(offset);
  }
  storage::ReadPartitionResult& r = *resp.mutable_partitions(0);
  if (protocol::ErrorFromWire(r.error_code()) == ErrorCode::kOffsetOutOfRange &&
      ++load_restarts_ <= kMaxLoadRestarts) {
    // Below the log start (retention, DeleteRecords) or the start moved during the load.
    return ReadNext(std::max<int64_t>(r.log_start_offset(), 0));
  }
  if (r.error_code() != 0) {
    Log()->warn("__consumer_offsets-{}: load read at {} failed: error {} {}; retrying", partition_,
                offset, r.error_code(), r.error_message());
    return RetryRead(offset);
  }
  if (load_end_ < 0) load_end_ = r.log_end_offset();

  const std::string& bytes = r.records();
  StatusOr<std::vector<record::BatchView>> batches = record::SplitBatches(
      record::ByteSpan(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  if (!batches.ok()) {
    Log()->error("__consumer_offsets-{}: unreadable batches at {}: {}; retrying", partition_,
                 offset, batches.status().ToString());
    return RetryRead(offset);
  }
  int64_t next = offset;
  for (const record::BatchView& batch : *batches) {
    if (batch.base_offset() >= load_end_) break;
    next = std::max(next, batch.last_offset() + 1);
    if (batch.is_control()) continue;
    Status st = record::ForEachRecord(batch, [&](const record::Record& rec) {
      if (!rec.key.has_value()) return true;
      StatusOr<ParsedRecord> parsed = ParseRecord(*rec.key, rec.value);
      if (!parsed.ok()) {
        if (parsed.status().code() != absl::StatusCode::kNotFound) {
          Log()->warn("__consumer_offsets-{}: skipping a record at {}: {}", partition_,
                      batch.base_offset() + rec.offset_delta, parsed.status().ToString());
        }
        return true;
      }
      Replay(*parsed);
      return true;
    });
    if (!st.ok()) {
      Log()->warn("__consumer_offsets-{}: skipping the batch at {}: {}", partition_,
                  batch.base_offset(), st.ToString());
    }
  }
  // Done at the end seen when the load began, or when a read brings nothing new (only batches
  // at or past that end): reading the same offset again would loop.
  if (batches->empty() || next >= load_end_ || next == offset) return FinishLoad();
  ReadNext(next);
}

void Shard::Replay(const ParsedRecord& record) {
  if (const auto* o = std::get_if<ParsedOffset>(&record)) {
    const TopicPartition tp{o->key.topic, o->key.partition};
    if (o->value.has_value()) {
      CommittedOffset& c = groups_[o->key.group].offsets[tp];
      c.offset = o->value->offset;
      c.leader_epoch = o->value->leader_epoch;
      c.metadata = o->value->metadata;
      c.commit_timestamp_ms = o->value->commit_timestamp_ms;
      c.expire_timestamp_ms = o->value->expire_timestamp_ms;
    } else if (GroupSlot* slot = Find(o->key.group)) {
      slot->offsets.erase(tp);
    }
    return;
  }
  if (const auto* g = std::get_if<ParsedClassicGroup>(&record)) {
    if (g->value.has_value()) {
      loaded_classic_[g->group] = *g->value;
    } else {
      loaded_classic_.erase(g->group);
    }
    return;
  }
  // KIP-848 records: the group is created by its first record and removed by the tombstone
  // of its metadata record (key 3), which Kafka writes last when deleting it.
  std::visit(
      [&](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (!std::is_same_v<T, ParsedOffset> && !std::is_same_v<T, ParsedClassicGroup>) {
          GroupSlot* slot = Find(r.group);
          constexpr bool kIsMetadata = std::is_same_v<T, ParsedGroupRecord<ConsumerGroupMetadata>>;
          if (!r.value.has_value()) {
            if (slot == nullptr || !slot->consumer) return;
            if (kIsMetadata) {
              slot->consumer.reset();
              return;
            }
            slot->consumer->Replay(record);
            return;
          }
          if (slot == nullptr) slot = &groups_[r.group];
          if (!slot->consumer) {
            slot->consumer = std::make_unique<ConsumerGroup>(r.group, *this, topics_);
          }
          slot->consumer->Replay(record);
        }
      },
      record);
}

void Shard::FinishLoad() {
  for (auto& [id, value] : loaded_classic_) {
    GroupSlot& slot = groups_[id];
    if (slot.consumer) {
      Log()->warn("group {}: both classic and consumer group records; keeping the consumer group",
                  id);
      continue;
    }
    slot.classic = std::make_unique<ClassicGroup>(id, *this);
  }
  // Active before the groups start, so what they schedule on load (session timers, writes)
  // goes through.
  state_ = State::kActive;
  for (auto& [id, value] : loaded_classic_) {
    GroupSlot& slot = groups_[id];
    if (slot.classic) slot.classic->Load(value);
  }
  loaded_classic_.clear();
  size_t offsets = 0;
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (it->second.consumer) it->second.consumer->OnLoaded();
    offsets += it->second.offsets.size();
    if (it->second.Unused()) {
      it = groups_.erase(it);
    } else {
      ++it;
    }
  }
  Log()->log(groups_.empty() ? spdlog::level::debug : spdlog::level::info,
             "loaded __consumer_offsets-{}: {} group(s), {} offset(s) up to offset {}", partition_,
             groups_.size(), offsets, load_end_);
  ScheduleExpiry();
  if (load_done_) {
    auto done = std::move(load_done_);
    load_done_ = nullptr;
    done();
  }
}

// ---- Offsets -------------------------------------------------------------------------------

void Shard::CommitOffsets(const std::string& group_id, std::vector<Commit> commits,
                          std::function<void(ErrorCode error)> done) {
  std::vector<LogRecord> records;
  records.reserve(commits.size());
  GroupSlot& slot = FindOrCreate(group_id);
  for (const Commit& c : commits) {
    records.push_back(OffsetCommitRecord(OffsetKey{group_id, c.topic, c.partition}, c.value));
    ++slot.pending_partitions[{c.topic, c.partition}];
  }
  ++slot.pending_commits;
  auto shared = std::make_shared<std::vector<Commit>>(std::move(commits));
  Write(std::move(records), [this, group_id, shared, done = std::move(done)](ErrorCode error) {
    if (GroupSlot* slot = Find(group_id)) {
      --slot->pending_commits;
      for (const Commit& c : *shared) {
        auto it = slot->pending_partitions.find({c.topic, c.partition});
        if (it != slot->pending_partitions.end() && --it->second <= 0) {
          slot->pending_partitions.erase(it);
        }
        if (error != ErrorCode::kNone || state_ != State::kActive) continue;
        CommittedOffset& o = slot->offsets[{c.topic, c.partition}];
        o.offset = c.value.offset;
        o.leader_epoch = c.value.leader_epoch;
        o.metadata = c.value.metadata;
        o.commit_timestamp_ms = c.value.commit_timestamp_ms;
        o.expire_timestamp_ms = c.value.expire_timestamp_ms;
      }
      if (slot->Unused() && state_ == State::kActive) groups_.erase(group_id);
    }
    done(error);
  });
}

void Shard::DeleteOffsets(const std::string& group_id,
                          const std::vector<TopicPartition>& partitions,
                          std::function<void(ErrorCode error)> done) {
  std::vector<LogRecord> records;
  std::vector<TopicPartition> deleted;
  if (GroupSlot* slot = Find(group_id)) {
    for (const TopicPartition& tp : partitions) {
      if (slot->offsets.count(tp) == 0) continue;
      if (std::find(deleted.begin(), deleted.end(), tp) != deleted.end()) continue;
      records.push_back(OffsetTombstone(OffsetKey{group_id, tp.first, tp.second}));
      deleted.push_back(tp);
    }
  }
  Write(std::move(records), [this, group_id, deleted, done = std::move(done)](ErrorCode error) {
    if (error == ErrorCode::kNone) {
      if (GroupSlot* slot = Find(group_id)) {
        for (const TopicPartition& tp : deleted) slot->offsets.erase(tp);
        if (slot->Unused()) groups_.erase(group_id);
      }
    }
    done(error);
  });
}

std::vector<LogRecord> Shard::GroupTombstones(const std::string& group_id, const GroupSlot& slot) {
  std::vector<LogRecord> records;
  if (slot.consumer) {
    records = slot.consumer->TombstoneRecords();
  } else {
    records.push_back(ClassicGroupTombstone(group_id));
  }
  return records;
}

void Shard::DeleteGroup(const std::string& group_id, std::function<void(ErrorCode error)> done) {
  GroupSlot* slot = Find(group_id);
  std::vector<LogRecord> records;
  if (slot != nullptr) {
    std::set<TopicPartition> partitions;
    for (const auto& [tp, offset] : slot->offsets) partitions.insert(tp);
    // Commits still being written land before these tombstones (one partition's appends
    // keep their order), so they are deleted too.
    for (const auto& [tp, count] : slot->pending_partitions) partitions.insert(tp);
    for (const TopicPartition& tp : partitions) {
      records.push_back(OffsetTombstone(OffsetKey{group_id, tp.first, tp.second}));
    }
    for (LogRecord& r : GroupTombstones(group_id, *slot)) records.push_back(std::move(r));
    // Gone at once, as Kafka marks the group Dead: a join or commit arriving while the
    // tombstones are written starts a new group, whose records follow them in the log.
    Remove(group_id);
  }
  Write(std::move(records), std::move(done));
}

std::optional<std::set<std::string>> Shard::SubscribedTopics(const GroupSlot& slot) const {
  if (slot.consumer) {
    std::set<std::string> topics;
    for (const auto& [name, info] : slot.consumer->subscription_metadata()) topics.insert(name);
    for (const auto& [member_id, m] : slot.consumer->members()) {
      topics.insert(m.subscribed_topic_names.begin(), m.subscribed_topic_names.end());
    }
    return topics;
  }
  if (!slot.classic || slot.classic->protocol_type() != "consumer") return std::set<std::string>();
  // Kafka parses each member's metadata for the chosen protocol; when it cannot, the group
  // counts as subscribed to every topic.
  std::set<std::string> topics;
  if (slot.classic->empty()) return topics;
  if (!slot.classic->protocol().has_value()) return std::nullopt;
  for (const ClassicMemberValue& m : slot.classic->ToValue().members) {
    std::optional<std::vector<std::string>> t = SubscriptionTopics(m.subscription);
    if (!t.has_value()) return std::nullopt;
    topics.insert(t->begin(), t->end());
  }
  return topics;
}

void Shard::ScheduleExpiry() {
  if (state_ != State::kActive) return;
  expiry_timer_ = StartTimer(config_.offsets_retention_check_interval_ms, [this] {
    expiry_timer_ = 0;
    ExpireOffsets();
    ScheduleExpiry();
  });
}

void Shard::ExpireOffsets(std::function<void()> done) {
  if (state_ != State::kActive) {
    if (done) done();
    return;
  }
  const int64_t now = NowMs();
  struct Expired {
    std::string group;
    std::vector<TopicPartition> partitions;
    bool remove_group = false;
  };
  std::vector<Expired> expired;
  std::vector<LogRecord> records;
  for (auto& [id, slot] : groups_) {
    if (slot.pending_commits > 0) continue;  // a commit in flight decides
    // Kafka's OffsetExpirationCondition: which timestamp an offset's age counts from, or none
    // while the group has members (classic groups other than "consumer" ones with known
    // subscriptions).
    enum class Base { kNone, kCommit, kStateTimestamp } base = Base::kCommit;
    int64_t state_ts = -1;
    bool has_members = false;
    if (slot.classic) {
      has_members = !slot.classic->empty();
      if (slot.classic->state() == ClassicGroup::State::kDead) continue;
      if (!slot.classic->protocol_type().empty()) {
        if (slot.classic->state() == ClassicGroup::State::kEmpty) {
          base = Base::kStateTimestamp;
          state_ts = slot.classic->current_state_timestamp_ms();
        } else if (slot.classic->protocol_type() == "consumer" &&
                   slot.classic->state() == ClassicGroup::State::kStable) {
          base = Base::kCommit;
        } else {
          base = Base::kNone;
        }
      }
    } else if (slot.consumer) {
      has_members = !slot.consumer->empty();
    }
    if (base == Base::kNone) continue;
    // Offsets of topics the group is subscribed to never expire while it is.
    std::optional<std::set<std::string>> subscribed;
    if (has_members) {
      subscribed = SubscribedTopics(slot);
      if (!subscribed.has_value()) continue;  // subscribed to everything
    }
    Expired e{id, {}, false};
    bool all_expired = true;
    for (const auto& [tp, offset] : slot.offsets) {
      if (subscribed.has_value() && subscribed->count(tp.first) > 0) {
        all_expired = false;
        continue;
      }
      bool is_expired;
      if (offset.expire_timestamp_ms >= 0) {
        is_expired = now >= offset.expire_timestamp_ms;
      } else {
        const int64_t from =
            base == Base::kStateTimestamp && state_ts >= 0 ? state_ts : offset.commit_timestamp_ms;
        is_expired = now - from >= config_.offsets_retention_ms;
      }
      if (is_expired) {
        e.partitions.push_back(tp);
        records.push_back(OffsetTombstone(OffsetKey{id, tp.first, tp.second}));
      } else {
        all_expired = false;
      }
    }
    // A group with no members and nothing left goes, with its tombstone (Kafka's
    // cleanupGroupMetadata).
    if (all_expired && !has_members && (slot.classic || slot.consumer)) {
      e.remove_group = true;
      for (LogRecord& r : GroupTombstones(id, slot)) records.push_back(std::move(r));
    } else if (all_expired && !has_members && !e.partitions.empty()) {
      e.remove_group = true;  // offsets-only: the slot goes with its last offset
    }
    if (!e.partitions.empty() || e.remove_group) expired.push_back(std::move(e));
  }
  if (records.empty()) {
    if (done) done();
    return;
  }
  size_t count = 0;
  for (const Expired& e : expired) count += e.partitions.size();
  Write(std::move(records),
        [this, expired = std::move(expired), count, done = std::move(done)](ErrorCode error) {
          if (error != ErrorCode::kNone) {
            Log()->warn("__consumer_offsets-{}: expiry write failed with error {}", partition_,
                        protocol::ErrorName(error));
          } else if (state_ == State::kActive) {
            for (const Expired& e : expired) {
              GroupSlot* slot = Find(e.group);
              if (slot == nullptr) continue;
              for (const TopicPartition& tp : e.partitions) slot->offsets.erase(tp);
              // Remove only what is still empty: a member may have joined meanwhile (its
              // records follow the tombstone in the log, so a reload agrees).
              bool still_empty = slot->offsets.empty() && slot->pending_commits == 0 &&
                                 (!slot->classic || slot->classic->empty()) &&
                                 (!slot->consumer || slot->consumer->empty());
              if (e.remove_group && still_empty) Remove(e.group);
            }
            Log()->info("__consumer_offsets-{}: expired {} offset(s)", partition_, count);
          }
          if (done) done();
        });
}

// ---- Coordinator ---------------------------------------------------------------------------

Coordinator::Coordinator(BrokerContext& broker)
    : broker_(broker), config_(GroupConfig::FromConfig(broker.config)) {}

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
  if (broker_.metadata.FindTopic(std::string(kOffsetsTopic)) != nullptr)
    return done(ErrorCode::kNone);
  const int32_t replication = broker_.config.GetInt("offsets.topic.replication.factor");
  int32_t alive = 0;
  for (const auto& [id, b] : broker_.metadata.brokers()) {
    if (!b.fenced) ++alive;
  }
  if (alive < replication) {
    Log()->warn("cannot create {}: {} broker(s) alive, offsets.topic.replication.factor is {}",
                kOffsetsTopic, alive, replication);
    return done(ErrorCode::kCoordinatorNotAvailable);
  }
  ensure_waiters_.push_back(std::move(done));
  if (ensure_in_flight_) return;
  ensure_in_flight_ = true;

  runnel::controller::CreateTopicsRequest req;
  auto* t = req.add_topics();
  t->set_name(std::string(kOffsetsTopic));
  t->set_num_partitions(broker_.config.GetInt("offsets.topic.num.partitions"));
  t->set_replication_factor(replication);
  auto add_config = [t](const std::string& name, const std::string& value) {
    auto* c = t->add_configs();
    c->set_name(name);
    c->set_value(value);
  };
  add_config("cleanup.policy", "compact");
  add_config("compression.type", "producer");
  add_config("segment.bytes", std::to_string(broker_.config.GetInt("offsets.topic.segment.bytes")));
  broker_.controller.CreateTopics(
      req, kCreateTopicTimeout,
      [this](const grpc::Status& status, const runnel::controller::CreateTopicsResponse& resp) {
        const ErrorCode error = status.ok() && resp.topics_size() == 1
                                    ? protocol::ErrorFromWire(resp.topics(0).error_code())
                                    : ErrorCode::kUnknownServerError;
        if (error != ErrorCode::kNone && error != ErrorCode::kTopicAlreadyExists) {
          Log()->warn("creating {} failed: {}", kOffsetsTopic,
                      status.ok() ? (resp.topics_size() == 1 ? resp.topics(0).error_message()
                                                             : std::string("no result"))
                                  : status.error_message());
          return FinishEnsure(ErrorCode::kCoordinatorNotAvailable);
        }
        if (error == ErrorCode::kNone) Log()->info("created {}", kOffsetsTopic);
        WaitForMetadata(
            broker_,
            [this] { return broker_.metadata.FindTopic(std::string(kOffsetsTopic)) != nullptr; },
            kTopicWaitMs,
            [this] {
              FinishEnsure(broker_.metadata.FindTopic(std::string(kOffsetsTopic)) != nullptr
                               ? ErrorCode::kNone
                               : ErrorCode::kCoordinatorNotAvailable);
            });
      });
}

void Coordinator::FinishEnsure(ErrorCode error) {
  ensure_in_flight_ = false;
  auto waiters = std::move(ensure_waiters_);
  ensure_waiters_.clear();
  for (auto& w : waiters) w(error);
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

std::vector<Shard*> Coordinator::shards() {
  std::vector<Shard*> out;
  for (auto& [p, shard] : shards_) out.push_back(shard.get());
  return out;
}

void Coordinator::Reconcile() {
  if (stopped_) return;
  std::map<int32_t, int32_t> want;  // partition -> leader epoch
  const brokerd::TopicInfo* topic = broker_.metadata.FindTopic(std::string(kOffsetsTopic));
  if (topic != nullptr && broker_.partitions.ready()) {
    const std::string topic_id = topic->id.ToString();
    for (const auto& [index, p] : topic->partitions) {
      if (p.leader != broker_.node_id) continue;
      const StoredPartition* stored = broker_.partitions.Find(topic->name, index);
      if (stored == nullptr || stored->topic_id != topic_id) continue;
      want[index] = p.leader_epoch;
    }
  }
  for (auto it = shards_.begin(); it != shards_.end();) {
    auto w = want.find(it->first);
    if (w == want.end() || w->second != it->second->leader_epoch()) {
      // Out of the map first: unloading answers requests, whose callbacks may route again.
      std::unique_ptr<Shard> shard = std::move(it->second);
      it = shards_.erase(it);
      shard->Unload();
    } else {
      ++it;
    }
  }
  for (const auto& [index, epoch] : want) {
    if (shards_.count(index) > 0) continue;
    auto shard = std::make_unique<Shard>(broker_, index, epoch, config_);
    Shard* s = shard.get();
    shards_[index] = std::move(shard);
    s->Load();
  }
}

void Coordinator::Stop() {
  stopped_ = true;
  while (!load_waits_.empty()) EndLoadWait(load_waits_.begin()->first);
  auto shards = std::move(shards_);
  shards_.clear();
  for (auto& [p, shard] : shards) shard->Unload();
}

}  // namespace runnel::brokerd::group
