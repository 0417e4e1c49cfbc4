// What the two expiry-value locks (GetSetExpiry, A3, and NaiveExpiry, A3n)
// share: the key's value is its expiration time in epoch seconds, read by
// every client against its own wall clock, and nothing else identifies the
// holder.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

#include <dlock/ext.hpp>

namespace dlock::ownership {

/// The base of an expiry-value ownership: its traits, its clock, the value's
/// format, and the answers it gives for what it cannot do. No owner id (so
/// no watchdog, no owner-checked release), no release message, not
/// reentrant, and a lease it cannot do without (the value is the lease).
struct expiry_value {
  static constexpr bool owner_checked = false;  ///< no owner id: no owner-checked release or extend, so no watchdog
  static constexpr bool publishes_on_release = false;  ///< the release publishes nothing
  static constexpr bool reentrant = false;  ///< a second acquire by the same owner fails with already_held
  static constexpr bool needs_lease = true;  ///< the value is the expiration: renewal::None is refused

  /// The wall clock, in epoch seconds: the algorithm's (and its flaw's)
  /// source of time. Tests replace it to show what clock skew does.
  std::function<double()> wall_clock = [] {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
  };

  /// invalid_argument when wall_clock is empty; else no error.
  std::error_code validate() const {
    if (!wall_clock) return make_error_code(error::invalid_argument);
    return {};
  }

  /// Its release publishes nothing (no wait::PubSub with it).
  static std::string channel(std::string_view) { return {}; }

  /// A lost acquire reply cannot be resolved: any client writes the same
  /// kind of value, so this try's win cannot be told from another's; it
  /// stays outcome_unknown.
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> resolve(B&, const ext::hold_record&) const {
    return ext::cannot_resolve();
  }

  /// No owner value: the expiration written when the lock is won takes its
  /// place in the hold record.
  std::string make_owner(const std::string&, const std::string&) const { return {}; }

  /// An expiration as stored: epoch seconds with six decimals.
  static std::string format(double seconds) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f", seconds);
    return buf;
  }

  /// Reads a stored expiration; anything unreadable counts as long expired
  /// (redis-objects' `to_f` makes it 0.0 too).
  static double parse(const std::string& text) {
    double v = 0;
    auto res = std::from_chars(text.data(), text.data() + text.size(), v);
    return res.ec == std::errc() ? v : 0.0;
  }

  /// How long until `expires_at` (epoch seconds) by this client's clock,
  /// bounded to [0, max_lease]: a stored time may be anything.
  milliseconds time_left(double expires_at) const {
    double ms = (expires_at - wall_clock()) * 1000.0;
    if (!(ms > 0)) return milliseconds::zero();
    if (ms >= static_cast<double>(max_lease.count())) return max_lease;
    return milliseconds(static_cast<milliseconds::rep>(ms));
  }

  /// A fresh expiration: now plus the hold's lease.
  std::string expiration_for(const ext::hold_record& rec) const {
    return format(wall_clock() + std::chrono::duration<double>(rec.lease).count());
  }
};

}  // namespace dlock::ownership
