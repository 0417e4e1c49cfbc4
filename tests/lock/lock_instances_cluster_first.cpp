// SetNx's and Token's locks on ClusterBackend, compiled once for the tests,
// dlock-compare and the benchmarks (see lock_instances.hpp).
#include "lock_instances.hpp"

#define DLOCK_TEST_INSTANTIATE(O, R, W) template class DLOCK_TEST_LOCK_ON(dlock::ClusterBackend, O, R, W);
DLOCK_TEST_FIRST_LOCKS(DLOCK_TEST_INSTANTIATE)
