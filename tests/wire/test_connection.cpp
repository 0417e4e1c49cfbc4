// The Redis client layer against a real redis-server: pipelining, errors,
// authentication, URLs, completion tokens and failed connects. (Reconnects,
// timeouts, cancellation, health checks: test_connection_faults.cpp;
// scripts: test_scripts.cpp.)
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/backend/redis.hpp>
#include <support/server_fixture.hpp>

#include "wire_support.hpp"

using namespace std::chrono_literals;
using dlock::redis::request;
using dlock::test::exec_error;
using dlock::test::first_connect;
using dlock::test::private_redis;
using dlock::test::redis_server;
using dlock::test::scaled;
namespace asio = boost::asio;

TEST_CASE("a backend built from a URL runs commands on its own thread", "[connection]") {
  private_redis redis;
  request req;
  req.push("SET", "greeting", "hello").push("GET", "greeting").push("INCR", "n");
  auto replies = redis.backend.exec(std::move(req));
  REQUIRE(replies.size() == 3);
  CHECK(replies[0].str == "OK");
  CHECK(replies[1].str == "hello");
  CHECK(replies[2].integer == 1);
  CHECK(redis.server.command({"GET", "greeting"}) == "hello");
}

TEST_CASE("10,000 concurrent commands from 4 threads are matched to their replies", "[connection]") {
  private_redis redis;
  constexpr int threads = 4, per_thread = 2500;
  std::atomic<int> mismatches{0}, errors{0}, done{0};
  std::promise<void> all_done;
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        std::string tag = std::to_string(t) + ":" + std::to_string(i);
        request req;
        req.push("ECHO", tag);
        redis.backend.async_exec(std::move(req), [&, tag](dlock::redis::error_code ec, dlock::redis::response r) {
          if (ec) ++errors;
          else if (r.size() != 1 || r[0].str != tag) ++mismatches;
          if (++done == threads * per_thread) all_done.set_value();
        });
      }
    });
  }
  for (auto& s : senders) s.join();
  REQUIRE(all_done.get_future().wait_for(scaled(60s)) == std::future_status::ready);
  CHECK(errors == 0);
  CHECK(mismatches == 0);
  auto stats = redis.backend.connection().statistics();
  CHECK(stats.commands_written >= threads * per_thread);
  // Coalescing: far fewer writes than commands.
  CHECK(stats.writes < stats.commands_written / 4);
}

// Scripts (loading, NOSCRIPT, batches): test_scripts.cpp.

TEST_CASE("a server error reply carries the server's message", "[connection]") {
  private_redis redis;
  redis.server.command({"SET", "text", "abc"});
  request req;
  req.push("INCR", "text");
  std::error_code ec;
  auto v = redis.backend.command(req, ec);
  CHECK(ec == dlock::error::server_error);
  CHECK(v.is_error());
  CHECK_THAT(v.str, Catch::Contains("not an integer"));
  try {
    redis.backend.command(req);
    FAIL("no exception");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::server_error);
    CHECK_THAT(std::string(e.what()), Catch::Contains("not an integer"));
  }
  // A script error too, and the connection goes on working.
  dlock::redis::script bad("return redis.call('NOSUCHCOMMAND')");
  redis.backend.eval(bad, {}, {}, ec);
  CHECK(ec == dlock::error::server_error);
  CHECK(redis.backend.command(request().push("PING"), ec).str == "PONG");
  CHECK(!ec);
}

