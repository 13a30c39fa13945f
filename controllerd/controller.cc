#include "controllerd/controller.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <future>
#include <map>
#include <set>

#include "common/config/config.h"
#include "common/config/synonyms.h"
#include "common/config/topic_config.h"
#include "common/log/log.h"
#include "common/protocol/error_code.h"
#include "common/util/topic_name.h"
#include "controllerd/placement.h"

namespace runnel::controllerd {

using protocol::ErrorCode;

namespace {

std::shared_ptr<spdlog::logger> Logger() { return log::Get("controllerd.controller"); }

// Runnel's metadata.version (the FeatureLevelRecord written on the first start).
constexpr int32_t kMetadataVersion = 1;
// Bounds what one CreateTopics topic may allocate; Kafka bounds the records of one
// operation too.
constexpr int32_t kMaxPartitionsPerTopic = 100000;

const std::string kZeroUuid(kUuidSize, '\0');

// The largest batch one metadata log entry (one frame on disk) holds.
constexpr size_t kMaxEntryBytes = logformat::kMaxFrameLength - 20;

// '.' and '_' collide in metric names, so Kafka refuses topics differing only by them.
std::string UnifyCollisionChars(const std::string& name) {
  std::string out = name;
  std::replace(out.begin(), out.end(), '.', '_');
  return out;
}

void SetError(controller::CreatableTopicResult* r, ErrorCode code, std::string message) {
  r->set_error_code(static_cast<int32_t>(code));
  r->set_error_message(std::move(message));
}

void SetError(controller::DeletableTopicResult* r, ErrorCode code, std::string message) {
  r->set_error_code(static_cast<int32_t>(code));
  r->set_error_message(std::move(message));
}

}  // namespace

ControllerOptions ControllerOptions::FromConfig(const config::Config& config) {
  ControllerOptions o;
  o.node_id = config.GetInt("node.id");
  o.default_num_partitions = config.GetInt("num.partitions");
  o.default_replication_factor = config.GetInt("default.replication.factor");
  o.snapshot_interval_bytes = config.GetLong("metadata.log.max.record.bytes.between.snapshots");
  o.session_timeout_ms = config.GetInt("broker.session.timeout.ms");
  return o;
}

// ---- Watcher ----------------------------------------------------------------------------

bool Watcher::Push(UpdatePtr update) {
  MutexLock lock(&mu_);
  if (closed_) return false;
  if (queue_.size() >= capacity_) {
    closed_ = absl::ResourceExhaustedError(fmt::format(
        "metadata watcher fell more than {} updates behind; reconnect with from_offset = the "
        "last applied offset + 1",
        capacity_));
    cv_.SignalAll();
    return false;
  }
  queue_.push_back(std::move(update));
  cv_.SignalAll();
  return true;
}

void Watcher::Close(Status why) {
  MutexLock lock(&mu_);
  if (!closed_) closed_ = std::move(why);
  cv_.SignalAll();
}

StatusOr<UpdatePtr> Watcher::Next(std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  cv_.WaitFor(&mu_, timeout, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || closed_.has_value();
  });
  if (!queue_.empty()) {
    UpdatePtr u = std::move(queue_.front());
    queue_.pop_front();
    return u;
  }
  if (closed_) return *closed_;
  return UpdatePtr();
}

bool Watcher::closed() const {
  MutexLock lock(&mu_);
  return closed_.has_value();
}

// ---- Controller: open, apply, commit ----------------------------------------------------

bool IsNotLeader(const Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition;
}

Controller::Controller(const ControllerOptions& options, std::unique_ptr<Quorum> quorum)
    : options_(options),
      quorum_(std::move(quorum)),
      uuids_(options.seed ? UuidGenerator(*options.seed) : UuidGenerator()),
      rng_(options.seed ? *options.seed ^ 0x9E3779B97F4A7C15ull : std::random_device{}()) {}

Controller::~Controller() { Shutdown(); }

StatusOr<std::unique_ptr<Controller>> Controller::Open(const ControllerOptions& options,
                                                       std::unique_ptr<Quorum> quorum) {
  std::unique_ptr<Controller> c(new Controller(options, std::move(quorum)));
  RUNNEL_RETURN_IF_ERROR(c->quorum_->Start(c.get()));
  {
    MutexLock lock(&c->mu_);
    RUNNEL_RETURN_IF_ERROR(c->fatal_);
    Logger()->info("controller {} opened the metadata log: image at offset {}, voters {}",
                   options.node_id, c->image_.offset(), fmt::join(c->quorum_->voters(), ","));
  }
  c->session_thread_ = std::thread([ptr = c.get()] { ptr->SessionLoop(); });
  return c;
}

Deadline Controller::Resolve(Deadline deadline) const {
  if (deadline != Deadline{}) return deadline;
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.default_timeout_ms);
}

Status Controller::CheckUsableLocked() const {
  if (!fatal_.ok()) return fatal_;
  if (shut_down_) return absl::UnavailableError("controller is shutting down");
  return absl::OkStatus();
}

void Controller::Fail(const Status& why) {
  if (!fatal_.ok()) return;
  fatal_ = absl::UnavailableError(
      fmt::format("controller stopped after a fatal error: {}", std::string(why.message())));
  Logger()->critical("{}", std::string(fatal_.message()));
  for (auto& w : watchers_) w->Close(fatal_);
  watchers_.clear();
  image_cv_.SignalAll();
  if (fatal_handler_) fatal_handler_(fatal_);
}

Status Controller::BeginWrite(Deadline deadline) {
  {
    MutexLock lock(&mu_);
    RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
  }
  RUNNEL_RETURN_IF_ERROR(quorum_->WaitLeaderReady(deadline));
  // A change is validated against the image, so every entry this leader proposed before must
  // be applied first: a write that timed out waiting for a majority is still in the log and
  // commits later, and validating a retry without it would write the same change twice (a
  // topic created twice under one name, which no image can apply).
  if (!quorum_->WaitFor(
          [](const QuorumState& s) {
            return s.applied_offset >= s.end_offset - 1 || s.role != raft::Role::kLeader;
          },
          deadline)) {
    return absl::UnavailableError(
        "an earlier metadata change is not committed yet (no majority of the controllers "
        "has it); try again");
  }
  RUNNEL_RETURN_IF_ERROR(quorum_->WaitLeaderReady(deadline));
  // A new cluster's first leader commits the cluster id right after its no-op.
  MutexLock lock(&mu_);
  while (true) {
    RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
    if (!image_.cluster_id().empty()) return absl::OkStatus();
    if (leader_term_ < 0) {
      return absl::FailedPreconditionError(
          fmt::format("controller {} lost the leadership before the cluster id was committed",
                      options_.node_id));
    }
    if (image_cv_.WaitUntil(&mu_, deadline) == std::cv_status::timeout &&
        image_.cluster_id().empty()) {
      return absl::UnavailableError("the cluster id was not committed within the deadline");
    }
  }
}

StatusOr<int64_t> Controller::Commit(const metadata::MetadataRecordBatch& batch, Deadline deadline,
                                     std::optional<int64_t> expected_offset) {
  std::string data = batch.SerializeAsString();
  if (data.size() > kMaxEntryBytes) {
    return absl::InvalidArgumentError(
        fmt::format("the change is {} bytes, more than the {} a metadata log entry may hold",
                    data.size(), kMaxEntryBytes));
  }
  std::future<StatusOr<int64_t>> done = quorum_->Propose(std::move(data), expected_offset);
  if (done.wait_until(deadline) != std::future_status::ready) {
    return absl::DeadlineExceededError(
        "the metadata change was not committed within the deadline (it may still commit)");
  }
  StatusOr<int64_t> offset = done.get();
  if (!offset.ok()) {
    MutexLock lock(&mu_);
    if (!fatal_.ok()) return fatal_;
  }
  return offset;
}

