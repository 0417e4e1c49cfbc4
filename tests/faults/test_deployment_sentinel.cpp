// Sentinel's own fault in the fault suite (docs/faults.md): a failover
// while processes churn.
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "deployment_churn.hpp"

using namespace std::chrono_literals;

// 3 processes churn on 2 locks (2 s leases, 8 s) against a master with 2
// replicas and a sentinel (1 s down-after). At 1.5 s the master is killed;
// once a replica is promoted, the old master starts again (Sentinel makes
// it a replica). Replica acknowledgement is on (SentinelBackend's default:
// every connected replica has each lock write before it counts), so the
// promoted replica has every hold: no two ever overlap. The errors a
// failover explains: commands that found no master (not_connected,
// connection_refused: nothing was sent), sent but unanswered
// (outcome_unknown), or not acknowledged in time; and releases of holds
// whose renewals the failover kept from the servers (lease_lost). The
// locks are taken again after the promotion.
TEMPLATE_LIST_TEST_CASE("Sentinel: a failover mid-churn never lets two hold a lock", "[faults][sentinel]",
                        dlock::test::faults::fault_kinds_t<dlock::SentinelBackend>) {
  using namespace dlock::test;
  sentinel_deployment d(sentinel_options{.replicas = 2, .sentinels = 1, .quorum = 1, .proxied = false});
  log_folder logs;
  churn_plan plan{.prefix = "failover:" + TestType::combination_name(), .locks = 2, .lease = scaled(2s),
                  .length = scaled(8s), .log = {}};
  churn_crowd crowd(logs, d.url(), TestType::combination_name(), plan, 3);
  REQUIRE(crowd.started() == 3);
  std::this_thread::sleep_for(scaled(1500ms));
  auto& old = d.master();
  const auto old_port = old.port();
  old.kill();
  const auto promoted = d.wait_for_new_master(old_port);
  const auto last = monotonic_ns();
  old.start();
  CHECK(crowd.finish(plan.length + scaled(30s)) == 3);
  using dlock::error;
  auto v = faults::read_deployment_churn(crowd, last,
                                         {error::not_connected, error::connection_refused, error::lease_lost});
  WARN(TestType::combination_name() << ": " << v.log.holds << " holds through a failover (master " << old_port
                                    << " killed, " << promoted << " promoted), " << v.after
                                    << " after the promotion; errors: " << v.log.expected.size()
                                    << " outcome_unknown, no_quorum or not_acknowledged"
                                    << (v.explained.empty() ? "" : "; " + v.explained));
  faults::check_deployment_churn(v, 3);
}
