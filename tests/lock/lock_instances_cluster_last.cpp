// ReentrantHash's, GetSetExpiry's, NaiveExpiry's and Queue's locks on
// ClusterBackend, compiled once for the tests, dlock-compare and the
// benchmarks (see backend_instances.hpp).
#include "backend_instances.hpp"

#define DLOCK_TEST_INSTANTIATE(O, R, W) template class DLOCK_TEST_LOCK_ON(dlock::ClusterBackend, O, R, W);
DLOCK_TEST_LAST_LOCKS(DLOCK_TEST_INSTANTIATE)