void Controller::Apply(const raft::Entry& entry) {
  MutexLock lock(&mu_);
  if (!fatal_.ok()) return;
  metadata::MetadataRecordBatch batch;
  if (!batch.ParseFromString(entry.data)) {
    Fail(absl::DataLossError(
        fmt::format("the metadata log entry at offset {} is not a record batch", entry.offset)));
    return;
  }
  const bool had_cluster_id = !image_.cluster_id().empty();
  if (Status st = image_.Apply(entry.offset, batch); !st.ok()) {
    Fail(st);
    return;
  }
  last_applied_term_ = entry.term;
  bytes_since_snapshot_ += entry.data.size();
  if (!had_cluster_id && !image_.cluster_id().empty()) {
    Logger()->info("cluster id {} (offset {})", image_.cluster_id(), entry.offset);
  }

  // A leader's no-op is published too (an empty delta), so watchers see consecutive offsets.
  auto update = std::make_shared<controller::MetadataUpdate>();
  update->set_offset(entry.offset);
  update->set_is_snapshot(false);
  *update->mutable_records() = std::move(*batch.mutable_records());
  SetLeaderLocked(update.get());
  UpdatePtr shared = std::move(update);
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    if ((*it)->Push(shared)) {
      ++it;
    } else {
      Logger()->warn("a metadata watcher fell behind at offset {}; its stream is ended",
                     entry.offset);
      it = watchers_.erase(it);
    }
  }
  image_cv_.SignalAll();
  MaybeProposeClusterIdLocked();

  if (bytes_since_snapshot_ >= static_cast<uint64_t>(options_.snapshot_interval_bytes)) {
    Status st = quorum_->CompactTo(raft::SnapshotId{entry.offset + 1, entry.term},
                                   image_.ToRecords().SerializeAsString());
    // The log still has everything; the next entry tries again.
    if (st.ok()) {
      bytes_since_snapshot_ = 0;
    } else {
      Logger()->warn("snapshot at offset {} failed: {}", entry.offset + 1, st.message());
    }
  }
}

void Controller::Restore(raft::SnapshotId id, const std::string& data) {
  MutexLock lock(&mu_);
  if (!fatal_.ok()) return;
  metadata::MetadataRecordBatch batch;
  if (!batch.ParseFromString(data)) {
    Fail(absl::DataLossError(
        fmt::format("snapshot {} is not a record batch", logformat::SnapshotFileName(id))));
    return;
  }
  if (Status st = image_.Load(id.end_offset - 1, batch); !st.ok()) {
    Fail(st);
    return;
  }
  last_applied_term_ = id.epoch;
  bytes_since_snapshot_ = 0;
  Logger()->info("metadata image loaded from snapshot {} ({} topics, {} brokers)",
                 logformat::SnapshotFileName(id), image_.topics().size(), image_.brokers().size());
  // Watchers hold deltas of the replaced state: they reconnect and get the new image.
  for (auto& w : watchers_) {
    w->Close(absl::UnavailableError(
        "the metadata image was replaced by a snapshot from the quorum leader; reconnect"));
  }
  watchers_.clear();
  image_cv_.SignalAll();
}

void Controller::RoleChanged(raft::Role role, int64_t term, raft::NodeId leader) {
  MutexLock lock(&mu_);
  leader_term_ = role == raft::Role::kLeader ? term : -1;
  if (leader != raft::kNoNode && term > known_leader_term_) {
    known_leader_ = static_cast<int32_t>(leader);
    known_leader_term_ = term;
  }
  // Heartbeats went to the previous leader: every broker's session starts over here.
  last_heartbeat_.clear();
  if (leader != raft::kNoNode) {
    Logger()->info("controller {} is {} in term {}; the leader is controller {}", options_.node_id,
                   raft::RoleName(role), term, leader);
  } else {
    Logger()->info("controller {} is {} in term {}; no leader known", options_.node_id,
                   raft::RoleName(role), term);
  }
  image_cv_.SignalAll();
  MaybeProposeClusterIdLocked();
}

void Controller::Fatal(const Status& why) {
  MutexLock lock(&mu_);
  Fail(why);
}

void Controller::MaybeProposeClusterIdLocked() {
  // Once this node's own no-op is applied, nothing earlier can still carry a cluster id.
  if (leader_term_ < 0 || last_applied_term_ != leader_term_ || cluster_id_term_ == leader_term_ ||
      !image_.cluster_id().empty() || shut_down_ || !fatal_.ok()) {
    return;
  }
  cluster_id_term_ = leader_term_;
  metadata::MetadataRecordBatch batch;
  std::string cluster_id = UuidToBase64(uuids_.Next());
  batch.add_records()->mutable_cluster_id()->set_cluster_id(cluster_id);
  auto* f = batch.add_records()->mutable_feature_level();
  f->set_name("metadata.version");
  f->set_feature_level(kMetadataVersion);
  Logger()->info("new cluster: proposing cluster id {}", cluster_id);
  // Completed on the driver thread once applied; a failure leaves it to the next leader.
  (void)quorum_->Propose(batch.SerializeAsString());
}

void Controller::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (auto& w : watchers_) w->Close(absl::UnavailableError("controller is shutting down"));
    watchers_.clear();
    image_cv_.SignalAll();
    session_cv_.SignalAll();
  }
  // Not under mu_: the driver thread may be waiting for it in Apply. Stopping the quorum also
  // ends a fencing write the session thread may be waiting for.
  quorum_->Stop();
  if (session_thread_.joinable()) session_thread_.join();
}

Status Controller::WaitForClusterId(Deadline deadline) {
  MutexLock lock(&mu_);
  while (true) {
    RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
    if (!image_.cluster_id().empty()) return absl::OkStatus();
    if (image_cv_.WaitUntil(&mu_, deadline) == std::cv_status::timeout &&
        image_.cluster_id().empty()) {
      return absl::UnavailableError("the cluster id is not known yet");
    }
  }
}

void Controller::SetFatalErrorHandler(std::function<void(const Status&)> handler) {
  MutexLock lock(&mu_);
  fatal_handler_ = std::move(handler);
}

MetadataImage Controller::Image() const {
  MutexLock lock(&mu_);
  return image_;
}

std::vector<int32_t> Controller::UnfencedBrokersLocked() const {
  std::vector<int32_t> out;
  for (const auto& [id, b] : image_.brokers()) {
    if (!b.fenced()) out.push_back(id);
  }
  return out;
}

std::string Controller::ManualAssignmentErrorLocked(const std::vector<int32_t>& replicas,
                                                    int32_t partition,
                                                    std::optional<size_t> replica_count) const {
  if (replicas.empty()) return "The manual partition assignment includes an empty replica list.";
  std::vector<int32_t> sorted = replicas;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (!image_.brokers().count(sorted[i])) {
      return fmt::format(
          "The manual partition assignment includes broker {}, but no such broker is registered.",
          sorted[i]);
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return fmt::format("The manual partition assignment includes the broker {} more than once.",
                         sorted[i]);
    }
  }
  if (replica_count && *replica_count != sorted.size()) {
    return fmt::format(
        "The manual partition assignment includes a partition with {} replica(s), but this is "
        "not consistent with previous partitions, which have {} replica(s).",
        sorted.size(), *replica_count);
  }
  bool any_active =
      std::any_of(sorted.begin(), sorted.end(), [&](int32_t b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !image_.brokers().at(b).fenced();
      });
  if (!any_active) {
    return fmt::format(
        "All brokers specified in the manual partition assignment for partition {} are fenced or "
        "in controlled shutdown.",
        partition);
  }
  return "";
}

