// Faults 5, 6 and 10 on Sentinel: the sentinel monitors the master through
// a fault proxy, so the SentinelBackend reaches it through the proxy;
// tests/faults/fault_scenarios_network.hpp and proxied_deployments.hpp.
#include <dlock/combinations.hpp>

#include "proxied_deployments.hpp"

NETWORK_FAULT_SCENARIOS(dlock::test::faults::proxied_sentinel, dlock::SentinelBackend, "sentinel")
