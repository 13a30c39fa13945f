// The controller's core: options, watchers, open / apply / restore / commit, shutdown and
// WatchMetadata. The writes live beside it: controller_topics.cc (CreateTopics, DeleteTopics,
// CreatePartitions and replica placement), controller_brokers.cc (registration, DescribeCluster,
// DescribeQuorum, heartbeats and fencing) and controller_configs.cc (AlterConfigs).
#include "controllerd/controller.h"

#include <fmt/format.h>

#include <algorithm>
#include <future>

#include "common/config/config.h"
#include "controllerd/controller_internal.h"

namespace runnel::controllerd {

using internal::kLog;

namespace {

// Runnel's metadata.version (the FeatureLevelRecord written on the first start).
constexpr int32_t kMetadataVersion = 1;

// The largest batch one metadata log entry (one frame on disk) holds.
constexpr size_t kMaxEntryBytes = logformat::kMaxFrameLength - 20;

}  // namespace

ControllerOptions ControllerOptions::FromConfig(const config::Config& config) {
  ControllerOptions o;
  o.node_id = config.GetInt("node.id");
  o.default_num_partitions = config.GetInt("num.partitions");
  o.default_replication_factor = config.GetInt("default.replication.factor");
  o.min_insync_replicas = config.GetInt("min.insync.replicas");
  o.snapshot_interval_bytes = config.GetLong("metadata.log.max.record.bytes.between.snapshots");
  o.session_timeout_ms = config.GetInt("broker.session.timeout.ms");
  o.transaction_version = config.GetInt("runnel.bootstrap.transaction.version");
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
    kLog()->info("controller {} opened the metadata log: image at offset {}, voters {}",
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
  kLog()->critical("{}", std::string(fatal_.message()));
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
    kLog()->info("cluster id {} (offset {})", image_.cluster_id(), entry.offset);
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
      kLog()->warn("a metadata watcher fell behind at offset {}; its stream is ended",
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
      kLog()->warn("snapshot at offset {} failed: {}", entry.offset + 1, st.message());
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
  kLog()->info("metadata image loaded from snapshot {} ({} topics, {} brokers)",
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
    kLog()->info("controller {} is {} in term {}; the leader is controller {}", options_.node_id,
                 raft::RoleName(role), term, leader);
  } else {
    kLog()->info("controller {} is {} in term {}; no leader known", options_.node_id,
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
  auto* tv = batch.add_records()->mutable_feature_level();
  tv->set_name("transaction.version");
  tv->set_feature_level(options_.transaction_version);
  // Kafka's format writes the cluster-wide min.insync.replicas, which every topic's
  // DescribeConfigs then shows as DYNAMIC_DEFAULT_BROKER_CONFIG.
  auto* c = batch.add_records()->mutable_config();
  c->set_resource_type(metadata::CONFIG_RESOURCE_BROKER);
  c->set_resource_name("");
  c->set_name("min.insync.replicas");
  c->set_value(fmt::format("{}", options_.min_insync_replicas));
  kLog()->info("new cluster: proposing cluster id {}", cluster_id);
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
        kLog()->warn("cannot replay the log from offset {} to a watcher ({}); sending the image",
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
