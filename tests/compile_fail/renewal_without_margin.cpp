// expect: dlock::Lock renewal policy: lacks lease(), period() or margin()
#include <dlock/dlock.hpp>
// A renewal policy written before the loss signal existed.
struct OldLease {
  static constexpr const char* policy_name = "old";
  static constexpr bool expires = true;
  static constexpr bool renews = false;
  std::chrono::milliseconds lease() const { return std::chrono::seconds(30); }
  std::chrono::milliseconds period() const { return {}; }
  std::error_code validate() const { return {}; }
};
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, OldLease, dlock::wait::Spin>;
