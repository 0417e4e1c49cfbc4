// The shared subscriber against a real redis-server: delivery, reference
// counts, and resubscription after a restart.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <mutex>
#include <vector>

#include <boost/asio/use_future.hpp>

#include <dlock/backend/redis.hpp>
#include <support/redis_server.hpp>

#include "wire_support.hpp"

using namespace std::chrono_literals;
using dlock::test::redis_server;
using dlock::test::wait_until;
namespace asio = boost::asio;

namespace {

// Collects what a listener receives; "<resync>" stands for std::nullopt.
struct inbox {
  std::mutex m;
  std::vector<std::string> got;

  dlock::redis::listener listener() {
    return [this](std::optional<std::string_view> msg) {
      std::lock_guard g(m);
      got.push_back(msg ? std::string(*msg) : std::string("<resync>"));
    };
  }
  std::size_t count(const std::string& what) {
    std::lock_guard g(m);
    return static_cast<std::size_t>(std::count(got.begin(), got.end(), what));
  }
};

dlock::redis::subscription subscribe(dlock::RedisBackend& redis, const std::string& channel, inbox& box) {
  return redis.async_subscribe(channel, box.listener(), asio::use_future).get();
}

int numsub(redis_server& server, const std::string& channel) {
  // redis-cli prints "channel\ncount"
  auto out = server.command({"PUBSUB", "NUMSUB", channel});
  return std::stoi(out.substr(out.find('\n') + 1));
}

}  // namespace

TEST_CASE("a message published after the subscription completes is delivered", "[pubsub]") {
  redis_server server;
  dlock::RedisBackend redis(server.url());
  inbox box;
  auto sub = subscribe(redis, "news", box);
  CHECK(sub.active());
  server.command({"PUBLISH", "news", "hello"});
  server.command({"PUBLISH", "other", "not for us"});
  CHECK(wait_until([&] { return box.count("hello") == 1; }));
  CHECK(box.count("not for us") == 0);
}

TEST_CASE("many listeners share one channel subscription", "[pubsub]") {
  redis_server server;
  dlock::RedisBackend redis(server.url());
  inbox a, b;
  auto s1 = subscribe(redis, "ch", a);
  auto s2 = subscribe(redis, "ch", b);
  CHECK(redis.subscriber().channel_count() == 1);
  CHECK(numsub(server, "ch") == 1);
  server.command({"PUBLISH", "ch", "1"});
  CHECK(wait_until([&] { return a.count("1") == 1 && b.count("1") == 1; }));

  s1.reset();
  server.command({"PUBLISH", "ch", "2"});
  CHECK(wait_until([&] { return b.count("2") == 1; }));
  CHECK(a.count("2") == 0);
  CHECK(numsub(server, "ch") == 1);

  s2.reset();
  CHECK(wait_until([&] { return numsub(server, "ch") == 0; }));
  CHECK(redis.subscriber().channel_count() == 0);
}

TEST_CASE("a thousand subscriptions use one connection", "[pubsub]") {
  redis_server server;
  dlock::RedisBackend redis(server.url());
  inbox box;
  std::vector<std::future<dlock::redis::subscription>> pending;
  for (int i = 0; i < 1000; ++i)
    pending.push_back(redis.async_subscribe("ch:" + std::to_string(i % 100), box.listener(), asio::use_future));
  std::vector<dlock::redis::subscription> subs;
  for (auto& f : pending) subs.push_back(f.get());
  CHECK(redis.subscriber().channel_count() == 100);
  auto clients = server.command({"CLIENT", "LIST"});
  CHECK(std::count(clients.begin(), clients.end(), '\n') + 1 == 3);  // commands, subscriber, redis-cli
  server.command({"PUBLISH", "ch:7", "x"});
  CHECK(wait_until([&] { return box.count("x") == 10; }));
  subs.clear();
  CHECK(wait_until([&] { return redis.subscriber().channel_count() == 0; }));
}

TEST_CASE("subscriptions are restored after the server restarts", "[pubsub][reconnect]") {
  redis_server server;
  dlock::RedisBackend redis(server.url());
  inbox box;
  auto sub = subscribe(redis, "events", box);
  server.restart();
  // Listeners hear that messages may have been missed, once resubscribed.
  REQUIRE(wait_until([&] { return box.count("<resync>") >= 1; }));
  CHECK(numsub(server, "events") == 1);
  server.command({"PUBLISH", "events", "after restart"});
  CHECK(wait_until([&] { return box.count("after restart") == 1; }));
}

TEST_CASE("a subscription on an unreachable server fails with a clear error", "[pubsub]") {
  redis_server server;
  auto cfg = dlock::redis::parse_url(server.url());
  cfg.command_timeout = 300ms;
  dlock::RedisBackend redis(cfg);
  server.stop();
  inbox box;
  auto f = redis.async_subscribe("x", box.listener(), asio::use_future);
  try {
    f.get();
    FAIL("subscribed to a stopped server");
  } catch (const boost::system::system_error& e) {
    CHECK((e.code() == dlock::error::connection_refused || e.code() == dlock::error::outcome_unknown));
  }
  CHECK(wait_until([&] { return redis.subscriber().channel_count() == 0; }));
}
