// Every valid combination on a second backend written outside dlock on the
// backend contract alone (examples/sharded_backend.hpp: two servers, each
// key on the one its cluster slot picks), with no change to the lock.
#include "combination_tests.hpp"
#include "shard_instances.hpp"  // its locks, compiled once

DLOCK_COMBINATION_TESTS_ON(dlock::test::two_servers, dlock::ownership::SetNx, "sharded")
DLOCK_COMBINATION_TESTS_ON(dlock::test::two_servers, dlock::ownership::Token, "sharded")
DLOCK_COMBINATION_TESTS_ON(dlock::test::two_servers, dlock::ownership::ReentrantHash, "sharded")
DLOCK_COMBINATION_TESTS_ON(dlock::test::two_servers, dlock::ownership::GetSetExpiry, "sharded")
DLOCK_COMBINATION_TESTS_ON(dlock::test::two_servers, dlock::ownership::NaiveExpiry, "sharded")
DLOCK_COMBINATION_TESTS_ON(dlock::test::two_servers, dlock::ownership::Queue, "sharded")

namespace {

// Names whose braces make Redisson's channel name hash to another slot than
// the lock (ReentrantHash once passed its channel as a script key: on a
// cluster, or here, its release failed with CROSSSLOT).
const std::vector<std::string> braced_names{"a{b}c", "orders:{7}", "x}y", "q{", "{ab}{cd}"};

}  // namespace

TEST_CASE("the names of this suite land on both servers", "[lock][sharded]") {
  dlock::test::two_servers redis;
  bool used[2] = {false, false};
  for (auto& name : braced_names) used[&redis.backend.shard_for(name) == &redis.backend.shard(0) ? 0 : 1] = true;
  CHECK(used[0]);
  CHECK(used[1]);
  CHECK(dlock::detail::key_slot(dlock::ownership::ReentrantHash::channel("x}y")) != dlock::detail::key_slot("x}y"));
}

TEMPLATE_LIST_TEST_CASE("every combination takes and releases a lock whose name holds braces, on two servers",
                        "[lock][sharded]", dlock::combinations::all_t<dlock::examples::ShardedBackend>) {
  dlock::test::two_servers redis;
  for (auto& name : braced_names) {
    CAPTURE(name);
    auto lock = dlock::test::make_lock<TestType>(redis.backend, name);
    std::error_code ec;
    auto hold = lock->try_acquire_for(std::chrono::seconds(5), ec);
    REQUIRE_FALSE(ec);
    CHECK(redis.command(name, {"EXISTS", name}) == "1");
    hold->release(ec);
    CHECK_FALSE(ec);
    CHECK(redis.command(name, {"EXISTS", name}) == "0");
  }
}
