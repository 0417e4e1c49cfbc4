// Everything for one lock: the host, the Redis backend, and every policy.
// (The compile-time list of all combinations is in combinations.hpp, which
// brings in Boost.Hana; this header does not.)
#pragma once

#include <dlock/error.hpp>
#include <dlock/concepts.hpp>
#include <dlock/ext.hpp>
#include <dlock/hold.hpp>
#include <dlock/lock.hpp>

#include <dlock/backend/redis.hpp>

#include <dlock/ownership/getset_expiry.hpp>
#include <dlock/ownership/queue.hpp>
#include <dlock/ownership/reentrant_hash.hpp>
#include <dlock/ownership/read_write.hpp>
#include <dlock/ownership/semaphore.hpp>
#include <dlock/ownership/setnx.hpp>
#include <dlock/ownership/token.hpp>

#include <dlock/renewal/fixed_lease.hpp>
#include <dlock/renewal/none.hpp>
#include <dlock/renewal/watchdog.hpp>

#include <dlock/wait/backoff.hpp>
#include <dlock/wait/hand_off.hpp>
#include <dlock/wait/pubsub.hpp>
#include <dlock/wait/spin.hpp>
#include <dlock/wait/try_once.hpp>

namespace dlock {

// The default lock, Lock<> (Redisson's RLock), is compiled once, in libdlock
// (src/lock_instances.cpp): a translation unit that uses it does not compile
// its engine again, which is most of the cost of using a lock. A
// combination of your own can do the same (docs/building.md, "Compile time").
extern template class Lock<RedisBackend, ownership::ReentrantHash, renewal::Watchdog, wait::PubSub>;

}  // namespace dlock
