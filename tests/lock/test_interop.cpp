// A dlock Token lock and redis-py's Lock (Debian's python3-redis) exclude
// each other on the same name: same key, same value layout.
#include <catch2/catch.hpp>

#include <filesystem>

#include <dlock/dlock.hpp>
#include <support/server_fixture.hpp>

#include "lock_support.hpp"

using namespace std::chrono_literals;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;

namespace {

// Debian's own interpreter: another python3 may come first on PATH without
// the redis module.
const char* debian_python = "/usr/bin/python3";

// Runs a redis-py snippet with `r` connected to the server and `sys`
// imported; returns what it printed.
std::string python(const dlock::test::redis_server& server, const std::string& body) {
  std::string script = "import sys, redis\nr = redis.Redis(host='127.0.0.1', port=" +
                       std::to_string(server.port()) + ")\n" + body;
  dlock::test::worker py(debian_python, {"-c", script});
  auto line = py.read_line(dlock::test::scaled(20s));
  CHECK(py.wait() == 0);
  return line;
}

}  // namespace

TEST_CASE("dlock's Token lock and redis-py's Lock exclude each other", "[interop]") {
  // ./dev installs python3-redis; without it this test fails rather than
  // passing silently.
  REQUIRE(std::filesystem::exists(debian_python));
  dlock::test::private_redis redis;
  REQUIRE(python(redis.server, "print(redis.__version__)") != "");

  using TokenLock = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;
  TokenLock ours(redis.backend, "shared", {}, r::FixedLease{dlock::test::scaled(30s)}, w::Spin{10ms});

  // redis-py holds it: dlock cannot take it.
  auto token = python(redis.server,
                      "l = r.lock('shared', timeout=30)\n"
                      "print(l.local.token.decode() if l.acquire(blocking=False) else 'refused')\n");
  REQUIRE(token != "refused");
  REQUIRE(!token.empty());
  CHECK(redis.server.command({"GET", "shared"}) == token);
  CHECK_FALSE(ours.try_lock());

  // redis-py releases with its token: now dlock gets it.
  CHECK(python(redis.server, "l = r.lock('shared', timeout=30)\nl.do_release(b'" + token + "')\nprint('released')\n") ==
        "released");
  REQUIRE(ours.try_lock());

  // dlock holds it: redis-py cannot take it.
  CHECK(python(redis.server, "print(r.lock('shared', timeout=30).acquire(blocking=False))\n") == "False");
  // and redis-py's release of a token that is not its own does nothing.
  CHECK(python(redis.server,
               "l = r.lock('shared', timeout=30)\n"
               "try:\n  l.do_release(b'not-the-token')\n  print('released')\n"
               "except redis.exceptions.LockNotOwnedError:\n  print('not owned')\n") == "not owned");
  ours.unlock();
  CHECK(python(redis.server, "print(r.lock('shared', timeout=30).acquire(blocking=False))\n") == "True");
}
