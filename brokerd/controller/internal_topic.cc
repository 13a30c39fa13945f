#include "brokerd/controller/internal_topic.h"

#include <chrono>

#include "brokerd/handlers/handler.h"
#include "brokerd/handlers/wait.h"
#include "common/log/log.h"

namespace runnel::brokerd {

using protocol::ErrorCode;

namespace {

constexpr std::chrono::milliseconds kCreateTopicTimeout{10000};
constexpr int64_t kTopicWaitMs = 10000;

const log::ModuleLogger kLog("brokerd.internal");

}  // namespace

InternalTopic::InternalTopic(BrokerContext& broker, std::string name, std::function<Spec()> spec)
    : broker_(broker), name_(std::move(name)), spec_(std::move(spec)) {}

void InternalTopic::Ensure(std::function<void(ErrorCode)> done) {
  if (broker_.metadata.FindTopic(name_) != nullptr) return done(ErrorCode::kNone);
  const Spec spec = spec_();
  int32_t alive = 0;
  for (const auto& [id, b] : broker_.metadata.brokers()) {
    if (!b.fenced) ++alive;
  }
  if (alive < spec.replication_factor) {
    kLog()->warn("cannot create {}: {} broker(s) alive, its replication factor is {}", name_, alive,
                 spec.replication_factor);
    return done(ErrorCode::kCoordinatorNotAvailable);
  }
  waiters_.push_back(std::move(done));
  if (in_flight_) return;
  in_flight_ = true;

  runnel::controller::CreateTopicsRequest req;
  auto* t = req.add_topics();
  t->set_name(name_);
  t->set_num_partitions(spec.partitions);
  t->set_replication_factor(spec.replication_factor);
  for (const auto& [name, value] : spec.configs) {
    auto* c = t->add_configs();
    c->set_name(name);
    c->set_value(value);
  }
  broker_.controller.CreateTopics(
      req, kCreateTopicTimeout,
      [this](const grpc::Status& status, const runnel::controller::CreateTopicsResponse& resp) {
        const ErrorCode error = status.ok() && resp.topics_size() == 1
                                    ? protocol::ErrorFromWire(resp.topics(0).error_code())
                                    : ErrorCode::kUnknownServerError;
        if (error != ErrorCode::kNone && error != ErrorCode::kTopicAlreadyExists) {
          kLog()->warn("creating {} failed: {}", name_,
                       status.ok() ? (resp.topics_size() == 1 ? resp.topics(0).error_message()
                                                              : std::string("no result"))
                                   : status.error_message());
          return Finish(ErrorCode::kCoordinatorNotAvailable);
        }
        if (error == ErrorCode::kNone) kLog()->info("created {}", name_);
        WaitForMetadata(
            broker_, [this] { return broker_.metadata.FindTopic(name_) != nullptr; }, kTopicWaitMs,
            [this] {
              Finish(broker_.metadata.FindTopic(name_) != nullptr
                         ? ErrorCode::kNone
                         : ErrorCode::kCoordinatorNotAvailable);
            });
      });
}

void InternalTopic::Finish(ErrorCode error) {
  in_flight_ = false;
  auto waiters = std::move(waiters_);
  waiters_.clear();
  for (auto& w : waiters) w(error);
}

}  // namespace runnel::brokerd
