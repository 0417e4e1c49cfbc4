// The blocking path on a real redis-server: redis::blocking_connection (one
// socket its caller's thread writes and reads) and the pool of them that
// RedisBackend's blocking calls use. Errors keep the shared connection's
// meanings: nothing written is "not sent", written and unanswered is
// "outcome unknown", and a question asked after a timeout is answered after
// the command it is about.
#include <catch2/catch.hpp>

#include <signal.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <dlock/backend/redis.hpp>
#include <dlock/redis/blocking_connection.hpp>
#include <support/fault_proxy.hpp>
#include <support/polling.hpp>
#include <support/server_fixture.hpp>

using namespace std::chrono_literals;
using dlock::redis::blocking_connection;
using dlock::redis::parse_url;
using dlock::redis::request;
using dlock::redis::script;
using dlock::test::private_redis;
using dlock::test::redis_server;
using dlock::test::scaled;

namespace {

long long calls(const redis_server& server, const std::string& command) {
  return dlock::test::command_calls(server, command);
}

const script& adder() {
  static const script s("return redis.call('INCRBY', KEYS[1], ARGV[1])");
  return s;
}

dlock::redis::config with_timeout(const std::string& url, std::chrono::milliseconds t) {
  auto cfg = parse_url(url);
  cfg.command_timeout = t;
  return cfg;
}

}  // namespace

TEST_CASE("a blocking connection runs pipelines and scripts, loading a script in the same round trip", "[blocking]") {
  redis_server server;
  blocking_connection c(parse_url(server.url()));
  // A script first, on a connection not yet open: the connect must not
  // forget that this pipeline loads it.
  auto [e0, v0] = c.eval(adder(), {"first"}, {"1"});
  REQUIRE(!e0);
  CHECK(v0.integer == 1);
  auto [ec, r] = c.exec(request().push("SET", "k", "v").push("GET", "k"));
  REQUIRE(!ec);
  REQUIRE(r.size() == 2);
  CHECK(r[1].str == "v");

  auto load = calls(server, "script|load"), evalsha = calls(server, "evalsha");
  CHECK(load == 1);
  auto [e1, v1] = c.eval(adder(), {"n"}, {"5"});
  REQUIRE(!e1);
  CHECK(v1.integer == 5);
  CHECK(calls(server, "script|load") == load);  // loaded by the first run
  CHECK(calls(server, "evalsha") == evalsha + 1);
  auto [e2, v2] = c.eval(adder(), {"n"}, {"2"});
  CHECK(v2.integer == 7);
  CHECK(calls(server, "script|load") == load);  // known loaded: the SHA alone

  // The server forgets its scripts: the call runs once, by EVAL.
  server.command({"SCRIPT", "FLUSH"});
  auto eval = calls(server, "eval");
  auto [e3, v3] = c.eval(adder(), {"n"}, {"1"});
  REQUIRE(!e3);
  CHECK(v3.integer == 8);
  CHECK(calls(server, "eval") == eval + 1);
  // An error reply is server_error with the server's text.
  auto [e4, v4] = c.eval(script("return redis.error_reply('no way')"), {}, {});
  CHECK(e4 == dlock::error::server_error);
  CHECK(v4.str.find("no way") != std::string::npos);
  CHECK(c.connects() == 1);
}

TEST_CASE("a blocking connection that cannot connect says the command was not sent, and backs off", "[blocking]") {
  auto cfg = parse_url("redis://127.0.0.1:" + std::to_string(dlock::test::free_port()));
  cfg.reconnect_wait = scaled(60s);
  blocking_connection c(cfg);
  auto [ec, r] = c.exec(request().push("PING"));
  CHECK(ec == dlock::error::connection_refused);
  CHECK(ec == dlock::condition::not_sent);
  // Within the backoff it does not try again.
  auto [again, r2] = c.exec(request().push("PING"));
  CHECK(again == dlock::error::not_connected);
  CHECK_FALSE(c.is_open());
}

TEST_CASE("a blocking connection with a wrong password fails with auth_failed", "[blocking]") {
  dlock::test::server_options opts;
  opts.password = "right";
  redis_server server(opts);
  auto cfg = parse_url(server.url());
  cfg.password = "wrong";
  blocking_connection c(cfg);
  auto [ec, r] = c.exec(request().push("PING"));
  CHECK(ec == dlock::error::auth_failed);
  cfg.password = "right";
  blocking_connection good(cfg);
  CHECK_FALSE(good.exec(request().push("PING")).first);
}

TEST_CASE("a blocking connection reaches a server over a unix socket", "[blocking]") {
  dlock::test::server_options opts;
  opts.unix_socket = true;
  redis_server server(opts);
  blocking_connection c(parse_url("unix://" + server.unix_path()));
  auto [ec, r] = c.exec(request().push("PING"));
  REQUIRE(!ec);
  CHECK(r[0].str == "PONG");
}

TEST_CASE("a timed-out command is outcome unknown, and the next command is answered after it ran", "[blocking]") {
  redis_server server;
  blocking_connection c(with_timeout(server.url(), scaled(700ms)));
  REQUIRE(!c.exec(request().push("PING")).first);
  // Writes wait 1 s: the SET is not answered within its 700 ms...
  server.command({"CLIENT", "PAUSE", std::to_string(scaled(1000ms).count()), "WRITE"});
  auto [ec, r] = c.exec(request().push("SET", "k", "v"));
  CHECK(ec == dlock::error::outcome_unknown);
  CHECK(ec == dlock::condition::may_have_run);
  // ...but it runs when the pause ends, and a GET on the same connection is
  // answered after it: it sees the value, never a stale nil.
  auto [gec, g] = c.exec(request().push("GET", "k"));
  REQUIRE(!gec);
  CHECK(g[0].str == "v");
  CHECK(c.connects() == 1);
}

