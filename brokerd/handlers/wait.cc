#include "brokerd/handlers/wait.h"

#include <algorithm>
#include <memory>

#include "brokerd/net/uv_handle.h"

namespace runnel::brokerd {
namespace {

// One WaitForMetadata. Owned by the broker's cancel_on_stop entry until it finishes (so a
// broker stopping ends it, as its timeout would); the metadata cache's and the partition
// states' pending rechecks hold their own references, the timer a weak one.
struct Waiter {
  std::function<bool()> ready;
  std::function<void()> then;
  UvTimer timer;
  UvTimer poll;  // only with a poll interval
  uint64_t cancel_id = 0;
  bool done = false;
  bool on_metadata = false;    // a recheck is registered with the metadata cache
  bool on_partitions = false;  // ... and with the partition states
};

void Finish(BrokerContext& broker, const std::shared_ptr<Waiter>& w) {
  if (w->done) return;
  w->done = true;
  w->timer.Close();
  w->poll.Close();
  std::function<void()> then = std::move(w->then);
  broker.cancel_on_stop.erase(w->cancel_id);  // may drop the last reference but `w`
  then();
}

void Recheck(BrokerContext& broker, const std::shared_ptr<Waiter>& w) {
  if (w->done) return;
  if (w->ready()) return Finish(broker, w);
  if (!w->on_metadata) {
    w->on_metadata = true;
    broker.metadata.OnNextUpdate([&broker, w] {
      w->on_metadata = false;
      Recheck(broker, w);
    });
  }
  if (!w->on_partitions) {
    w->on_partitions = true;
    broker.partitions.OnNextChange([&broker, w] {
      w->on_partitions = false;
      Recheck(broker, w);
    });
  }
}

}  // namespace

void WaitForMetadata(BrokerContext& broker, std::function<bool()> ready, int64_t timeout_ms,
                     std::function<void()> then, int64_t poll_ms) {
  auto w = std::make_shared<Waiter>();
  w->ready = std::move(ready);
  w->then = std::move(then);
  w->cancel_id = broker.next_cancel_id++;
  broker.cancel_on_stop.emplace(w->cancel_id, [&broker, w] { Finish(broker, w); });
  w->timer.Init(broker.loop.raw());
  std::weak_ptr<Waiter> weak = w;
  w->timer.Start(static_cast<uint64_t>(std::max<int64_t>(timeout_ms, 0)), 0, [&broker, weak] {
    if (auto w = weak.lock()) Finish(broker, w);
  });
  if (poll_ms > 0) {
    w->poll.Init(broker.loop.raw());
    w->poll.Start(static_cast<uint64_t>(poll_ms), static_cast<uint64_t>(poll_ms), [&broker, weak] {
      auto w = weak.lock();
      if (w && !w->done && w->ready()) Finish(broker, w);
    });
  }
  Recheck(broker, w);
}

bool PartitionsReadyHere(const BrokerContext& broker, const TopicInfo& topic) {
  for (const auto& [index, p] : topic.partitions) {
    bool here = p.HostedOn(broker.node_id);
    if (here && broker.partitions.Find(topic.name, index) == nullptr &&
        broker.partitions.CreateFailure(topic.name, index) == nullptr) {
      return false;
    }
  }
  return true;
}

protocol::ErrorCode CheckLocalPartition(const BrokerContext& broker, const TopicInfo* topic,
                                        int32_t index, int32_t current_leader_epoch,
                                        const PartitionInfo** partition, bool leader_only) {
  using protocol::ErrorCode;
  *partition = nullptr;
  if (topic == nullptr) return ErrorCode::kUnknownTopicOrPartition;
  auto p = topic->partitions.find(index);
  if (p == topic->partitions.end()) return ErrorCode::kUnknownTopicOrPartition;
  *partition = &p->second;
  if (current_leader_epoch >= 0 && current_leader_epoch < p->second.leader_epoch) {
    return ErrorCode::kFencedLeaderEpoch;
  }
  if (current_leader_epoch > p->second.leader_epoch) return ErrorCode::kUnknownLeaderEpoch;
  if ((leader_only && p->second.leader != broker.node_id) ||
      broker.partitions.Find(topic->name, index) == nullptr) {
    return ErrorCode::kNotLeaderOrFollower;
  }
  return ErrorCode::kNone;
}

}  // namespace runnel::brokerd
