// docs/acl.md's one-server ACL rule, read from that page: every combination
// works as a user with exactly that rule, every command it grants is used,
// and a user missing a permission gets the server's refusal, in its own
// words, never "not acquired". (test_acl_deployments.cpp: Cluster and
// Sentinel.)
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <boost/hana/for_each.hpp>

#include <dlock/combinations.hpp>

#include "acl_support.hpp"

using namespace std::chrono_literals;
using dlock::test::redis_server;
using dlock::test::scaled;
using dlock::test::take_within;
using namespace dlock::test::acl;

TEST_CASE("README's ACL rule is docs/acl.md's", "[acl]") {
  CHECK(documented_rule("server", DLOCK_README) == documented_rule("server"));
}

TEST_CASE("one server: every combination as a user with exactly docs/acl.md's rule, which it uses whole", "[acl]") {
  const auto rule = documented_rule("server");
  acl_server redis(rule);
  dlock::RedisBackend a(redis.url()), b(redis.url());
  try {
    boost::hana::for_each(dlock::combinations::all<>(), [&](auto t) {
      using L = typename decltype(t)::type;
      exercise<L>(a, b, {"app:orders:1", "app:{orders}:2"});
    });
    exercise_rare_paths(a, b, [&] { REQUIRE(redis.server.command({"SCRIPT", "FLUSH"}) == "OK"); });
  } catch (const std::system_error& e) {
    FAIL(e.what() << "; ACL LOG: " << redis.refusals());
  }
  CHECK(redis.refusals() == "");
  check_every_command_used(rule, {commandstats(redis.server)});
}