std::vector<std::vector<int32_t>> Controller::PlaceReplicasLocked(
    int32_t partitions, int32_t rf, const std::vector<int32_t>& unfenced, std::string* error) {
  if (unfenced.empty()) {
    *error = fmt::format(
        "Unable to replicate the partition {} time(s): All brokers are currently fenced.", rf);
    return {};
  }
  if (static_cast<size_t>(rf) > unfenced.size()) {
    *error = fmt::format(
        "Unable to replicate the partition {} time(s): The target replication factor of {} "
        "cannot be reached because only {} broker(s) are registered.",
        rf, rf, unfenced.size());
    return {};
  }
  // With racks (broker.rack on any broker), Kafka's rack-aware placement: replicas of a
  // partition on as many racks as there are.
  std::vector<PlacementBroker> with_racks;
  bool any_rack = false;
  for (int32_t id : unfenced) {
    const auto& reg = image_.brokers().at(id);
    with_racks.push_back(PlacementBroker{id, reg.has_rack() ? reg.rack() : std::string()});
    any_rack |= reg.has_rack() && !reg.rack().empty();
  }
  if (any_rack) {
    const uint64_t start = rng_();
    const uint64_t shift = rng_();
    return PlaceRackAware(partitions, rf, with_racks, start, shift);
  }
  // Without racks: round-robin from a random start.
  std::vector<std::vector<int32_t>> placement;
  size_t start = static_cast<size_t>(rng_() % unfenced.size());
  for (int32_t p = 0; p < partitions; ++p) {
    std::vector<int32_t> replicas;
    replicas.reserve(static_cast<size_t>(std::max(rf, 0)));
    for (int32_t i = 0; i < rf; ++i) {
      replicas.push_back(
          unfenced[(start + static_cast<size_t>(p) + static_cast<size_t>(i)) % unfenced.size()]);
    }
    placement.push_back(std::move(replicas));
  }
  return placement;
}

void Controller::AddPartitionRecordsLocked(const std::string& topic_id, int32_t first_partition,
                                           const std::vector<std::vector<int32_t>>& placement,
                                           metadata::MetadataRecordBatch* batch) const {
  for (size_t p = 0; p < placement.size(); ++p) {
    auto* pr = batch->add_records()->mutable_partition();
    pr->set_topic_id(topic_id);
    pr->set_partition_id(first_partition + static_cast<int32_t>(p));
    std::vector<int32_t> isr;
    for (int32_t b : placement[p]) {
      pr->add_replicas(b);
      if (!image_.brokers().at(b).fenced()) isr.push_back(b);
    }
    for (int32_t b : isr) pr->add_isr(b);
    pr->set_leader(isr.empty() ? -1 : isr.front());
    pr->set_leader_epoch(0);
    pr->set_partition_epoch(0);
  }
}

// ---- CreateTopics -----------------------------------------------------------------------

StatusOr<controller::CreateTopicsResponse> Controller::CreateTopics(
    const controller::CreateTopicsRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());

  std::map<std::string, int> name_counts;
  for (const auto& t : request.topics()) ++name_counts[t.name()];
  // Existing and to-be-created names with '.' unified to '_', for the collision check.
  std::map<std::string, std::string> unified;
  for (const auto& [name, topic] : image_.topics()) unified[UnifyCollisionChars(name)] = name;
  std::set<std::string> new_ids;
  const std::vector<int32_t> unfenced = UnfencedBrokersLocked();

  controller::CreateTopicsResponse response;
  response.set_metadata_offset(-1);
  metadata::MetadataRecordBatch batch;
  for (const controller::CreatableTopic& t : request.topics()) {
    controller::CreatableTopicResult* r = response.add_topics();
    r->set_name(t.name());
    r->set_topic_id(kZeroUuid);
    r->set_num_partitions(-1);
    r->set_replication_factor(-1);

    if (name_counts[t.name()] > 1) {
      SetError(r, ErrorCode::kInvalidRequest, "Duplicate topic name.");
      continue;
    }
    if (std::string why = TopicNameError(t.name()); !why.empty()) {
      SetError(r, ErrorCode::kInvalidTopicException, why);
      continue;
    }
    if (image_.TopicByName(t.name()) != nullptr) {
      SetError(r, ErrorCode::kTopicAlreadyExists,
               fmt::format("Topic '{}' already exists.", t.name()));
      continue;
    }
    if (auto it = unified.find(UnifyCollisionChars(t.name())); it != unified.end()) {
      SetError(r, ErrorCode::kInvalidTopicException,
               fmt::format("Topic '{}' collides with existing topic: {}", t.name(), it->second));
      continue;
    }

    // Configs (a later duplicate of a key wins, as Kafka's request map does).
    std::map<std::string, std::string> configs;
    std::string config_error;
    for (const auto& c : t.configs()) {
      if (!c.has_value()) {
        config_error = fmt::format("Null value not supported for topic configs: {}", c.name());
        break;
      }
      configs[c.name()] = c.value();
    }
    if (config_error.empty()) {
      if (Status st = config::ValidateTopicConfigs(configs); !st.ok()) {
        config_error = std::string(st.message());
      }
    }
    if (!config_error.empty()) {
      SetError(r, ErrorCode::kInvalidConfig, config_error);
      continue;
    }

    // Placement: replicas per partition.
    std::vector<std::vector<int32_t>> placement;
    if (!t.assignments().empty()) {
      if (t.replication_factor() != -1) {
        SetError(r, ErrorCode::kInvalidRequest,
                 "A manual partition assignment was specified, but replication factor was not "
                 "set to -1.");
        continue;
      }
      if (t.num_partitions() != -1) {
        SetError(r, ErrorCode::kInvalidRequest,
                 "A manual partition assignment was specified, but numPartitions was not set "
                 "to -1.");
        continue;
      }
      std::map<int32_t, std::vector<int32_t>> by_partition;
      std::optional<size_t> replica_count;
      std::string error;
      for (const auto& a : t.assignments()) {
        if (by_partition.count(a.partition_index())) {
          error = fmt::format("Found multiple manual partition assignments for partition {}",
                              a.partition_index());
          break;
        }
        std::vector<int32_t> replicas(a.broker_ids().begin(), a.broker_ids().end());
        error = ManualAssignmentErrorLocked(replicas, a.partition_index(), replica_count);
        if (!error.empty()) break;
        replica_count = replicas.size();
        by_partition[a.partition_index()] = std::move(replicas);
      }
      if (error.empty()) {
        for (int32_t i = 0; i < static_cast<int32_t>(by_partition.size()); ++i) {
          if (!by_partition.count(i)) {
            error = "partitions should be a consecutive 0-based integer sequence";
            break;
          }
        }
      }
      if (!error.empty()) {
        SetError(r, ErrorCode::kInvalidReplicaAssignment, error);
        continue;
      }
      for (auto& [index, replicas] : by_partition) placement.push_back(std::move(replicas));
    } else {
      if (t.replication_factor() < -1 || t.replication_factor() == 0) {
        SetError(r, ErrorCode::kInvalidReplicationFactor,
                 "Replication factor must be larger than 0, or -1 to use the default value.");
        continue;
      }
      if (t.num_partitions() < -1 || t.num_partitions() == 0) {
        SetError(r, ErrorCode::kInvalidPartitions,
                 "Number of partitions was set to an invalid non-positive value.");
        continue;
      }
      int32_t partitions =
          t.num_partitions() == -1 ? options_.default_num_partitions : t.num_partitions();
      int32_t rf = t.replication_factor() == -1 ? options_.default_replication_factor
                                                : t.replication_factor();
      if (partitions > kMaxPartitionsPerTopic) {
        SetError(r, ErrorCode::kInvalidPartitions,
                 fmt::format("Number of partitions {} is more than the {} a topic may have.",
                             partitions, kMaxPartitionsPerTopic));
        continue;
      }
      std::string error;
      placement = PlaceReplicasLocked(partitions, rf, unfenced, &error);
      if (!error.empty()) {
        SetError(r, ErrorCode::kInvalidReplicationFactor, error);
        continue;
      }
    }

    // Valid: build the records.
    std::string id = kZeroUuid;
    if (!request.validate_only()) {
      do {
        id = uuids_.Next();
      } while (image_.TopicById(id) != nullptr || new_ids.count(id));
      new_ids.insert(id);
      auto* tr = batch.add_records()->mutable_topic();
      tr->set_name(t.name());
      tr->set_topic_id(id);
      for (const auto& [key, value] : configs) {
        auto* c = batch.add_records()->mutable_config();
        c->set_resource_type(metadata::CONFIG_RESOURCE_TOPIC);
        c->set_resource_name(t.name());
        c->set_name(key);
        c->set_value(value);
      }
      AddPartitionRecordsLocked(id, 0, placement, &batch);
    }
    unified[UnifyCollisionChars(t.name())] = t.name();
    r->set_error_code(0);
    r->clear_error_message();
    r->set_topic_id(id);
    r->set_num_partitions(static_cast<int32_t>(placement.size()));
    r->set_replication_factor(static_cast<int32_t>(placement.front().size()));
    for (const auto& [key, value] : config::EffectiveTopicConfigs(configs)) {
      auto* c = r->add_configs();
      c->set_name(key);
      c->set_value(value);
      c->set_read_only(false);
      c->set_config_source(configs.count(key) ? controller::DYNAMIC_TOPIC_CONFIG
                                              : controller::DEFAULT_CONFIG);
      c->set_is_sensitive(false);
    }
  }

  lock.Unlock();
  if (batch.records_size() > 0) {
    RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
    response.set_metadata_offset(offset);
    for (const auto& r : response.topics()) {
      if (r.error_code() == 0) {
        Logger()->info("created topic {} ({} partition(s), replication factor {}) at offset {}",
                       r.name(), r.num_partitions(), r.replication_factor(), offset);
      }
    }
  }
  return response;
}

