// The Redis client layer against a real redis-server: pipelining, scripts,
// reconnects, timeouts, authentication, and completion tokens.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/backend/redis.hpp>
#include <support/redis_server.hpp>

#include "wire_support.hpp"

using namespace std::chrono_literals;
using dlock::redis::request;
using dlock::test::redis_server;
namespace asio = boost::asio;

namespace {

// Issues `req` on a connection or backend; the future holds its error code
// (a callback, so that errors are values rather than exceptions).
template <class Link>
std::future<dlock::redis::error_code> exec_error(Link& link, request req) {
  auto done = std::make_shared<std::promise<dlock::redis::error_code>>();
  auto f = done->get_future();
  link.async_exec(std::move(req), [done](dlock::redis::error_code ec, dlock::redis::response) { done->set_value(ec); });
  return f;
}

// Starts `conn` and gives how its first connect attempt ended.
std::future<dlock::redis::error_code> first_connect(dlock::redis::connection& conn) {
  auto connected = std::make_shared<std::promise<dlock::redis::error_code>>();
  conn.start();
  conn.async_wait_connected([connected](dlock::redis::error_code ec) { connected->set_value(ec); });
  return connected->get_future();
}

}  // namespace

TEST_CASE("a backend built from a URL runs commands on its own thread", "[connection]") {
  redis_server server;
  dlock::RedisBackend redis(server.url());
  request req;
  req.push("SET", "greeting", "hello").push("GET", "greeting").push("INCR", "n");
  auto replies = redis.exec(std::move(req));
  REQUIRE(replies.size() == 3);
  CHECK(replies[0].str == "OK");
  CHECK(replies[1].str == "hello");
  CHECK(replies[2].integer == 1);
  CHECK(server.command({"GET", "greeting"}) == "hello");
}

TEST_CASE("10,000 concurrent commands from 4 threads are matched to their replies", "[connection]") {
  redis_server server;
  dlock::RedisBackend redis(server.url());
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
        redis.async_exec(std::move(req), [&, tag](dlock::redis::error_code ec, dlock::redis::response r) {
          if (ec) ++errors;
          else if (r.size() != 1 || r[0].str != tag) ++mismatches;
          if (++done == threads * per_thread) all_done.set_value();
        });
      }
    });
  }
  for (auto& s : senders) s.join();
  REQUIRE(all_done.get_future().wait_for(60s) == std::future_status::ready);
  CHECK(errors == 0);
  CHECK(mismatches == 0);
  auto stats = redis.connection().statistics();
  CHECK(stats.commands_written >= threads * per_thread);
  // Coalescing: far fewer writes than commands.
  CHECK(stats.writes < stats.commands_written / 4);
}

// Scripts (loading, NOSCRIPT, batches): test_scripts.cpp.

TEST_CASE("a server error reply carries the server's message", "[connection]") {
  redis_server server;
  dlock::RedisBackend redis(server.url());
  server.command({"SET", "text", "abc"});
  request req;
  req.push("INCR", "text");
  std::error_code ec;
  auto v = redis.command(req, ec);
  CHECK(ec == dlock::error::server_error);
  CHECK(v.is_error());
  CHECK_THAT(v.str, Catch::Contains("not an integer"));
  try {
    redis.command(req);
    FAIL("no exception");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::server_error);
    CHECK_THAT(std::string(e.what()), Catch::Contains("not an integer"));
  }
  // A script error too, and the connection goes on working.
  dlock::redis::script bad("return redis.call('NOSUCHCOMMAND')");
  redis.eval(bad, {}, {}, ec);
  CHECK(ec == dlock::error::server_error);
  CHECK(redis.command(request().push("PING"), ec).str == "PONG");
  CHECK(!ec);
}

