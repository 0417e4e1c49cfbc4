// The Redis client layer when things go wrong, against a real redis-server:
// reconnects, command and connect timeouts, cancellation, health checks.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>

#include <dlock/backend/redis.hpp>
#include <support/server_fixture.hpp>

#include "wire_support.hpp"

using namespace std::chrono_literals;
using dlock::redis::request;
using dlock::test::adjusted;
using dlock::test::exec_error;
using dlock::test::private_redis;
using dlock::test::redis_server;
using dlock::test::scaled;
using dlock::test::wait_until;
namespace asio = boost::asio;

namespace {

// Whether the backend's shared connection answers PING again.
bool answers(dlock::RedisBackend& redis) {
  return !dlock::test::exec_error(redis, request().push("PING")).get();
}

}  // namespace

TEST_CASE("the connection reconnects after the server restarts on the same port", "[connection][reconnect]") {
  private_redis redis(adjusted([](dlock::redis::config& cfg) { cfg.command_timeout = scaled(2s); }));
  CHECK(dlock::test::shared_command(redis.backend, request().push("SET", "k", "v")).str == "OK");

  // A command the server holds (BLPOP) is in flight when the server dies:
  // its outcome is unknown, not "failed".
  std::promise<dlock::redis::error_code> blpop;
  redis.backend.async_exec(request().push("BLPOP", "nothing", "30"),
                           [&](dlock::redis::error_code ec, dlock::redis::response) { blpop.set_value(ec); });
  REQUIRE(wait_until([&] { return redis.server.command({"CLIENT", "LIST"}).find("cmd=blpop") != std::string::npos; }));
  redis.server.kill();
  CHECK(blpop.get_future().get() == dlock::error::outcome_unknown);

  // While it is down, a command is not sent and says why.
  std::error_code ec;
  dlock::test::shared_command(redis.backend, request().push("PING"), ec);
  CHECK(ec == dlock::error::connection_refused);

  redis.server.start();
  CHECK(wait_until([&] { return answers(redis.backend); }));
  CHECK(redis.backend.connection().statistics().connects >= 2);
  CHECK(redis.server.command({"GET", "k"}).empty());  // no persistence: a new server
}

TEST_CASE("a paused server turns an in-flight command into outcome_unknown", "[connection][timeout]") {
  private_redis redis(adjusted([](dlock::redis::config& cfg) {
    cfg.command_timeout = scaled(500ms);
    cfg.health_check_interval = scaled(200ms);
  }));
  CHECK(dlock::test::shared_command(redis.backend, request().push("PING")).str == "PONG");
  redis.server.pause();
  std::error_code ec;
  auto started = std::chrono::steady_clock::now();
  dlock::test::shared_command(redis.backend, request().push("SET", "k", "v"), ec);
  auto waited = std::chrono::steady_clock::now() - started;
  CHECK(ec == dlock::error::outcome_unknown);
  CHECK(waited < scaled(10s));
  redis.server.resume();
  CHECK(wait_until([&] { return answers(redis.backend); }));
  // The SET was written before the pause was noticed; it ran once resumed.
  CHECK(redis.server.command({"GET", "k"}) == "v");
}

TEST_CASE("a command timeout without a reply is outcome_unknown, and the late reply is dropped",
          "[connection][timeout]") {
  private_redis redis(adjusted([](dlock::redis::config& cfg) {
    cfg.command_timeout = scaled(300ms);
    cfg.health_check_interval = scaled(10s);  // keep the connection: only the timeout acts
  }));
  std::error_code ec;
  // The server holds BLPOP for 1 s (scaled), longer than the command timeout.
  const auto held = std::chrono::duration_cast<std::chrono::seconds>(scaled(1s));
  dlock::test::shared_command(redis.backend, request().push("BLPOP", "nothing", std::to_string(held.count())), ec);
  CHECK(ec == dlock::error::outcome_unknown);
  // The late nil reply must not be taken as the answer to the next command:
  // wait until the server has given up the BLPOP and sent it.
  REQUIRE(wait_until([&] {
    return redis.server.command({"INFO", "clients"}).find("blocked_clients:0") != std::string::npos;
  }));
  auto v = dlock::test::shared_command(redis.backend, request().push("ECHO", "after"), ec);
  CHECK(!ec);
  CHECK(v.str == "after");
  CHECK(redis.backend.connection().statistics().connects == 1);
}

