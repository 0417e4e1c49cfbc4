// expect: watchdog renewal needs an ownership policy with an owner id
#include <dlock/dlock.hpp>
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::GetSetExpiry, dlock::renewal::Watchdog, dlock::wait::Spin>;
