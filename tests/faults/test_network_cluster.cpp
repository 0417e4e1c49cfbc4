// Faults 5, 6 and 10 on Redis Cluster: each node announces the port of a
// fault proxy in front of it, so the ClusterBackend reaches every node
// through its proxy; tests/faults/fault_scenarios_network.hpp and
// proxied_deployments.hpp.
#include <dlock/combinations.hpp>

#include "proxied_deployments.hpp"

NETWORK_FAULT_SCENARIOS(dlock::test::faults::proxied_cluster, dlock::ClusterBackend, "cluster")
