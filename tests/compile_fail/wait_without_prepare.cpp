// expect: dlock::Lock wait policy: its waiter lacks prepare()
#include <dlock/dlock.hpp>
// A wait whose waiter can wait but not get ready.
struct Sleepy {
  static constexpr const char* policy_name = "sleepy";
  static constexpr bool needs_publish = false;
  std::error_code validate() const { return {}; }
  template <class B>
  struct waiter {
    waiter(const Sleepy&, B&, const std::string&, const std::string&) {}
    boost::asio::awaitable<dlock::error_code> wait(std::optional<std::chrono::milliseconds>,
                                                   std::chrono::steady_clock::time_point);
  };
};
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, Sleepy>;
