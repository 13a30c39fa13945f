// Owning libuv handles: every handle brokerd opens is held by one of these.
//
// libuv frees nothing: a handle's memory must stay valid from its init until its close
// callback has run, in a later pass of the loop. UvHandle<T> keeps that memory on the heap
// and frees it in that close callback, so whatever holds a handle may go away as soon as it
// has asked for the close. Nothing closes a handle for its holder: the holder closes its
// handles (Close(), or its destructor), and the loop's owner then runs the loop until their
// close callbacks have run (EventLoop's destructor does).
#pragma once

#include <absl/functional/any_invocable.h>
#include <uv.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <utility>

namespace runnel::brokerd {

namespace uv_internal {
// Handles allocated and not yet freed, of every type.
inline std::atomic<int64_t> live_handles{0};
// Logs a close callback's exception (a libuv callback is an entry point: nothing escapes).
void LogCallbackFailure(const char* what);
}  // namespace uv_internal

// Handles of every type allocated and not yet freed: 0 once every holder closed its handles
// and the loops ran their close callbacks (for tests).
inline int64_t LiveUvHandles() { return uv_internal::live_handles.load(); }

template <typename T>
class UvCallbackHandle;

// Owns one libuv handle of type T (uv_timer_t, uv_async_t, uv_poll_t, uv_tcp_t, uv_pipe_t,
// uv_signal_t). Move-only.
//
// Invariants: the handle's memory is allocated by Init and freed exactly once: in its close
// callback, or at once when its init failed. After Close() (or the destructor) no callback of
// the handle runs but libuv's cancellations of its pending requests and the close callback;
// get() is null from then on. The handle's `data` is the holder's to set; a holder that
// points it at itself must not move while the handle is open. Only the thread running the
// loop (any thread once it stopped) uses it; the loop must outlive the close callback.
template <typename T>
class UvHandle {
 public:
  UvHandle() = default;
  ~UvHandle() { Close(); }
  UvHandle(UvHandle&& other) noexcept : box_(std::exchange(other.box_, nullptr)) {}
  UvHandle& operator=(UvHandle&& other) noexcept {
    if (this != &other) {
      Close();
      box_ = std::exchange(other.box_, nullptr);
    }
    return *this;
  }
  UvHandle(const UvHandle&) = delete;
  UvHandle& operator=(const UvHandle&) = delete;

  // Closes the handle held, if any, then allocates a new one and runs `init` on it, e.g.
  // [loop](uv_timer_t* h) { return uv_timer_init(loop, h); }. Returns init's result; on
  // failure nothing is held.
  template <typename InitFn>
  int Init(InitFn&& init) {
    Close();
    Box* box = new Box();
    const int rc = std::forward<InitFn>(init)(static_cast<T*>(box));
    if (rc != 0) {
      delete box;  // a failed init leaves nothing registered with the loop
      return rc;
    }
    box_ = box;
    return 0;
  }

  T* get() const { return box_; }
  uv_handle_t* handle() const { return reinterpret_cast<uv_handle_t*>(get()); }
  explicit operator bool() const { return box_ != nullptr; }

  // Starts closing the handle held; `on_closed`, if given, runs in its close callback, after
  // the handle's memory is freed. False, with `on_closed` dropped unrun, when nothing is held.
  bool Close(absl::AnyInvocable<void()> on_closed = nullptr) {
    Box* box = std::exchange(box_, nullptr);
    if (box == nullptr) return false;
    box->on_closed = std::move(on_closed);
    uv_close(reinterpret_cast<uv_handle_t*>(static_cast<T*>(box)), &UvHandle::OnClosed);
    return true;
  }

 private:
  friend class UvCallbackHandle<T>;

  // The handle and what travels with it. Derives from T so that the close callback gets from
  // the handle to its box with a static_cast.
  struct Box : T {
    Box() : T{} { ++uv_internal::live_handles; }
    ~Box() { --uv_internal::live_handles; }
    absl::AnyInvocable<void()> on_closed;
    std::function<void()> on_event;  // UvTimer's and UvAsync's callback
  };

  static void OnClosed(uv_handle_t* h) {
    Box* box = static_cast<Box*>(reinterpret_cast<T*>(h));
    absl::AnyInvocable<void()> on_closed = std::move(box->on_closed);
    delete box;
    if (!on_closed) return;
    try {
      on_closed();
    } catch (const std::exception& e) {
      uv_internal::LogCallbackFailure(e.what());
    } catch (...) {
      uv_internal::LogCallbackFailure("unknown exception");
    }
  }

  Box* box_ = nullptr;
};

// A UvHandle whose libuv callback is a std::function kept with the handle (UvTimer, UvAsync).
template <typename T>
class UvCallbackHandle {
 public:
  bool open() const { return static_cast<bool>(handle_); }
  T* get() const { return handle_.get(); }
  // See UvHandle::Close.
  bool Close(absl::AnyInvocable<void()> on_closed = nullptr) {
    return handle_.Close(std::move(on_closed));
  }

 protected:
  static std::function<void()>& Callback(T* h) {
    return static_cast<typename UvHandle<T>::Box*>(h)->on_event;
  }
  // Runs a copy of the callback, so that it may replace itself, close the handle or destroy
  // the holder while it runs.
  static void Run(T* h) {
    std::function<void()> fn = Callback(h);
    if (!fn) return;
    try {
      fn();
    } catch (const std::exception& e) {
      uv_internal::LogCallbackFailure(e.what());
    } catch (...) {
      uv_internal::LogCallbackFailure("unknown exception");
    }
  }

  UvHandle<T> handle_;
};

// A timer: `fn` runs on the loop after `timeout_ms`, then every `repeat_ms` unless that is 0.
class UvTimer : public UvCallbackHandle<uv_timer_t> {
 public:
  UvTimer() = default;
  explicit UvTimer(uv_loop_t* loop) { Init(loop); }

  int Init(uv_loop_t* loop) {
    return handle_.Init([loop](uv_timer_t* h) { return uv_timer_init(loop, h); });
  }
  // (Re)starts the timer; `fn` replaces the previous callback. Nothing when closed.
  void Start(uint64_t timeout_ms, uint64_t repeat_ms, std::function<void()> fn) {
    if (!handle_) return;
    Callback(get()) = std::move(fn);
    uv_timer_start(
        get(), [](uv_timer_t* h) { Run(h); }, timeout_ms, repeat_ms);
  }
  void Stop() {
    if (handle_) uv_timer_stop(get());
  }
  bool active() const { return handle_ && uv_is_active(handle_.handle()) != 0; }
};

// An async handle: `fn` runs on the loop after Send() from any thread (sends before it runs
// make one run). The holder keeps Send() from racing with Close().
class UvAsync : public UvCallbackHandle<uv_async_t> {
 public:
  int Init(uv_loop_t* loop, std::function<void()> fn) {
    const int rc = handle_.Init(
        [loop](uv_async_t* h) { return uv_async_init(loop, h, [](uv_async_t* a) { Run(a); }); });
    if (rc == 0) Callback(get()) = std::move(fn);
    return rc;
  }
  // Any thread.
  void Send() {
    if (handle_) uv_async_send(get());
  }
};

}  // namespace runnel::brokerd
