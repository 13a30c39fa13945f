// The gRPC face of runnel-storaged (proto/runnel/storage.proto) over the LogManager.
//
// Synchronous API: each call runs on a gRPC thread and works partition by partition; one
// partition's failure is its Kafka error code and never fails the call. A WatchPartitions
// stream holds one gRPC thread while it lasts (one per brokerd).
//
// A watcher keeps a set of the partitions that changed since its last message, not a queue
// of changes, so a slow reader costs at most one entry per partition: while it is behind,
// changes coalesce (the message it gets next carries each partition's state as of then).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/util/mutex.h"
#include "proto/runnel/storage.grpc.pb.h"
#include "storaged/log/log_manager.h"
#include "storaged/log_dirs.h"
#include "storaged/shared_regions.h"

namespace runnel::storaged {

// Internal errors as the Kafka error code of one partition: NotFound is
// UNKNOWN_TOPIC_OR_PARTITION, OutOfRange OFFSET_OUT_OF_RANGE, InvalidArgument
// INVALID_REQUEST, FailedPrecondition INCONSISTENT_TOPIC_ID (a log of another topic id),
// and anything else (I/O, a full disk, corrupt data) KAFKA_STORAGE_ERROR.
protocol::ErrorCode KafkaErrorOf(const Status& status);

// One WatchPartitions stream's pending work: the set of partitions changed since its last
// message (a set, not a queue: memory is bounded by the partition count however slow the
// reader is). Marked from the threads that change logs, taken by the stream's thread.
//
// A change is news when a log appears or goes, or its start offset moves, or its end moves
// back. One that only moves a known log's end forward (an append; a flush) is routine: the
// appender learns of it from the append's answer, so the stream may send it later, together
// with the others of its kind, in one message.
class PartitionWatcher {
 public:
  using Clock = std::chrono::steady_clock;

  // `topics` filters the partitions of interest; empty = all.
  explicit PartitionWatcher(std::set<std::string> topics) : topics_(std::move(topics)) {}

  bool Wants(const std::string& topic) const { return topics_.empty() || topics_.count(topic); }
  // Never blocks beyond a short lock: it runs on an appending thread. `state` is the log's
  // state after the change (negative offsets: the log was deleted).
  void Mark(const TopicPartition& tp, const LogState& state);
  // Wakes Take for good.
  void Close();
  // Up to `max` changed partitions, taken out of the set, waiting up to `timeout` for one;
  // empty on timeout or once closed (then *closed is set).
  std::vector<TopicPartition> Take(std::chrono::milliseconds timeout, size_t max, bool* closed);
  // Waits while changes keep collecting: until `news_at` once a change that is news is
  // pending, else until `routine_at`. False once closed.
  bool Hold(Clock::time_point news_at, Clock::time_point routine_at);
  size_t pending() const;
  // True when a pending change is news.
  bool news() const;

 private:
  struct Offsets {
    int64_t log_start_offset;
    int64_t log_end_offset;
  };
  const std::set<std::string> topics_;
  mutable Mutex mu_;
  CondVar cv_;
  std::set<TopicPartition> dirty_ ABSL_GUARDED_BY(mu_);
  bool news_ ABSL_GUARDED_BY(mu_) = false;
  // Each wanted partition's offsets as last marked, to tell news from routine.
  std::map<TopicPartition, Offsets> marked_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

class StorageServiceImpl final : public storage::StorageService::Service {
 public:
  StorageServiceImpl(const LogDirs& dirs, LogManager& logs);
  ~StorageServiceImpl() override;

  // Ends every watch stream and refuses new ones, so the server's shutdown does not wait
  // for them. Call before grpc::Server::Shutdown.
  void Shutdown();

  grpc::Status DescribeLogDirs(grpc::ServerContext* context,
                               const storage::DescribeLogDirsRequest* request,
                               storage::DescribeLogDirsResponse* response) override;
  grpc::Status CreatePartitions(grpc::ServerContext* context,
                                const storage::PartitionsRequest* request,
                                storage::PartitionsResponse* response) override;
  grpc::Status DeletePartitions(grpc::ServerContext* context,
                                const storage::PartitionsRequest* request,
                                storage::PartitionsResponse* response) override;
  grpc::Status UpdatePartitionConfigs(grpc::ServerContext* context,
                                      const storage::PartitionsRequest* request,
                                      storage::PartitionsResponse* response) override;
  grpc::Status Append(grpc::ServerContext* context, const storage::AppendRequest* request,
                      storage::AppendResponse* response) override;
  // Append's work, on a request the caller owns (its record bytes are edited in place): the
  // gRPC Append and the append socket (storaged/append_socket.h) both come here.
  grpc::Status AppendOwned(storage::AppendRequest* request, storage::AppendResponse* response);
  grpc::Status Read(grpc::ServerContext* context, const storage::ReadRequest* request,
                    storage::ReadResponse* response) override;
  grpc::Status ListOffsets(grpc::ServerContext* context, const storage::ListOffsetsRequest* request,
                           storage::ListOffsetsResponse* response) override;
  grpc::Status DeleteRecords(grpc::ServerContext* context,
                             const storage::DeleteRecordsRequest* request,
                             storage::DeleteRecordsResponse* response) override;
  grpc::Status OffsetsForLeaderEpoch(grpc::ServerContext* context,
                                     const storage::OffsetsForLeaderEpochRequest* request,
                                     storage::OffsetsForLeaderEpochResponse* response) override;
  grpc::Status DescribeProducers(grpc::ServerContext* context,
                                 const storage::DescribeProducersRequest* request,
                                 storage::DescribeProducersResponse* response) override;
  grpc::Status GetPartitionStates(grpc::ServerContext* context,
                                  const storage::GetPartitionStatesRequest* request,
                                  storage::GetPartitionStatesResponse* response) override;
  grpc::Status WatchPartitions(grpc::ServerContext* context,
                               const storage::WatchPartitionsRequest* request,
                               grpc::ServerWriter<storage::PartitionChange>* writer) override;

  // Most partitions in one change message after the first; more wait for the next one.
  static constexpr size_t kMaxChangesPerMessage = 4096;

 private:
  // Reads the bytes of `ranges` into `out`; stops at the first range it cannot read in
  // full and returns how many ranges it read.
  int ReadRanges(const std::vector<FileRange>& ranges, std::string* out, Status* error);

  const LogDirs& dirs_;
  LogManager& logs_;
  SharedRegions shared_regions_;
  Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::shared_ptr<PartitionWatcher>> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace runnel::storaged
