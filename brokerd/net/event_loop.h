// One libuv loop on one thread. Other threads never touch the loop's handles; they hand
// work to it with Post(), which wakes the loop through a uv_async_t.
#pragma once

#include <uv.h>

#include <functional>
#include <mutex>
#include <vector>

namespace runnel::brokerd {

class EventLoop {
 public:
  EventLoop();
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  uv_loop_t* raw() { return &loop_; }

  // Runs until Stop() and until every handle is closed.
  void Run();
  // Thread-safe: runs `fn` on the loop thread soon. Posts after Stop() are dropped.
  void Post(std::function<void()> fn);
  // Thread-safe: asks Run() to return once the loop has no more work; `on_stop` runs on the
  // loop thread first so the owner can close its handles.
  void Stop(std::function<void()> on_stop);

 private:
  static void OnAsync(uv_async_t* handle);
  void Drain();

  uv_loop_t loop_;
  uv_async_t async_;
  std::mutex mu_;
  std::vector<std::function<void()>> queue_;
  std::function<void()> on_stop_;
  bool stopping_ = false;
};

}  // namespace runnel::brokerd
