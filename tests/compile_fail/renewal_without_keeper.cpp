// expect: dlock::Lock renewal policy: lacks keeper<Backend>
#include <dlock/dlock.hpp>
// A renewal policy with all its numbers and no behaviour: nothing would
// watch its lease or renew it.
struct NumbersOnly {
  static constexpr const char* policy_name = "numbers";
  static constexpr bool expires = true;
  static constexpr bool renews = false;
  std::chrono::milliseconds lease() const { return std::chrono::seconds(30); }
  std::chrono::milliseconds period() const { return {}; }
  std::chrono::milliseconds margin() const { return std::chrono::milliseconds(5); }
  std::error_code validate() const { return {}; }
};
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, NumbersOnly, dlock::wait::Spin>;
