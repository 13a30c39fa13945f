#include "storaged/storage_service.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>

#include "common/log/log.h"
#include "common/protocol/uuid.h"
#include "common/util/topic_name.h"

namespace runnel::storaged {

using protocol::ErrorCode;
using protocol::ToWire;

namespace {

// How often a waiting WatchPartitions stream looks whether its client went away.
constexpr std::chrono::milliseconds kWatchPoll{200};
// The least time between two messages of a WatchPartitions stream: news (a log created or
// deleted, its start moved, its end moved back) goes this soon after the previous message;
// routine changes (a log's end moved on by appends) wait until kRoutineSpacing after it, or
// go with news (see PartitionWatcher).
// brokerd learns of its own appends from their answers, so under a steady run of appends
// the stream only keeps its view in step, a message per kRoutineSpacing rather than one per
// append: each costs both daemons a few thread wake-ups.
constexpr std::chrono::milliseconds kWatchSpacing{5};
constexpr std::chrono::milliseconds kRoutineSpacing{50};
// Bound of a Read answer carrying bytes, well under the channels' 256 MiB message limit.
constexpr int64_t kMaxBytesPerResponse = 128 << 20;

// Every gRPC callback is an entry point: an exception fails only this call.
template <typename Fn>
grpc::Status Guard(const char* method, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    log::Get("storaged.grpc")->error("{} failed: {}", method, e.what());
    return grpc::Status(grpc::StatusCode::INTERNAL, fmt::format("{}: {}", method, e.what()));
  } catch (...) {
    log::Get("storaged.grpc")->error("{} failed with an unknown exception", method);
    return grpc::Status(grpc::StatusCode::INTERNAL, fmt::format("{} failed", method));
  }
}

TopicPartition Tp(const std::string& topic, int32_t partition) { return {topic, partition}; }

void FillState(const Log& log, storage::PartitionState* out) {
  LogState s = log.State();
  out->set_topic(log.tp().topic);
  out->set_partition(log.tp().partition);
  out->set_topic_id(log.topic_id());
  out->set_dir(log.dir());
  out->set_log_start_offset(s.log_start_offset);
  out->set_log_end_offset(s.log_end_offset);
  out->set_high_watermark(s.high_watermark);
  out->set_last_stable_offset(s.last_stable_offset);
  out->set_size_bytes(s.size_bytes);
  out->set_segments(s.segments);
  out->set_recovery_point(s.recovery_point);
}

template <typename Result>
void SetError(Result* out, ErrorCode code, std::string message) {
  out->set_error_code(ToWire(code));
  out->set_error_message(std::move(message));
}

std::map<std::string, std::string> ConfigsOf(const storage::PartitionSpec& spec) {
  return std::map<std::string, std::string>(spec.configs().begin(), spec.configs().end());
}

std::string Message(const Status& status) { return std::string(status.message()); }

void ToProto(const FileRange& from, storage::FileRange* to) {
  to->set_path(from.path);
  to->set_position(from.position);
  to->set_length(from.length);
  to->set_inode(from.inode);
}

// The log the partition names, or nullptr with `*error` set to why not: an offline log
// (one that failed to load, or an I/O error took offline) is KAFKA_STORAGE_ERROR, as Kafka
// answers for a partition on an offline log dir.
std::shared_ptr<Log> FindLog(const LogManager& logs, const std::string& topic, int32_t partition,
                             ErrorCode* error) {
  const TopicPartition tp = Tp(topic, partition);
  std::shared_ptr<Log> log = logs.GetLog(tp);
  if (log) {
    *error = ErrorCode::kNone;
  } else {
    *error =
        logs.IsOffline(tp) ? ErrorCode::kKafkaStorageError : ErrorCode::kUnknownTopicOrPartition;
  }
  return log;
}

}  // namespace

