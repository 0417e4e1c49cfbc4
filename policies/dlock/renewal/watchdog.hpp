// renewal::Watchdog: Redisson's lock watchdog: a lease renewed every third
// of itself while the lock is held.
#pragma once

#include <chrono>

#include <dlock/concepts.hpp>

namespace dlock::renewal {

/// Keeps the lock while its holder lives: the key gets `timeout` (30 s by
/// default, Redisson's lockWatchdogTimeout) and one timer per backend renews
/// every held lock every `timeout / 3` (10 s), all in one round trip, with
/// an owner-checked script. Renewal stops before release is sent, when the
/// hold or the lock object is destroyed, and when a renewal finds the lock
/// gone (the hold is then marked lost and its loss callbacks run). A crashed
/// holder's lock frees within one timeout.
struct Watchdog {
  static constexpr const char* policy_name = "watchdog";
  static constexpr bool renews = true;

  milliseconds timeout{std::chrono::seconds(30)};

  Watchdog() = default;
  explicit Watchdog(milliseconds t) : timeout(t) {}

  milliseconds lease() const { return timeout; }
  milliseconds period() const { return timeout / 3; }
  std::error_code validate() const {
    // A timeout under 3 ms would make the period zero.
    if (timeout < milliseconds(3)) return make_error_code(error::invalid_lease);
    return {};
  }
};

}  // namespace dlock::renewal
