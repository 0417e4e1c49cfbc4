// Every valid combination with ownership::Queue (and so wait::HandOff),
// against a real redis-server.
#include "combination_tests.hpp"

DLOCK_COMBINATION_TESTS(dlock::ownership::Queue, "queue")