ErrorCode KafkaErrorOf(const Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return ErrorCode::kNone;
    case absl::StatusCode::kNotFound:
      return ErrorCode::kUnknownTopicOrPartition;
    case absl::StatusCode::kOutOfRange:
      return ErrorCode::kOffsetOutOfRange;
    case absl::StatusCode::kInvalidArgument:
      return ErrorCode::kInvalidRequest;
    case absl::StatusCode::kFailedPrecondition:
      return ErrorCode::kInconsistentTopicId;
    default:
      // I/O errors, a full disk (ResourceExhausted), corrupt files (DataLoss), ...: the log
      // directory's trouble, which Kafka reports as KAFKA_STORAGE_ERROR.
      return ErrorCode::kKafkaStorageError;
  }
}

void PartitionWatcher::Mark(const TopicPartition& tp, const LogState& state) {
  if (!Wants(tp.topic)) return;
  MutexLock lock(&mu_);
  bool news = true;
  if (state.log_end_offset < 0) {
    marked_.erase(tp);
  } else {
    const Offsets now{state.log_start_offset, state.log_end_offset};
    auto [it, added] = marked_.try_emplace(tp, now);
    if (!added) {
      news = now.log_start_offset != it->second.log_start_offset ||
             now.log_end_offset < it->second.log_end_offset;
      it->second = now;
    }
  }
  const bool first = dirty_.insert(tp).second && dirty_.size() == 1;
  const bool first_news = news && !news_;
  news_ = news_ || news;
  if (first || first_news) cv_.Signal();
}

void PartitionWatcher::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
  cv_.SignalAll();
}

std::vector<TopicPartition> PartitionWatcher::Take(std::chrono::milliseconds timeout, size_t max,
                                                   bool* closed) {
  MutexLock lock(&mu_);
  cv_.WaitFor(&mu_, timeout,
              [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || !dirty_.empty(); });
  *closed = closed_;
  std::vector<TopicPartition> out;
  if (closed_) return out;
  while (!dirty_.empty() && out.size() < max) {
    out.push_back(std::move(dirty_.extract(dirty_.begin()).value()));
  }
  if (dirty_.empty()) news_ = false;
  return out;
}

bool PartitionWatcher::Hold(Clock::time_point news_at, Clock::time_point routine_at) {
  MutexLock lock(&mu_);
  while (!closed_) {
    const Clock::time_point until = news_ ? news_at : routine_at;
    if (Clock::now() >= until) return true;
    cv_.WaitUntil(&mu_, until);
  }
  return false;
}

bool PartitionWatcher::news() const {
  MutexLock lock(&mu_);
  return news_;
}

size_t PartitionWatcher::pending() const {
  MutexLock lock(&mu_);
  return dirty_.size();
}

StorageServiceImpl::StorageServiceImpl(const LogDirs& dirs, LogManager& logs)
    : dirs_(dirs), logs_(logs) {}

StorageServiceImpl::~StorageServiceImpl() { Shutdown(); }

void StorageServiceImpl::Shutdown() {
  MutexLock lock(&mu_);
  shutdown_ = true;
  for (const auto& w : watchers_) w->Close();
}

grpc::Status StorageServiceImpl::DescribeLogDirs(grpc::ServerContext*,
                                                 const storage::DescribeLogDirsRequest*,
                                                 storage::DescribeLogDirsResponse* response) {
  return Guard("DescribeLogDirs", [&] {
    response->set_node_id(dirs_.node_id());
    for (const LogDirState& d : dirs_.dirs()) {
      storage::LogDir* out = response->add_dirs();
      out->set_path(d.path);
      out->set_directory_id(d.directory_id);
      StatusOr<DiskUsage> usage = LogDirs::Usage(d.path);
      if (usage.ok()) {
        out->set_total_bytes(usage->total_bytes);
        out->set_usable_bytes(usage->usable_bytes);
      } else {
        out->set_error(Message(usage.status()));
      }
    }
    return grpc::Status::OK;
  });
}

