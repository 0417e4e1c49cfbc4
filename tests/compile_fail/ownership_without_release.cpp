// expect: dlock::Lock ownership policy: lacks release(backend, record&)
#include <dlock/dlock.hpp>
// Token's acquire, with no way to release.
struct NoRelease : dlock::ownership::Token {
  template <class B>
  void release(B&, dlock::detail::hold_record&) const;  // returns nothing the host can await
};
template class dlock::Lock<dlock::RedisBackend, NoRelease, dlock::renewal::FixedLease, dlock::wait::Spin>;
