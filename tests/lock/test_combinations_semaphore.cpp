// Every valid combination with ownership::Semaphore (one permit, its
// default), against a real redis-server: a one-permit semaphore must pass
// everything an exclusive lock passes.
#include "combination_tests.hpp"

DLOCK_COMBINATION_TESTS(dlock::ownership::Semaphore, "semaphore")