TEST_CASE("the connection reconnects after the server restarts on the same port", "[connection][reconnect]") {
  redis_server server;
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = 2s;
  dlock::RedisBackend redis(cfg);
  CHECK(redis.command(request().push("SET", "k", "v")).str == "OK");

  // A command the server holds (BLPOP) is in flight when the server dies:
  // its outcome is unknown, not "failed".
  std::promise<dlock::redis::error_code> blpop;
  redis.async_exec(request().push("BLPOP", "nothing", "30"),
                   [&](dlock::redis::error_code ec, dlock::redis::response) { blpop.set_value(ec); });
  dlock::test::wait_until([&] { return server.command({"CLIENT", "LIST"}).find("cmd=blpop") != std::string::npos; });
  server.kill();
  CHECK(blpop.get_future().get() == dlock::error::outcome_unknown);

  // While it is down, a command is not sent and says why.
  std::error_code ec;
  redis.command(request().push("PING"), ec);
  CHECK(ec == dlock::error::connection_refused);

  server.start();
  bool back = dlock::test::wait_until([&] {
    std::error_code e;
    auto v = redis.command(request().push("PING"), e);
    return !e && v.str == "PONG";
  });
  CHECK(back);
  CHECK(redis.connection().statistics().connects >= 2);
  CHECK(server.command({"GET", "k"}).empty());  // no persistence: a new server
}

TEST_CASE("a paused server turns an in-flight command into outcome_unknown", "[connection][timeout]") {
  redis_server server;
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = 500ms;
  cfg.health_check_interval = 200ms;
  dlock::RedisBackend redis(cfg);
  CHECK(redis.command(request().push("PING")).str == "PONG");
  server.pause();
  std::error_code ec;
  auto started = std::chrono::steady_clock::now();
  redis.command(request().push("SET", "k", "v"), ec);
  auto waited = std::chrono::steady_clock::now() - started;
  CHECK(ec == dlock::error::outcome_unknown);
  CHECK(waited < 10s);
  server.resume();
  CHECK(dlock::test::wait_until([&] {
    std::error_code e;
    return redis.command(request().push("PING"), e).str == "PONG";
  }));
  // The SET was written before the pause was noticed; it ran once resumed.
  CHECK(server.command({"GET", "k"}) == "v");
}

TEST_CASE("a command timeout without a reply is outcome_unknown, and the late reply is dropped", "[connection][timeout]") {
  redis_server server;
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = 300ms;
  cfg.health_check_interval = 10s;  // keep the connection: only the timeout acts
  dlock::RedisBackend redis(cfg);
  std::error_code ec;
  // The server holds BLPOP for 1 s, longer than the command timeout.
  redis.exec(request().push("BLPOP", "nothing", "1"), ec);
  CHECK(ec == dlock::error::outcome_unknown);
  // The late nil reply must not be taken as the answer to the next command.
  std::this_thread::sleep_for(1200ms);
  auto v = redis.command(request().push("ECHO", "after"), ec);
  CHECK(!ec);
  CHECK(v.str == "after");
  CHECK(redis.connection().statistics().connects == 1);
}

TEST_CASE("authentication errors are clear", "[connection][auth]") {
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
    cfg.command_timeout = 30s;
    dlock::RedisBackend redis(io.ctx.get_executor(), cfg);
    auto f = exec_error(redis, request().push("PING"));
    REQUIRE(f.wait_for(10s) == std::future_status::ready);
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
  dlock::RedisBackend redis("unix://" + server.unix_path());
  CHECK(redis.command(request().push("PING")).str == "PONG");
}

TEST_CASE("completion tokens: callback, use_future, use_awaitable, deferred", "[connection][tokens]") {
  redis_server server;
  dlock::test::io_thread io;
  dlock::RedisBackend redis(io.ctx.get_executor(), server.url());

  auto fut = redis.async_command(request().push("INCR", "n"), asio::use_future);
  CHECK(fut.get().integer == 1);

  auto coro = asio::co_spawn(io.ctx, [&]() -> asio::awaitable<std::int64_t> {
    auto v = co_await redis.async_command(request().push("INCR", "n"), asio::use_awaitable);
    auto [ec, r] = co_await redis.async_exec(request().push("INCR", "n"), asio::as_tuple(asio::use_awaitable));
    co_return ec ? -1 : r.at(0).integer + v.integer * 100;
  }, asio::use_future);
  CHECK(coro.get() == 203);

  auto op = redis.async_command(request().push("INCR", "n"), asio::deferred);
  std::promise<std::int64_t> p;
  std::move(op)([&](dlock::redis::error_code, dlock::redis::value v) { p.set_value(v.integer); });
  CHECK(p.get_future().get() == 4);

  // use_future reports a server error as an exception.
  auto bad = redis.async_command(request().push("NOSUCHCOMMAND"), asio::use_future);
  CHECK_THROWS(bad.get());

  // use_future completes on Asio's system thread pool, which goes on to
  // destroy the finished operation, and the copies of the connection's
  // strand it holds, after the future is ready. They must not outlive
  // `io`'s io_context: give that thread a moment.
  std::this_thread::sleep_for(200ms);
}