namespace {

// The log `spec` names, checking the topic id when one is given; nullptr (with the error set
// on `out`) otherwise.
std::shared_ptr<Log> FindSpecLog(LogManager& logs, const storage::PartitionSpec& spec,
                                 storage::PartitionResult* out) {
  // Not FindLog: to a config change or a deletion an offline log is not there (brokerd's
  // reconciler takes UNKNOWN_TOPIC_OR_PARTITION as settled).
  std::shared_ptr<Log> log = logs.GetLog(Tp(spec.topic(), spec.partition()));
  if (!log) {
    SetError(out, ErrorCode::kUnknownTopicOrPartition, "no such partition here");
    return nullptr;
  }
  if (!spec.topic_id().empty() && spec.topic_id() != log->topic_id()) {
    SetError(out, ErrorCode::kInconsistentTopicId,
             fmt::format("the log holds topic id {}, not {}", log->topic_id(), spec.topic_id()));
    return nullptr;
  }
  return log;
}

}  // namespace

grpc::Status StorageServiceImpl::CreatePartitions(grpc::ServerContext*,
                                                  const storage::PartitionsRequest* request,
                                                  storage::PartitionsResponse* response) {
  return Guard("CreatePartitions", [&] {
    for (const storage::PartitionSpec& spec : request->partitions()) {
      storage::PartitionResult* out = response->add_partitions();
      out->set_topic(spec.topic());
      out->set_partition(spec.partition());
      if (std::string why = TopicNameError(spec.topic()); !why.empty()) {
        SetError(out, ErrorCode::kInvalidTopicException, why);
        continue;
      }
      if (spec.partition() < 0) {
        SetError(out, ErrorCode::kInvalidPartitions,
                 fmt::format("partition {} is negative", spec.partition()));
        continue;
      }
      std::optional<protocol::Uuid> id = protocol::Uuid::FromString(spec.topic_id());
      if (!id || id->IsZero()) {
        SetError(out, ErrorCode::kInvalidRequest,
                 fmt::format("'{}' is not a topic id (22 characters of base64)", spec.topic_id()));
        continue;
      }
      StatusOr<std::shared_ptr<Log>> log =
          logs_.CreateLog(Tp(spec.topic(), spec.partition()), spec.topic_id(), ConfigsOf(spec));
      if (log.ok()) continue;
      ErrorCode code = log.status().code() == absl::StatusCode::kInvalidArgument
                           ? ErrorCode::kInvalidConfig
                           : KafkaErrorOf(log.status());
      SetError(out, code, Message(log.status()));
    }
    return grpc::Status::OK;
  });
}

grpc::Status StorageServiceImpl::DeletePartitions(grpc::ServerContext*,
                                                  const storage::PartitionsRequest* request,
                                                  storage::PartitionsResponse* response) {
  return Guard("DeletePartitions", [&] {
    for (const storage::PartitionSpec& spec : request->partitions()) {
      storage::PartitionResult* out = response->add_partitions();
      out->set_topic(spec.topic());
      out->set_partition(spec.partition());
      if (!FindSpecLog(logs_, spec, out)) continue;
      Status st = logs_.DeleteLog(Tp(spec.topic(), spec.partition()));
      if (!st.ok()) SetError(out, KafkaErrorOf(st), Message(st));
    }
    return grpc::Status::OK;
  });
}

grpc::Status StorageServiceImpl::UpdatePartitionConfigs(grpc::ServerContext*,
                                                        const storage::PartitionsRequest* request,
                                                        storage::PartitionsResponse* response) {
  return Guard("UpdatePartitionConfigs", [&] {
    for (const storage::PartitionSpec& spec : request->partitions()) {
      storage::PartitionResult* out = response->add_partitions();
      out->set_topic(spec.topic());
      out->set_partition(spec.partition());
      if (!FindSpecLog(logs_, spec, out)) continue;
      Status st = logs_.UpdateConfig(Tp(spec.topic(), spec.partition()), ConfigsOf(spec));
      if (st.ok()) continue;
      SetError(out,
               st.code() == absl::StatusCode::kInvalidArgument ? ErrorCode::kInvalidConfig
                                                               : KafkaErrorOf(st),
               Message(st));
    }
    return grpc::Status::OK;
  });
}

