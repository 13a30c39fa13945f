#include "brokerd/net/event_loop.h"

#include <cstdio>
#include <exception>

#include "common/log/log.h"

namespace runnel::brokerd {

EventLoop::EventLoop() {
  uv_loop_init(&loop_);
  uv_async_init(&loop_, &async_, &EventLoop::OnAsync);
  async_.data = this;
}

EventLoop::~EventLoop() {
  if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&async_))) {
    uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
  }
  uv_run(&loop_, UV_RUN_DEFAULT);
  uv_loop_close(&loop_);
}

void EventLoop::Run() { uv_run(&loop_, UV_RUN_DEFAULT); }

void EventLoop::Post(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(fn));
  }
  uv_async_send(&async_);
}

void EventLoop::Stop(std::function<void()> on_stop) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    on_stop_ = std::move(on_stop);
  }
  uv_async_send(&async_);
}

void EventLoop::OnAsync(uv_async_t* handle) { static_cast<EventLoop*>(handle->data)->Drain(); }

void EventLoop::Drain() {
  std::vector<std::function<void()>> work;
  std::function<void()> on_stop;
  bool stopping;
  {
    std::lock_guard lock(mu_);
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
    if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&async_))) {
      uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
    }
  }
}

}  // namespace runnel::brokerd
