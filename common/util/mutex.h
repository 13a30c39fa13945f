// A mutex, its scoped lock and a condition variable that clang's -Wthread-safety can check.
//
// They are std::mutex and std::condition_variable underneath, unchanged at run time; only
// the types carry Abseil's thread-safety annotations, which libstdc++'s do not. Members a
// mutex guards are declared ABSL_GUARDED_BY(mu_), functions that expect it held
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_), and a clang build with -Wthread-safety
// (scripts/thread-safety-check, run by `make test`) fails on any access without it.
// (LevelDB's port/port_stdcxx.h and port/thread_annotations.h do the same.)
//
// Keep a Mutex a private member (or a local): scripts/thread-safety-check then needs to parse
// only the files that name the lock vocabulary.
//
// A wait's predicate is a lambda, which the analysis checks as a function of its own: say
// that it runs under the lock with `[&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { ... }`.
#pragma once

#include <absl/base/thread_annotations.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

namespace runnel {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope, like std::unique_lock: Unlock() and Lock() let go of it for a
// while inside the scope (around a slow call or a callback); the destructor unlocks only
// when it holds it.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    if (locked_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() ABSL_UNLOCK_FUNCTION() {
    mu_->Unlock();
    locked_ = false;
  }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_->Lock();
    locked_ = true;
  }

 private:
  Mutex* const mu_;
  bool locked_ = true;
};

// std::condition_variable's waits, given the Mutex (held by the caller) instead of a
// std::unique_lock. Spurious wakeups are possible where std's are: the forms without a
// predicate may return early.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  template <typename Predicate>
  void Wait(Mutex* mu, Predicate pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Adopted lock(mu);
    cv_.wait(lock.lock, std::move(pred));
  }

  template <typename Rep, typename Period>
  std::cv_status WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Adopted lock(mu);
    return cv_.wait_for(lock.lock, timeout);
  }

  // Returns pred(): false when the time ran out first.
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& timeout, Predicate pred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Adopted lock(mu);
    return cv_.wait_for(lock.lock, timeout, std::move(pred));
  }

  template <typename Clock, typename Duration>
  std::cv_status WaitUntil(Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    Adopted lock(mu);
    return cv_.wait_until(lock.lock, deadline);
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  // The caller's hold on the mutex as the std::unique_lock std::condition_variable wants;
  // handed back on the way out (also if the predicate throws), so the caller still holds it.
  struct Adopted {
    explicit Adopted(Mutex* mu) : lock(mu->mu_, std::adopt_lock) {}
    ~Adopted() { lock.release(); }
    std::unique_lock<std::mutex> lock;
  };

  std::condition_variable cv_;
};

}  // namespace runnel