grpc::Status StorageServiceImpl::Append(grpc::ServerContext*, const storage::AppendRequest* request,
                                        storage::AppendResponse* response) {
  // The request is this call's own message, parsed for it alone and read by nobody else.
  return AppendOwned(const_cast<storage::AppendRequest*>(request), response);
}

grpc::Status StorageServiceImpl::AppendOwned(storage::AppendRequest* request,
                                             storage::AppendResponse* response) {
  return Guard("Append", [&] {
    // Shared bytes are all resolved before anything is appended, so a region that cannot be
    // used fails the call as a whole with nothing written (the brokerd may then resend).
    std::vector<std::span<uint8_t>> shared(request->partitions_size());
    std::vector<std::shared_ptr<SharedRegions::Mapping>> holds(request->partitions_size());
    for (int i = 0; i < request->partitions_size(); ++i) {
      const storage::AppendPartition& p = request->partitions(i);
      if (!p.has_shared()) continue;
      StatusOr<std::span<uint8_t>> bytes = shared_regions_.Resolve(p.shared(), &holds[i]);
      if (!bytes.ok()) return ToGrpc(bytes.status());
      shared[i] = *bytes;
    }
    for (int i = 0; i < request->partitions_size(); ++i) {
      const storage::AppendPartition& p = request->partitions(i);
      storage::AppendPartitionResult* out = response->add_partitions();
      out->set_topic(p.topic());
      out->set_partition(p.partition());
      out->set_batch_index(-1);
      out->set_base_offset(-1);
      out->set_last_offset(-1);
      out->set_log_append_time(-1);
      out->set_log_start_offset(-1);
      out->set_high_watermark(-1);
      out->set_last_stable_offset(-1);
      ErrorCode error;
      std::shared_ptr<Log> log = FindLog(logs_, p.topic(), p.partition(), &error);
      if (!log) {
        SetError(out, error, "no such partition here");
        continue;
      }
      // Offsets (and LogAppendTime) are written into the batches in place: the request is
      // the caller's to change, and shared bytes are not touched by the brokerd until this
      // call is answered (SharedBytes), so editing them saves copying every produced byte
      // once more.
      std::string& bytes = *request->mutable_partitions(i)->mutable_records();
      AppendResult r = log->Append(
          p.has_shared()
              ? shared[i]
              : std::span<uint8_t>(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()),
          p.leader_epoch(),
          p.coordinator_origin() ? AppendOrigin::kCoordinator : AppendOrigin::kClient,
          p.transaction_version());
      SetError(out, r.error, std::move(r.error_message));
      out->set_batch_index(r.batch_index);
      out->set_base_offset(r.base_offset);
      out->set_last_offset(r.last_offset);
      out->set_log_append_time(r.log_append_time);
      out->set_log_start_offset(r.log_start_offset);
      out->set_high_watermark(r.high_watermark);
      out->set_last_stable_offset(r.last_stable_offset);
      out->set_topic_id(log->topic_id());
      if (r.error == ErrorCode::kNone) ToProto(r.range, out->mutable_range());
    }
    return grpc::Status::OK;
  });
}

int StorageServiceImpl::ReadRanges(const std::vector<FileRange>& ranges, std::string* out,
                                   Status* error) {
  int done = 0;
  for (const FileRange& range : ranges) {
    // Through the manager's cache of open segment files, so a remote reader costs no
    // open() per call.
    StatusOr<std::shared_ptr<FileHandle>> file = logs_.files().Get(range.path);
    if (!file.ok()) {
      *error = file.status();
      return done;
    }
    size_t start = out->size();
    out->resize(start + range.length);
    int64_t got = 0;
    while (got < range.length) {
      ssize_t n = ::pread((*file)->fd(), out->data() + start + got, range.length - got,
                          range.position + got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // Truncated or removed under the read (retention, a replication truncation): what
        // was read before this range is still whole batches.
        *error = absl::DataLossError(fmt::format("read of {} bytes at {} in {}: {}", range.length,
                                                 range.position, range.path,
                                                 n < 0 ? std::strerror(errno) : "end of file"));
        out->resize(start);
        return done;
      }
      got += n;
    }
    ++done;
  }
  return done;
}

