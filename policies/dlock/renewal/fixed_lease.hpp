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
  static constexpr const char* policy_name = "fixed";
  static constexpr bool expires = true;
  static constexpr bool renews = false;
  /// What the host calls while a hold lives (see keepers.hpp).
  template <class B>
  using keeper = keepers::lease<B>;

  milliseconds duration{std::chrono::seconds(30)};
  /// How long before the lease's end the hold counts as lost.
  loss_margin safety{};

  FixedLease() = default;
  explicit FixedLease(milliseconds d, loss_margin m = {}) : duration(d), safety(m) {}

  milliseconds lease() const { return duration; }
  milliseconds period() const { return milliseconds::zero(); }
  milliseconds margin() const { return safety.of(duration); }
  std::error_code validate() const { return ext::validate_lease(duration, safety, duration); }
};

}  // namespace dlock::renewal
