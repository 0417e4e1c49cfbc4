// The fault suite on a Sentinel deployment (a master, a replica, a
// sentinel that waits 10 s before a failover; shared by the file's tests):
// tests/faults/fault_scenarios.hpp.
#include <dlock/combinations.hpp>

#include "fault_scenarios.hpp"
#include "patient_sentinel.hpp"

FAULT_SCENARIOS(dlock::test::faults::patient_sentinel_servers, dlock::SentinelBackend, "sentinel")