TEST_CASE("cancelling a request that was not written removes it", "[connection][cancel]") {
  dlock::test::io_thread io;
  private_redis redis(io.ctx.get_executor(),
                      adjusted([](dlock::redis::config& cfg) { cfg.command_timeout = scaled(10s); }));
  CHECK(redis.backend.async_command(request().push("PING"), asio::use_future).get().str == "PONG");
  redis.server.stop();  // the request below waits for a reconnect that does not come
  // Let the connection see the close first (nothing shows when it has).
  std::this_thread::sleep_for(scaled(300ms));

  asio::cancellation_signal cancel;
  std::promise<dlock::redis::error_code> result;
  asio::post(io.ctx, [&] {
    redis.backend.async_exec(request().push("SET", "k", "v"),
                             asio::bind_cancellation_slot(cancel.slot(), [&](dlock::redis::error_code ec, auto) {
                               result.set_value(ec);
                             }));
  });
  // The request is queued on the connection's strand once a marker posted
  // there after it has run.
  std::promise<void> queued;
  asio::post(io.ctx, [&] {
    asio::post(redis.backend.connection().get_executor(), [&] { queued.set_value(); });
  });
  REQUIRE(queued.get_future().wait_for(scaled(5s)) == std::future_status::ready);
  asio::post(io.ctx, [&] { cancel.emit(asio::cancellation_type::terminal); });
  auto f = result.get_future();
  REQUIRE(f.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(f.get() == asio::error::operation_aborted);
}

TEST_CASE("a backend shut down with requests queued fails them with shutting_down", "[connection]") {
  redis_server server;  // stopped before the backend starts: no fixture
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
  REQUIRE(f.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(f.get() == dlock::error::shutting_down);
}

TEST_CASE("a request cancelled as soon as it is issued is removed", "[connection][cancel]") {
  // The cancellation handler is installed when the request is issued, in
  // the caller's context (here a thread of its own): a cancellation emitted
  // before the connection's strand has even seen the request is not lost.
  redis_server server;  // stopped before the backend starts: no fixture
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = scaled(5s);
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
  REQUIRE(f.wait_for(scaled(3s)) == std::future_status::ready);
  CHECK(f.get() == asio::error::operation_aborted);
}

TEST_CASE("commands the server holds for 2 s keep the connection", "[connection][health]") {
  dlock::test::server_options opts;
  opts.extra_args = {"--enable-debug-command", "local"};
  private_redis redis(opts, adjusted([](dlock::redis::config& cfg) { cfg.command_timeout = scaled(5s); }));
  REQUIRE(redis.backend.settings().health_check_interval == 1s);  // the default

  // Our own blocking command: no byte arrives for 2 s.
  std::error_code ec;
  auto v = dlock::test::shared_command(redis.backend, request().push("BLPOP", "nothing", "2"), ec);
  CHECK(!ec);
  CHECK(v.is_null());

  // Another client stalls the whole server for 2 s (scaled) while our PING
  // waits; the PING is sent once the stall has surely begun.
  const auto stall = std::chrono::duration_cast<std::chrono::seconds>(scaled(2s));
  std::thread staller([&redis, stall] {
    try {
      redis.server.command({"DEBUG", "SLEEP", std::to_string(stall.count())});
    } catch (...) {
    }
  });
  std::this_thread::sleep_for(scaled(300ms));
  auto started = std::chrono::steady_clock::now();
  v = dlock::test::shared_command(redis.backend, request().push("PING"), ec);
  auto waited = std::chrono::steady_clock::now() - started;
  staller.join();
  CHECK(!ec);
  CHECK(v.str == "PONG");
  CHECK(waited >= scaled(1200ms));  // the stall really happened
  CHECK(redis.backend.connection().statistics().connects == 1);
}

TEST_CASE("a paused server is noticed under steady traffic", "[connection][health]") {
  private_redis redis(adjusted([](dlock::redis::config& cfg) {
    cfg.command_timeout = scaled(500ms);
    cfg.health_check_interval = scaled(200ms);
  }));
  std::atomic<int> unknown{0}, never_written{0}, other{0}, done{0};
  CHECK(dlock::test::shared_command(redis.backend, request().push("PING")).str == "PONG");
  redis.server.pause();
  // A request every 50 ms: writes never stop, but replies do. The health
  // check must close the connection, and the requests after that are never
  // written (command_timeout, or connect_timeout once the reconnect to the
  // paused server timed out), not outcome_unknown.
  constexpr int sent = 50;
  for (int i = 0; i < sent; ++i) {
    redis.backend.async_exec(request().push("SET", "k" + std::to_string(i), "v"),
                             [&](dlock::redis::error_code ec, dlock::redis::response) {
                               if (ec == dlock::error::outcome_unknown) ++unknown;
                               else if (ec == dlock::error::command_timeout || ec == dlock::error::connect_timeout)
                                 ++never_written;
                               else ++other;
                               ++done;
                             });
    std::this_thread::sleep_for(scaled(50ms));  // the traffic
  }
  REQUIRE(wait_until([&] { return done == sent; }));
  CHECK(unknown > 0);  // those written before the pause was noticed
  CHECK(never_written > 0);
  CHECK(other == 0);
  redis.server.resume();
  CHECK(wait_until([&] { return answers(redis.backend); }));
  CHECK(redis.backend.connection().statistics().connects >= 2);
}

TEST_CASE("a request issued as the connection drops is sent on the next one", "[connection][reconnect]") {
  private_redis redis;
  auto& conn = redis.backend.connection();
  CHECK(dlock::test::shared_command(redis.backend, request().push("PING")).str == "PONG");
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
      redis.backend.async_exec(request().push("INCR", "sent"),
                               [result](dlock::redis::error_code ec, auto) { result->set_value(ec); });
    };
    asio::post(conn.get_executor(), [&conn, &issue, hops] {
      conn.drop_connection();
      issue(hops);
    });
    auto f = result->get_future();
    REQUIRE(f.wait_for(scaled(5s)) == std::future_status::ready);
    CHECK(f.get() == dlock::redis::error_code{});
    CHECK(redis.server.command({"GET", "sent"}) == std::to_string(hops + 1));
  }
  CHECK(conn.statistics().connects == 7);
}

TEST_CASE("connecting to a paused server fails with connect_timeout", "[connection][timeout]") {
  redis_server server;  // paused before the backend starts: no fixture
  server.pause();  // the kernel still accepts the TCP connection; nothing answers
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.connect_timeout = scaled(300ms);
  auto started = std::chrono::steady_clock::now();
  try {
    dlock::RedisBackend redis(cfg);
    FAIL("connected to a paused server");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::connect_timeout);
  }
  CHECK(std::chrono::steady_clock::now() - started < scaled(5s));
  server.resume();
}

TEST_CASE("a request waiting for a slow first connect fails with command_timeout", "[connection][timeout]") {
  redis_server server;  // paused before the backend starts: no fixture
  server.pause();
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.connect_timeout = scaled(3s);
  cfg.command_timeout = scaled(300ms);
  dlock::test::io_thread io;
  dlock::RedisBackend redis(io.ctx.get_executor(), cfg);
  auto f = exec_error(redis, request().push("SET", "k", "v"));
  REQUIRE(f.wait_for(scaled(2s)) == std::future_status::ready);
  // Never written, so it did not run: not outcome_unknown.
  CHECK(f.get() == dlock::error::command_timeout);
  server.resume();
  CHECK(server.command({"GET", "k"}).empty());
}
