// The fault suite on one private redis-server (tests/faults/fault_scenarios.hpp).
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "fault_scenarios.hpp"

FAULT_SCENARIOS(dlock::test::one_server, dlock::RedisBackend, "one_server")
