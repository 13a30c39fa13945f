// `runnel status`: asks a running supervisor for its roles and prints them as a table.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "proto/runnel/supervisor.pb.h"

namespace runnel::supervisor {

// A short human duration: "850ms", "42s", "5m03s", "2h05m", "3d04h".
std::string FormatDuration(int64_t ms);

// The table `ROLE  PID  STATE  UPTIME  RESTARTS`, one line per role, columns aligned;
// followed by a "last exit" line for each role that has one.
std::string FormatStatusTable(const GetStatusResponse& status);

// Asks the supervisor listening in `run_dir`, prints the table to `out` and returns 0;
// prints why to `err` and returns 1 when no supervisor answers within `deadline_ms`.
int RunStatus(const std::string& run_dir, int64_t deadline_ms, std::FILE* out, std::FILE* err);

}  // namespace runnel::supervisor
