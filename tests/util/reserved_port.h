// Loopback ports for tests that must name a port before a daemon binds it (a Kafka listener, a
// controller quorum's voter addresses).
//
// Picking a port by binding port 0 and closing the socket races under `ctest -j`: the kernel
// hands the same ephemeral port to the next process that asks, or uses it as the local port of
// an outgoing connection, before the daemon binds it. A reserved port is instead drawn from
// 20000-32767, below Linux's ephemeral range (32768-60999) so no outgoing connection takes it,
// and is claimed by an flock on /tmp/runnel-test-ports/<port>.lock, held until this process
// exits, so no other test process (C++ or Python: tests/integration/harness.py uses the same
// files) draws it. A port is never handed out twice within a process either.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <random>
#include <string>

namespace runnel::testing {

inline constexpr int kReservedPortLow = 20000;
inline constexpr int kReservedPortHigh = 32767;
inline constexpr char kReservedPortDir[] = "/tmp/runnel-test-ports";

// True when nothing listens on, or holds, 127.0.0.1:`port` right now.
inline bool LoopbackPortBindable(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// A 127.0.0.1 port reserved for this process (see above); 0 when none could be had in 500
// draws. Thread-safe.
inline int ReservePort() {
  static std::mutex mu;
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::lock_guard<std::mutex> lock(mu);
  ::mkdir(kReservedPortDir, 0777);
  std::uniform_int_distribution<int> pick(kReservedPortLow, kReservedPortHigh);
  for (int attempt = 0; attempt < 500; ++attempt) {
    const int port = pick(rng);
    const std::string path = std::string(kReservedPortDir) + "/" + std::to_string(port) + ".lock";
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) continue;
    // Held by this process already (an earlier draw) or by another: both refuse.
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      continue;
    }
    if (!LoopbackPortBindable(port)) {
      ::close(fd);  // releases the lock: someone outside the scheme has it
      continue;
    }
    // The descriptor stays open, and so the lock held, until the process exits.
    return port;
  }
  return 0;
}

}  // namespace runnel::testing