TEST_CASE("a user missing a permission gets the server's refusal, not \"not acquired\"", "[acl]") {
  const auto rule = documented_rule("server");
  SECTION("a command the ownership sends itself: SET for Token") {
    acl_server redis(without(rule, "+set"));
    dlock::RedisBackend backend(redis.url());
    dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::TryOnce> lock(
        backend, "app:token");
    std::error_code ec;
    CHECK_FALSE(lock.try_acquire(ec));
    CHECK(ec == dlock::error::server_error);
    // The thrown error carries the server's words.
    CHECK_THROWS_WITH(lock.try_acquire(), Catch::Contains("acquire 'app:token'") &&
                                              Catch::Contains("NOPERM") && Catch::Contains("'set' command"));
    CHECK_THAT(redis.refusals(), Catch::Contains("reason\ncommand\n") && Catch::Contains("object\nset\n") &&
                                     Catch::Contains("username\nlocks\n"));
  }
  SECTION("a command of a pipeline: Token's PTTL, on a contended try") {
    acl_server redis(without(rule, "+pttl"));
    dlock::RedisBackend a(redis.url()), b(redis.url());
    using TokenLock =
        dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::TryOnce>;
    TokenLock first(a, "app:token"), second(b, "app:token");
    auto hold = first.acquire();  // won: its SET's reply is the verdict
    // Held: the SET did not run, and the PTTL beside it was refused. Before,
    // this read as unexpected_reply, without the server's words.
    CHECK_THROWS_WITH(second.try_acquire(), Catch::Contains("NOPERM") && Catch::Contains("'pttl' command"));
    std::error_code ec;
    CHECK_FALSE(second.try_acquire(ec));
    CHECK(ec == dlock::error::server_error);
  }
  SECTION("a command inside a script: HSET for ReentrantHash") {
    acl_server redis(without(rule, "+hset"));
    dlock::RedisBackend backend(redis.url());
    dlock::Lock<> lock(backend, "app:hash");
    std::error_code ec;
    CHECK_FALSE(lock.try_acquire(ec));
    CHECK(ec == dlock::error::server_error);
    CHECK_THROWS_WITH(lock.acquire(), Catch::Contains("The user executing the script can't run this command"));
    auto log = redis.refusals();
    CHECK_THAT(log, Catch::Contains("lua") && Catch::Contains("hset"));
  }
  SECTION("a channel outside the rule: a hand-off waiter's SUBSCRIBE") {
    acl_server redis(without(without(rule, "&{app:*"), "&app:*"));
    dlock::RedisBackend a(redis.url()), b(redis.url());
    using QueueLock = dlock::Lock<dlock::RedisBackend, dlock::ownership::Queue, dlock::renewal::FixedLease,
                                  dlock::wait::HandOff>;
    QueueLock first(a, "app:queue"), second(b, "app:queue");
    auto hold = first.acquire();
    std::error_code ec;
    auto started = std::chrono::steady_clock::now();
    CHECK_FALSE(second.try_acquire_for(scaled(3s), ec));
    CHECK(ec == dlock::error::server_error);
    CHECK(std::chrono::steady_clock::now() - started < scaled(2s));  // at once, not at the deadline
    CHECK_THAT(redis.refusals(), Catch::Contains("channel") && Catch::Contains("{app:queue}:handoff:"));
    CHECK_THROWS_WITH(second.try_lock_for(scaled(3s)),
                      Catch::Contains("NOPERM") && Catch::Contains("access one of the channels"));
  }
  SECTION("a channel outside the rule: a pub/sub waiter's SUBSCRIBE") {
    acl_server redis(without(rule, "&redisson_lock__channel:{app:*"));
    dlock::RedisBackend a(redis.url()), b(redis.url());
    dlock::Lock<> first(a, "app:hash"), second(b, "app:hash");
    auto hold = first.acquire();
    std::error_code ec;
    CHECK_FALSE(second.try_acquire_for(scaled(3s), ec));
    CHECK(ec == dlock::error::server_error);
    CHECK_THAT(redis.refusals(), Catch::Contains("redisson_lock__channel:{app:hash}"));
    CHECK_THROWS_WITH(second.try_acquire_for(scaled(3s)), Catch::Contains("acquire 'app:hash' (Redis replied: NOPERM") &&
                                                              Catch::Contains("access one of the channels"));
    // The holder's release may not publish either: its script stops there.
    CHECK_THROWS_WITH(hold.release(), Catch::Contains("release of lock 'app:hash'") &&
                                          Catch::Contains("can't publish to the channel"));
    // The key is gone all the same (Redis keeps a script's writes before
    // the refused command); the hold is kept, and releasing it again runs
    // the script again, which finds the key gone and is refused at the same
    // PUBLISH (Redisson's release publishes then too): docs/acl.md.
    CHECK(redis.server.command({"EXISTS", "app:hash"}) == "0");
    CHECK(hold.owns_lock());
    CHECK_THROWS_WITH(hold.release(), Catch::Contains("can't publish to the channel"));
    // The std interface's unlock() tells its error handler the same words.
    std::string told;
    dlock::Lock<> third(a, "app:other");
    third.set_error_handler([&](std::error_code, const std::string& what) { told += what + "\n"; });
    third.lock();
    third.unlock();
    CHECK_THAT(told, Catch::StartsWith("unlock (Redis replied: ") && Catch::Contains("can't publish to the channel"));
  }
  SECTION("WAIT, behind a write that replicas must acknowledge") {
    // Acknowledgement asked for in the URL (one server has it off): each
    // lock write goes as ROLE; <write>; WAIT. A user with +role but not
    // +wait has the write applied and the WAIT refused. Before, the win was
    // given back as unacknowledged and the wait tried on to its deadline,
    // ending not_acknowledged, without the server's words.
    auto with_role = rule;
    with_role.push_back("+role");
    acl_server redis(with_role);
    dlock::RedisBackend backend(redis.url() + "?acknowledge=1");
    dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::Spin> lock(
        backend, "app:token");
    std::error_code ec;
    auto started = std::chrono::steady_clock::now();
    CHECK_FALSE(lock.try_acquire_for(scaled(3s), ec));
    CHECK(ec == dlock::error::server_error);
    CHECK(std::chrono::steady_clock::now() - started < scaled(2s));  // at once, not at the deadline
    CHECK(redis.server.command({"EXISTS", "app:token"}) == "0");  // the write was given back
    CHECK_THROWS_WITH(lock.try_acquire_for(scaled(3s)), Catch::Contains("acquire 'app:token'") &&
                                                            Catch::Contains("NOPERM") && Catch::Contains("'wait' command"));
    CHECK(redis.server.command({"EXISTS", "app:token"}) == "0");
    CHECK_THAT(redis.refusals(), Catch::Contains("object\nwait\n"));
  }
  SECTION("a key outside the rule") {
    acl_server redis(rule);
    dlock::RedisBackend backend(redis.url());
    dlock::Lock<> lock(backend, "other:hash");
    std::error_code ec;
    CHECK_FALSE(lock.try_acquire(ec));
    CHECK(ec == dlock::error::server_error);
    CHECK_THROWS_WITH(lock.try_lock(), Catch::Contains("try_lock 'other:hash'") &&
                                           Catch::Contains("NOPERM") &&
                                           Catch::Contains("access one of the keys"));
    CHECK_THAT(redis.refusals(), Catch::Contains("key") && Catch::Contains("other:hash"));
  }
}

TEST_CASE("a name whose '}' closes no hash tag needs docs/acl.md's ~{slot-* &{slot-* besides", "[acl]") {
  using QueueLock = dlock::Lock<dlock::RedisBackend, dlock::ownership::Queue, dlock::renewal::FixedLease,
                                dlock::wait::HandOff>;
  auto rule = documented_rule("server");
  SECTION("without them: refused, in the server's words") {
    acl_server redis(rule);
    dlock::RedisBackend a(redis.url());
    QueueLock lock(a, "app:x}y");
    CHECK_THROWS_WITH(lock.try_lock(), Catch::Contains("NOPERM") || Catch::Contains("can't access"));
    CHECK_THAT(redis.refusals(), Catch::Contains("{slot-"));
  }
  SECTION("with them: it works, and nothing is refused") {
    rule.insert(rule.end(), {"~{slot-*", "&{slot-*"});
    acl_server redis(rule);
    dlock::RedisBackend a(redis.url()), b(redis.url());
    exercise<QueueLock>(a, b, {"app:x}y", "app:{}x"});
    CHECK(redis.refusals() == "");
  }
}