grpc::Status StorageServiceImpl::Read(grpc::ServerContext*, const storage::ReadRequest* request,
                                      storage::ReadResponse* response) {
  return Guard("Read", [&]() -> grpc::Status {
    if (request->max_total_bytes() < 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "max_total_bytes is negative");
    }
    int64_t budget = request->max_total_bytes() > 0 ? request->max_total_bytes()
                                                    : std::numeric_limits<int64_t>::max();
    if (request->want_bytes()) budget = std::min(budget, kMaxBytesPerResponse);
    bool bounded = budget != std::numeric_limits<int64_t>::max();
    int64_t used = 0;
    for (const storage::ReadPartition& p : request->partitions()) {
      storage::ReadPartitionResult* out = response->add_partitions();
      out->set_topic(p.topic());
      out->set_partition(p.partition());
      out->set_high_watermark(-1);
      out->set_last_stable_offset(-1);
      out->set_log_start_offset(-1);
      out->set_log_end_offset(-1);
      ErrorCode error;
      std::shared_ptr<Log> log = FindLog(logs_, p.topic(), p.partition(), &error);
      if (!log) {
        SetError(out, error, "no such partition here");
        continue;
      }
      int64_t left = std::max<int64_t>(0, budget - used);
      int32_t max_bytes = static_cast<int32_t>(std::min<int64_t>(std::max(0, p.max_bytes()), left));
      // Fetch's rule: past the response bound only the first partition with data may
      // exceed its limit, so a consumer always progresses and a response stays bounded.
      bool min_one = p.min_one_batch() && (!bounded || used == 0);
      std::optional<int64_t> max_offset;
      if (p.has_max_offset()) max_offset = p.max_offset();
      ReadResult r = log->Read(p.offset(), max_bytes, min_one, max_offset, p.read_committed());
      out->set_error_code(ToWire(r.error));
      out->set_high_watermark(r.high_watermark);
      out->set_last_stable_offset(r.last_stable_offset);
      out->set_log_start_offset(r.log_start_offset);
      out->set_log_end_offset(r.log_end_offset);
      if (r.error != ErrorCode::kNone) continue;
      int kept = static_cast<int>(r.ranges.size());
      if (request->want_bytes()) {
        Status read_error;
        kept = ReadRanges(r.ranges, out->mutable_records(), &read_error);
        if (kept < static_cast<int>(r.ranges.size())) {
          log::Get("storaged.grpc")
              ->warn("[{}] read: {}", log->tp().ToString(), Message(read_error));
          if (kept == 0) SetError(out, ErrorCode::kKafkaStorageError, Message(read_error));
        }
      }
      for (int i = 0; i < kept; ++i) {
        ToProto(r.ranges[i], out->add_ranges());
        used += r.ranges[i].length;
      }
      for (const AbortedTxn& txn : r.aborted) {
        storage::AbortedTransaction* a = out->add_aborted_transactions();
        a->set_producer_id(txn.producer_id);
        a->set_first_offset(txn.first_offset);
      }
    }
    return grpc::Status::OK;
  });
}

grpc::Status StorageServiceImpl::ListOffsets(grpc::ServerContext*,
                                             const storage::ListOffsetsRequest* request,
                                             storage::ListOffsetsResponse* response) {
  return Guard("ListOffsets", [&] {
    for (const storage::ListOffsetsPartition& p : request->partitions()) {
      storage::ListOffsetsPartitionResult* out = response->add_partitions();
      out->set_topic(p.topic());
      out->set_partition(p.partition());
      out->set_offset(-1);
      out->set_timestamp(-1);
      out->set_leader_epoch(-1);
      ErrorCode error;
      std::shared_ptr<Log> log = FindLog(logs_, p.topic(), p.partition(), &error);
      if (!log) {
        out->set_error_code(ToWire(error));
        continue;
      }
      OffsetLookup r = log->ListOffset(p.timestamp(), p.isolation_level() == 1);
      out->set_error_code(ToWire(r.error));
      out->set_offset(r.offset);
      out->set_timestamp(r.timestamp);
      out->set_leader_epoch(r.leader_epoch);
    }
    return grpc::Status::OK;
  });
}

