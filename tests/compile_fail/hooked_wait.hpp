// A wait policy whose waiter takes its hooks from `Hooks`, for the hook_*
// cases: each gives one hook whose signature is not the contract's, which
// the lock would otherwise skip without a word.
#pragma once

#include <dlock/dlock.hpp>

template <class Hooks>
struct HookedWait {
  static constexpr const char* policy_name = "hooked";
  static constexpr bool needs_publish = false;
  std::error_code validate() const { return {}; }
  template <class B>
  struct waiter : Hooks {
    waiter(const HookedWait&, B&, const std::string&, const std::string&) {}
    boost::asio::awaitable<dlock::error_code> prepare();
    boost::asio::awaitable<dlock::error_code> wait(std::optional<std::chrono::milliseconds>,
                                                   std::chrono::steady_clock::time_point);
  };
};

// Naming the lock type is enough: its class checks its policies.
template <class Ownership, class Wait>
constexpr bool lock_named = sizeof(dlock::Lock<dlock::RedisBackend, Ownership, dlock::renewal::FixedLease, Wait>) > 0;
