// Restart delay of a role that died: exponential, capped, reset once the role has been
// healthy for a while.
#pragma once

#include <chrono>

namespace runnel::supervisor {

// Delay before the restart that follows the `consecutive_failures`-th failure in a row
// (1 for the first): initial * 2^(consecutive_failures - 1), capped at `max`. Values
// below 1 count as 1; never overflows.
std::chrono::milliseconds RestartBackoff(std::chrono::milliseconds initial,
                                         std::chrono::milliseconds max, int consecutive_failures);

// How long a role must have been SERVING before its failure count is reset, so that a
// role crashing once a day restarts quickly while one crashing in a loop backs off:
// ten times the initial delay, at least 10 s.
std::chrono::milliseconds BackoffResetAfter(std::chrono::milliseconds initial);

}  // namespace runnel::supervisor
