// Every valid combination with ownership::ReadWrite, taken exclusively,
// against a real redis-server: a read-write lock's writer must pass
// everything an exclusive lock passes (its shared side: test_read_write).
#include "combination_tests.hpp"

DLOCK_COMBINATION_TESTS(dlock::ownership::ReadWrite, "read_write")
