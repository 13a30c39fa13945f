#include "brokerd/watch_thread.h"

#include <utility>

namespace runnel::brokerd {

void WatchThread::Start(std::function<void()> body) { thread_ = std::thread(std::move(body)); }

bool WatchThread::Attach(grpc::ClientContext* ctx) {
  MutexLock lock(&mu_);
  if (stopping_) return false;
  ctx_ = ctx;
  return true;
}

bool WatchThread::Detach() {
  MutexLock lock(&mu_);
  ctx_ = nullptr;
  return !stopping_;
}

bool WatchThread::Pause(std::chrono::milliseconds duration) {
  MutexLock lock(&mu_);
  return !cv_.WaitFor(&mu_, duration,
                      [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; });
}

bool WatchThread::Stopping() {
  MutexLock lock(&mu_);
  return stopping_;
}

void WatchThread::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

}  // namespace runnel::brokerd
