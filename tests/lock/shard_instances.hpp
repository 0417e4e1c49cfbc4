// Every combination on examples::ShardedBackend (the test suite's backend
// over two servers), compiled once for the tests
// (shard_instances_first.cpp, shard_instances_last.cpp).
#pragma once

#include "../../examples/sharded_backend.hpp"
#include "lock_instances.hpp"

#define DLOCK_TEST_EXTERN_SHARDED_LOCK(O, R, W) \
  extern template class DLOCK_TEST_LOCK_ON(dlock::examples::ShardedBackend, O, R, W);
DLOCK_TEST_ALL_LOCKS(DLOCK_TEST_EXTERN_SHARDED_LOCK)
