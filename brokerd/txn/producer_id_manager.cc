#include "brokerd/txn/producer_id_manager.h"

#include <spdlog/spdlog.h>

#include "brokerd/handlers/handler.h"

namespace runnel::brokerd {

using protocol::ErrorCode;

void ProducerIdManager::Next(Done done) {
  if (current_.next >= current_.end && next_) {
    current_ = *next_;
    next_.reset();
  }
  if (current_.next < current_.end) {
    const int64_t id = current_.next++;
    MaybePrefetch();
    return done(ErrorCode::kNone, id);
  }
  if (waiters_.size() >= kMaxWaiters) return done(ErrorCode::kCoordinatorLoadInProgress, -1);
  waiters_.push_back(std::move(done));
  if (!fetching_) Fetch();
}

void ProducerIdManager::MaybePrefetch() {
  if (fetching_ || next_) return;
  // Kafka's threshold: the next block is asked for once 90% of this one is used.
  const int64_t used = current_.size - (current_.end - current_.next);
  if (used * 10 >= current_.size * 9) Fetch();
}

void ProducerIdManager::Fetch() {
  fetching_ = true;
  allocate_([this](const grpc::Status& status,
                   const runnel::controller::AllocateProducerIdsResponse& response) {
    OnAllocated(status, response);
  });
}

void ProducerIdManager::OnAllocated(
    const grpc::Status& status, const runnel::controller::AllocateProducerIdsResponse& response) {
  fetching_ = false;
  if (!status.ok() || response.error_code() != 0 || response.producer_id_start() < 0 ||
      response.producer_id_len() <= 0) {
    KafkaLog()->warn(
        "no block of producer ids from the controller: {}",
        !status.ok()
            ? status.error_message()
            : fmt::format("{} {}",
                          protocol::ErrorName(static_cast<ErrorCode>(response.error_code())),
                          response.error_message()));
    // Every waiter retries (a client backs off); the next request asks again.
    std::deque<Done> waiters;
    waiters.swap(waiters_);
    for (Done& done : waiters) done(ErrorCode::kCoordinatorLoadInProgress, -1);
    return;
  }
  Block block{response.producer_id_start(),
              response.producer_id_start() + response.producer_id_len(),
              response.producer_id_len()};
  if (current_.next < current_.end) {
    next_ = block;
  } else {
    current_ = block;
  }
  // Serve the waiters in order from what there is now; more come with the next fetch.
  while (!waiters_.empty()) {
    if (current_.next >= current_.end) {
      if (!next_) break;
      current_ = *next_;
      next_.reset();
    }
    Done done = std::move(waiters_.front());
    waiters_.pop_front();
    done(ErrorCode::kNone, current_.next++);
  }
  if (!waiters_.empty()) {
    Fetch();
  } else {
    MaybePrefetch();
  }
}

}  // namespace runnel::brokerd
