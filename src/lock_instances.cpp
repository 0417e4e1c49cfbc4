// The default lock, compiled once for every program that links libdlock
// (dlock.hpp declares it `extern template`).
#include <dlock/dlock.hpp>

namespace dlock {

template class Lock<RedisBackend, ownership::ReentrantHash, renewal::Watchdog, wait::PubSub>;

}  // namespace dlock
