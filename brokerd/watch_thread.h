// The thread a client reads a server stream on with blocking calls (ControllerClient's
// WatchMetadata, StorageClient's WatchPartitions), and the stop that ends it wherever it is.
//
// The client's body runs on the thread, posts what it reads to the loop itself, and loops:
// Attach a fresh ClientContext before opening a stream on it, so that Stop() cancels the
// stream's blocking Read; Detach once Finish() has returned; Pause between streams. Each
// returns false once Stop() has been called, and the body then returns. What the body does
// between them (which server, how long a pause, what it tells the loop) is the client's.
//
// Stopping() and Pause() may be called from any thread, so another wait of the client (the
// controller's blocking registration) ends with the same Stop().
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <thread>

#include "common/util/mutex.h"

namespace runnel::brokerd {

class WatchThread {
 public:
  WatchThread() = default;
  ~WatchThread() { Stop(); }
  WatchThread(const WatchThread&) = delete;
  WatchThread& operator=(const WatchThread&) = delete;

  // Starts the thread running `body`; once.
  void Start(std::function<void()> body);

  // `ctx` is the context of the stream about to be opened: Stop() cancels it from now. False
  // (nothing attached) once stopping.
  [[nodiscard]] bool Attach(grpc::ClientContext* ctx);
  // The attached stream has finished; false once stopping.
  [[nodiscard]] bool Detach();
  // Waits `duration`, or less when Stop() comes; false once stopping.
  [[nodiscard]] bool Pause(std::chrono::milliseconds duration);
  bool Stopping();

  // Cancels the attached stream, ends every Pause, and waits for the thread. Again after
  // that, it does nothing.
  void Stop();

 private:
  std::thread thread_;
  Mutex mu_;
  CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace runnel::brokerd
