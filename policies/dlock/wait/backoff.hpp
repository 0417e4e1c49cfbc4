// wait::Backoff: exponential backoff with full jitter, capped.
#pragma once

#include <algorithm>
#include <chrono>
#include <random>

#include <dlock/ext.hpp>

namespace dlock::wait {

/// Wait n (counting from 0: the wait after the first failed try) sleeps a
/// uniformly random time in [0, min(cap, base * 2^n)] ("full jitter"), never
/// past the caller's deadline: waiters spread out instead of polling in
/// step. Defaults: base 10 ms, cap 1 s.
struct Backoff {
  static constexpr const char* policy_name = "backoff";  ///< its name in Lock::combination_name()
  static constexpr bool needs_publish = false;  ///< polls: no release message needed

  milliseconds base{10};  ///< the bound of the first wait; each later wait doubles it
  milliseconds cap{1000};  ///< the bound never grows past this

  Backoff() = default;
  /// A base of `b` and a cap of `c`.
  Backoff(milliseconds b, milliseconds c) : base(b), cap(c) {}

  /// invalid_interval unless 0 < base <= cap <= max_lease (a longer cap
  /// would overflow bound()'s doubling and the clock's arithmetic).
  std::error_code validate() const {
    if (auto ec = ext::validate_positive(base, error::invalid_interval)) return ec;
    if (auto ec = ext::validate_positive(cap, error::invalid_interval)) return ec;
    if (cap < base || cap > max_lease) return make_error_code(error::invalid_interval);
    return {};
  }

  /// The longest sleep of wait `n` (counting from 0): min(cap, base * 2^n).
  static milliseconds bound(milliseconds base, milliseconds cap, int n) {
    milliseconds b = base;
    for (int i = 0; i < n && b < cap; ++i) b *= 2;
    return std::min(b, cap);
  }

  /// One acquire's waiter: it counts its waits, to double the bound.
  template <class B>
  struct waiter {
    ///@{
    milliseconds base, cap;  ///< the policy's numbers
    ///@}
    int tries = 0;  ///< waits so far: the next one's bound is bound(base, cap, tries)

    /// Made at the start of each acquire; keeps the policy's numbers.
    waiter(const Backoff& p, B&, const std::string& /*name*/, const std::string& /*channel*/)
        : base(p.base), cap(p.cap) {}
    /// Nothing to set up: completes at once, with no error.
    asio::awaitable<error_code> prepare() { co_return error_code{}; }
    /// Sleeps a uniformly random time in [0, bound] (base on the first wait,
    /// doubled on each next one, at most cap), never past `deadline`; the
    /// holder's remaining lease is not used. Completes with no error, or with
    /// operation_aborted when the acquire is cancelled during the sleep.
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
