// The set-up most tests start with: a private redis-server and a backend
// connected to it. Header-only, since it needs the library (RedisBackend)
// and the harness library (tests/support) does not link it.
//
//   dlock::test::private_redis redis;                                  // defaults
//   dlock::test::private_redis redis(dlock::test::impatient(scaled(300ms)));  // settings from the URL
//   dlock::test::private_redis redis(options);                         // server_options
//   dlock::test::private_redis redis(io.ctx.get_executor());           // on the caller's executor
//   ... redis.server.command({...}), Lock lock(redis.backend, ...)
//   auto other = redis.another_backend();  // a second client of the same server
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <utility>

#include <dlock/backend/redis.hpp>
#include <support/polling.hpp>
#include <support/redis_server.hpp>

namespace dlock::test {

/// How a test's backend is configured, from its server's URL.
using backend_settings = std::function<redis::config(const std::string& url)>;

/// The URL as it is: the library's defaults.
inline redis::config defaults(const std::string& url) { return redis::parse_url(url); }

/// Settings for a backend on `url` whose commands time out after
/// `command_timeout`, with a health check slow enough (5 s, scaled, and at
/// least twice the timeout) that only that timeout decides: for tests that
/// stall the server to lose a reply.
inline redis::config impatient(const std::string& url, std::chrono::milliseconds command_timeout) {
  auto cfg = redis::parse_url(url);
  cfg.command_timeout = command_timeout;
  cfg.health_check_interval = std::max(scaled(std::chrono::seconds(5)), command_timeout * 2);
  return cfg;
}

/// The same, as settings for private_redis.
inline backend_settings impatient(std::chrono::milliseconds command_timeout) {
  return [command_timeout](const std::string& url) { return impatient(url, command_timeout); };
}

/// The URL's settings with `change` applied (a shorter timeout, say).
inline backend_settings adjusted(std::function<void(redis::config&)> change) {
  return [change = std::move(change)](const std::string& url) {
    auto cfg = redis::parse_url(url);
    change(cfg);
    return cfg;
  };
}

/// A private redis-server and one backend connected to it. The backend is
/// destroyed first; the server is the harness's, so a test can still stop,
/// pause or restart it.
struct private_redis {
  redis_server server;
  RedisBackend backend;

  private_redis() : private_redis(server_options{}) {}
  explicit private_redis(server_options options, const backend_settings& settings = defaults)
      : server(std::move(options)), backend(settings(server.url())) {}
  explicit private_redis(const backend_settings& settings) : private_redis(server_options{}, settings) {}
  /// The backend runs on `ex` (which the test runs) instead of a thread of its own.
  explicit private_redis(RedisBackend::executor_type ex, const backend_settings& settings = defaults)
      : server(), backend(std::move(ex), settings(server.url())) {}

  /// Another client of the same server, with connections (and an I/O
  /// thread) of its own.
  RedisBackend another_backend(const backend_settings& settings = defaults) const {
    return RedisBackend(settings(server.url()));
  }
};

/// How many clients the server has subscribed to `channel` (PUBSUB NUMSUB).
inline int numsub(const redis_server& server, const std::string& channel) {
  auto out = server.command({"PUBSUB", "NUMSUB", channel});  // redis-cli prints "channel\ncount"
  return std::stoi(out.substr(out.find('\n') + 1));
}

}  // namespace dlock::test