grpc::Status StorageServiceImpl::DeleteRecords(grpc::ServerContext*,
                                               const storage::DeleteRecordsRequest* request,
                                               storage::DeleteRecordsResponse* response) {
  return Guard("DeleteRecords", [&] {
    for (const storage::DeleteRecordsPartition& p : request->partitions()) {
      storage::DeleteRecordsPartitionResult* out = response->add_partitions();
      out->set_topic(p.topic());
      out->set_partition(p.partition());
      out->set_low_watermark(-1);
      ErrorCode error;
      std::shared_ptr<Log> log = FindLog(logs_, p.topic(), p.partition(), &error);
      if (!log) {
        SetError(out, error, "no such partition here");
        continue;
      }
      error = ErrorCode::kNone;
      StatusOr<int64_t> start = log->DeleteRecordsBefore(p.offset(), &error);
      if (!start.ok()) {
        SetError(out, KafkaErrorOf(start.status()), Message(start.status()));
      } else if (error != ErrorCode::kNone) {
        SetError(out, error, fmt::format("cannot delete records before offset {}", p.offset()));
      } else {
        out->set_low_watermark(*start);
      }
    }
    return grpc::Status::OK;
  });
}

grpc::Status StorageServiceImpl::OffsetsForLeaderEpoch(
    grpc::ServerContext*, const storage::OffsetsForLeaderEpochRequest* request,
    storage::OffsetsForLeaderEpochResponse* response) {
  return Guard("OffsetsForLeaderEpoch", [&] {
    for (const storage::OffsetsForLeaderEpochPartition& p : request->partitions()) {
      storage::OffsetsForLeaderEpochPartitionResult* out = response->add_partitions();
      out->set_topic(p.topic());
      out->set_partition(p.partition());
      out->set_leader_epoch(-1);
      out->set_end_offset(-1);
      ErrorCode error;
      std::shared_ptr<Log> log = FindLog(logs_, p.topic(), p.partition(), &error);
      if (!log) {
        out->set_error_code(ToWire(error));
        continue;
      }
      auto [epoch, end_offset] = log->EndOffsetForEpoch(p.leader_epoch());
      out->set_leader_epoch(epoch);
      out->set_end_offset(end_offset);
    }
    return grpc::Status::OK;
  });
}

grpc::Status StorageServiceImpl::DescribeProducers(grpc::ServerContext*,
                                                   const storage::DescribeProducersRequest* request,
                                                   storage::DescribeProducersResponse* response) {
  return Guard("DescribeProducers", [&] {
    for (const storage::DescribeProducersPartition& p : request->partitions()) {
      storage::DescribeProducersPartitionResult* out = response->add_partitions();
      out->set_topic(p.topic());
      out->set_partition(p.partition());
      ErrorCode error;
      std::shared_ptr<Log> log = FindLog(logs_, p.topic(), p.partition(), &error);
      if (log && log->offline()) error = ErrorCode::kKafkaStorageError;
      if (error != ErrorCode::kNone) {
        out->set_error_code(ToWire(error));
        continue;
      }
      for (const ActiveProducer& a : log->ActiveProducers()) {
        storage::ProducerDescription* d = out->add_producers();
        d->set_producer_id(a.producer_id);
        d->set_producer_epoch(a.epoch);
        d->set_last_sequence(a.last_sequence);
        d->set_last_timestamp(a.last_timestamp);
        d->set_coordinator_epoch(a.coordinator_epoch);
        d->set_current_txn_start_offset(a.txn_first_offset);
      }
    }
    return grpc::Status::OK;
  });
}

