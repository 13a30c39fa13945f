#include "supervisor/status_cli.h"

#include <absl/strings/ascii.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <vector>

#include "common/grpc/unix_server.h"
#include "proto/runnel/supervisor.grpc.pb.h"

namespace runnel::supervisor {

std::string FormatDuration(int64_t ms) {
  if (ms < 0) ms = 0;
  if (ms < 1000) return fmt::format("{}ms", ms);
  int64_t s = ms / 1000;
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  return fmt::format("{}d{:02}h", s / 86400, (s % 86400) / 3600);
}

std::string FormatStatusTable(const GetStatusResponse& status) {
  using Row = std::array<std::string, 5>;
  std::vector<Row> rows = {{"ROLE", "PID", "STATE", "UPTIME", "RESTARTS"}};
  for (const RoleStatus& r : status.roles()) {
    std::string state = RoleStatus::State_Name(r.state());
    if (state.empty()) state = "unknown";
    rows.push_back({r.name(), r.pid() > 0 ? fmt::format("{}", r.pid()) : "-",
                    absl::AsciiStrToLower(state), r.pid() > 0 ? FormatDuration(r.uptime_ms()) : "-",
                    fmt::format("{}", r.restarts())});
  }
  std::array<size_t, 5> width{};
  for (const Row& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const Row& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += i + 1 < row.size() ? fmt::format("{:<{}}  ", row[i], width[i]) : row[i];
    }
    out += line + "\n";
  }
  for (const RoleStatus& r : status.roles()) {
    if (!r.last_exit().empty())
      out += fmt::format("last exit of {}: {}\n", r.name(), r.last_exit());
  }
  return out;
}

int RunStatus(const std::string& run_dir, int64_t deadline_ms, std::FILE* out, std::FILE* err) {
  const std::string socket = grpcutil::SocketPath(run_dir, "supervisor");
  struct stat st;
  if (::stat(socket.c_str(), &st) != 0) {
    fmt::print(err, "runnel status: no supervisor is running with run dir {} ({} does not exist)\n",
               run_dir, socket);
    return 1;
  }
  auto stub = SupervisorAdmin::NewStub(grpcutil::UnixChannel(socket));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  GetStatusResponse response;
  grpc::Status st_rpc = stub->GetStatus(&ctx, GetStatusRequest(), &response);
  if (!st_rpc.ok()) {
    fmt::print(err, "runnel status: no supervisor answers on {}: {}\n", socket,
               st_rpc.error_message());
    return 1;
  }
  fmt::print(out, "{}", FormatStatusTable(response));
  return 0;
}

}  // namespace runnel::supervisor
