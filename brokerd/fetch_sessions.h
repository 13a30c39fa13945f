// Incremental fetch sessions (KIP-227). A consumer of many partitions names them all in its
// first Fetch (a full fetch, session epoch 0); the broker keeps them, with what it last
// answered for each, as a session and gives the consumer its id. Each later Fetch of the
// session (epoch 1, 2, ...) names only the partitions whose fetch position or limits changed,
// and those to forget; its answer holds only the partitions with something new: records, a
// moved high watermark or log start offset, or an error. So a consumer of 10,000 partitions
// that keeps up sends and receives a few of them per fetch, not 10,000.
//
// As Kafka does: a session whose epoch does not follow on is refused with
// INVALID_FETCH_SESSION_EPOCH, an unknown id with FETCH_SESSION_ID_NOT_FOUND (the consumer
// then starts over with a full fetch), epoch -1 closes a session; a session is made with the
// topic ids of Fetch v13+ or the names of older versions and kept to that
// (FETCH_SESSION_TOPIC_ID_ERROR otherwise). A partition answered with records moves to the
// end of its session's order, so a fetch bounded by max_bytes serves the others first next
// time.
//
// The cache holds max.incremental.fetch.session.cache.slots sessions. When it is full, a new
// session takes the slot of the one unused for longest if that one has been idle for two
// minutes, else of the smallest session if the new one has more partitions; else the new
// fetch is answered without a session (session id 0), which a consumer takes in its stride.
//
// Everything here runs on brokerd's loop thread; a fetch holds its session by shared_ptr,
// so a session evicted while a fetch of it waits is simply no longer found by the next one.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "brokerd/storage/partition_key.h"
#include "common/protocol/messages/fetch.h"
#include "common/protocol/uuid.h"

namespace runnel::brokerd {

class FetchSession {
 public:
  struct Partition {
    std::string topic;          // as the consumer named it (empty with topic ids)
    protocol::Uuid topic_id{};  // as the consumer named it (zero before v13)
    protocol::FetchRequest::FetchPartition in;
    // What the last answer that held this partition said; -1 before any, and after an error
    // so that the answer after the error is sent.
    int64_t high_watermark = -1;
    int64_t log_start_offset = -1;
    int64_t last_stable_offset = -1;
  };

  // A new session's next epoch is 1 (tests may start elsewhere).
  FetchSession(int32_t id, bool uses_topic_ids, int32_t epoch = 1)
      : id_(id), uses_topic_ids_(uses_topic_ids), epoch_(epoch) {}

  int32_t id() const { return id_; }
  // The epoch the next incremental fetch of this session must carry.
  int32_t epoch() const { return epoch_; }
  bool uses_topic_ids() const { return uses_topic_ids_; }
  size_t size() const { return partitions_.size(); }
  // In the order a fetch of the session reads and answers them.
  const std::list<Partition>& partitions() const { return partitions_; }

  // Adds `p`, or takes its fetch position and limits when the session holds it already.
  void Upsert(Partition p);
  // Drops a partition; nothing when the session does not hold it.
  void Forget(const std::string& topic, const protocol::Uuid& topic_id, int32_t partition);
  // Applies an incremental Fetch: its partitions upserted, its forgotten ones dropped, then
  // the epoch moves on (Int32 max is followed by 1).
  void ApplyIncremental(const protocol::FetchRequest& req);

  // Records the answer `out` for a partition of the session and says whether an incremental
  // answer must hold it (Kafka's rule: records, an error, a changed high watermark or log
  // start offset). A partition with records moves to the end. False for a partition the
  // session no longer holds.
  bool Answered(const std::string& topic, const protocol::Uuid& topic_id,
                const protocol::FetchResponse::PartitionData& out);

  std::chrono::steady_clock::time_point last_used() const { return last_used_; }
  void Touch(std::chrono::steady_clock::time_point now) { last_used_ = now; }

 private:
  // The topic's name, or with topic ids its 16 bytes, and the partition.
  PartitionKey KeyOf(const std::string& topic, const protocol::Uuid& topic_id,
                     int32_t partition) const;

  const int32_t id_;
  const bool uses_topic_ids_;
  int32_t epoch_;
  std::list<Partition> partitions_;
  std::unordered_map<PartitionKey, std::list<Partition>::iterator, PartitionKeyHash> index_;
  std::chrono::steady_clock::time_point last_used_{};
};

class FetchSessionCache {
 public:
  using Clock = std::chrono::steady_clock;
  // A session idle this long gives up its slot to any new one.
  static constexpr std::chrono::milliseconds kEvictionAge{120000};

  explicit FetchSessionCache(int32_t max_slots);

  // A new session holding `partitions` in their order (a repeated partition kept once, at
  // its first place with its last parameters), or null when no slot is free or can be freed.
  std::shared_ptr<FetchSession> Create(std::vector<FetchSession::Partition> partitions,
                                       bool uses_topic_ids, Clock::time_point now);
  // The session with `id`, marked used at `now`; null when there is none.
  std::shared_ptr<FetchSession> Find(int32_t id, Clock::time_point now);
  void Remove(int32_t id);

  size_t size() const { return sessions_.size(); }

 private:
  // Frees a slot for a session of `size` partitions, if Kafka's rule allows (see the top).
  bool MakeRoom(size_t size, Clock::time_point now);

  const size_t max_slots_;
  std::unordered_map<int32_t, std::shared_ptr<FetchSession>> sessions_;
  std::mt19937 random_;
};

}  // namespace runnel::brokerd
