// Redis Cluster's own faults in the fault suite (docs/faults.md): the
// locks' slot moved to another master while processes wait on them, then
// the master serving it killed (a failover).
#include <algorithm>

#include <dlock/combinations.hpp>
#include <dlock/detail/key_slot.hpp>

#include "../lock/backend_fixtures.hpp"
#include "deployment_churn.hpp"

using namespace std::chrono_literals;

// 3 processes churn on 2 locks in one slot (a hash tag; 2 s leases, 10 s)
// on 3 masters with a replica each. At 1.5 s the slot moves to another
// master (keys migrated one step at a time, as `redis-cli --cluster
// reshard` does: ASK redirections meanwhile, and the waiters' shard
// channels move with it); at about 4 s that master is killed and its
// replica promoted (a few seconds in which the cluster serves no slot at
// all), and the old master starts again as a replica. With replica
// acknowledgement on (ClusterBackend's default) no two holds overlap. The
// errors these explain: commands that found no node to take them
// (not_connected, connection_refused: nothing was sent), sent but
// unanswered (outcome_unknown), or not acknowledged; the cluster's
// refusals while it is down or mid-move (cluster_down, server_error:
// CLUSTERDOWN, TRYAGAIN; not run); and releases of holds whose renewals it kept from the
// servers (lease_lost). The locks are taken again after the failover.
TEMPLATE_LIST_TEST_CASE("Cluster: a slot moved mid-wait and a failover never let two hold a lock",
                        "[faults][cluster]", dlock::test::faults::fault_kinds_t<dlock::ClusterBackend>) {
  using namespace dlock::test;
  redis_cluster c(cluster_options{.masters = 3, .replicas_per_master = 1});
  log_folder logs;
  churn_plan plan{.prefix = "{moved:" + TestType::combination_name() + "}", .locks = 2, .lease = scaled(2s),
                  .length = scaled(10s), .log = {}};
  const auto slot = static_cast<std::uint16_t>(dlock::detail::key_slot(plan.lock_name(0)));
  churn_crowd crowd(logs, "cluster:" + c.url(), TestType::combination_name(), plan, 3);
  REQUIRE(crowd.started() == 3);
  std::this_thread::sleep_for(scaled(1500ms));
  const auto from = c.master_of_slot(slot);
  auto masters = c.masters();
  const auto to = masters[(std::find(masters.begin(), masters.end(), from) - masters.begin() + 1) % masters.size()];
  c.move_slot(slot, from, to);
  std::this_thread::sleep_for(scaled(1500ms));
  const auto promoted = c.kill_master_and_wait(to);
  const auto last = monotonic_ns();
  c.node(to).start();  // it rejoins as a replica of the promoted node
  const auto restarted_ms = (monotonic_ns() - last) / 1'000'000;
  CHECK(crowd.finish(plan.length + scaled(30s)) == 3);
  using dlock::error;
  auto v = faults::read_deployment_churn(
      crowd, last,
      {error::not_connected, error::connection_refused, error::cluster_down, error::server_error, error::lease_lost});
  WARN(TestType::combination_name() << ": " << v.log.holds << " holds through slot " << slot << " moved from node "
                                    << from << " to " << to << " and node " << to << " killed (node " << promoted
                                    << " promoted), " << v.after << " after the promotion; errors: "
                                    << v.log.expected.size() << " outcome_unknown, no_quorum or not_acknowledged"
                                    << (v.explained.empty() ? "" : "; " + v.explained) << "; node " << to
                                    << " restarted " << restarted_ms << " ms after the promotion was seen");
  faults::check_deployment_churn(v, 3);
}
