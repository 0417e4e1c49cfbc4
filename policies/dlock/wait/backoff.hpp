// wait::Backoff: exponential backoff with full jitter, capped.
#pragma once

#include <algorithm>
#include <chrono>
#include <random>

#include <dlock/ext.hpp>

namespace dlock::wait {

/// Before try n+1 sleeps a uniformly random time in [0, min(cap, base * 2^n)]
/// ("full jitter"), never past the caller's deadline: waiters spread out
/// instead of polling in step. Defaults: base 10 ms, cap 1 s.
struct Backoff {
  static constexpr const char* policy_name = "backoff";
  static constexpr bool needs_publish = false;

  milliseconds base{10};
  milliseconds cap{1000};

  Backoff() = default;
  Backoff(milliseconds b, milliseconds c) : base(b), cap(c) {}

  std::error_code validate() const {
    if (auto ec = ext::validate_positive(base, error::invalid_interval)) return ec;
    if (auto ec = ext::validate_positive(cap, error::invalid_interval)) return ec;
    if (cap < base) return make_error_code(error::invalid_interval);
    return {};
  }

  /// The longest sleep before try `n + 1`.
  static milliseconds bound(milliseconds base, milliseconds cap, int n) {
    milliseconds b = base;
    for (int i = 0; i < n && b < cap; ++i) b *= 2;
    return std::min(b, cap);
  }

  template <class B>
  struct waiter {
    milliseconds base, cap;
    int tries = 0;

    waiter(const Backoff& p, B&, const std::string& /*name*/, const std::string& /*channel*/)
        : base(p.base), cap(p.cap) {}
    asio::awaitable<error_code> prepare() { co_return error_code{}; }
    asio::awaitable<error_code> wait(std::optional<milliseconds>, ext::steady::time_point deadline) {
      auto limit = bound(base, cap, tries++);
      // Seeded once per thread: jitter needs no fresh entropy, and reading
      // the OS's on every acquire would cost syscalls on the uncontended path.
      thread_local std::minstd_rand rng{std::random_device{}()};
      std::uniform_int_distribution<long long> pick(0, limit.count());
      auto pause = milliseconds(pick(rng));
      co_return co_await ext::sleep_until(std::min(deadline, ext::steady::now() + pause));
    }
  };
};

}  // namespace dlock::wait
