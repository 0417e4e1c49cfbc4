// Redlock's own fault in the fault suite (docs/faults.md): a minority of
// its nodes lost and restarted while processes churn.
#include <dlock/combinations.hpp>

#include "../lock/backend_fixtures.hpp"
#include "deployment_churn.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::scaled;

/// Three private redis-servers behind a RedlockBackend, each keeping what
/// it acknowledged across a restart (append-only file, fsync on every
/// write): Redlock's safety asks that of a node that restarts sooner than
/// the longest lease.
struct persistent_redlock_servers {
  using backend_type = dlock::RedlockBackend;
  std::vector<std::unique_ptr<dlock::test::redis_server>> nodes = three();
  dlock::RedlockBackend backend{dlock::test::loaded_machine_redlock(url())};

  std::string worker_spec() const { return "redlock:" + url(); }
  std::string url() const {
    std::string out = "redis://";
    for (std::size_t i = 0; i < nodes.size(); ++i) out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(nodes[i]->port());
    return out;
  }
  static std::vector<std::unique_ptr<dlock::test::redis_server>> three() {
    dlock::test::server_options o;
    o.extra_args = {"--appendonly", "yes", "--appendfsync", "always"};
    std::vector<std::unique_ptr<dlock::test::redis_server>> out;
    for (int i = 0; i < 3; ++i) out.push_back(std::make_unique<dlock::test::redis_server>(o));
    return out;
  }
};

}  // namespace

// While 3 processes churn on 2 locks (2 s leases, 6 s), node 0 is killed
// at 1 s and started again at 2.5 s; node 2 is restarted at 3.5 s (a
// minority down at any moment). Votes that miss a node still win on the
// other two; a restarted node comes back with its keys. No overlap; the
// only errors are the documented ones of a vote that could not finish
// (outcome_unknown, no_quorum) and releases a majority could not confirm
// (lease_lost); the locks are taken again after the last restart.
TEMPLATE_LIST_TEST_CASE("Redlock: a minority of nodes lost and restarted mid-churn never lets two hold a lock",
                        "[faults][redlock]", dlock::test::faults::fault_kinds_t<dlock::RedlockBackend>) {
  using namespace dlock::test;
  persistent_redlock_servers redis;
  log_folder logs;
  churn_plan plan{.prefix = "minority:" + TestType::combination_name(), .locks = 2, .lease = scaled(2s),
                  .length = scaled(6s), .log = {}};
  churn_crowd crowd(logs, redis.worker_spec(), TestType::combination_name(), plan, 3);
  REQUIRE(crowd.started() == 3);
  std::this_thread::sleep_for(scaled(1s));
  redis.nodes[0]->kill();
  std::this_thread::sleep_for(scaled(1500ms));
  redis.nodes[0]->start();
  std::this_thread::sleep_for(scaled(1s));
  redis.nodes[2]->restart();
  const auto last = monotonic_ns();
  CHECK(crowd.finish(plan.length + scaled(20s)) == 3);
  auto v = faults::read_deployment_churn(crowd, last, {dlock::error::lease_lost});
  WARN(TestType::combination_name() << ": " << v.log.holds << " holds through a node killed, started and another "
                                    << "restarted, " << v.after << " after the last restart; "
                                    << v.log.expected.size() << " outcome_unknown or no_quorum; "
                                    << "releases a majority could not confirm: "
                                    << (v.explained.empty() ? "none" : v.explained));
  faults::check_deployment_churn(v, 3);
}
