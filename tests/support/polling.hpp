// Polling for a condition with a deadline: how tests wait for something that
// happens in another thread or process, without fixed sleeps.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace dlock::test {

/// How much slower timing-sensitive tests must allow a sanitizer build to
/// be: ThreadSanitizer stalls the I/O thread for a few hundred ms whenever it
/// symbolizes a new report stack (suppressed ones too), which is longer than
/// the short watchdog leases those tests use.
#if defined(__SANITIZE_THREAD__)
inline constexpr int sanitizer_slowdown = 5;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr int sanitizer_slowdown = 2;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr int sanitizer_slowdown = 5;
#elif __has_feature(address_sanitizer)
inline constexpr int sanitizer_slowdown = 2;
#else
inline constexpr int sanitizer_slowdown = 1;
#endif
#else
inline constexpr int sanitizer_slowdown = 1;
#endif

/// `d`, stretched for sanitizer builds (see sanitizer_slowdown).
inline std::chrono::milliseconds scaled(std::chrono::milliseconds d) { return d * sanitizer_slowdown; }

/// Polls `condition` every 10 ms until it holds or `limit` (by default 10 s,
/// scaled) passes; returns whether it held.
inline bool wait_until(const std::function<bool()>& condition,
                       std::chrono::milliseconds limit = scaled(std::chrono::seconds(10))) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

}  // namespace dlock::test
