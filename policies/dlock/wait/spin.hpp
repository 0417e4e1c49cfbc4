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
  static constexpr const char* policy_name = "spin";
  static constexpr bool needs_publish = false;

  milliseconds interval{100};

  Spin() = default;
  explicit Spin(milliseconds i) : interval(i) {}

  std::error_code validate() const { return ext::validate_positive(interval, error::invalid_interval); }

  template <class B>
  struct waiter {
    milliseconds interval;
    waiter(const Spin& p, B&, const std::string& /*name*/, const std::string& /*channel*/) : interval(p.interval) {}
    asio::awaitable<error_code> prepare() { co_return error_code{}; }
    asio::awaitable<error_code> wait(std::optional<milliseconds>, ext::steady::time_point deadline) {
      co_return co_await ext::sleep_until(std::min(deadline, ext::steady::now() + interval));
    }
  };
};

}  // namespace dlock::wait