// ---- DeleteTopics -----------------------------------------------------------------------

StatusOr<controller::DeleteTopicsResponse> Controller::DeleteTopics(
    const controller::DeleteTopicsRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());

  // Resolve each entry to a key naming the topic (its id when it exists), so the same topic
  // asked twice, by name or by id, is caught.
  struct Resolved {
    bool by_id = false;
    const MetadataImage::Topic* topic = nullptr;
    std::string key;
  };
  std::vector<Resolved> resolved;
  std::map<std::string, int> key_counts;
  controller::DeleteTopicsResponse response;
  response.set_metadata_offset(-1);
  for (const auto& t : request.topics()) {
    controller::DeletableTopicResult* r = response.add_topics();
    r->set_name(t.name());
    r->set_topic_id(t.topic_id());
    Resolved res;
    bool has_name = !t.name().empty();
    bool has_id = !t.topic_id().empty() && !IsZeroUuid(t.topic_id());
    if (has_name && has_id) {
      SetError(r, ErrorCode::kInvalidRequest, "You may not specify both topic name and topic id.");
    } else if (!has_name && !has_id) {
      SetError(r, ErrorCode::kInvalidRequest, "Neither topic name nor topic id was specified.");
    } else if (has_id && t.topic_id().size() != kUuidSize) {
      SetError(r, ErrorCode::kInvalidRequest,
               fmt::format("A topic id is 16 bytes, not {}.", t.topic_id().size()));
    } else if (has_name) {
      res.topic = image_.TopicByName(t.name());
      res.key = res.topic ? res.topic->id : "name:" + t.name();
    } else {
      res.by_id = true;
      res.topic = image_.TopicById(t.topic_id());
      res.key = res.topic ? res.topic->id : "id:" + t.topic_id();
    }
    if (!res.key.empty()) ++key_counts[res.key];
    resolved.push_back(std::move(res));
  }

  metadata::MetadataRecordBatch batch;
  for (int i = 0; i < response.topics_size(); ++i) {
    controller::DeletableTopicResult* r = response.mutable_topics(i);
    const Resolved& res = resolved[i];
    if (res.key.empty()) continue;  // already answered
    if (key_counts[res.key] > 1) {
      SetError(r, ErrorCode::kInvalidRequest,
               res.by_id ? "Duplicate topic id." : "Duplicate topic name.");
      continue;
    }
    if (res.topic == nullptr) {
      if (res.by_id) {
        SetError(r, ErrorCode::kUnknownTopicId, "This server does not host this topic ID.");
      } else {
        SetError(r, ErrorCode::kUnknownTopicOrPartition,
                 "This server does not host this topic-partition.");
      }
      continue;
    }
    r->set_name(res.topic->name);
    r->set_topic_id(res.topic->id);
    r->set_error_code(0);
    batch.add_records()->mutable_remove_topic()->set_topic_id(res.topic->id);
  }
  lock.Unlock();
  if (batch.records_size() > 0) {
    RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
    response.set_metadata_offset(offset);
    for (const auto& r : response.topics()) {
      if (r.error_code() == 0) Logger()->info("deleted topic {} at offset {}", r.name(), offset);
    }
  }
  return response;
}

// ---- RegisterBroker / DescribeCluster ---------------------------------------------------

