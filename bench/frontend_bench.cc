// Kafka front-end throughput: pipelined small requests on one connection.
//
//   frontend_bench <host:port> [requests] [window]
//
// Sends `requests` ApiVersions v3 requests with `window` in flight to the broker at
// host:port and reports requests/s. In the same run it does the same against a reference:
// a raw loopback TCP server in this process that answers every frame with a frame of the
// same size as the broker's answer and does no other work. The ratio broker/reference says
// how close the broker's request path comes to the cost of the loopback bytes alone.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

bool WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

int Connect(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    perror("connect");
    exit(1);
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// An ApiVersions v3 request frame with the given correlation id.
std::vector<uint8_t> ApiVersionsFrame(int32_t corr) {
  std::vector<uint8_t> b = {0, 18, 0, 3};
  for (int s : {24, 16, 8, 0}) b.push_back(static_cast<uint8_t>(corr >> s));
  b.insert(b.end(), {0, 5, 'b', 'e', 'n', 'c', 'h', 0});       // client id, header tags
  b.insert(b.end(), {6, 'b', 'e', 'n', 'c', 'h', 2, '1', 0});  // software name/version, tags
  std::vector<uint8_t> f = {0, 0, 0, static_cast<uint8_t>(b.size())};
  f.insert(f.end(), b.begin(), b.end());
  return f;
}

// Runs `requests` pipelined requests with `window` in flight; returns requests/s and the
// size of one response frame body. Responses are read in bulk so the client is not the
// bottleneck.
double Run(int fd, int requests, int window, size_t* response_size) {
  std::vector<uint8_t> frame = ApiVersionsFrame(0);
  std::vector<uint8_t> in(1 << 20);
  size_t have = 0;
  int sent = 0, received = 0;
  auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> batch;
  while (received < requests) {
    batch.clear();
    while (sent < requests && sent - received < window) {
      batch.insert(batch.end(), frame.begin(), frame.end());
      ++sent;
    }
    if (!batch.empty() && !WriteAll(fd, batch.data(), batch.size())) exit(1);
    ssize_t n = read(fd, in.data() + have, in.size() - have);
    if (n <= 0) exit(1);
    have += static_cast<size_t>(n);
    size_t pos = 0;
    while (have - pos >= 4) {
      uint32_t size = Be32(in.data() + pos);
      if (size > in.size() - 4) exit(1);
      if (have - pos - 4 < size) break;
      *response_size = size;
      pos += 4 + size;
      ++received;
    }
    std::memmove(in.data(), in.data() + pos, have - pos);
    have -= pos;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return requests / secs;
}

// The reference server: answers each frame with `response_size` bytes, nothing else.
void EchoServer(int listen_fd, size_t response_size, std::atomic<bool>* stop) {
  int fd = accept(listen_fd, nullptr, nullptr);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::vector<uint8_t> in(1 << 16);
  std::vector<uint8_t> reply(4 + response_size, 0);
  reply[0] = static_cast<uint8_t>(response_size >> 24);
  reply[1] = static_cast<uint8_t>(response_size >> 16);
  reply[2] = static_cast<uint8_t>(response_size >> 8);
  reply[3] = static_cast<uint8_t>(response_size);
  std::vector<uint8_t> pending;
  std::vector<uint8_t> out;
  while (!stop->load()) {
    ssize_t n = read(fd, in.data(), in.size());
    if (n <= 0) break;
    pending.insert(pending.end(), in.begin(), in.begin() + n);
    size_t pos = 0;
    out.clear();
    while (pending.size() - pos >= 4) {
      uint32_t size = Be32(pending.data() + pos);
      if (pending.size() - pos - 4 < size) break;
      pos += 4 + size;
      out.insert(out.end(), reply.begin(), reply.end());
    }
    pending.erase(pending.begin(), pending.begin() + static_cast<ptrdiff_t>(pos));
    if (!out.empty() && !WriteAll(fd, out.data(), out.size())) break;
  }
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: frontend_bench <host:port> [requests] [window]\n");
    return 2;
  }
  std::string target = argv[1];
  std::string host = target.substr(0, target.rfind(':'));
  int port = std::atoi(target.substr(target.rfind(':') + 1).c_str());
  int requests = argc > 2 ? std::atoi(argv[2]) : 200000;
  int window = argc > 3 ? std::atoi(argv[3]) : 64;

  // Warm up, then measure the broker.
  size_t response_size = 0;
  int fd = Connect(host, port);
  Run(fd, requests / 10, window, &response_size);
  double broker_rate = Run(fd, requests, window, &response_size);
  close(fd);

  // The reference on the same machine, same sizes.
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  (void)bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));  // port 0: any free one
  socklen_t len = sizeof(addr);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(lfd, 1);
  std::atomic<bool> stop{false};
  std::thread server(EchoServer, lfd, response_size, &stop);
  int rfd = Connect("127.0.0.1", ntohs(addr.sin_port));
  size_t ignored = 0;
  Run(rfd, requests / 10, window, &ignored);
  double raw_rate = Run(rfd, requests, window, &ignored);
  stop = true;
  shutdown(rfd, SHUT_RDWR);
  close(rfd);
  server.join();
  close(lfd);

  printf("frontend_bench: %d ApiVersions v3 requests, window %d, %zu-byte responses\n", requests,
         window, response_size);
  printf("  brokerd:            %10.0f requests/s\n", broker_rate);
  printf("  raw loopback TCP:   %10.0f requests/s\n", raw_rate);
  printf("  ratio brokerd/raw:  %10.2f\n", broker_rate / raw_rate);
  return 0;
}
