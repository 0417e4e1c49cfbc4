// The waits between connect attempts: the first wait after a connection that
// served, doubled per failed attempt up to a cap.
#pragma once

#include <algorithm>
#include <chrono>

namespace dlock::redis::detail {

// A server that is down is not hammered, and one that comes back after a
// working connection broke is tried again at once (almost).
class reconnect_backoff {
 public:
  using duration = std::chrono::milliseconds;

  reconnect_backoff(duration first, duration cap) : first_(first), cap_(cap), next_(first) {}

  // A connection was made: the wait after it ends starts over.
  duration after_success() {
    next_ = first_;
    return first_;
  }

  // A connect attempt failed: the wait before the next one.
  duration after_failure() {
    auto wait = next_;
    next_ = std::min(next_ * 2, cap_);
    return wait;
  }

 private:
  duration first_, cap_, next_;
};

}  // namespace dlock::redis::detail
