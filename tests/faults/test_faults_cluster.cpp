// The fault suite on a Redis Cluster of 3 masters with a replica each (shared by the file's tests): tests/faults/fault_scenarios.hpp.
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "fault_scenarios.hpp"

FAULT_SCENARIOS(dlock::test::cluster_servers, dlock::ClusterBackend, "cluster")
