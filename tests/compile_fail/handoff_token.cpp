// expect: hand-off waiting and a queueing ownership go together
#include <dlock/dlock.hpp>
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::HandOff>;
