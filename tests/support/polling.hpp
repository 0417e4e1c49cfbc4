// Polling for a condition with a deadline: how tests wait for something that
// happens in another thread or process, without fixed sleeps.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace dlock::test {

/// Polls `condition` every 10 ms until it holds or `limit` passes; returns
/// whether it held.
inline bool wait_until(const std::function<bool()>& condition,
                       std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

}  // namespace dlock::test
