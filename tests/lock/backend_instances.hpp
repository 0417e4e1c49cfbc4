// Every combination on SentinelBackend and ClusterBackend, compiled once
// for the tests, dlock-compare and the benchmarks
// (lock_instances_{sentinel,cluster}_*.cpp; see lock_instances.hpp).
#pragma once

#include <dlock/backend/cluster.hpp>
#include <dlock/backend/sentinel.hpp>

#include "lock_instances.hpp"

// Not in a build for one server only (-Dtest_backends=one_server), which
// does not compile them: there a test compiles the few it uses itself.
#ifndef DLOCK_TEST_ONE_SERVER_ONLY
#define DLOCK_TEST_EXTERN_SENTINEL_LOCK(O, R, W) extern template class DLOCK_TEST_LOCK_ON(dlock::SentinelBackend, O, R, W);
#define DLOCK_TEST_EXTERN_CLUSTER_LOCK(O, R, W) extern template class DLOCK_TEST_LOCK_ON(dlock::ClusterBackend, O, R, W);
DLOCK_TEST_ALL_LOCKS(DLOCK_TEST_EXTERN_SENTINEL_LOCK)
DLOCK_TEST_ALL_LOCKS(DLOCK_TEST_EXTERN_CLUSTER_LOCK)
#endif
