// wait::TryOnce: one attempt; a held lock is reported at once.
#pragma once

#include <dlock/ext.hpp>

namespace dlock::wait {

/// Tries once and gives up: a held lock completes with not_acquired. With
/// the std interface, `lock()` then throws and `try_lock()` returns false.
struct TryOnce {
  static constexpr const char* policy_name = "tryonce";  ///< its name in Lock::combination_name()
  static constexpr bool needs_publish = false;  ///< never waits for a release message

  /// Nothing to check: no error.
  std::error_code validate() const { return {}; }

  /// One acquire's waiter: it gives up at its first wait.
  template <class B>
  struct waiter {
    /// Made at the start of each acquire; keeps nothing.
    waiter(const TryOnce&, B&, const std::string& /*name*/, const std::string& /*channel*/) {}
    /// Nothing to set up: completes at once, with no error.
    asio::awaitable<error_code> prepare() { co_return error_code{}; }
    /// Completes at once with not_acquired, which ends the acquire (whatever
    /// its deadline).
    asio::awaitable<error_code> wait(std::optional<milliseconds>, ext::steady::time_point) {
      co_return make_error_code(error::not_acquired);
    }
  };
};

}  // namespace dlock::wait
