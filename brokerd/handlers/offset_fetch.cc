// OffsetFetch (key 9), v1-v10: a group's committed offsets, from the coordinator's memory.
//
// One group (v1-v7) or many (v8+). Null topics (v2+) ask for every partition the group has
// committed. A partition without a committed offset answers offset -1, empty metadata and
// no error, also for a group that does not exist (Kafka's behaviour). With require_stable
// (v7+), a partition whose commit is still being written, or with an offset of a transaction
// not ended yet (TxnOffsetCommit), answers UNSTABLE_OFFSET_COMMIT so the client retries. v9 carries
// the member id and epoch, checked for KIP-848 groups. Group-level errors (NOT_COORDINATOR,
// COORDINATOR_LOAD_IN_PROGRESS, a stale member epoch): per group in v8+, the top-level error in
// v2-v7, on every asked partition in v1. v10 (KIP-848) names topics by id, in the request and the
// answer, as Kafka: an id this broker does not know is UNKNOWN_TOPIC_ID on each asked partition;
// with null topics, the answer leaves out a topic whose offsets outlive it (no id to give it).
#include "brokerd/group/coordinator.h"
#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {
namespace {

using protocol::ErrorCode;
using protocol::OffsetFetchRequest;
using protocol::OffsetFetchResponse;

constexpr int16_t kFirstTopLevelErrorVersion = 2;
constexpr int16_t kFirstMultiGroupVersion = 8;
constexpr int16_t kFirstTopicIdVersion = 10;

struct PartitionResult {
  int32_t partition = 0;
  int64_t offset = -1;
  int32_t leader_epoch = -1;
  std::string metadata;
  ErrorCode error = ErrorCode::kNone;
};
struct TopicResult {
  std::string name;
  protocol::Uuid id;
  std::vector<PartitionResult> partitions;
};
struct QueryTopic {
  std::string name;
  protocol::Uuid id;
  std::vector<int32_t> partitions;
  ErrorCode error = ErrorCode::kNone;  // UNKNOWN_TOPIC_ID: answered without the group
};
struct GroupQuery {
  std::string group_id;
  std::optional<std::string> member_id;
  int32_t member_epoch = -1;
  std::optional<std::vector<QueryTopic>> topics;
};
struct GroupResult {
  ErrorCode error = ErrorCode::kNone;
  std::vector<TopicResult> topics;
};

PartitionResult Lookup(const group::GroupSlot* slot, const std::string& topic, int32_t partition,
                       bool require_stable) {
  PartitionResult r;
  r.partition = partition;
  if (slot == nullptr) return r;
  const group::TopicPartition tp{topic, partition};
  // Unstable: a commit still being written, or an offset of an open transaction (Kafka's
  // rule for require_stable). Without it, the last committed offset.
  if (require_stable && (slot->pending_partitions.count(tp) > 0 || slot->HasPendingTxnOffset(tp))) {
    r.error = ErrorCode::kUnstableOffsetCommit;
    return r;
  }
  auto it = slot->offsets.find(tp);
  if (it == slot->offsets.end()) return r;
  r.offset = it->second.offset;
  r.leader_epoch = it->second.leader_epoch;
  r.metadata = it->second.metadata;
  return r;
}

GroupResult FetchGroup(BrokerContext& broker, const GroupQuery& q, bool require_stable,
                       bool by_id) {
  GroupResult result;
  group::Coordinator::Route route = broker.groups.RouteGroup(q.group_id);
  if (route.error != ErrorCode::kNone) {
    result.error = route.error;
    return result;
  }
  const group::GroupSlot* slot = route.shard->Find(q.group_id);
  if (slot != nullptr) {
    ErrorCode error = ErrorCode::kNone;
    if (slot->consumer && (q.member_id.has_value() || q.member_epoch >= 0)) {
      error = slot->consumer->ValidateOffsetFetch(q.member_id.value_or(""), q.member_epoch);
    } else if (slot->classic) {
      error = slot->classic->ValidateOffsetFetch(q.member_id.value_or(""), q.member_epoch);
    }
    if (error == ErrorCode::kGroupIdNotFound) {
      slot = nullptr;  // a Dead group: as if it did not exist
    } else if (error != ErrorCode::kNone) {
      result.error = error;
      return result;
    }
  }
  if (q.topics.has_value()) {
    for (const QueryTopic& qt : *q.topics) {
      TopicResult& t = result.topics.emplace_back();
      t.name = qt.name;
      t.id = qt.id;
      for (int32_t p : qt.partitions) {
        if (qt.error != ErrorCode::kNone) {
          PartitionResult& pr = t.partitions.emplace_back();
          pr.partition = p;
          pr.error = qt.error;
          continue;
        }
        t.partitions.push_back(Lookup(slot, qt.name, p, require_stable));
      }
    }
    return result;
  }
  if (slot == nullptr) return result;
  bool skipping = false;  // the current topic has no id (v10): left out
  for (const auto& [tp, offset] : slot->offsets) {
    if (result.topics.empty() || result.topics.back().name != tp.first) {
      const TopicInfo* info = by_id ? broker.metadata.FindTopic(tp.first) : nullptr;
      skipping = by_id && info == nullptr;
      if (skipping) continue;
      TopicResult& t = result.topics.emplace_back();
      t.name = tp.first;
      if (info != nullptr) t.id = info->id;
    } else if (skipping) {
      continue;
    }
    result.topics.back().partitions.push_back(Lookup(slot, tp.first, tp.second, require_stable));
  }
  return result;
}

// Moves `topics` into a response's topic list: v8+ (per group) and v0-v7 (top level) have
// different types with the same fields.
template <typename ResponseTopic>
void AppendTopics(std::vector<TopicResult>& topics, std::vector<ResponseTopic>* out) {
  for (TopicResult& t : topics) {
    ResponseTopic& ot = out->emplace_back();
    ot.name = std::move(t.name);
    if constexpr (requires { ot.topic_id; }) ot.topic_id = t.id;
    for (PartitionResult& p : t.partitions) {
      auto& op = ot.partitions.emplace_back();
      op.partition_index = p.partition;
      op.committed_offset = p.offset;
      op.committed_leader_epoch = p.leader_epoch;
      op.metadata = std::move(p.metadata);
      op.error_code = p.error;
    }
  }
}

}  // namespace

