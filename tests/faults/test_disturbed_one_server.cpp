// Faults 7 to 9 on one private redis-server: tests/faults/fault_scenarios_server.hpp.
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "fault_scenarios_server.hpp"

SERVER_FAULT_SCENARIOS(dlock::test::one_server, dlock::RedisBackend, "one_server")
