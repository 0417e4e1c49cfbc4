// renewal::FixedLease: the lock expires after a fixed lease unless released.
#pragma once

#include <chrono>

#include <dlock/ext.hpp>
#include <dlock/keepers.hpp>

namespace dlock::renewal {

/// A lease that nobody extends: if the work outlasts it, the lock expires
/// under the holder and someone else may take it (A2's known limit). The
/// holder's loss signal (Hold::on_lost, Hold::stop_token) fires `margin`
/// before the lease could end; a release after that reports lease_lost.
/// Default 30 s, the coupon story's lease. A lease must be positive, at most
/// max_lease (10^12 ms), and longer than its margin.
struct FixedLease {
  static constexpr const char* policy_name = "fixed";  ///< its name in Lock::combination_name()
  static constexpr bool expires = true;  ///< the key gets a lease
  static constexpr bool renews = false;  ///< nobody extends it
  /// What the host calls while a hold lives (see keepers.hpp).
  template <class B>
  using keeper = keepers::lease<B>;

  milliseconds duration{std::chrono::seconds(30)};  ///< the lease: the key's time to live, set when the lock is taken
  /// How long before the lease's end the hold counts as lost.
  loss_margin safety{};

  FixedLease() = default;
  /// A lease of `d`, counted as lost `m.of(d)` before its end.
  explicit FixedLease(milliseconds d, loss_margin m = {}) : duration(d), safety(m) {}

  /// The key's time to live: `duration`.
  milliseconds lease() const { return duration; }
  /// Zero: the lease is never extended.
  milliseconds period() const { return milliseconds::zero(); }
  /// How long before the lease's end the hold counts as lost: `safety.of(duration)`.
  milliseconds margin() const { return safety.of(duration); }
  /// invalid_lease unless 0 < duration <= max_lease and its margin is shorter
  /// than it; invalid_argument for a bad `safety` (see loss_margin::validate).
  std::error_code validate() const { return ext::validate_lease(duration, safety, duration); }
};

}  // namespace dlock::renewal
