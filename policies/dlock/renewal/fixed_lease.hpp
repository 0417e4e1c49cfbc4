// renewal::FixedLease: the lock expires after a fixed lease unless released.
#pragma once

#include <chrono>

#include <dlock/concepts.hpp>

namespace dlock::renewal {

/// A lease that nobody extends: if the work outlasts it, the lock expires
/// under the holder and someone else may take it (A2's known limit; the
/// holder learns it only at release, as lease_lost). Default 30 s, the
/// coupon story's lease.
struct FixedLease {
  static constexpr const char* policy_name = "fixed";
  static constexpr bool renews = false;

  milliseconds duration{std::chrono::seconds(30)};

  FixedLease() = default;
  explicit FixedLease(milliseconds d) : duration(d) {}

  milliseconds lease() const { return duration; }
  milliseconds period() const { return milliseconds::zero(); }
  std::error_code validate() const { return detail::validate_positive(duration, error::invalid_lease); }
};

}  // namespace dlock::renewal