StatusOr<controller::RegisterBrokerResponse> Controller::RegisterBroker(
    const controller::RegisterBrokerRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  // The broker epoch is the offset of the registration record (as in KRaft). The leader
  // knows that offset before proposing, since writers are serialized and each waits for its
  // entry; the proposal is refused (and retried here) if the entry would land elsewhere.
  for (int attempt = 0;; ++attempt) {
    RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
    MutexLock lock(&mu_);
    RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
    controller::RegisterBrokerResponse response;
    response.set_broker_epoch(-1);
    response.set_metadata_offset(-1);
    response.set_cluster_id(image_.cluster_id());
    auto fail = [&](ErrorCode code, std::string message) {
      response.set_error_code(static_cast<int32_t>(code));
      response.set_error_message(std::move(message));
      return response;
    };

    if (!request.cluster_id().empty() && request.cluster_id() != image_.cluster_id()) {
      return fail(ErrorCode::kInconsistentClusterId,
                  fmt::format("Expected cluster ID {}, but got cluster ID {}.", image_.cluster_id(),
                              request.cluster_id()));
    }
    if (request.broker_id() < 0) {
      return fail(
          ErrorCode::kInvalidRegistration,
          fmt::format("Invalid broker id {}: it must not be negative.", request.broker_id()));
    }
    if (!request.incarnation_id().empty() && !IsValidUuid(request.incarnation_id())) {
      return fail(ErrorCode::kInvalidRegistration,
                  "The incarnation id must be 16 bytes and not all zero.");
    }
    if (request.endpoints().empty()) {
      return fail(ErrorCode::kInvalidRegistration, "The broker must have at least one listener.");
    }
    std::set<std::string> listener_names;
    for (const auto& e : request.endpoints()) {
      if (e.name().empty() || e.host().empty() || e.port() < 1 || e.port() > 65535 ||
          e.security_protocol() < 0 || e.security_protocol() > 3) {
        return fail(ErrorCode::kInvalidRegistration,
                    fmt::format("Invalid listener {}://{}:{} (security protocol {}).", e.name(),
                                e.host(), e.port(), e.security_protocol()));
      }
      if (!listener_names.insert(e.name()).second) {
        return fail(ErrorCode::kInvalidRegistration,
                    fmt::format("Listener {} is given more than once.", e.name()));
      }
    }

    const int64_t epoch = image_.offset() + 1;
    metadata::MetadataRecordBatch batch;
    auto* rec = batch.add_records()->mutable_register_broker();
    rec->set_broker_id(request.broker_id());
    rec->set_broker_epoch(epoch);
    rec->set_incarnation_id(request.incarnation_id().empty() ? uuids_.Next()
                                                             : request.incarnation_id());
    *rec->mutable_endpoints() = request.endpoints();
    if (request.has_rack()) rec->set_rack(request.rack());
    rec->set_fenced(false);
    // A registration unfences: the broker leads again where it was the last in-sync replica.
    AddLeaderReturnsLocked(request.broker_id(), &batch);
    last_heartbeat_[request.broker_id()] = std::chrono::steady_clock::now();
    const bool again = image_.brokers().count(request.broker_id()) > 0;
    lock.Unlock();

    StatusOr<int64_t> offset = Commit(batch, deadline, epoch);
    if (offset.status().code() == absl::StatusCode::kAborted && attempt < 3) {
      // An earlier entry (a write that timed out) is still on its way: let it apply first.
      quorum_->WaitFor([](const QuorumState& q) { return q.applied_offset + 1 >= q.end_offset; },
                       deadline);
      continue;
    }
    if (!offset.ok()) return offset.status();
    Logger()->info("broker {} {}registered with epoch {}", request.broker_id(), again ? "re-" : "",
                   epoch);
    response.set_error_code(0);
    response.set_broker_epoch(epoch);
    response.set_metadata_offset(*offset);
    return response;
  }
}

StatusOr<controller::DescribeClusterResponse> Controller::DescribeCluster() {
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
  controller::DescribeClusterResponse response;
  response.set_error_code(0);
  response.set_cluster_id(image_.cluster_id());
  response.set_controller_id(quorum_->Leader());
  response.set_metadata_offset(image_.offset());
  for (const auto& [id, b] : image_.brokers()) {
    auto* info = response.add_brokers();
    info->set_broker_id(id);
    info->set_broker_epoch(b.broker_epoch());
    *info->mutable_endpoints() = b.endpoints();
    if (b.has_rack()) info->set_rack(b.rack());
    info->set_fenced(b.fenced());
  }
  return response;
}

StatusOr<controller::DescribeClusterResponse> Controller::DescribeClusterLinearizable(
    Deadline deadline) {
  deadline = Resolve(deadline);
  {
    MutexLock lock(&mu_);
    RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
  }
  std::future<StatusOr<int64_t>> read = quorum_->ReadIndex();
  if (read.wait_until(deadline) != std::future_status::ready) {
    return absl::DeadlineExceededError("the leadership was not confirmed within the deadline");
  }
  RUNNEL_ASSIGN_OR_RETURN(int64_t commit, read.get());
  if (!quorum_->WaitApplied(commit, deadline)) {
    return absl::DeadlineExceededError(
        fmt::format("the image did not reach offset {} within the deadline", commit));
  }
  return DescribeCluster();
}

StatusOr<controller::DescribeQuorumResponse> Controller::DescribeQuorum() {
  {
    MutexLock lock(&mu_);
    RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
  }
  QuorumState q = quorum_->State();
  if (q.role != raft::Role::kLeader) {
    return absl::FailedPreconditionError(fmt::format(
        "controller {} is not the leader (the leader is {})", options_.node_id, q.leader));
  }
  const int64_t wall_now = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  // The quorum's times are steady-clock ms; Kafka reports wall-clock ones.
  auto to_wall = [&](int64_t steady_ms) {
    return steady_ms < 0 ? int64_t{-1} : wall_now - (q.now_ms - steady_ms);
  };
  controller::DescribeQuorumResponse response;
  response.set_error_code(0);
  response.set_leader_id(options_.node_id);
  response.set_leader_epoch(q.term);
  response.set_high_watermark(q.commit_offset + 1);
  bool self_listed = false;
  std::vector<raft::ReplicaState> replicas = q.replicas;
  for (const raft::ReplicaState& r : replicas) self_listed |= r.id == options_.node_id;
  if (!self_listed) replicas.push_back(raft::ReplicaState{options_.node_id, true, -1, -1});
  std::sort(replicas.begin(), replicas.end(),
            [](const raft::ReplicaState& a, const raft::ReplicaState& b) { return a.id < b.id; });
  for (const raft::ReplicaState& r : replicas) {
    controller::QuorumReplicaState* out =
        r.voter ? response.add_voters() : response.add_observers();
    out->set_replica_id(r.id);
    if (r.id == options_.node_id) {
      out->set_log_end_offset(q.end_offset);
      out->set_last_fetch_timestamp(wall_now);
      out->set_last_caught_up_timestamp(wall_now);
      continue;
    }
    out->set_log_end_offset(r.match_offset >= 0 ? r.match_offset + 1 : -1);
    out->set_last_fetch_timestamp(to_wall(r.last_contact_ms));
    auto it = q.caught_up_ms.find(r.id);
    out->set_last_caught_up_timestamp(it == q.caught_up_ms.end() ? -1 : to_wall(it->second));
  }
  return response;
}

// ---- Broker sessions: heartbeats and fencing ---------------------------------------------

StatusOr<controller::BrokerHeartbeatResponse> Controller::BrokerHeartbeat(
    const controller::BrokerHeartbeatRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  {
    MutexLock lock(&mu_);
    RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
  }
  // Only a ready leader has every registration applied to check the epoch against.
  RUNNEL_RETURN_IF_ERROR(quorum_->WaitLeaderReady(deadline));
  controller::BrokerHeartbeatResponse response;
  response.set_metadata_offset(-1);
  response.set_is_fenced(true);
  // The registration the heartbeat is for, or null with the error set in `response`.
  auto registration =
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> const metadata::RegisterBrokerRecord* {
    auto it = image_.brokers().find(request.broker_id());
    if (it == image_.brokers().end()) {
      response.set_error_code(static_cast<int32_t>(ErrorCode::kBrokerIdNotRegistered));
      response.set_error_message(fmt::format("Broker {} is not registered.", request.broker_id()));
      return nullptr;
    }
    if (it->second.broker_epoch() != request.broker_epoch()) {
      response.set_error_code(static_cast<int32_t>(ErrorCode::kStaleBrokerEpoch));
      response.set_error_message(fmt::format("Expected broker epoch {} of broker {}, but got {}.",
                                             it->second.broker_epoch(), request.broker_id(),
                                             request.broker_epoch()));
      return nullptr;
    }
    response.set_error_code(0);
    response.clear_error_message();
    return &it->second;
  };
  auto not_leader = [&] {
    return absl::FailedPreconditionError(
        fmt::format("controller {} no longer leads the quorum", options_.node_id));
  };
  {
    MutexLock lock(&mu_);
    RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
    if (leader_term_ < 0) return not_leader();
    const metadata::RegisterBrokerRecord* reg = registration();
    if (reg == nullptr) return response;
    last_heartbeat_[request.broker_id()] = std::chrono::steady_clock::now();
    if (!reg->fenced()) {
      response.set_is_fenced(false);
      return response;
    }
  }

  // A fenced broker is back: unfence it (a write, so as the other writes).
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
  if (leader_term_ < 0) return not_leader();
  const metadata::RegisterBrokerRecord* reg = registration();  // may have changed meanwhile
  if (reg == nullptr) return response;
  last_heartbeat_[request.broker_id()] = std::chrono::steady_clock::now();
  if (!reg->fenced()) {  // another heartbeat did it
    response.set_is_fenced(false);
    return response;
  }
  metadata::MetadataRecordBatch batch;
  auto* rec = batch.add_records()->mutable_register_broker();
  *rec = *reg;
  rec->set_fenced(false);
  AddLeaderReturnsLocked(request.broker_id(), &batch);
  const int partitions = batch.records_size() - 1;
  lock.Unlock();
  RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
  Logger()->info(
      "broker {} (epoch {}) is back: unfenced at offset {}, leading {} partition(s) "
      "again",
      request.broker_id(), request.broker_epoch(), offset, partitions);
  response.set_is_fenced(false);
  response.set_metadata_offset(offset);
  return response;
}

