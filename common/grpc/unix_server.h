// gRPC over Unix domain sockets: where each role listens, and how a role's server is
// started (with grpc.health.v1) and how a client waits for it to be SERVING.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/util/status.h"

namespace runnel::grpcutil {

// Absolute Unix socket path of `role` ("controllerd", "storaged", "brokerd", "supervisor").
std::string SocketPath(const std::string& run_dir, const std::string& role);
// "unix:<path>" target for a channel or a listening port.
std::string UnixTarget(const std::string& socket_path);

// Builds and starts a server on the Unix socket `socket_path` with `services` and the
// standard health service, then sets the socket's mode to 0660. A stale socket file
// from a dead process is removed first. `services` must not be empty: gRPC's built-in health
// service alone gives the server no completion queue to poll, and it refuses to start.
// With `serving` false the health is NOT_SERVING from the first connection on (the socket
// is bound under a temporary name and renamed once the status is set).
// The server runs calls on at most `max_threads` threads, whatever the load: a call that
// finds none free is answered RESOURCE_EXHAUSTED at once ("Server Threadpool Exhausted")
// and not run, which callers treat as retriable (brokerd/error_mapping.h).
constexpr int kDefaultServerThreads = 256;
StatusOr<std::unique_ptr<grpc::Server>> StartUnixServer(const std::string& socket_path,
                                                        const std::vector<grpc::Service*>& services,
                                                        bool serving = true,
                                                        int max_threads = kDefaultServerThreads);

// Shuts `server` down, letting calls in flight run until `deadline`, and removes its socket
// file. gRPC removes the file it bound itself, but not one renamed into place (`serving`
// false above), which would otherwise be left behind for the next start to clear.
void ShutdownUnixServer(grpc::Server& server, const std::string& socket_path,
                        std::chrono::system_clock::time_point deadline);

// Sets the overall health of `server` (the "" service) to SERVING or NOT_SERVING.
void SetServing(grpc::Server& server, bool serving);

// An insecure channel to a Unix socket.
std::shared_ptr<grpc::Channel> UnixChannel(const std::string& socket_path);

// Asks grpc.health.v1.Health/Check once; OK when the answer is SERVING.
Status CheckServing(const std::string& socket_path, std::chrono::milliseconds deadline);
// Asks grpc.health.v1.Health/Check once: whether the answer is SERVING, or the error when
// there is no answer.
StatusOr<bool> HealthCheck(const std::string& socket_path, std::chrono::milliseconds deadline);

}  // namespace runnel::grpcutil
