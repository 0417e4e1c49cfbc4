// renewal::Watchdog: Redisson's lock watchdog: a lease renewed every third
// of itself while the lock is held.
#pragma once

#include <chrono>

#include <dlock/ext.hpp>
#include <dlock/keepers.hpp>

namespace dlock::renewal {

/// Keeps the lock while its holder lives: the key gets `timeout` (30 s by
/// default, Redisson's lockWatchdogTimeout) and one timer per backend renews
/// every held lock every `timeout / 3` (10 s), all in one round trip, with
/// an owner-checked script (up to 100 locks per script call when the
/// ownership has `extend_batch`, as Token and ReentrantHash do; per slot on
/// a cluster). Renewal stops before release is sent, when the
/// hold or the lock object is destroyed, and when a renewal finds the lock
/// gone (the hold is then marked lost and its loss callbacks run). A crashed
/// holder's lock frees within one timeout.
///
/// The loss signal does not wait for a failed renewal's reply: it fires
/// `margin` before the lease could end, counted from the send time of the
/// last confirmed renewal. A renewal confirmed after that does not revive
/// the hold. The timeout must be at most max_lease (10^12 ms), and its
/// margin at most a third of it, so that a renewal sent at a third of the
/// lease has another third to be confirmed: with the default margin the
/// shortest timeout is 18 ms (its margin, 5 ms + 1% rounded up, is
/// 6 ms: a third of it).
struct Watchdog {
  static constexpr const char* policy_name = "watchdog";  ///< its name in Lock::combination_name()
  static constexpr bool expires = true;  ///< the key gets a lease
  static constexpr bool renews = true;  ///< extended while held: needs an owner-checked ownership
  /// What the host calls while a hold lives (see keepers.hpp).
  template <class B>
  using keeper = keepers::renewing<B>;

  milliseconds timeout{std::chrono::seconds(30)};  ///< the lease each acquire and renewal sets (lockWatchdogTimeout)
  /// How long before the lease's end the hold counts as lost.
  loss_margin safety{};

  Watchdog() = default;
  /// A lease of `t`, renewed every `t / 3`, counted as lost `m.of(t)` before its end.
  explicit Watchdog(milliseconds t, loss_margin m = {}) : timeout(t), safety(m) {}

  /// The key's time to live: `timeout`.
  milliseconds lease() const { return timeout; }
  /// How often the hold is renewed: `timeout / 3`, rounded down to whole ms.
  milliseconds period() const { return timeout / 3; }
  /// How long before the lease's end the hold counts as lost: `safety.of(timeout)`.
  milliseconds margin() const { return safety.of(timeout); }
  /// invalid_lease unless 3 ms <= timeout <= max_lease (a shorter one has a
  /// renewal period of 0 ms) and its margin is at most `timeout / 3`;
  /// invalid_argument for a bad `safety` (see loss_margin::validate).
  std::error_code validate() const {
    if (auto ec = ext::validate_lease(timeout, safety, timeout / 3 + milliseconds(1))) return ec;
    if (period() < milliseconds(1)) return make_error_code(error::invalid_lease);
    return {};
  }
};

}  // namespace dlock::renewal
