// Faults 7 to 9 on a Sentinel deployment (a master, a replica and a
// sentinel): tests/faults/fault_scenarios_server.hpp.
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "fault_scenarios_server.hpp"

namespace {

// Not the shared deployment (1 s down-after): fault 7 pauses the master's
// clients, the sentinel's among them, for 300 ms; on a loaded machine that
// plus a scheduling delay went past 1 s, the sentinel failed over, and the
// next scenario met a demoted master. Here the sentinel waits 10 s: these
// scenarios test the locks under disturbed servers, not a failover (the
// soak and the failover tests do that).
dlock::test::sentinel_deployment& patient_sentinel() {
  static dlock::test::sentinel_deployment deployment(
      dlock::test::sentinel_options{.replicas = 1, .sentinels = 1, .quorum = 1, .down_after_ms = 10000});
  return deployment;
}

}  // namespace

SERVER_FAULT_SCENARIOS(dlock::test::basic_sentinel_servers<patient_sentinel>, dlock::SentinelBackend, "sentinel")
