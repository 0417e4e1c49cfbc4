// Every valid combination with ownership::GetSetExpiry, against a real redis-server.
#include "combination_tests.hpp"

DLOCK_COMBINATION_TESTS(dlock::ownership::GetSetExpiry, "getset")
