// expect: its waiter's server_reply does not match the hook
#include <dlock/dlock.hpp>
// A wait whose server_reply() is not const: the lock could never call it,
// and the server's words would be lost without a word.
struct Forgetful {
  static constexpr const char* policy_name = "forgetful";
  static constexpr bool needs_publish = false;
  std::error_code validate() const { return {}; }
  template <class B>
  struct waiter {
    waiter(const Forgetful&, B&, const std::string&, const std::string&) {}
    boost::asio::awaitable<dlock::error_code> prepare();
    boost::asio::awaitable<dlock::error_code> wait(std::optional<std::chrono::milliseconds>,
                                                   std::chrono::steady_clock::time_point);
    std::string server_reply() { return {}; }
  };
};
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, Forgetful>;
