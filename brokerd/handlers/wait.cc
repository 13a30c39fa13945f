#include "brokerd/handlers/wait.h"

#include <uv.h>

#include <algorithm>

namespace runnel::brokerd {
namespace {

struct Waiter {
  std::function<bool()> ready;
  std::function<void()> then;
  uv_timer_t timer;
  bool done = false;
  bool on_metadata = false;    // a recheck is registered with the metadata cache
  bool on_partitions = false;  // ... and with the partition states
};

// The timer's data is a heap shared_ptr owning the waiter until the timer is closed; the
// cache's pending callbacks hold their own references.
void Finish(const std::shared_ptr<Waiter>& w) {
  if (w->done) return;
  w->done = true;
  uv_timer_stop(&w->timer);
  uv_close(reinterpret_cast<uv_handle_t*>(&w->timer), [](uv_handle_t* h) {
    delete static_cast<std::shared_ptr<Waiter>*>(h->data);
  });
  w->then();
}

void Recheck(BrokerContext& broker, const std::shared_ptr<Waiter>& w) {
  if (w->done) return;
  if (w->ready()) return Finish(w);
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
                     std::function<void()> then) {
  auto w = std::make_shared<Waiter>();
  w->ready = std::move(ready);
  w->then = std::move(then);
  uv_timer_init(broker.loop.raw(), &w->timer);
  w->timer.data = new std::shared_ptr<Waiter>(w);
  uv_timer_start(
      &w->timer,
      [](uv_timer_t* t) {
        std::shared_ptr<Waiter> w = *static_cast<std::shared_ptr<Waiter>*>(t->data);
        Finish(w);
      },
      static_cast<uint64_t>(std::max<int64_t>(timeout_ms, 0)), 0);
  Recheck(broker, w);
}

bool PartitionsReadyHere(const BrokerContext& broker, const TopicInfo& topic) {
  for (const auto& [index, p] : topic.partitions) {
    bool here = std::find(p.replicas.begin(), p.replicas.end(), broker.node_id) != p.replicas.end();
    if (here && broker.partitions.Find(topic.name, index) == nullptr) return false;
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
