// expect: cannot bound an ownership that admits several holders
#include <dlock/dlock.hpp>
#include <dlock/backend/redlock.hpp>
template class dlock::Lock<dlock::RedlockBackend, dlock::ownership::Semaphore, dlock::renewal::FixedLease, dlock::wait::Spin>;
