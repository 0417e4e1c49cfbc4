// Scripts on a real redis-server: the first run of a script costs one round
// trip (SCRIPT LOAD rides ahead of the EVALSHA), later runs send only the
// SHA, a server that lost its scripts is answered without a lost call, and
// many calls share one round trip.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <boost/asio/use_future.hpp>

#include <dlock/backend/redis.hpp>
#include <support/polling.hpp>
#include <support/server_fixture.hpp>

using dlock::redis::script;
using dlock::redis::script_call;
using dlock::test::private_redis;
using dlock::test::redis_server;

namespace {

long long calls(const redis_server& server, const std::string& command) {
  return dlock::test::command_calls(server, command);
}

struct counts {
  long long load, evalsha, eval;
  bool operator==(const counts&) const = default;
};
counts counted(const redis_server& server) {
  // "script|load" is how Redis 7 names the subcommand in commandstats.
  return {calls(server, "script|load"), calls(server, "evalsha"), calls(server, "eval")};
}

// Runs a script on the backend's shared connection, the one the watchdog
// and the async interface use (the blocking eval uses a connection of its
// own: test_blocking.cpp).
dlock::redis::value shared_eval(dlock::RedisBackend& backend, const script& s, std::vector<std::string> keys,
                                std::vector<std::string> args, std::error_code& ec) {
  std::promise<std::pair<dlock::redis::error_code, dlock::redis::value>> done;
  backend.async_eval(s, std::move(keys), std::move(args),
                     [&](dlock::redis::error_code e, dlock::redis::value v) { done.set_value({e, std::move(v)}); });
  auto [e, v] = done.get_future().get();
  ec = e;
  return v;
}

dlock::redis::value shared_eval(dlock::RedisBackend& backend, const script& s, std::vector<std::string> keys,
                                std::vector<std::string> args) {
  std::error_code ec;
  auto v = shared_eval(backend, s, std::move(keys), std::move(args), ec);
  if (ec) throw std::system_error(ec, "shared_eval");
  return v;
}

const script& adder() {
  static const script s("return redis.call('INCRBY', KEYS[1], ARGV[1])");
  return s;
}

}  // namespace

TEST_CASE("a script's first run loads it in the same round trip; later runs send only the SHA", "[script]") {
  private_redis redis;
  auto before = counted(redis.server);
  auto writes = redis.backend.connection().statistics().writes;
  CHECK(shared_eval(redis.backend, adder(), {"n"}, {"5"}).integer == 5);
  CHECK(counted(redis.server) == counts{before.load + 1, before.evalsha + 1, before.eval});
  CHECK(redis.backend.connection().statistics().writes == writes + 1);  // one round trip, no NOSCRIPT
  CHECK(shared_eval(redis.backend, adder(), {"n"}, {"2"}).integer == 7);
  CHECK(counted(redis.server) == counts{before.load + 1, before.evalsha + 2, before.eval});
}

TEST_CASE("after SCRIPT FLUSH a call is run again by EVAL, exactly once", "[script]") {
  private_redis redis;
  CHECK(shared_eval(redis.backend, adder(), {"n"}, {"5"}).integer == 5);
  redis.server.command({"SCRIPT", "FLUSH"});
  auto before = counted(redis.server);
  CHECK(shared_eval(redis.backend, adder(), {"n"}, {"2"}).integer == 7);  // NOSCRIPT, then EVAL
  CHECK(counted(redis.server) == counts{before.load, before.evalsha + 1, before.eval + 1});
  CHECK(redis.server.command({"GET", "n"}) == "7");  // added once
  // The next run loads it again ahead of its EVALSHA, in one round trip.
  CHECK(shared_eval(redis.backend, adder(), {"n"}, {"1"}).integer == 8);
  CHECK(counted(redis.server) == counts{before.load + 1, before.evalsha + 2, before.eval + 1});
}

