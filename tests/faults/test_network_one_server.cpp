// Faults 5, 6 and 10 on one server behind a fault proxy:
// tests/faults/fault_scenarios_network.hpp.
#include <dlock/combinations.hpp>

#include "fault_scenarios_network.hpp"

NETWORK_FAULT_SCENARIOS(dlock::test::faults::proxied_one_server, dlock::RedisBackend, "single")

// The ownerships that cannot ask the server whether a lost acquire won.
TEMPLATE_TEST_CASE("fault 5: a lost acquire reply that cannot be resolved is outcome_unknown and lapses",
                   "[faults][single]",
                   (dlock::Lock<dlock::RedisBackend, dlock::ownership::GetSetExpiry, dlock::renewal::FixedLease,
                                dlock::wait::Spin>)) {
  dlock::test::faults::unresolvable_reply_scenario<dlock::test::faults::proxied_one_server, TestType>();
}
