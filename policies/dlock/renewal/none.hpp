// renewal::None: the key never expires (the first attempt, A1).
#pragma once

#include <dlock/concepts.hpp>

namespace dlock::renewal {

/// No lease at all: the lock lasts until released. Only SetNx accepts it,
/// and a crashed holder then keeps the lock forever: the A1 deadlock.
struct None {
  static constexpr const char* policy_name = "none";
  static constexpr bool renews = false;
  milliseconds lease() const { return milliseconds::zero(); }
  milliseconds period() const { return milliseconds::zero(); }
  milliseconds margin() const { return milliseconds::zero(); }
  std::error_code validate() const { return {}; }
};

}  // namespace dlock::renewal
