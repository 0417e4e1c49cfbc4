// Faults 7 to 9 on a Sentinel deployment (a master, a replica and a
// sentinel that waits 10 s before a failover: patient_sentinel.hpp):
// tests/faults/fault_scenarios_server.hpp.
#include <dlock/combinations.hpp>

#include "fault_scenarios_server.hpp"
#include "patient_sentinel.hpp"

SERVER_FAULT_SCENARIOS(dlock::test::faults::patient_sentinel_servers, dlock::SentinelBackend, "sentinel")