grpc::Status StorageServiceImpl::GetPartitionStates(
    grpc::ServerContext*, const storage::GetPartitionStatesRequest* request,
    storage::GetPartitionStatesResponse* response) {
  return Guard("GetPartitionStates", [&] {
    std::set<std::string> topics(request->topics().begin(), request->topics().end());
    std::vector<std::shared_ptr<Log>> logs = logs_.AllLogs();
    std::sort(logs.begin(), logs.end(),
              [](const auto& a, const auto& b) { return a->tp() < b->tp(); });
    for (const std::shared_ptr<Log>& log : logs) {
      if (!topics.empty() && !topics.count(log->tp().topic)) continue;
      FillState(*log, response->add_partitions());
    }
    return grpc::Status::OK;
  });
}

grpc::Status StorageServiceImpl::WatchPartitions(
    grpc::ServerContext* context, const storage::WatchPartitionsRequest* request,
    grpc::ServerWriter<storage::PartitionChange>* writer) {
  return Guard("WatchPartitions", [&]() -> grpc::Status {
    auto watcher = std::make_shared<PartitionWatcher>(
        std::set<std::string>(request->topics().begin(), request->topics().end()));
    {
      MutexLock lock(&mu_);
      if (shutdown_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "storaged is stopping");
      watchers_.insert(watcher);
    }
    // Subscribed before the snapshot is taken, so no change falls between the two (one may
    // be reported twice, which is harmless: states are absolute).
    int subscription = logs_.Subscribe(
        [watcher](const TopicPartition& tp, const LogState& state) { watcher->Mark(tp, state); });
    // Undone however this call ends, an exception included.
    struct Unwatch {
      StorageServiceImpl* self;
      int subscription;
      std::shared_ptr<PartitionWatcher> watcher;
      ~Unwatch() {
        self->logs_.Unsubscribe(subscription);
        MutexLock lock(&self->mu_);
        self->watchers_.erase(watcher);
      }
    } unwatch{this, subscription, watcher};
    grpc::Status result = grpc::Status::OK;
    {
      storage::PartitionChange first;
      std::vector<std::shared_ptr<Log>> logs = logs_.AllLogs();
      std::sort(logs.begin(), logs.end(),
                [](const auto& a, const auto& b) { return a->tp() < b->tp(); });
      for (const std::shared_ptr<Log>& log : logs) {
        if (watcher->Wants(log->tp().topic)) FillState(*log, first.add_partitions());
      }
      if (!writer->Write(first)) {
        result = grpc::Status(grpc::StatusCode::CANCELLED, "watcher stream broken");
      }
    }
    auto last_sent = PartitionWatcher::Clock::now();
    while (result.ok()) {
      if (context->IsCancelled()) {
        result = grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away");
        break;
      }
      bool closed = false;
      if (!watcher->Hold(last_sent + kWatchSpacing, last_sent + kRoutineSpacing)) {
        result = grpc::Status(grpc::StatusCode::UNAVAILABLE, "storaged is stopping");
        break;
      }
      std::vector<TopicPartition> changed =
          watcher->Take(kWatchPoll, kMaxChangesPerMessage, &closed);
      if (closed) {
        result = grpc::Status(grpc::StatusCode::UNAVAILABLE, "storaged is stopping");
        break;
      }
      if (changed.empty()) continue;
      // Each partition's state as of now: the latest wins over whatever changed before.
      storage::PartitionChange change;
      for (const TopicPartition& tp : changed) {
        storage::PartitionState* state = change.add_partitions();
        if (std::shared_ptr<Log> log = logs_.GetLog(tp)) {
          FillState(*log, state);
        } else {
          state->set_topic(tp.topic);
          state->set_partition(tp.partition);
          state->set_deleted(true);
        }
      }
      if (!writer->Write(change)) {
        result = grpc::Status(grpc::StatusCode::CANCELLED, "watcher stream broken");
      }
      last_sent = PartitionWatcher::Clock::now();
    }
    return result;
  });
}

}  // namespace runnel::storaged