void Controller::AddFenceRecordsLocked(int32_t broker_id,
                                       metadata::MetadataRecordBatch* batch) const {
  auto* rec = batch->add_records()->mutable_register_broker();
  *rec = image_.brokers().at(broker_id);
  rec->set_fenced(true);
  for (const auto& [name, topic] : image_.topics()) {
    for (const auto& [index, p] : topic.partitions) {
      const bool in_isr = std::find(p.isr().begin(), p.isr().end(), broker_id) != p.isr().end();
      std::vector<int32_t> others;
      for (int32_t b : p.isr()) {
        if (b != broker_id) others.push_back(b);
      }
      if (p.leader() != broker_id) {
        // A follower leaves the ISR, as in Kafka; the leader epoch stays. Unfencing does not
        // add it back: the partition leader's ISR expansion does (AlterPartition, which
        // comes with replication).
        if (!in_isr || others.empty()) continue;
        metadata::PartitionRecord* next = batch->add_records()->mutable_partition();
        *next = p;
        next->clear_isr();
        for (int32_t b : others) next->add_isr(b);
        next->set_partition_epoch(p.partition_epoch() + 1);
        continue;
      }
      int32_t leader = -1;
      for (int32_t b : others) {
        auto it = image_.brokers().find(b);
        if (it != image_.brokers().end() && !it->second.fenced()) {
          leader = b;
          break;
        }
      }
      metadata::PartitionRecord* next = batch->add_records()->mutable_partition();
      *next = p;
      if (leader >= 0) {
        next->clear_isr();
        for (int32_t b : others) next->add_isr(b);
      }
      // else: the ISR keeps its last member, which is the only safe leader when it returns.
      next->set_leader(leader);
      next->set_leader_epoch(p.leader_epoch() + 1);
      next->set_partition_epoch(p.partition_epoch() + 1);
    }
  }
}

void Controller::AddLeaderReturnsLocked(int32_t broker_id,
                                        metadata::MetadataRecordBatch* batch) const {
  for (const auto& [name, topic] : image_.topics()) {
    for (const auto& [index, p] : topic.partitions) {
      if (p.leader() != -1 ||
          std::find(p.isr().begin(), p.isr().end(), broker_id) == p.isr().end()) {
        continue;
      }
      metadata::PartitionRecord* next = batch->add_records()->mutable_partition();
      *next = p;
      next->set_leader(broker_id);
      next->set_leader_epoch(p.leader_epoch() + 1);
      next->set_partition_epoch(p.partition_epoch() + 1);
    }
  }
}

bool Controller::SessionExpiredLocked(int32_t broker_id,
                                      std::chrono::steady_clock::time_point now) {
  auto it = image_.brokers().find(broker_id);
  if (it == image_.brokers().end() || it->second.fenced()) return false;
  // First seen by this leader: its session starts now.
  auto [last, inserted] = last_heartbeat_.try_emplace(broker_id, now);
  return now - last->second >= std::chrono::milliseconds(options_.session_timeout_ms);
}

void Controller::SessionLoop() {
  MutexLock lock(&mu_);
  while (!shut_down_) {
    session_cv_.WaitFor(&mu_, std::chrono::milliseconds(options_.session_check_interval_ms),
                        [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shut_down_; });
    if (shut_down_) break;
    lock.Unlock();
    FenceExpiredBrokers();
    lock.Lock();
  }
}

void Controller::FenceExpiredBrokers() {
  // Only a ready leader: its image has every registration and fencing before its term.
  if (!quorum_->IsLeaderReady()) return;
  std::vector<int32_t> expired;
  {
    MutexLock lock(&mu_);
    if (!CheckUsableLocked().ok() || leader_term_ < 0) return;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [id, b] : image_.brokers()) {
      if (SessionExpiredLocked(id, now)) expired.push_back(id);
    }
  }
  // One write per broker: each election sees the brokers fenced before it.
  for (int32_t id : expired) FenceBroker(id);
}

void Controller::FenceBroker(int32_t broker_id) {
  const Deadline deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.session_timeout_ms);
  MutexLock write_lock(&write_mu_);
  if (Status st = BeginWrite(deadline); !st.ok()) {
    Logger()->debug("not fencing broker {}: {}", broker_id, st.message());
    return;
  }
  MutexLock lock(&mu_);
  // A heartbeat or a registration may have come while this waited for the writer mutex.
  if (!CheckUsableLocked().ok() || leader_term_ < 0 ||
      !SessionExpiredLocked(broker_id, std::chrono::steady_clock::now())) {
    return;
  }
  const int64_t epoch = image_.brokers().at(broker_id).broker_epoch();
  metadata::MetadataRecordBatch batch;
  AddFenceRecordsLocked(broker_id, &batch);
  std::vector<std::string> moves;  // for the log line (the first few)
  for (int i = 1; i < batch.records_size() && moves.size() < 10; ++i) {
    const metadata::PartitionRecord& p = batch.records(i).partition();
    const MetadataImage::Topic* topic = image_.TopicById(p.topic_id());
    moves.push_back(
        fmt::format("{}-{}->{}", topic ? topic->name : "?", p.partition_id(), p.leader()));
  }
  lock.Unlock();
  StatusOr<int64_t> offset = Commit(batch, deadline);
  if (!offset.ok()) {
    Logger()->warn("fencing broker {} failed: {}", broker_id, offset.status().message());
    return;
  }
  const int moved = batch.records_size() - 1;
  Logger()->warn("broker {} (epoch {}) sent no heartbeat for {} ms: fenced at offset {}{}{}{}",
                 broker_id, epoch, options_.session_timeout_ms, *offset,
                 moved == 0
                     ? std::string()
                     : fmt::format("; new leaders of its {} partition(s) (-1 = none): ", moved),
                 fmt::join(moves, ", "), moved > 10 ? ", ..." : "");
}

// ---- CreatePartitions -------------------------------------------------------------------