TEST_CASE("cancelling a request that was not written removes it", "[connection][cancel]") {
  redis_server server;
  dlock::test::io_thread io;
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = 10s;
  dlock::RedisBackend redis(io.ctx.get_executor(), cfg);
  CHECK(redis.async_command(request().push("PING"), asio::use_future).get().str == "PONG");
  server.stop();  // the request below waits for a reconnect that does not come
  std::this_thread::sleep_for(300ms);  // let the connection see the close first

  asio::cancellation_signal cancel;
  std::promise<dlock::redis::error_code> result;
  asio::post(io.ctx, [&] {
    redis.async_exec(request().push("SET", "k", "v"),
                     asio::bind_cancellation_slot(cancel.slot(), [&](dlock::redis::error_code ec, auto) {
                       result.set_value(ec);
                     }));
  });
  std::this_thread::sleep_for(100ms);
  asio::post(io.ctx, [&] { cancel.emit(asio::cancellation_type::terminal); });
  auto f = result.get_future();
  REQUIRE(f.wait_for(5s) == std::future_status::ready);
  CHECK(f.get() == asio::error::operation_aborted);
}

TEST_CASE("a large value round-trips", "[connection]") {
  redis_server server;
  dlock::RedisBackend redis(server.url());
  std::string big(3 << 20, 'x');
  for (std::size_t i = 0; i < big.size(); i += 4099) big[i] = static_cast<char>('a' + i % 26);
  big[10] = '\r';
  big[11] = '\n';
  redis.command(request().push("SET", "big", big));
  CHECK(redis.command(request().push("GET", "big")).str == big);
}

TEST_CASE("a backend shut down with requests queued fails them with shutting_down", "[connection]") {
  redis_server server;
  dlock::test::io_thread io;
  std::promise<dlock::redis::error_code> result;
  {
    auto cfg = dlock::redis::parse_url(server.url());
    server.stop();
    dlock::RedisBackend redis(io.ctx.get_executor(), cfg);
    redis.async_exec(request().push("PING"),
                     [&](dlock::redis::error_code ec, auto) { result.set_value(ec); });
  }
  auto f = result.get_future();
  REQUIRE(f.wait_for(5s) == std::future_status::ready);
  CHECK(f.get() == dlock::error::shutting_down);
}

TEST_CASE("a request cancelled as soon as it is issued is removed", "[connection][cancel]") {
  // The cancellation handler is installed when the request is issued, in
  // the caller's context (here a thread of its own): a cancellation emitted
  // before the connection's strand has even seen the request is not lost.
  redis_server server;
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = 5s;
  server.stop();  // the request waits for a connect that never comes
  dlock::test::io_thread io, caller;
  auto result = std::make_shared<std::promise<dlock::redis::error_code>>();
  auto cancel = std::make_shared<asio::cancellation_signal>();
  dlock::RedisBackend redis(io.ctx.get_executor(), cfg);
  asio::post(caller.ctx, [&redis, &caller, result, cancel] {
    redis.async_exec(request().push("PING"),
                     asio::bind_cancellation_slot(
                         cancel->slot(), asio::bind_executor(caller.ctx, [result](dlock::redis::error_code ec, auto) {
                           result->set_value(ec);
                         })));
    cancel->emit(asio::cancellation_type::terminal);
  });
  auto f = result->get_future();
  REQUIRE(f.wait_for(3s) == std::future_status::ready);
  CHECK(f.get() == asio::error::operation_aborted);
}

