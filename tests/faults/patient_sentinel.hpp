// The fault suite's Sentinel deployment: a master, a replica and a
// sentinel, as the shared one of the lock tests, but whose sentinel calls
// the master down after 10 s, not 1 s.
//
// These scenarios test the locks under faults that are not failovers
// (workers killed and paused, servers paused with CLIENT PAUSE, refusing
// writes, losing connections). On a loaded machine, three test programs
// at a time on 2 CPUs, a 1 s down-after was once exceeded by a paused
// master plus a scheduling delay, and once (faults 1 to 4) without a
// server fault at all: the sentinel failed over, and a worker met a
// demoted master. Failovers are tested on purpose elsewhere
// (test_sentinel, the soak's --faults failover).
#pragma once

#include "../lock/backend_fixtures.hpp"

namespace dlock::test::faults {

/// The deployment, started on first use and kept until the process ends.
inline sentinel_deployment& patient_sentinel() {
  static sentinel_deployment deployment(
      sentinel_options{.replicas = 1, .sentinels = 1, .quorum = 1, .down_after_ms = 10000});
  return deployment;
}

/// The patient deployment, emptied, behind a SentinelBackend.
using patient_sentinel_servers = basic_sentinel_servers<patient_sentinel>;

}  // namespace dlock::test::faults
