// Faults 7 to 9 on the shared Sentinel deployment (a master, a replica and a sentinel): tests/faults/fault_scenarios_server.hpp.
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "fault_scenarios_server.hpp"

SERVER_FAULT_SCENARIOS(dlock::test::sentinel_servers, dlock::SentinelBackend, "sentinel")
