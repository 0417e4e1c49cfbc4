// expect: this ownership policy needs a lease
#include <dlock/dlock.hpp>
template class dlock::Lock<dlock::RedisBackend, dlock::ownership::ReentrantHash, dlock::renewal::None, dlock::wait::Spin>;