TEST_CASE("a reconnect to a restarted server loads scripts again without a NOSCRIPT", "[script]") {
  private_redis redis;
  CHECK(shared_eval(redis.backend, adder(), {"n"}, {"5"}).integer == 5);
  auto connects = redis.backend.connection().statistics().connects;
  redis.server.restart();  // a new server: no scripts, fresh statistics
  // Once the connection is back (a call encoded before the reconnect sends
  // only the SHA, gets NOSCRIPT and is run again: correct, one trip more).
  REQUIRE(dlock::test::wait_until([&] { return redis.backend.connection().statistics().connects > connects; }));
  auto v = shared_eval(redis.backend, adder(), {"n"}, {"2"});
  CHECK(v.integer == 2);
  CHECK(counted(redis.server) == counts{1, 1, 0});
}

TEST_CASE("a script that does not compile reports the compiler's message", "[script]") {
  private_redis redis;
  script broken("return (");
  std::error_code ec;
  auto v = shared_eval(redis.backend, broken, {}, {}, ec);
  CHECK(ec == dlock::error::server_error);
  CHECK_THAT(v.str, Catch::Contains("compiling"));
  CHECK(shared_eval(redis.backend, adder(), {"n"}, {"1"}).integer == 1);  // and the connection goes on
}

TEST_CASE("many calls share one round trip, replies in order; NOSCRIPT is given back per call", "[script]") {
  private_redis redis;
  static const script getter("return redis.call('GET', KEYS[1])");
  auto run = [&](std::vector<script_call> calls) {
    return redis.backend.async_eval_all(std::move(calls), boost::asio::use_future).get();
  };
  auto writes = redis.backend.connection().statistics().writes;
  auto r = run({{&adder(), {"a"}, {"1"}}, {&adder(), {"b"}, {"2"}}, {&getter, {"a"}, {}}, {&adder(), {"a"}, {"3"}}});
  CHECK(redis.backend.connection().statistics().writes == writes + 1);
  REQUIRE(r.size() == 4);
  for (auto& one : r) CHECK_FALSE(one.ec);
  CHECK(r[0].reply.integer == 1);
  CHECK(r[1].reply.integer == 2);
  CHECK(r[2].reply.str == "1");
  CHECK(r[3].reply.integer == 4);

  // The server loses its scripts: each call answers NOSCRIPT (none ran),
  // and the next run loads them again.
  redis.server.command({"SCRIPT", "FLUSH"});
  r = run({{&adder(), {"a"}, {"1"}}, {&getter, {"a"}, {}}});
  REQUIRE(r.size() == 2);
  CHECK(dlock::redis::detail::is_noscript(r[0].reply));
  CHECK(dlock::redis::detail::is_noscript(r[1].reply));
  CHECK(redis.server.command({"GET", "a"}) == "4");
  r = run({{&adder(), {"a"}, {"1"}}, {&getter, {"a"}, {}}});
  REQUIRE(r.size() == 2);
  CHECK(r[0].reply.integer == 5);
  CHECK(r[1].reply.str == "5");

  // Nothing to run completes at once, with nothing.
  CHECK(run({}).empty());
}

TEST_CASE("a backend destroyed while replies are still completing frees nothing they use", "[script]") {
  // Found by AddressSanitizer in the fault suite: a renewal batch's reply,
  // read just before ~RedisBackend stopped its connection, completed on the
  // I/O thread after the connection object was freed. With many calls in
  // flight, the backend goes while some replies are still being read and
  // completed; under AddressSanitizer a use of freed memory ends the test.
  redis_server server;
  std::atomic<long long> completed{0}, applied{0};
  for (int round = 0; round < 20; ++round) {
    auto backend = std::make_unique<dlock::RedisBackend>(server.url());
    const long long before = completed.load();
    for (int i = 0; i < 2000; ++i)
      backend->async_eval_all({{&adder(), {"n"}, {"1"}}}, [&](std::vector<dlock::redis::call_result> r) {
        ++completed;
        if (r.size() == 1 && !r[0].ec) ++applied;
      });
    // A few replies in (more each round), the backend goes.
    dlock::test::wait_until([&] { return completed.load() - before >= 10 + round * 50; }, std::chrono::seconds(5));
    backend.reset();
  }
  // Every call reported applied ran; the server still answers.
  CHECK(applied.load() > 0);
  CHECK(std::stoll(server.command({"GET", "n"})) >= applied.load());
}
