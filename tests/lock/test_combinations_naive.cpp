// Every valid combination with ownership::NaiveExpiry, against a real redis-server.
#include "combination_tests.hpp"

DLOCK_COMBINATION_TESTS(dlock::ownership::NaiveExpiry, "naive")
