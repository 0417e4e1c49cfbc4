// wait::TryOnce: one attempt; a held lock is reported at once.
#pragma once

#include <dlock/ext.hpp>

namespace dlock::wait {

/// Tries once and gives up: a held lock completes with not_acquired. With
/// the std interface, `lock()` then throws and `try_lock()` returns false.
struct TryOnce {
  static constexpr const char* policy_name = "tryonce";
  static constexpr bool needs_publish = false;

  std::error_code validate() const { return {}; }

  template <class B>
  struct waiter {
    waiter(const TryOnce&, B&, const std::string& /*name*/, const std::string& /*channel*/) {}
    asio::awaitable<error_code> prepare() { co_return error_code{}; }
    asio::awaitable<error_code> wait(std::optional<milliseconds>, ext::steady::time_point) {
      co_return make_error_code(error::not_acquired);
    }
  };
};

}  // namespace dlock::wait
