// expect: dlock::Lock wait policy: says hands_off but its waiter lacks one of
#include <dlock/dlock.hpp>
// A wait that says the lock is handed to it, with none of the hooks a
// hand-off needs (it would never notice a grant, nor leave the line).
struct Deaf {
  static constexpr const char* policy_name = "deaf";
  static constexpr bool needs_publish = false;
  static constexpr bool hands_off = true;
  std::error_code validate() const { return {}; }
  template <class B>
  struct waiter {
    waiter(const Deaf&, B&, const std::string&, const std::string&) {}
    boost::asio::awaitable<dlock::error_code> prepare();
    boost::asio::awaitable<dlock::error_code> wait(std::optional<std::chrono::milliseconds>,
                                                   std::chrono::steady_clock::time_point);
  };
};
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::Queue, dlock::renewal::FixedLease, Deaf>;
