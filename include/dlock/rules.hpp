// The rule table (which combinations of the four families can work) and
// the checks of a policy's numbers that every policy shares.
#pragma once

#include <string_view>
#include <system_error>

#include <dlock/hooks.hpp>

namespace dlock {

/// The rule table: which combinations can work. Lock's static_asserts turn
/// each broken rule into a sentence; the compile-time list of combinations
/// (combinations.hpp) keeps the ones where `ok` holds.
///
/// | rule | why |
/// |---|---|
/// | watchdog renewal needs owner-checked ownership (Token, ReentrantHash) | an unchecked extend would keep someone else's lock alive |
/// | ownership that needs a lease (ReentrantHash, GetSetExpiry) cannot take renewal::None | the hash's scripts set its expiry with every write; GETSET's value is the expiry |
/// | pub/sub waiting needs ownership that publishes on release (ReentrantHash) | otherwise no message ever wakes the waiter |
/// | hand-off waiting needs a queueing ownership (Queue), and Queue needs hand-off waiting | only Queue's release grants the lock to a waiter; Queue's line is kept by HandOff's waiters |
///
/// (GetSetExpiry falls under the first rule: it has no owner id, and its
/// expiry lives in the value, compared against other clients' clocks.)
template <class O, class R, class W>
struct rules {
  /// A renewal that renews goes with an owner-checked ownership.
  static constexpr bool watchdog_has_owner = !R::renews || O::owner_checked;
  /// An ownership that needs a lease gets one.
  static constexpr bool lease_present = !O::needs_lease || R::expires;
  /// A wait for the release message goes with an ownership that publishes it.
  static constexpr bool pubsub_has_publisher = !W::needs_publish || O::publishes_on_release;
  /// A wait that hands off goes with an ownership that queues, and only with one.
  static constexpr bool hand_off_matches_queue = detail::hands_off<W>() == detail::queues<O>();
  /// Every rule holds: the combination can work.
  static constexpr bool ok = watchdog_has_owner && lease_present && pubsub_has_publisher && hand_off_matches_queue;
};

/// Whether ownership `O`, renewal `R` and wait `W` can work together.
template <class O, class R, class W>
inline constexpr bool valid_combination = rules<O, R, W>::ok;

namespace detail {

inline std::error_code validate_name(std::string_view name) {
  if (name.empty() || name.size() > max_name_length) return make_error_code(error::invalid_name);
  return {};
}

inline std::error_code validate_positive(milliseconds d, error e) {
  if (d <= milliseconds::zero()) return make_error_code(e);
  return {};
}

/// invalid_lease unless 0 < lease <= max_lease and the margin leaves some
/// of it (`usable`: the part of the lease the margin must stay within).
inline std::error_code validate_lease(milliseconds lease, const loss_margin& margin, milliseconds usable) {
  if (lease <= milliseconds::zero() || lease > max_lease) return make_error_code(error::invalid_lease);
  if (auto ec = margin.validate()) return ec;
  if (margin.of(lease) >= usable) return make_error_code(error::invalid_lease);
  return {};
}

}  // namespace detail
}  // namespace dlock
