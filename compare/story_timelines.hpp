// The backends' fault stories as timelines for the report page: seed 003's
// failover on Sentinel (each of its three acts) and Redlock's node-restart
// story (at once and delayed), drawn from the stamps the stories record as
// they run (examples/failover_story.hpp, examples/redlock_story.hpp).
#pragma once

#include "../examples/failover_story.hpp"
#include "../examples/redlock_story.hpp"
#include "timeline.hpp"

namespace dlock::compare {

/// One act of seed 003's failover story, as it went.
timeline failover_timeline(examples::failover_story::act which, const examples::failover_story::outcome& o);

/// One act of the restart story (`delayed`: node 1 stayed out `out_ms`,
/// longer than the lease `lease_ms`), as it went.
timeline restart_timeline(bool delayed, const examples::redlock_story::outcome& o, double lease_ms, double out_ms);

}  // namespace dlock::compare
