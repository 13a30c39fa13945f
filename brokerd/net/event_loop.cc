#include "brokerd/net/event_loop.h"

#include <exception>

#include "common/log/log.h"

namespace runnel::brokerd {

EventLoop::EventLoop() {
  uv_loop_init(&loop_);
  async_.Init(&loop_, [this] { Drain(); });
}

EventLoop::~EventLoop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    async_.Close();
  }
  for (int pass = 0; pass < kMaxClosingPasses; ++pass) {
    if (uv_loop_close(&loop_) == 0) return;
    uv_run(&loop_, UV_RUN_NOWAIT);
  }
  if (uv_loop_close(&loop_) == 0) return;
  // Only to say which: closing them here would free nothing and hide whose they were.
  uv_walk(
      &loop_,
      [](uv_handle_t* h, void*) {
        log::Get("brokerd.loop")
            ->error("a {} handle is still {} as the loop goes; its holder did not close it",
                    uv_handle_type_name(uv_handle_get_type(h)),
                    uv_is_closing(h) != 0 ? "closing" : "open");
      },
      nullptr);
}

void EventLoop::Run() { uv_run(&loop_, UV_RUN_DEFAULT); }

void EventLoop::Post(std::function<void()> fn) {
  MutexLock lock(&mu_);
  if (stopping_) return;
  queue_.push_back(std::move(fn));
  async_.Send();
}

void EventLoop::Stop(std::function<void()> on_stop) {
  MutexLock lock(&mu_);
  if (stopping_) return;
  stopping_ = true;
  on_stop_ = std::move(on_stop);
  async_.Send();
}

void EventLoop::Drain() {
  std::vector<std::function<void()>> work;
  std::function<void()> on_stop;
  bool stopping;
  {
    MutexLock lock(&mu_);
    work.swap(queue_);
    stopping = stopping_;
    on_stop = std::move(on_stop_);
    on_stop_ = nullptr;
  }
  for (auto& fn : work) {
    // Each posted closure is an entry point: a failure fails that piece of work only.
    try {
      fn();
    } catch (const std::exception& e) {
      log::Get("brokerd.loop")->error("posted task failed: {}", e.what());
    }
  }
  if (stopping) {
    if (on_stop) on_stop();
    MutexLock lock(&mu_);
    async_.Close();
  }
}

}  // namespace runnel::brokerd
