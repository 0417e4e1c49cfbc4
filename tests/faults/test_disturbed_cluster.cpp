// Faults 7 to 9 on the shared Redis Cluster (3 masters with a replica each): tests/faults/fault_scenarios_server.hpp.
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "fault_scenarios_server.hpp"

SERVER_FAULT_SCENARIOS(dlock::test::cluster_servers, dlock::ClusterBackend, "cluster")
