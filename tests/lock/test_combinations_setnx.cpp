// Every valid combination with ownership::SetNx, against a real redis-server.
#include "combination_tests.hpp"

DLOCK_COMBINATION_TESTS(dlock::ownership::SetNx, "setnx")
