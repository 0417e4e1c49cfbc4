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
DLOCK_COMBINATION_TESTS_ON(dlock::test::two_servers, dlock::ownership::Semaphore, "sharded")
DLOCK_COMBINATION_TESTS_ON(dlock::test::two_servers, dlock::ownership::ReadWrite, "sharded")

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

// Torn down right after its last call returned, with the lock's key on the
// second server. With an I/O thread per server, that server's thread posted
// the call's completion to the first server's context (where lock
// operations ran) and only then let go of its hold on that context's work,
// while the first server's thread held work on the second's context for
// calls it made there: whichever context went first, another thread could
// still touch it (SIGSEGV in the scheduler's work count; lock_worker about
// once in 500 teardowns on a loaded machine). The servers now share the
// backend's one thread and context, which goes last.
TEST_CASE("a ShardedBackend torn down right after a call to its second server", "[lock][sharded]") {
  dlock::test::redis_server first, second;
  using L = dlock::Lock<dlock::examples::ShardedBackend, dlock::ownership::Token, dlock::renewal::FixedLease,
                        dlock::wait::TryOnce>;
  std::string key;
  {
    dlock::examples::ShardedBackend probe({first.url(), second.url()});
    for (int i = 0; key.empty(); ++i)
      if (&probe.shard_for("teardown:" + std::to_string(i)) == &probe.shard(1)) key = "teardown:" + std::to_string(i);
  }
  for (int round = 0; round < 300; ++round) {
    dlock::examples::ShardedBackend backend({first.url(), second.url()});
    L lock(backend, key, {}, dlock::renewal::FixedLease{std::chrono::seconds(10)});
    REQUIRE(lock.try_lock());
    lock.unlock();
  }
  CHECK(second.command({"EXISTS", key}) == "0");
}
