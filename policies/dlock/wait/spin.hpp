// wait::Spin: retry at a fixed interval (seed 001: every 100 ms).
#pragma once

#include <chrono>

#include <dlock/ext.hpp>

namespace dlock::wait {

/// Sleeps a fixed interval between tries (100 ms by default, as seed 001
/// and redis-objects do), never past the caller's deadline. Simple, and
/// wasteful: every waiter polls the server, and a release is noticed only at
/// the next tick.
struct Spin {
  static constexpr const char* policy_name = "spin";  ///< its name in Lock::combination_name()
  static constexpr bool needs_publish = false;  ///< polls: no release message needed

  milliseconds interval{100};  ///< the sleep between two tries

  Spin() = default;
  /// Sleeps `i` between tries.
  explicit Spin(milliseconds i) : interval(i) {}

  /// invalid_interval unless 0 < interval <= max_lease (a longer one would
  /// overflow the clock's arithmetic and end the sleep at once).
  std::error_code validate() const {
    if (auto ec = ext::validate_positive(interval, error::invalid_interval)) return ec;
    if (interval > max_lease) return make_error_code(error::invalid_interval);
    return {};
  }

  /// One acquire's waiter.
  template <class B>
  struct waiter {
    milliseconds interval;  ///< the policy's interval
    /// Made at the start of each acquire; keeps the policy's interval.
    waiter(const Spin& p, B&, const std::string& /*name*/, const std::string& /*channel*/) : interval(p.interval) {}
    /// Nothing to set up: completes at once, with no error.
    asio::awaitable<error_code> prepare() { co_return error_code{}; }
    /// Sleeps `interval`, or until `deadline` if that comes first; the holder's
    /// remaining lease is not used. Completes with no error, or with
    /// operation_aborted when the acquire is cancelled during the sleep.
    asio::awaitable<error_code> wait(std::optional<milliseconds>, ext::steady::time_point deadline) {
      co_return co_await ext::sleep_until(std::min(deadline, ext::steady::now() + interval));
    }
  };
};

}  // namespace dlock::wait
