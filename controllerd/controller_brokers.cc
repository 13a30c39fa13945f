// Controller operations on brokers: RegisterBroker, DescribeCluster, DescribeQuorum, and
// broker sessions (heartbeats, fencing, unfencing), and producer id blocks for brokers.
#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <limits>
#include <set>

#include "common/protocol/error_code.h"
#include "controllerd/controller.h"
#include "controllerd/controller_internal.h"

namespace runnel::controllerd {

using internal::kLog;
using protocol::ErrorCode;

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
    kLog()->info("broker {} {}registered with epoch {}", request.broker_id(), again ? "re-" : "",
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
    protocol::KafkaError error =
        CheckBrokerEpochLocked(request.broker_id(), request.broker_epoch());
    response.set_error_code(static_cast<int32_t>(error.code));
    if (!error.ok()) {
      response.set_error_message(std::move(error.message));
      return nullptr;
    }
    response.clear_error_message();
    return &image_.brokers().at(request.broker_id());
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
  kLog()->info(
      "broker {} (epoch {}) is back: unfenced at offset {}, leading {} partition(s) "
      "again",
      request.broker_id(), request.broker_epoch(), offset, partitions);
  response.set_is_fenced(false);
  response.set_metadata_offset(offset);
  return response;
}

protocol::KafkaError Controller::CheckBrokerEpochLocked(int32_t broker_id,
                                                        int64_t broker_epoch) const {
  auto it = image_.brokers().find(broker_id);
  if (it == image_.brokers().end()) {
    return {ErrorCode::kBrokerIdNotRegistered,
            fmt::format("Broker {} is not registered.", broker_id)};
  }
  if (it->second.broker_epoch() != broker_epoch) {
    return {ErrorCode::kStaleBrokerEpoch,
            fmt::format("Expected broker epoch {} of broker {}, but got {}.",
                        it->second.broker_epoch(), broker_id, broker_epoch)};
  }
  return {};
}

// ---- Producer id blocks -------------------------------------------------------------------

StatusOr<controller::AllocateProducerIdsResponse> Controller::AllocateProducerIds(
    const controller::AllocateProducerIdsRequest& request, Deadline deadline) {
  deadline = Resolve(deadline);
  MutexLock write_lock(&write_mu_);
  RUNNEL_RETURN_IF_ERROR(BeginWrite(deadline));
  MutexLock lock(&mu_);
  RUNNEL_RETURN_IF_ERROR(CheckUsableLocked());
  controller::AllocateProducerIdsResponse response;
  response.set_producer_id_start(-1);
  response.set_metadata_offset(-1);
  protocol::KafkaError error = CheckBrokerEpochLocked(request.broker_id(), request.broker_epoch());
  if (!error.ok()) {
    response.set_error_code(static_cast<int32_t>(error.code));
    response.set_error_message(std::move(error.message));
    return response;
  }
  // Writers are serialized and each waits for its entry, so the image holds every block
  // handed out before this one.
  const int64_t start = image_.next_producer_id();
  if (start > std::numeric_limits<int64_t>::max() - kProducerIdBlockSize) {
    response.set_error_code(static_cast<int32_t>(ErrorCode::kUnknownServerError));
    response.set_error_message(
        fmt::format("Exhausted all producer ids: the next one would be {}.", start));
    return response;
  }
  metadata::MetadataRecordBatch batch;
  auto* rec = batch.add_records()->mutable_producer_ids();
  rec->set_broker_id(request.broker_id());
  rec->set_broker_epoch(request.broker_epoch());
  rec->set_next_producer_id(start + kProducerIdBlockSize);
  lock.Unlock();
  RUNNEL_ASSIGN_OR_RETURN(int64_t offset, Commit(batch, deadline));
  kLog()->info("producer ids [{}, {}) handed to broker {}", start, start + kProducerIdBlockSize,
               request.broker_id());
  response.set_error_code(0);
  response.set_producer_id_start(start);
  response.set_producer_id_len(kProducerIdBlockSize);
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
    kLog()->debug("not fencing broker {}: {}", broker_id, st.message());
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
    kLog()->warn("fencing broker {} failed: {}", broker_id, offset.status().message());
    return;
  }
  const int moved = batch.records_size() - 1;
  kLog()->warn("broker {} (epoch {}) sent no heartbeat for {} ms: fenced at offset {}{}{}{}",
               broker_id, epoch, options_.session_timeout_ms, *offset,
               moved == 0
                   ? std::string()
                   : fmt::format("; new leaders of its {} partition(s) (-1 = none): ", moved),
               fmt::join(moves, ", "), moved > 10 ? ", ..." : "");
}
}  // namespace runnel::controllerd
