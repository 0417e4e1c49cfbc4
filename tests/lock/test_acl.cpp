// docs/acl.md's ACL rule, read from that page: every combination works as a
// user with exactly that rule, and a user missing a permission gets the
// server's refusal as an error, never "not acquired".
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dlock/combinations.hpp>
#include <support/redis_server.hpp>

#include "lock_support.hpp"

using namespace std::chrono_literals;
using dlock::test::redis_server;
using dlock::test::scaled;
using dlock::test::take_within;

namespace {

// The words of the rule in docs/acl.md: the block after its "acl-rule"
// marker, without "ACL SETUSER".
std::vector<std::string> documented_rule() {
  std::ifstream doc(DLOCK_ACL_DOC);
  REQUIRE(doc);
  std::string line;
  while (std::getline(doc, line) && line.find("<!-- acl-rule") == std::string::npos) {
  }
  REQUIRE(std::getline(doc, line));
  REQUIRE(line == "```");
  std::vector<std::string> words;
  while (std::getline(doc, line) && line != "```") {
    std::istringstream in(line);
    for (std::string w; in >> w;) words.push_back(w);
  }
  REQUIRE(words.size() > 3);
  REQUIRE(words[0] == "ACL");
  REQUIRE(words[1] == "SETUSER");
  return {words.begin() + 2, words.end()};
}

std::vector<std::string> without(std::vector<std::string> rule, const std::string& word) {
  auto it = std::find(rule.begin(), rule.end(), word);
  REQUIRE(it != rule.end());
  rule.erase(it);
  return rule;
}

// A server with the user "locks" (password "change-me") made by `rule`.
struct acl_server {
  redis_server server;
  explicit acl_server(const std::vector<std::string>& rule) {
    std::vector<std::string> args{"ACL", "SETUSER"};
    args.insert(args.end(), rule.begin(), rule.end());
    REQUIRE(server.command(args) == "OK");
    REQUIRE(server.command({"ACL", "LOG", "RESET"}) == "OK");
  }
  std::string url() const { return "redis://locks:change-me@127.0.0.1:" + std::to_string(server.port()); }
  // What ACL LOG recorded (empty when nothing was refused).
  std::string refusals() const { return server.command({"ACL", "LOG"}); }
};

}  // namespace

TEMPLATE_LIST_TEST_CASE("every combination works as a user with exactly docs/acl.md's rule", "[acl]",
                        dlock::combinations::all_t<>) {
  using L = TestType;
  acl_server redis(documented_rule());
  dlock::RedisBackend a(redis.url()), b(redis.url());
  for (const std::string name : {"app:orders:1", "app:{orders}:2"}) {
    INFO(L::combination_name() << " on " << name);
    try {
      auto first = dlock::test::make_lock<L>(a, name);
      auto second = dlock::test::make_lock<L>(b, name);
      auto hold = first->acquire();
      CHECK_FALSE(second->try_acquire());
      // A waiter, served when the hold is released (by its message, for
      // the waits that listen for one).
      auto waiter = std::async(std::launch::async, [&] { return take_within(*second, scaled(5s)).has_value(); });
      std::this_thread::sleep_for(scaled(100ms));
      hold.release();
      CHECK(waiter.get());
    } catch (const std::system_error& e) {
      FAIL(e.what() << "; ACL LOG: " << redis.refusals());
    }
  }
  CHECK(redis.refusals() == "");
}

TEST_CASE("a user missing a permission gets the server's refusal, not \"not acquired\"", "[acl]") {
  const auto rule = documented_rule();
  SECTION("a command the ownership sends itself: SET for Token") {
    acl_server redis(without(rule, "+set"));
    dlock::RedisBackend backend(redis.url());
    dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::TryOnce> lock(
        backend, "app:token");
    std::error_code ec;
    CHECK_FALSE(lock.try_acquire(ec));
    CHECK(ec == dlock::error::server_error);
    CHECK_THROWS_AS(lock.try_acquire(), std::system_error);
    auto log = redis.refusals();
    CHECK_THAT(log, Catch::Contains("command") && Catch::Contains("set") && Catch::Contains("locks"));
  }
  SECTION("a command inside a script: HSET for ReentrantHash") {
    acl_server redis(without(rule, "+hset"));
    dlock::RedisBackend backend(redis.url());
    dlock::Lock<> lock(backend, "app:hash");
    std::error_code ec;
    CHECK_FALSE(lock.try_acquire(ec));
    CHECK(ec == dlock::error::server_error);
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
    // The holder's release may not publish either: its script stops there.
    hold.release(ec);
    CHECK(ec == dlock::error::server_error);
  }
  SECTION("a key outside the rule") {
    acl_server redis(rule);
    dlock::RedisBackend backend(redis.url());
    dlock::Lock<> lock(backend, "other:hash");
    std::error_code ec;
    CHECK_FALSE(lock.try_acquire(ec));
    CHECK(ec == dlock::error::server_error);
    CHECK_THAT(redis.refusals(), Catch::Contains("key") && Catch::Contains("other:hash"));
  }
}
