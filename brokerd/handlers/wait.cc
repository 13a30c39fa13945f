#include "brokerd/handlers/wait.h"

#include <uv.h>

namespace runnel::brokerd {
namespace {

struct Waiter {
  std::function<bool()> ready;
  std::function<void()> then;
  uv_timer_t timer;
  bool done = false;
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

void Recheck(MetadataCache& cache, const std::shared_ptr<Waiter>& w) {
  if (w->done) return;
  if (w->ready()) return Finish(w);
  cache.OnNextUpdate([&cache, w] { Recheck(cache, w); });
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
  Recheck(broker.metadata, w);
}

protocol::ErrorCode ControllerCallError(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return protocol::ErrorCode::kRequestTimedOut;
    case grpc::StatusCode::UNAVAILABLE:
      return protocol::ErrorCode::kNotController;
    default:
      return protocol::ErrorCode::kUnknownServerError;
  }
}

}  // namespace runnel::brokerd
