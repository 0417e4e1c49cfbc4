// expect: no member named
#include <dlock/dlock.hpp>
// An ownership without a shared side has no shared interface at all: its
// lock has no lock_shared (SharedInterface is empty unless `shares`).
void f(dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::Spin>& lock) {
  lock.lock_shared();
}
