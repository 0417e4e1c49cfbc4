// renewal::None: the key never expires (the first attempt, A1).
#pragma once

#include <dlock/ext.hpp>
#include <dlock/keepers.hpp>

namespace dlock::renewal {

/// No lease at all: the lock lasts until released, and a crashed holder
/// keeps it forever: A1's deadlock with SetNx, and redis-py's default
/// `Lock(name)` (no timeout) with Token, whose owner check still keeps
/// anyone else's release from deleting it (A2n).
struct None {
  static constexpr const char* policy_name = "none";  ///< its name in Lock::combination_name()
  static constexpr bool expires = false;  ///< the key gets no lease
  static constexpr bool renews = false;  ///< so there is nothing to extend
  /// What the host calls while a hold lives (see keepers.hpp).
  template <class B>
  using keeper = keepers::nothing<B>;
  /// Zero: the key never expires.
  milliseconds lease() const { return milliseconds::zero(); }
  /// Zero: never extended.
  milliseconds period() const { return milliseconds::zero(); }
  /// Zero: with no lease, a hold is never lost to time.
  milliseconds margin() const { return milliseconds::zero(); }
  /// Nothing to check: no error.
  std::error_code validate() const { return {}; }
};

}  // namespace dlock::renewal
