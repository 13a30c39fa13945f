#include "brokerd/fetch_sessions.h"

#include <limits>

#include "common/log/log.h"

namespace runnel::brokerd {
namespace {

const log::ModuleLogger kLog("brokerd.fetch");

}  // namespace

using protocol::FetchRequest;
using protocol::FetchResponse;

PartitionKey FetchSession::KeyOf(const std::string& topic, const protocol::Uuid& topic_id,
                                 int32_t partition) const {
  return {uses_topic_ids_ ? topic_id.ToByteString() : topic, partition};
}

void FetchSession::Upsert(Partition p) {
  PartitionKey key = KeyOf(p.topic, p.topic_id, p.in.partition);
  auto it = index_.find(key);
  if (it != index_.end()) {
    it->second->in = std::move(p.in);
    return;
  }
  partitions_.push_back(std::move(p));
  index_.emplace(std::move(key), std::prev(partitions_.end()));
}

void FetchSession::Forget(const std::string& topic, const protocol::Uuid& topic_id,
                          int32_t partition) {
  auto it = index_.find(KeyOf(topic, topic_id, partition));
  if (it == index_.end()) return;
  partitions_.erase(it->second);
  index_.erase(it);
}

void FetchSession::ApplyIncremental(const FetchRequest& req) {
  for (const FetchRequest::FetchTopic& topic : req.topics) {
    for (const FetchRequest::FetchPartition& in : topic.partitions) {
      Upsert(Partition{.topic = topic.topic, .topic_id = topic.topic_id, .in = in});
    }
  }
  for (const FetchRequest::ForgottenTopic& topic : req.forgotten_topics_data) {
    for (int32_t partition : topic.partitions) Forget(topic.topic, topic.topic_id, partition);
  }
  epoch_ = epoch_ == std::numeric_limits<int32_t>::max() ? 1 : epoch_ + 1;
}

bool FetchSession::Answered(const std::string& topic, const protocol::Uuid& topic_id,
                            const FetchResponse::PartitionData& out) {
  auto it = index_.find(KeyOf(topic, topic_id, out.partition_index));
  if (it == index_.end()) return false;
  Partition& p = *it->second;
  const bool has_records =
      !out.records.files.empty() || (out.records.data.has_value() && !out.records.data->empty());
  bool must = has_records;
  if (out.error_code != protocol::ErrorCode::kNone) {
    must = true;
    p.high_watermark = -1;
  } else if (p.high_watermark != out.high_watermark) {
    must = true;
    p.high_watermark = out.high_watermark;
  }
  if (p.log_start_offset != out.log_start_offset) {
    must = true;
    p.log_start_offset = out.log_start_offset;
  }
  // A transaction's end moves the last stable offset (Kafka answers that too).
  if (p.last_stable_offset != out.last_stable_offset) {
    must = true;
    p.last_stable_offset = out.last_stable_offset;
  }
  if (has_records) partitions_.splice(partitions_.end(), partitions_, it->second);
  return must;
}

FetchSessionCache::FetchSessionCache(int32_t max_slots)
    : max_slots_(static_cast<size_t>(std::max(max_slots, 0))), random_(std::random_device()()) {}

std::shared_ptr<FetchSession> FetchSessionCache::Create(
    std::vector<FetchSession::Partition> partitions, bool uses_topic_ids, Clock::time_point now) {
  if (!MakeRoom(partitions.size(), now)) return nullptr;
  std::uniform_int_distribution<int32_t> ids(1, std::numeric_limits<int32_t>::max());
  int32_t id = ids(random_);
  while (sessions_.contains(id)) id = ids(random_);
  auto session = std::make_shared<FetchSession>(id, uses_topic_ids);
  for (FetchSession::Partition& p : partitions) session->Upsert(std::move(p));
  session->Touch(now);
  sessions_.emplace(id, session);
  kLog()->debug("fetch session {} made with {} partition(s); {} in the cache", id, session->size(),
                sessions_.size());
  return session;
}

std::shared_ptr<FetchSession> FetchSessionCache::Find(int32_t id, Clock::time_point now) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return nullptr;
  it->second->Touch(now);
  return it->second;
}

void FetchSessionCache::Remove(int32_t id) { sessions_.erase(id); }

bool FetchSessionCache::MakeRoom(size_t size, Clock::time_point now) {
  if (sessions_.size() < max_slots_) return true;
  if (sessions_.empty()) return false;  // no slots at all
  auto stalest = sessions_.begin();
  auto smallest = sessions_.begin();
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (it->second->last_used() < stalest->second->last_used()) stalest = it;
    if (it->second->size() < smallest->second->size()) smallest = it;
  }
  if (now - stalest->second->last_used() >= kEvictionAge) {
    kLog()->debug("fetch session {} evicted: idle", stalest->first);
    sessions_.erase(stalest);
    return true;
  }
  if (size > smallest->second->size()) {
    kLog()->debug("fetch session {} evicted for a bigger one", smallest->first);
    sessions_.erase(smallest);
    return true;
  }
  return false;
}

}  // namespace runnel::brokerd