TEST_CASE("commands the server holds for 2 s keep the connection", "[connection][health]") {
  dlock::test::server_options opts;
  opts.extra_args = {"--enable-debug-command", "local"};
  redis_server server(opts);
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = 5s;
  REQUIRE(cfg.health_check_interval == 1s);  // the default
  dlock::RedisBackend redis(cfg);

  // Our own blocking command: no byte arrives for 2 s.
  std::error_code ec;
  auto v = redis.command(request().push("BLPOP", "nothing", "2"), ec);
  CHECK(!ec);
  CHECK(v.is_null());

  // Another client stalls the whole server for 2 s while our PING waits.
  std::thread staller([&server] {
    try {
      server.command({"DEBUG", "SLEEP", "2"});
    } catch (...) {
    }
  });
  std::this_thread::sleep_for(300ms);
  auto started = std::chrono::steady_clock::now();
  v = redis.command(request().push("PING"), ec);
  auto waited = std::chrono::steady_clock::now() - started;
  staller.join();
  CHECK(!ec);
  CHECK(v.str == "PONG");
  CHECK(waited >= 1200ms);  // the stall really happened
  CHECK(redis.connection().statistics().connects == 1);
}

TEST_CASE("a paused server is noticed under steady traffic", "[connection][health]") {
  redis_server server;
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = 500ms;
  cfg.health_check_interval = 200ms;
  std::atomic<int> unknown{0}, never_written{0}, other{0}, done{0};
  dlock::RedisBackend redis(cfg);
  CHECK(redis.command(request().push("PING")).str == "PONG");
  server.pause();
  // A request every 50 ms: writes never stop, but replies do. The health
  // check must close the connection, and the requests after that are never
  // written (command_timeout, or connect_timeout once the reconnect to the
  // paused server timed out), not outcome_unknown.
  constexpr int sent = 50;
  for (int i = 0; i < sent; ++i) {
    redis.async_exec(request().push("SET", "k" + std::to_string(i), "v"),
                     [&](dlock::redis::error_code ec, dlock::redis::response) {
                       if (ec == dlock::error::outcome_unknown) ++unknown;
                       else if (ec == dlock::error::command_timeout || ec == dlock::error::connect_timeout)
                         ++never_written;
                       else ++other;
                       ++done;
                     });
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(dlock::test::wait_until([&] { return done == sent; }));
  CHECK(unknown > 0);  // those written before the pause was noticed
  CHECK(never_written > 0);
  CHECK(other == 0);
  server.resume();
  CHECK(dlock::test::wait_until([&] {
    std::error_code e;
    return redis.command(request().push("PING"), e).str == "PONG";
  }));
  CHECK(redis.connection().statistics().connects >= 2);
}

TEST_CASE("a request issued as the connection drops is sent on the next one", "[connection][reconnect]") {
  redis_server server;
  dlock::RedisBackend redis(server.url());
  auto& conn = redis.connection();
  CHECK(redis.command(request().push("PING")).str == "PONG");
  // On the connection's strand the socket closes, and `hops` strand turns
  // later a request is issued: before or after the reader has seen the
  // close, before or after the writer was cancelled. It was never written,
  // so it must wait for the next connection, not fail as outcome_unknown.
  for (int hops = 0; hops < 6; ++hops) {
    INFO("issued " << hops << " strand turns after the drop");
    auto result = std::make_shared<std::promise<dlock::redis::error_code>>();
    std::function<void(int)> issue = [&](int left) {
      if (left > 0) {
        asio::post(conn.get_executor(), [&issue, left] { issue(left - 1); });
        return;
      }
      redis.async_exec(request().push("INCR", "sent"),
                       [result](dlock::redis::error_code ec, auto) { result->set_value(ec); });
    };
    asio::post(conn.get_executor(), [&conn, &issue, hops] {
      conn.drop_connection();
      issue(hops);
    });
    auto f = result->get_future();
    REQUIRE(f.wait_for(5s) == std::future_status::ready);
    CHECK(f.get() == dlock::redis::error_code{});
    CHECK(server.command({"GET", "sent"}) == std::to_string(hops + 1));
  }
  CHECK(conn.statistics().connects == 7);
}

TEST_CASE("a connect handler that throws costs one connection, not the loop", "[connection]") {
  redis_server server;
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = 2s;
  dlock::test::io_thread io;
  std::atomic<int> calls{0};
  dlock::redis::connection conn(io.ctx.get_executor(), cfg);
  conn.set_connect_handler([&calls] {
    if (calls++ == 0) throw std::runtime_error("the first connect handler fails");
  });
  conn.start();
  CHECK(dlock::test::wait_until([&] { return calls >= 2; }, 5s));
  auto f = exec_error(conn, request().push("PING"));
  REQUIRE(f.wait_for(5s) == std::future_status::ready);
  CHECK(!f.get());
  CHECK(conn.statistics().connects == 2);
}

TEST_CASE("a connect that throws is reported, not a silent hang", "[connection]") {
  // Asio throws name_too_long for a socket path longer than sockaddr_un
  // holds: a URL with one is rejected, but settings can still carry one.
  dlock::redis::config cfg;
  cfg.kind = dlock::redis::config::transport::unix_socket;
  cfg.path = "/tmp/" + std::string(200, 'x');
  cfg.command_timeout = 10s;
  try {
    dlock::RedisBackend redis("unix://" + cfg.path);
    FAIL("accepted a socket path that does not fit");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::invalid_url);
  }
  dlock::test::io_thread io;
  dlock::redis::connection conn(io.ctx.get_executor(), cfg);
  auto c = first_connect(conn);
  REQUIRE(c.wait_for(5s) == std::future_status::ready);
  CHECK(c.get() == dlock::error::not_connected);
  // A request does not wait out its command timeout either.
  auto f = exec_error(conn, request().push("PING"));
  REQUIRE(f.wait_for(5s) == std::future_status::ready);
  CHECK(f.get() == dlock::error::not_connected);
}