void HandleOffsetFetch(BrokerContext& broker, std::unique_ptr<RequestContext> ctx,
                       Respond respond) {
  OffsetFetchRequest req;
  if (!DecodeRequest(*ctx, &req)) return respond(Response::Close());
  const int16_t version = ctx->header.api_version;

  const bool by_id = version >= kFirstTopicIdVersion;
  std::vector<GroupQuery> queries;
  if (version < kFirstMultiGroupVersion) {
    GroupQuery& q = queries.emplace_back();
    q.group_id = req.group_id;
    if (req.topics.has_value()) {
      q.topics.emplace();
      for (const auto& t : *req.topics) {
        q.topics->push_back({t.name, protocol::Uuid(), t.partition_indexes});
      }
    }
  } else {
    for (const auto& g : req.groups) {
      GroupQuery& q = queries.emplace_back();
      q.group_id = g.group_id;
      q.member_id = g.member_id;
      q.member_epoch = g.member_epoch;
      if (g.topics.has_value()) {
        q.topics.emplace();
        for (const auto& t : *g.topics) {
          QueryTopic& qt = q.topics->emplace_back();
          qt.name = t.name;
          qt.id = t.topic_id;
          qt.partitions = t.partition_indexes;
          if (!by_id) continue;
          const TopicInfo* info = broker.metadata.FindTopicById(t.topic_id);
          if (info == nullptr) {
            qt.name.clear();
            qt.error = ErrorCode::kUnknownTopicId;
          } else {
            qt.name = info->name;
          }
        }
      }
    }
  }

  OffsetFetchResponse resp;
  for (const GroupQuery& q : queries) {
    GroupResult r = FetchGroup(broker, q, req.require_stable, by_id);
    if (version >= kFirstMultiGroupVersion) {
      OffsetFetchResponse::OffsetFetchResponseGroup& g = resp.groups.emplace_back();
      g.group_id = q.group_id;
      g.error_code = r.error;
      AppendTopics(r.topics, &g.topics);
      continue;
    }
    if (r.error != ErrorCode::kNone && version < kFirstTopLevelErrorVersion &&
        q.topics.has_value()) {
      // No top-level error before v2: the group's error goes on each asked partition.
      for (const QueryTopic& qt : *q.topics) {
        TopicResult& t = r.topics.emplace_back();
        t.name = qt.name;
        for (int32_t p : qt.partitions) {
          PartitionResult& pr = t.partitions.emplace_back();
          pr.partition = p;
          pr.error = r.error;
        }
      }
    }
    resp.error_code = version >= kFirstTopLevelErrorVersion ? r.error : ErrorCode::kNone;
    AppendTopics(r.topics, &resp.topics);
  }
  respond(EncodeResponse(*ctx, resp));
}

}  // namespace runnel::brokerd
