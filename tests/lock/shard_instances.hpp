// Every combination on examples::ShardedBackend (the test suite's backend
// over two servers), compiled once for the tests
// (shard_instances_first.cpp, shard_instances_last.cpp).
#pragma once

#include "../../examples/sharded_backend.hpp"
#include "lock_instances.hpp"

// Not in a build for one server only (see backend_instances.hpp).
#ifndef DLOCK_TEST_ONE_SERVER_ONLY
#define DLOCK_TEST_EXTERN_SHARDED_LOCK(O, R, W) \
  extern template class DLOCK_TEST_LOCK_ON(dlock::examples::ShardedBackend, O, R, W);
DLOCK_TEST_ALL_LOCKS(DLOCK_TEST_EXTERN_SHARDED_LOCK)
#endif
