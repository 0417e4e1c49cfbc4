// expect: a quorum backend (RedlockBackend) cannot hand the lock over
#include <dlock/dlock.hpp>
#include <dlock/backend/redlock.hpp>
template class dlock::Lock<dlock::RedlockBackend, dlock::ownership::Queue, dlock::renewal::FixedLease, dlock::wait::HandOff>;