StatusOr<controller::CreatePartitionsResponse> Controller::CreatePartitions(
    const controller::CreatePartitionsRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());

  std::map<std::string, int> name_counts;
  for (const auto& t : request.topics()) ++name_counts[t.name()];
  const std::vector<int32_t> unfenced = UnfencedBrokersLocked();

  controller::CreatePartitionsResponse response;
  response.set_metadata_offset(-1);
  metadata::MetadataRecordBatch batch;
  for (const controller::CreatePartitionsTopic& t : request.topics()) {
    controller::CreatePartitionsTopicResult* r = response.add_topics();
    r->set_name(t.name());
    auto fail = [r](ErrorCode code, std::string message) {
      r->set_error_code(static_cast<int32_t>(code));
      r->set_error_message(std::move(message));
    };
    if (name_counts[t.name()] > 1) {
      fail(ErrorCode::kInvalidRequest, "Duplicate topic name.");
      continue;
    }
    const MetadataImage::Topic* topic = image_.TopicByName(t.name());
    if (topic == nullptr) {
      // Kafka answers this one without a message (the client's default text says it all).
      r->set_error_code(static_cast<int32_t>(ErrorCode::kUnknownTopicOrPartition));
      continue;
    }
    const int32_t current = static_cast<int32_t>(topic->partitions.size());
    if (t.count() == current) {
      fail(ErrorCode::kInvalidPartitions,
           fmt::format("Topic already has {} partition(s).", current));
      continue;
    }
    if (t.count() < current) {
      fail(ErrorCode::kInvalidPartitions,
           fmt::format("The topic {} currently has {} partition(s); {} would not be an increase.",
                       t.name(), current, t.count()));
      continue;
    }
    if (t.count() > kMaxPartitionsPerTopic) {
      fail(ErrorCode::kInvalidPartitions,
           fmt::format("Number of partitions {} is more than the {} a topic may have.", t.count(),
                       kMaxPartitionsPerTopic));
      continue;
    }
    if (topic->partitions.empty()) {
      fail(ErrorCode::kUnknownServerError,
           fmt::format("Invalid state: topic {} appears to have no partitions.", t.name()));
      continue;
    }
    const int32_t additional = t.count() - current;
    // New partitions get as many replicas as the existing ones (Kafka takes the first's).
    const int32_t rf = topic->partitions.begin()->second.replicas_size();

    std::vector<std::vector<int32_t>> placement;
    std::string error;
    if (t.manual()) {
      if (t.assignments_size() != additional) {
        error = fmt::format(
            "Attempted to add {} additional partition(s), but only {} assignment(s) were "
            "specified.",
            additional, t.assignments_size());
      }
      for (int i = 0; error.empty() && i < t.assignments_size(); ++i) {
        std::vector<int32_t> replicas(t.assignments(i).broker_ids().begin(),
                                      t.assignments(i).broker_ids().end());
        error = ManualAssignmentErrorLocked(replicas, current + i, static_cast<size_t>(rf));
        placement.push_back(std::move(replicas));
      }
      if (!error.empty()) {
        fail(ErrorCode::kInvalidReplicaAssignment, error);
        continue;
      }
    } else {
      placement = PlaceReplicasLocked(additional, rf, unfenced, &error);
      if (!error.empty()) {
        fail(ErrorCode::kInvalidReplicationFactor, error);
        continue;
      }
    }
    if (!request.validate_only()) AddPartitionRecordsLocked(topic->id, current, placement, &batch);
    r->set_error_code(0);
  }

  lock.Unlock();
  if (batch.records_size() > 0) {
    RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
    response.set_metadata_offset(offset);
    for (int i = 0; i < response.topics_size(); ++i) {
      if (response.topics(i).error_code() == 0) {
        Logger()->info("topic {} now has {} partition(s) (offset {})", response.topics(i).name(),
                       request.topics(i).count(), offset);
      }
    }
  }
  return response;
}

// ---- AlterConfigs -----------------------------------------------------------------------

namespace {

// Kafka's AlterConfigOp.OpType ids.
constexpr int32_t kOpSet = 0;
constexpr int32_t kOpDelete = 1;
constexpr int32_t kOpAppend = 2;
constexpr int32_t kOpSubtract = 3;

std::string Join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

metadata::ConfigRecord MakeConfigRecord(int32_t type, const std::string& resource,
                                        const std::string& key, std::optional<std::string> value) {
  metadata::ConfigRecord c;
  c.set_resource_type(static_cast<metadata::ConfigResourceType>(type));
  c.set_resource_name(resource);
  c.set_name(key);
  if (value) c.set_value(std::move(*value));
  return c;
}

}  // namespace

std::optional<protocol::KafkaError> Controller::AlterResourceLocked(
    const controller::AlterConfigsResource& resource, bool incremental,
    std::vector<metadata::ConfigRecord>* records) const {
  auto invalid_request = [](std::string message) {
    return protocol::KafkaError{ErrorCode::kInvalidRequest, std::move(message)};
  };
  const auto& configs = resource.configs();
  const int32_t type = resource.resource_type();
  const std::string& name = resource.resource_name();

  // The request's shape, checked as Kafka's broker does before the controller sees it.
  std::set<std::string> keys;
  for (const auto& c : configs) {
    if (!keys.insert(c.name()).second) return invalid_request("Error due to duplicate config keys");
  }
  std::vector<std::string> nulls;
  for (const auto& c : configs) {
    if (!c.has_value() && !(incremental && c.operation() == kOpDelete)) nulls.push_back(c.name());
  }
  if (!nulls.empty()) {
    return invalid_request(fmt::format("Null value not supported for : {}", Join(nulls, ", ")));
  }
  const bool is_topic = type == metadata::CONFIG_RESOURCE_TOPIC;
  if (!is_topic && type != metadata::CONFIG_RESOURCE_BROKER) {
    return invalid_request(fmt::format("Unknown resource type {}", type));
  }
  for (const auto& c : configs) {
    if (incremental && (c.operation() < kOpSet || c.operation() > kOpSubtract)) {
      return invalid_request(fmt::format("Unknown operations type {}", c.operation()));
    }
  }

  // The resource and its current explicit configs.
  static const std::map<std::string, std::string> kNone;
  const std::map<std::string, std::string>* current = &kNone;
  const MetadataImage::Topic* topic = nullptr;
  int32_t broker_id = -1;
  if (is_topic) {
    if (name.empty()) return invalid_request("Default topic resources are not allowed.");
    if (std::string why = TopicNameError(name); !why.empty()) {
      return protocol::KafkaError{ErrorCode::kInvalidTopicException, why};
    }
    topic = image_.TopicByName(name);
    if (topic != nullptr) current = &topic->configs;
  } else {
    if (!name.empty()) {
      auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), broker_id);
      if (ec != std::errc() || ptr != name.data() + name.size()) {
        return invalid_request("Unable to parse broker name as a base 10 number.");
      }
      if (broker_id < 0) return invalid_request("Invalid negative broker ID.");
    }
    auto it = image_.broker_configs().find(name);
    if (it != image_.broker_configs().end()) current = &it->second;
  }

  // The explicit configs after the change: legacy AlterConfigs replaces them all.
  std::map<std::string, std::string> next;
  if (incremental) next = *current;
  for (const auto& c : configs) {
    if (!incremental || c.operation() == kOpSet) {
      next[c.name()] = c.value();
      continue;
    }
    if (c.operation() == kOpDelete) {
      next.erase(c.name());
      continue;
    }
    const bool append = c.operation() == kOpAppend;
    const config::KeyDef* def =
        is_topic ? config::FindTopicKey(c.name()) : config::FindKey(c.name());
    if (def == nullptr || def->type != config::KeyType::kList) {
      return protocol::KafkaError{ErrorCode::kInvalidConfig,
                                  fmt::format("Can't {} to key {} because its type is not LIST.",
                                              append ? "APPEND" : "SUBTRACT", c.name())};
    }
    // Without an explicit value the list starts from the declared default, as in Kafka.
    auto it = next.find(c.name());
    std::vector<std::string> items =
        config::SplitList(it != next.end() ? it->second : std::string(def->default_value));
    for (const std::string& item : config::SplitList(c.value())) {
      auto pos = std::find(items.begin(), items.end(), item);
      if (append && pos == items.end()) items.push_back(item);
      if (!append && pos != items.end()) items.erase(pos);
    }
    next[c.name()] = Join(items, ",");
  }

  // The resulting set is checked whole, as Kafka's validators do.
  if (is_topic) {
    if (Status st = config::ValidateTopicConfigs(next); !st.ok()) {
      return protocol::KafkaError{ErrorCode::kInvalidConfig, std::string(st.message())};
    }
    if (topic == nullptr) {
      return protocol::KafkaError{ErrorCode::kUnknownTopicOrPartition,
                                  fmt::format("The topic '{}' does not exist.", name)};
    }
  } else {
    // Kafka answers a key that cannot change at runtime, and a bad value, with INVALID_REQUEST
    // (KAFKA-13609 keeps that code for compatibility).
    std::vector<std::string> fixed;
    for (const auto& [key, value] : next) {
      if (!config::IsDynamicNodeKey(key)) fixed.push_back(key);
    }
    if (!fixed.empty()) {
      return invalid_request(
          fmt::format("Cannot update these configs dynamically: Set({})", Join(fixed, ", ")));
    }
    for (const auto& [key, value] : next) {
      if (std::string why = config::CheckValue(*config::FindKey(key), value); !why.empty()) {
        return invalid_request(
            fmt::format("Invalid value {} for configuration {}: {}", value, key, why));
      }
    }
    if (!name.empty() && !image_.brokers().count(broker_id) && broker_id != options_.node_id) {
      return protocol::KafkaError{ErrorCode::kBrokerIdNotRegistered,
                                  fmt::format("No node with id {} found.", broker_id)};
    }
  }

  for (const auto& [key, value] : next) {
    auto it = current->find(key);
    if (it == current->end() || it->second != value) {
      records->push_back(MakeConfigRecord(type, name, key, value));
    }
  }
  for (const auto& [key, value] : *current) {
    if (!next.count(key)) records->push_back(MakeConfigRecord(type, name, key, std::nullopt));
  }
  return std::nullopt;
}

