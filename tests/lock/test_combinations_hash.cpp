// Every valid combination with ownership::ReentrantHash, against a real redis-server.
#include "combination_tests.hpp"

DLOCK_COMBINATION_TESTS(dlock::ownership::ReentrantHash, "hash")