TEST_CASE("a reply trickled a byte at a time is cut off at the command timeout", "[blocking]") {
  redis_server server;
  dlock::test::fault_proxy proxy(server.port());
  blocking_connection c(with_timeout(proxy.url(), scaled(500ms)));
  REQUIRE(!c.exec(request().push("SET", "k", std::string(200, 'x'))).first);
  // GET's reply is 208 bytes: 50 ms a byte makes it 10 s.
  proxy.trickle(50ms, dlock::test::fault_proxy::direction::to_client);
  auto start = std::chrono::steady_clock::now();
  CHECK(c.exec(request().push("GET", "k")).first == dlock::error::outcome_unknown);
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= scaled(500ms));
  CHECK(took < scaled(1500ms));
}

TEST_CASE("a blocking connection to a silent server closes after a second unanswered command", "[blocking]") {
  redis_server server;
  blocking_connection c(with_timeout(server.url(), scaled(300ms)));
  REQUIRE(!c.exec(request().push("PING")).first);
  ::kill(server.pid(), SIGSTOP);
  CHECK(c.exec(request().push("PING")).first == dlock::error::outcome_unknown);
  CHECK(c.is_open());  // maybe only slow
  CHECK(c.exec(request().push("PING")).first == dlock::error::outcome_unknown);
  CHECK_FALSE(c.is_open());  // not one byte in two timeouts
  ::kill(server.pid(), SIGCONT);
  auto [ec, r] = c.exec(request().push("PING"));
  CHECK(!ec);
  CHECK(c.connects() == 2);
}

TEST_CASE("a blocking connection dropped mid-command reports outcome unknown, then reconnects", "[blocking]") {
  redis_server server;
  blocking_connection c(parse_url(server.url()));
  auto [iec, id] = c.exec(request().push("CLIENT", "ID"));
  REQUIRE(!iec);
  auto waiting = std::async(std::launch::async, [&] { return c.exec(request().push("BLPOP", "nothing", "0")).first; });
  // Kill it once the server has it blocked in BLPOP.
  REQUIRE(dlock::test::wait_until([&] { return server.command({"INFO", "clients"}).find("blocked_clients:1") != std::string::npos; }));
  server.command({"CLIENT", "KILL", "ID", std::to_string(id[0].integer)});
  auto ec = waiting.get();
  CHECK(ec == dlock::error::outcome_unknown);
  CHECK_FALSE(c.is_open());
  CHECK_FALSE(c.exec(request().push("PING")).first);
  CHECK(c.connects() == 2);
}

TEST_CASE("a reply beyond the parser's limits closes the blocking connection; the next command reconnects", "[blocking]") {
  redis_server server;
  auto cfg = parse_url(server.url());
  cfg.limits.max_bulk_length = 16;
  server.command({"SET", "big", std::string(100, 'x')});
  blocking_connection c(cfg);
  CHECK(c.exec(request().push("GET", "big")).first == dlock::error::outcome_unknown);
  CHECK_FALSE(c.is_open());
  auto [ec, r] = c.exec(request().push("SET", "small", "y"));
  CHECK(!ec);
}

TEST_CASE("a backend's blocking calls find a pooled connection the server closed, before using it", "[blocking]") {
  private_redis redis;
  auto id = redis.backend.command(request().push("CLIENT", "ID")).integer;
  CHECK(redis.backend.command(request().push("CLIENT", "ID")).integer == id);  // the same pooled connection
  redis.server.command({"CLIENT", "KILL", "ID", std::to_string(id)});
  // Without the idle check this PING would be written to a closed socket and
  // reported as outcome_unknown. (A connection back from a command less
  // than idle_check_after ago is reused unchecked: make sure it sat idle.)
  std::this_thread::sleep_for(dlock::redis::blocking_connection::idle_check_after * 5);
  CHECK(redis.backend.command(request().push("PING")).str == "PONG");
  CHECK(redis.backend.command(request().push("CLIENT", "ID")).integer != id);
}

TEST_CASE("a backend's blocking call goes through the shared connection when it cannot open its own", "[blocking]") {
  private_redis redis;
  REQUIRE(redis.backend.command(request().push("PING")).str == "PONG");
  // No new client is accepted (the backend's shared connections are in
  // already); the pooled one is closed, so the next call must connect.
  auto id = redis.backend.command(request().push("CLIENT", "ID")).integer;
  redis.server.command({"CLIENT", "KILL", "ID", std::to_string(id)});
  redis.server.command({"CONFIG", "SET", "maxclients", "1"});
  auto writes = redis.backend.connection().statistics().writes;
  std::error_code ec;
  auto v = redis.backend.command(request().push("SET", "via", "shared"), ec);
  CHECK(!ec);
  CHECK(v.str == "OK");
  CHECK(redis.backend.connection().statistics().writes > writes);
  redis.backend.command(request().push("CONFIG", "SET", "maxclients", "1000"));
  CHECK(redis.server.command({"GET", "via"}) == "shared");
}
