// Every combination a quorum allows (Token and ReentrantHash with a lease,
// waiting by TryOnce, Spin or Backoff) on a RedlockBackend over three
// private servers, through the same suite as one server.
#include "combination_tests.hpp"

DLOCK_COMBINATION_TESTS_ON(dlock::test::redlock_servers, dlock::ownership::Token, "redlock")
DLOCK_COMBINATION_TESTS_ON(dlock::test::redlock_servers, dlock::ownership::ReentrantHash, "redlock")
