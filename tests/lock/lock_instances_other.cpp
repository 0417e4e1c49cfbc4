// GetSetExpiry's, NaiveExpiry's, Queue's, Semaphore's and ReadWrite's locks on RedisBackend, compiled
// once for the tests, dlock-compare and the benchmarks (see
// lock_instances.hpp).
#include "lock_instances.hpp"

#define DLOCK_TEST_INSTANTIATE_LOCK(O, R, W) template class DLOCK_TEST_LOCK_TYPE(O, R, W);
DLOCK_TEST_OTHER_LOCKS(DLOCK_TEST_INSTANTIATE_LOCK)
DLOCK_TEST_SEMAPHORE_LOCKS(DLOCK_TEST_INSTANTIATE_LOCK)
DLOCK_TEST_RW_LOCKS(DLOCK_TEST_INSTANTIATE_LOCK)
