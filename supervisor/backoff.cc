#include "supervisor/backoff.h"

#include <algorithm>

namespace runnel::supervisor {

std::chrono::milliseconds RestartBackoff(std::chrono::milliseconds initial,
                                         std::chrono::milliseconds max, int consecutive_failures) {
  if (initial.count() < 1) initial = std::chrono::milliseconds(1);
  if (max < initial) return max.count() < 1 ? std::chrono::milliseconds(1) : max;
  std::chrono::milliseconds delay = initial;
  for (int i = 1; i < consecutive_failures; ++i) {
    // Doubling stops at the cap, so delay never exceeds max and cannot overflow.
    if (delay >= max - delay) return max;
    delay *= 2;
  }
  return std::min(delay, max);
}

std::chrono::milliseconds BackoffResetAfter(std::chrono::milliseconds initial) {
  return std::max(initial * 10, std::chrono::milliseconds(10000));
}

}  // namespace runnel::supervisor
