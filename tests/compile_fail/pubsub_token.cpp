// expect: pub/sub waiting needs an ownership policy that publishes on release
#include <dlock/dlock.hpp>
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::PubSub>;
