// expect: nothing (this one must compile: it proves the harness can pass)
#include <dlock/dlock.hpp>
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::Watchdog, dlock::wait::Backoff>;
