// Unary gRPC calls made with the callback API, whose completions run on the loop.
//
// A completion arrives on a gRPC thread and is posted to the loop. A client keeps its calls
// in an InflightCalls so that, when it stops, it can cancel them and wait until every
// completion has run its gRPC side and freed its call: after that nothing touches the loop,
// which may then go, and no call holds the client's channel.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <utility>

#include "brokerd/net/event_loop.h"
#include "common/util/mutex.h"

namespace runnel::brokerd {

class InflightCalls {
 public:
  // Registers a call about to start; false once stopped (the call must not start).
  bool Add(grpc::ClientContext* ctx) {
    MutexLock lock(&mu_);
    if (stopped_) return false;
    calls_.insert(ctx);
    return true;
  }
  // The call's completion is done with the loop.
  void Remove(grpc::ClientContext* ctx) {
    MutexLock lock(&mu_);
    calls_.erase(ctx);
    if (calls_.empty()) cv_.SignalAll();
  }
  // Refuses new calls, cancels those in flight and waits for their completions.
  void CancelAndWait() {
    MutexLock lock(&mu_);
    stopped_ = true;
    for (grpc::ClientContext* ctx : calls_) ctx->TryCancel();
    cv_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.empty(); });
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

template <typename Resp>
using UnaryDone = std::function<void(const grpc::Status&, Resp&)>;

// Starts one call: `start(ctx, req, resp, on_complete)` is the stub's async() method bound
// to a stub. `done(status, resp)` runs on the loop, unless the loop is stopping by then (it
// drops posts) or the client has stopped (the call does not start).
template <typename Req, typename Resp, typename Done, typename Start>
void StartUnaryCall(EventLoop& loop, const std::shared_ptr<InflightCalls>& inflight, Req req,
                    std::chrono::milliseconds timeout, Done done, Start&& start) {
  struct Call {
    grpc::ClientContext ctx;
    Req req;
    Resp resp;
  };
  auto call = std::make_shared<Call>();
  call->req = std::move(req);
  call->ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  if (!inflight->Add(&call->ctx)) return;
  EventLoop* target = &loop;
  grpc::ClientContext* key = &call->ctx;
  start(&call->ctx, &call->req, &call->resp,
        [call, key, target, inflight, done = std::move(done)](grpc::Status status) mutable {
          target->Post([resp = std::move(call->resp), status, done = std::move(done)]() mutable {
            done(status, resp);
          });
          // The call (its ClientContext holds the channel) goes before the client is told,
          // not when gRPC drops this functor: once Stop() returns, the client may drop the
          // channel, and its last reference must not go on this gRPC thread (~Channel would
          // join and free the completion queue the thread is polling).
          call.reset();
          inflight->Remove(key);
        });
}

}  // namespace runnel::brokerd
