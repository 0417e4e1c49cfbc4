// The fault suite on a Sentinel deployment (a master, a replica, a sentinel; shared by the file's tests): tests/faults/fault_scenarios.hpp.
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "fault_scenarios.hpp"

FAULT_SCENARIOS(dlock::test::sentinel_servers, dlock::SentinelBackend, "sentinel")
