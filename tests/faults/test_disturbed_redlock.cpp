// Faults 7 to 9 on a Redlock quorum of 3 private servers: tests/faults/fault_scenarios_server.hpp.
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "fault_scenarios_server.hpp"

SERVER_FAULT_SCENARIOS(dlock::test::redlock_servers, dlock::RedlockBackend, "redlock")