TEST_CASE("a server that hangs up during the handshake means not_connected", "[connection]") {
  // With maxclients 1 and one client connected, the server answers the next
  // one with an error and closes: a raw end-of-file must not reach callers.
  dlock::test::server_options opts;
  opts.extra_args = {"--maxclients", "1"};
  redis_server server(opts);
  auto cfg = dlock::redis::parse_url(server.url());
  dlock::test::io_thread io;
  dlock::redis::connection first(io.ctx.get_executor(), cfg);
  first.start();
  auto ok = exec_error(first, request().push("PING"));
  REQUIRE(ok.wait_for(5s) == std::future_status::ready);
  REQUIRE(!ok.get());

  cfg.command_timeout = 300ms;
  dlock::redis::connection second(io.ctx.get_executor(), cfg);
  auto c = first_connect(second);
  REQUIRE(c.wait_for(5s) == std::future_status::ready);
  CHECK(c.get() == dlock::error::not_connected);
  auto f = exec_error(second, request().push("PING"));
  REQUIRE(f.wait_for(5s) == std::future_status::ready);
  CHECK(f.get() == dlock::error::not_connected);
}

TEST_CASE("connecting to a paused server fails with connect_timeout", "[connection][timeout]") {
  redis_server server;
  server.pause();  // the kernel still accepts the TCP connection; nothing answers
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.connect_timeout = 300ms;
  auto started = std::chrono::steady_clock::now();
  try {
    dlock::RedisBackend redis(cfg);
    FAIL("connected to a paused server");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::connect_timeout);
  }
  CHECK(std::chrono::steady_clock::now() - started < 5s);
  server.resume();
}

TEST_CASE("a request waiting for a slow first connect fails with command_timeout", "[connection][timeout]") {
  redis_server server;
  server.pause();
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.connect_timeout = 3s;
  cfg.command_timeout = 300ms;
  dlock::test::io_thread io;
  dlock::RedisBackend redis(io.ctx.get_executor(), cfg);
  auto f = exec_error(redis, request().push("SET", "k", "v"));
  REQUIRE(f.wait_for(2s) == std::future_status::ready);
  // Never written, so it did not run: not outcome_unknown.
  CHECK(f.get() == dlock::error::command_timeout);
  server.resume();
  CHECK(server.command({"GET", "k"}).empty());
}
