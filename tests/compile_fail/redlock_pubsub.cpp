// expect: pub/sub waiting on a quorum backend (RedlockBackend) is not supported yet
#include <dlock/dlock.hpp>
#include <dlock/backend/redlock.hpp>
template class dlock::Lock<dlock::RedlockBackend>;
