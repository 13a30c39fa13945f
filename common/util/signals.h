// Termination signals for daemons whose work runs on other threads (gRPC servers).
// Call BlockTerminationSignals() first thing in main, before any thread starts, so every
// thread inherits the mask; then the main thread waits in WaitForTerminationSignal().
#pragma once

#include <csignal>

namespace runnel {

inline void BlockTerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
}

// Returns the signal number that arrived (SIGTERM or SIGINT).
inline int WaitForTerminationSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

}  // namespace runnel
