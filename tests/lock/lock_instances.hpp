// Every combination on RedisBackend, compiled once for the whole test
// suite, dlock-compare and the benchmarks (lock_instances_*.cpp, the library
// lock_instances of the top meson.build): a file that includes this one
// takes them from there instead of compiling each lock's members again.
// That halves the compile time of a file that runs all of them (test_tls_locks:
// 176 s of CPU at -O0, 88 s with these declarations). Lock<> itself is
// compiled in libdlock (dlock.hpp declares it). backend_instances.hpp
// declares the same on SentinelBackend and ClusterBackend, and
// shard_instances.hpp on the test suite's ShardedBackend: each only for the
// files that use them, since a declaration costs every file that sees it
// the class's instantiation.
//
// The lists, one per ownership, in dlock::combinations::all<>()'s order
// (lock_instances_setnx.cpp checks that they are that list exactly): each
// entry is X(Ownership, Renewal, Wait), in the policies' own names.
#pragma once

#include <dlock/dlock.hpp>
#include <dlock/ownership/naive_expiry.hpp>

#define DLOCK_TEST_SETNX_LOCKS(X)                                                                              \
  X(SetNx, None, TryOnce) X(SetNx, None, Spin) X(SetNx, None, Backoff) X(SetNx, FixedLease, TryOnce)            \
  X(SetNx, FixedLease, Spin) X(SetNx, FixedLease, Backoff)
#define DLOCK_TEST_TOKEN_LOCKS(X)                                                                              \
  X(Token, None, TryOnce) X(Token, None, Spin) X(Token, None, Backoff) X(Token, FixedLease, TryOnce)            \
  X(Token, FixedLease, Spin) X(Token, FixedLease, Backoff) X(Token, Watchdog, TryOnce) X(Token, Watchdog, Spin) \
  X(Token, Watchdog, Backoff)
// Without hash/watchdog/pubsub, which is Lock<> (libdlock has it).
#define DLOCK_TEST_HASH_LOCKS(X)                                                                              \
  X(ReentrantHash, FixedLease, TryOnce) X(ReentrantHash, FixedLease, Spin) X(ReentrantHash, FixedLease, Backoff) \
  X(ReentrantHash, FixedLease, PubSub) X(ReentrantHash, Watchdog, TryOnce) X(ReentrantHash, Watchdog, Spin)     \
  X(ReentrantHash, Watchdog, Backoff)
#define DLOCK_TEST_OTHER_LOCKS(X)                                                                             \
  X(GetSetExpiry, FixedLease, TryOnce) X(GetSetExpiry, FixedLease, Spin) X(GetSetExpiry, FixedLease, Backoff)   \
  X(NaiveExpiry, FixedLease, TryOnce) X(NaiveExpiry, FixedLease, Spin) X(NaiveExpiry, FixedLease, Backoff)      \
  X(Queue, FixedLease, HandOff) X(Queue, Watchdog, HandOff)
// Semaphore's (one permit by default: Semaphore{}).
#define DLOCK_TEST_SEMAPHORE_LOCKS(X)                                                                         \
  X(Semaphore, None, TryOnce) X(Semaphore, None, Spin) X(Semaphore, None, Backoff) X(Semaphore, None, PubSub)    \
  X(Semaphore, FixedLease, TryOnce) X(Semaphore, FixedLease, Spin) X(Semaphore, FixedLease, Backoff)            \
  X(Semaphore, FixedLease, PubSub) X(Semaphore, Watchdog, TryOnce) X(Semaphore, Watchdog, Spin)                 \
  X(Semaphore, Watchdog, Backoff) X(Semaphore, Watchdog, PubSub)
// ReadWrite's (taken exclusively by the generic suite).
#define DLOCK_TEST_RW_LOCKS(X)                                                                                \
  X(ReadWrite, FixedLease, TryOnce) X(ReadWrite, FixedLease, Spin) X(ReadWrite, FixedLease, Backoff)            \
  X(ReadWrite, FixedLease, PubSub) X(ReadWrite, Watchdog, TryOnce) X(ReadWrite, Watchdog, Spin)                 \
  X(ReadWrite, Watchdog, Backoff) X(ReadWrite, Watchdog, PubSub)

// All 51, Lock<> (hash/watchdog/pubsub) among them, in list order.
#define DLOCK_TEST_ALL_LOCKS(X)                                                                           \
  DLOCK_TEST_SETNX_LOCKS(X) DLOCK_TEST_TOKEN_LOCKS(X) DLOCK_TEST_HASH_LOCKS(X) X(ReentrantHash, Watchdog, PubSub) \
  DLOCK_TEST_OTHER_LOCKS(X) DLOCK_TEST_SEMAPHORE_LOCKS(X) DLOCK_TEST_RW_LOCKS(X)
// The first half and the rest, so that a backend's locks compile in two
// files at once.
#define DLOCK_TEST_FIRST_LOCKS(X) DLOCK_TEST_SETNX_LOCKS(X) DLOCK_TEST_TOKEN_LOCKS(X)
#define DLOCK_TEST_LAST_LOCKS(X) \
  DLOCK_TEST_HASH_LOCKS(X) X(ReentrantHash, Watchdog, PubSub) DLOCK_TEST_OTHER_LOCKS(X) DLOCK_TEST_SEMAPHORE_LOCKS(X) \
      DLOCK_TEST_RW_LOCKS(X)

#define DLOCK_TEST_LOCK_ON(B, O, R, W) dlock::Lock<B, dlock::ownership::O, dlock::renewal::R, dlock::wait::W>
#define DLOCK_TEST_LOCK_TYPE(O, R, W) DLOCK_TEST_LOCK_ON(dlock::RedisBackend, O, R, W)
#define DLOCK_TEST_EXTERN_LOCK(O, R, W) extern template class DLOCK_TEST_LOCK_TYPE(O, R, W);

DLOCK_TEST_SETNX_LOCKS(DLOCK_TEST_EXTERN_LOCK)
DLOCK_TEST_TOKEN_LOCKS(DLOCK_TEST_EXTERN_LOCK)
DLOCK_TEST_HASH_LOCKS(DLOCK_TEST_EXTERN_LOCK)
DLOCK_TEST_OTHER_LOCKS(DLOCK_TEST_EXTERN_LOCK)
DLOCK_TEST_SEMAPHORE_LOCKS(DLOCK_TEST_EXTERN_LOCK)
DLOCK_TEST_RW_LOCKS(DLOCK_TEST_EXTERN_LOCK)