TEST_CASE("authentication errors are clear", "[connection][auth]") {
  // No fixture: every backend here has its own credentials.
  dlock::test::server_options opts;
  opts.password = "s3cret";
  redis_server server(opts);
  std::string base = "redis://127.0.0.1:" + std::to_string(server.port());

  auto code_of = [](const std::string& url) -> std::error_code {
    try {
      dlock::RedisBackend redis(url);
    } catch (const std::system_error& e) {
      return e.code();
    }
    return {};
  };
  CHECK(code_of(base) == dlock::error::auth_failed);                       // none given
  CHECK(code_of("redis://:wrong@127.0.0.1:" + std::to_string(server.port())) == dlock::error::auth_failed);
  CHECK(code_of("redis://:s3cret@127.0.0.1:" + std::to_string(server.port())) == std::error_code{});
  CHECK(code_of("redis://:s3cret@127.0.0.1:" + std::to_string(server.port()) + "/99") ==
        dlock::error::select_failed);

  // A wrong password is permanent: a request fails at once with the reason,
  // instead of waiting out its command timeout for a reconnect.
  {
    dlock::test::io_thread io;
    auto cfg = dlock::redis::parse_url("redis://:wrong@127.0.0.1:" + std::to_string(server.port()));
    cfg.command_timeout = scaled(30s);
    dlock::RedisBackend redis(io.ctx.get_executor(), cfg);
    auto f = exec_error(redis, request().push("PING"));
    REQUIRE(f.wait_for(scaled(10s)) == std::future_status::ready);
    CHECK(f.get() == dlock::error::auth_failed);
  }

  dlock::RedisBackend redis("redis://:s3cret@127.0.0.1:" + std::to_string(server.port()) + "/3");
  redis.command(request().push("SET", "in-db-3", "yes"));
  CHECK(server.command({"-n", "3", "GET", "in-db-3"}) == "yes");
}

TEST_CASE("connecting to a port with no server is connection_refused", "[connection]") {
  auto port = dlock::test::free_port();
  try {
    dlock::RedisBackend redis("redis://127.0.0.1:" + std::to_string(port));
    FAIL("connected to nothing");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::connection_refused);
    CHECK_THAT(std::string(e.what()), Catch::Contains(std::to_string(port)));
  }
  CHECK_THROWS_AS(dlock::RedisBackend("redis://127.0.0.1:notaport"), std::system_error);
}

TEST_CASE("a unix socket URL works", "[connection]") {
  dlock::test::server_options opts;
  opts.unix_socket = true;
  redis_server server(opts);
  dlock::RedisBackend redis("unix://" + server.unix_path());  // not the fixture's TCP URL
  CHECK(redis.command(request().push("PING")).str == "PONG");
}

TEST_CASE("completion tokens: callback, use_future, use_awaitable, deferred", "[connection][tokens]") {
  dlock::test::io_thread io;
  private_redis redis(io.ctx.get_executor());

  auto fut = redis.backend.async_command(request().push("INCR", "n"), asio::use_future);
  CHECK(fut.get().integer == 1);

  auto coro = asio::co_spawn(io.ctx, [&]() -> asio::awaitable<std::int64_t> {
    auto v = co_await redis.backend.async_command(request().push("INCR", "n"), asio::use_awaitable);
    auto [ec, r] =
        co_await redis.backend.async_exec(request().push("INCR", "n"), asio::as_tuple(asio::use_awaitable));
    co_return ec ? -1 : r.at(0).integer + v.integer * 100;
  }, asio::use_future);
  CHECK(coro.get() == 203);

  auto op = redis.backend.async_command(request().push("INCR", "n"), asio::deferred);
  std::promise<std::int64_t> p;
  std::move(op)([&](dlock::redis::error_code, dlock::redis::value v) { p.set_value(v.integer); });
  CHECK(p.get_future().get() == 4);

  // use_future reports a server error as an exception.
  auto bad = redis.backend.async_command(request().push("NOSUCHCOMMAND"), asio::use_future);
  CHECK_THROWS(bad.get());

  // use_future completes on Asio's system thread pool, which goes on to
  // destroy the finished operation, and the copies of the connection's
  // strand it holds, after the future is ready. They must not outlive
  // `io`'s io_context: give that thread a moment (nothing here shows when
  // it is done).
  std::this_thread::sleep_for(scaled(200ms));
}

TEST_CASE("a large value round-trips", "[connection]") {
  private_redis redis;
  std::string big(3 << 20, 'x');
  for (std::size_t i = 0; i < big.size(); i += 4099) big[i] = static_cast<char>('a' + i % 26);
  big[10] = '\r';
  big[11] = '\n';
  redis.backend.command(request().push("SET", "big", big));
  CHECK(redis.backend.command(request().push("GET", "big")).str == big);
}

