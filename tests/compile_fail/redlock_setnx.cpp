// expect: a quorum backend (RedlockBackend) gives back a partial win
#include <dlock/dlock.hpp>
#include <dlock/backend/redlock.hpp>
template class dlock::Lock<dlock::RedlockBackend, dlock::ownership::SetNx, dlock::renewal::FixedLease, dlock::wait::Spin>;
