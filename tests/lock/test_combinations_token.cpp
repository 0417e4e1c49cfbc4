// Every valid combination with ownership::Token, against a real redis-server.
#include "combination_tests.hpp"

DLOCK_COMBINATION_TESTS(dlock::ownership::Token, "token")