StatusOr<controller::AlterConfigsResponse> Controller::AlterConfigs(
    const controller::AlterConfigsRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());

  std::map<std::pair<int32_t, std::string>, int> resource_counts;
  for (const auto& res : request.resources()) {
    ++resource_counts[{res.resource_type(), res.resource_name()}];
  }
  controller::AlterConfigsResponse response;
  response.set_metadata_offset(-1);
  metadata::MetadataRecordBatch batch;
  std::vector<std::string> changes;  // for the log line
  for (const controller::AlterConfigsResource& res : request.resources()) {
    controller::AlterConfigsResult* r = response.add_results();
    r->set_resource_type(res.resource_type());
    r->set_resource_name(res.resource_name());
    if (resource_counts[{res.resource_type(), res.resource_name()}] > 1) {
      r->set_error_code(static_cast<int32_t>(ErrorCode::kInvalidRequest));
      r->set_error_message("Each resource must appear at most once.");
      continue;
    }
    std::vector<metadata::ConfigRecord> records;
    if (std::optional<protocol::KafkaError> error =
            AlterResourceLocked(res, request.incremental(), &records)) {
      r->set_error_code(static_cast<int32_t>(error->code));
      r->set_error_message(std::move(error->message));
      continue;
    }
    r->set_error_code(0);
    if (request.validate_only()) continue;
    for (metadata::ConfigRecord& c : records) {
      std::string what = c.resource_type() == metadata::CONFIG_RESOURCE_TOPIC
                             ? fmt::format("topic {}", c.resource_name())
                         : c.resource_name().empty() ? std::string("cluster default")
                                                     : fmt::format("broker {}", c.resource_name());
      std::string value = !c.has_value()                     ? std::string("(default)")
                          : config::IsSensitiveKey(c.name()) ? std::string("[hidden]")
                                                             : c.value();
      changes.push_back(fmt::format("{} {}={}", what, c.name(), value));
      *batch.add_records()->mutable_config() = std::move(c);
    }
  }
  lock.Unlock();
  if (batch.records_size() > 0) {
    RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
    response.set_metadata_offset(offset);
    Logger()->info("configs changed at offset {}: {}", offset, Join(changes, ", "));
  }
  return response;
}

// ---- WatchMetadata ----------------------------------------------------------------------

UpdatePtr Controller::SnapshotUpdateLocked() const {
  auto update = std::make_shared<controller::MetadataUpdate>();
  update->set_offset(image_.offset());
  update->set_is_snapshot(true);
  *update->mutable_records() = std::move(*image_.ToRecords().mutable_records());
  SetLeaderLocked(update.get());
  return update;
}

void Controller::SetLeaderLocked(controller::MetadataUpdate* update) const {
  if (known_leader_term_ < 0) return;
  update->set_leader_id(known_leader_);
  update->set_leader_epoch(known_leader_term_);
}

StatusOr<std::shared_ptr<Watcher>> Controller::Watch(int64_t from_offset) {
  {
    MutexLock lock(&mu_);
    RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
  }
  auto watcher = std::make_shared<Watcher>(options_.watcher_queue_capacity);
  // On the driver thread, between applies: the image, the log and the watcher's start agree,
  // and the watcher is registered before the next entry is applied.
  std::future<Status> done = quorum_->RunOnDriver([&](const raft::Storage& storage) -> Status {
    MutexLock lock(&mu_);
    RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
    const int64_t end = image_.offset() + 1;  // only applied entries are replayed
    const int64_t start = storage.start_offset();
    bool snapshot = from_offset <= 0 || from_offset < start || from_offset > end ||
                    static_cast<uint64_t>(end - from_offset) >= options_.watcher_queue_capacity;
    if (!snapshot) {
      Status st = absl::OkStatus();
      for (int64_t next = from_offset; st.ok() && next < end;) {
        StatusOr<std::vector<raft::Entry>> entries = storage.Read(next, end, 1 << 20);
        if (!entries.ok()) {
          st = entries.status();
          break;
        }
        if (entries->empty()) {
          st = absl::InternalError(fmt::format("the log returned nothing at offset {}", next));
          break;
        }
        for (const raft::Entry& e : *entries) {
          auto update = std::make_shared<controller::MetadataUpdate>();
          metadata::MetadataRecordBatch batch;
          if (e.offset != next || !batch.ParseFromString(e.data)) {
            st = absl::DataLossError(fmt::format("bad metadata log entry at offset {}", next));
            break;
          }
          update->set_offset(e.offset);
          update->set_is_snapshot(false);
          *update->mutable_records() = std::move(*batch.mutable_records());
          SetLeaderLocked(update.get());
          if (!watcher->Push(std::move(update))) {
            st = absl::ResourceExhaustedError("catch-up larger than the watcher queue");
            break;
          }
          ++next;
        }
      }
      if (!st.ok()) {
        Logger()->warn("cannot replay the log from offset {} to a watcher ({}); sending the image",
                       from_offset, st.message());
        watcher = std::make_shared<Watcher>(options_.watcher_queue_capacity);
        snapshot = true;
      }
    }
    if (snapshot) watcher->Push(SnapshotUpdateLocked());
    watchers_.push_back(watcher);
    return absl::OkStatus();
  });
  RUNNEL_RETURN_IF_ERROR(done.get());
  return watcher;
}

void Controller::Unwatch(const std::shared_ptr<Watcher>& watcher) {
  MutexLock lock(&mu_);
  watchers_.erase(std::remove(watchers_.begin(), watchers_.end(), watcher), watchers_.end());
  watcher->Close(absl::CancelledError("watch ended"));
}

}  // namespace runnel::controllerd
