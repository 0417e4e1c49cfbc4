// expect: ownership::GetSetExpiry keeps its expiry in the value and cannot be renewed
#include <dlock/dlock.hpp>
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::GetSetExpiry, dlock::renewal::Watchdog, dlock::wait::Spin>;
