// A bounded wait on a condition, for tests that must wait for another thread or process to
// get somewhere (a connection accepted, a leader elected, a record applied, a socket full):
// poll for the thing itself rather than sleep for a time guessed to be long enough, which
// is too short on a loaded machine and too long everywhere else.
//
// A sleep stays right where time passing is the point of the test: that something does not
// happen within a period, or that a timeout runs out. Say so beside it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

namespace runnel::testing {

// Checks `cond` every `poll` (1 ms at least) until it holds (true) or `timeout` has passed
// (false). Bounded in time and in count: about timeout / poll checks, never more than
// timeout / poll + 3. Fail the test on false with a message saying what did not happen:
//   ASSERT_TRUE(WaitUntil([&] { return server.accepted() == 1; }, 5s)) << "never accepted";
[[nodiscard]] inline bool WaitUntil(const std::function<bool()>& cond,
                                    std::chrono::milliseconds timeout,
                                    std::chrono::milliseconds poll = std::chrono::milliseconds(5)) {
  poll = std::max(poll, std::chrono::milliseconds(1));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int64_t max_polls = timeout / poll + 1;
  for (int64_t i = 0; i <= max_polls; ++i) {
    if (cond()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(poll);
  }
  return cond();
}

}  // namespace runnel::testing
