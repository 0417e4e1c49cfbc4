// expect: a quorum backend (RedlockBackend) needs a lease
#include <dlock/dlock.hpp>
#include <dlock/backend/redlock.hpp>
template class dlock::Lock<dlock::RedlockBackend, dlock::ownership::Token, dlock::renewal::None, dlock::wait::Spin>;
