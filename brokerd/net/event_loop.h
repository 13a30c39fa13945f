// One libuv loop on one thread. Other threads never touch the loop's handles; they hand
// work to it with Post(), which wakes the loop through an async handle.
//
// Every handle on the loop is held by a UvHandle (uv_handle.h) whose holder closes it; the
// loop closes only its own wake-up handle. The loop's owner destroys the holders of handles
// before the EventLoop, whose destructor then runs the loop until their close callbacks ran.
#pragma once

#include <uv.h>

#include <functional>
#include <vector>

#include "brokerd/net/uv_handle.h"
#include "common/util/mutex.h"

namespace runnel::brokerd {

class EventLoop {
 public:
  EventLoop();
  // Closes the wake-up handle and runs the loop until every handle is closed, for at most
  // kMaxClosingPasses passes; a handle still open then (its holder never closed it) is
  // logged. Loop thread, with no Post or Stop racing it.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  uv_loop_t* raw() { return &loop_; }

  // Runs until Stop() and until every active handle is closed.
  void Run();
  // Thread-safe: runs `fn` on the loop thread soon. Posts after Stop() are dropped.
  void Post(std::function<void()> fn);
  // Thread-safe: asks Run() to return once the loop has no more work; `on_stop` runs on the
  // loop thread first so the owner can close its handles.
  void Stop(std::function<void()> on_stop);

  // Passes of the loop ~EventLoop runs at most for the close callbacks (one pass runs those
  // asked for before it; a close callback may close more).
  static constexpr int kMaxClosingPasses = 64;

 private:
  void Drain();

  uv_loop_t loop_;
  Mutex mu_;
  // Sent and closed under mu_: once stopping_ is set no thread sends again, so the loop
  // thread may close it.
  UvAsync async_;
  std::vector<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_stop_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace runnel::brokerd