TEST_CASE("a connect handler that throws costs one connection, not the loop", "[connection]") {
  redis_server server;  // a bare connection, no backend
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = scaled(2s);
  dlock::test::io_thread io;
  std::atomic<int> calls{0};
  dlock::redis::connection conn(io.ctx.get_executor(), cfg);
  conn.set_connect_handler([&calls] {
    if (calls++ == 0) throw std::runtime_error("the first connect handler fails");
  });
  conn.start();
  CHECK(dlock::test::wait_until([&] { return calls >= 2; }, scaled(5s)));
  auto f = exec_error(conn, request().push("PING"));
  REQUIRE(f.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(!f.get());
  CHECK(conn.statistics().connects == 2);
}

TEST_CASE("a connect that throws is reported, not a silent hang", "[connection]") {
  // Asio throws name_too_long for a socket path longer than sockaddr_un
  // holds: a URL with one is rejected, but settings can still carry one.
  dlock::redis::config cfg;
  cfg.kind = dlock::redis::config::transport::unix_socket;
  cfg.path = "/tmp/" + std::string(200, 'x');
  cfg.command_timeout = scaled(10s);
  try {
    dlock::RedisBackend redis("unix://" + cfg.path);
    FAIL("accepted a socket path that does not fit");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::invalid_url);
  }
  dlock::test::io_thread io;
  dlock::redis::connection conn(io.ctx.get_executor(), cfg);
  auto c = first_connect(conn);
  REQUIRE(c.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(c.get() == dlock::error::not_connected);
  // A request does not wait out its command timeout either.
  auto f = exec_error(conn, request().push("PING"));
  REQUIRE(f.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(f.get() == dlock::error::not_connected);
}

TEST_CASE("a server that hangs up during the handshake means not_connected", "[connection]") {
  // With maxclients 1 and one client connected, the server answers the next
  // one with an error and closes: a raw end-of-file must not reach callers.
  dlock::test::server_options opts;
  opts.extra_args = {"--maxclients", "1"};
  redis_server server(opts);  // bare connections, no backend
  auto cfg = dlock::redis::parse_url(server.url());
  dlock::test::io_thread io;
  dlock::redis::connection first(io.ctx.get_executor(), cfg);
  first.start();
  auto ok = exec_error(first, request().push("PING"));
  REQUIRE(ok.wait_for(scaled(5s)) == std::future_status::ready);
  REQUIRE(!ok.get());

  cfg.command_timeout = scaled(300ms);
  dlock::redis::connection second(io.ctx.get_executor(), cfg);
  auto c = first_connect(second);
  REQUIRE(c.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(c.get() == dlock::error::not_connected);
  auto f = exec_error(second, request().push("PING"));
  REQUIRE(f.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(f.get() == dlock::error::not_connected);
}

TEST_CASE("a replica at a fixed address that must be a master refuses requests at once", "[connection]") {
  // A cluster node demoted by a failover: its connection fails what is
  // queued and what comes with not_master at once, so that the caller reads
  // where the master is now. It waited out the command timeout before,
  // which let a Cluster acquire run out of time at the old master. (A
  // connection with an address source, Sentinel's, asks it again instead.)
  redis_server master;
  dlock::test::server_options o;
  o.replica_of = master.port();
  redis_server replica(o);
  auto cfg = dlock::redis::parse_url(replica.url());
  cfg.require_master = true;
  cfg.command_timeout = scaled(30s);
  dlock::test::io_thread io;
  dlock::redis::connection conn(io.ctx.get_executor(), cfg);
  conn.start();
  auto queued = exec_error(conn, request().push("PING"));  // before the first connect ends
  REQUIRE(queued.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(queued.get() == dlock::error::not_master);
  auto later = exec_error(conn, request().push("PING"));
  REQUIRE(later.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(later.get() == dlock::error::not_master);
  // Promoted, it is served again by the same connection.
  replica.command({"REPLICAOF", "NO", "ONE"});
  CHECK(dlock::test::wait_until([&] {
    auto f = exec_error(conn, request().push("PING"));
    return f.wait_for(scaled(5s)) == std::future_status::ready && !f.get();
  }));
}
