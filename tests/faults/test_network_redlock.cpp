// Faults 5, 6 and 10 on Redlock (3 nodes), each node behind a fault proxy
// of its own: tests/faults/fault_scenarios_network.hpp.
#include <dlock/combinations.hpp>

#include "fault_scenarios_network.hpp"

NETWORK_FAULT_SCENARIOS(dlock::test::faults::proxied_redlock, dlock::RedlockBackend, "redlock")
