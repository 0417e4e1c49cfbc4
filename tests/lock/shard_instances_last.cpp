// The last half of the combinations on examples::ShardedBackend, compiled
// once for the tests (see shard_instances.hpp).
#include "shard_instances.hpp"

#define DLOCK_TEST_INSTANTIATE(O, R, W) template class DLOCK_TEST_LOCK_ON(dlock::examples::ShardedBackend, O, R, W);
DLOCK_TEST_LAST_LOCKS(DLOCK_TEST_INSTANTIATE)
