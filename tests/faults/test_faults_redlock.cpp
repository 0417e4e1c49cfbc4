// The fault suite on Redlock over 3 private redis-servers: tests/faults/fault_scenarios.hpp.
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "fault_scenarios.hpp"

FAULT_SCENARIOS(dlock::test::redlock_servers, dlock::RedlockBackend, "redlock")
