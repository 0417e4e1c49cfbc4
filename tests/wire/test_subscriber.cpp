// The shared subscriber against a real redis-server: delivery, reference
// counts, and resubscription after a restart.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/use_future.hpp>

#include <dlock/backend/redis.hpp>
#include <support/server_fixture.hpp>

#include "wire_support.hpp"

using namespace std::chrono_literals;
using dlock::test::numsub;
using dlock::test::private_redis;
using dlock::test::scaled;
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

}  // namespace

TEST_CASE("a message published after the subscription completes is delivered", "[pubsub]") {
  private_redis redis;
  inbox box;
  auto sub = subscribe(redis.backend, "news", box);
  CHECK(sub.active());
  redis.server.command({"PUBLISH", "news", "hello"});
  redis.server.command({"PUBLISH", "other", "not for us"});
  CHECK(wait_until([&] { return box.count("hello") == 1; }));
  CHECK(box.count("not for us") == 0);
}

TEST_CASE("after reset() returns its listener is neither running nor called again", "[pubsub]") {
  // What a listener touches may be destroyed right after its subscription
  // ends (an inbox on the stack, say): a call still running on the
  // subscriber's thread, or one about to start, would touch freed memory.
  private_redis redis;
  std::atomic<bool> started{false}, finished{false};
  std::atomic<int> calls{0};
  auto sub = redis.backend
                 .async_subscribe("slow",
                                  [&](std::optional<std::string_view> m) {
                                    if (!m) return;
                                    ++calls;
                                    started = true;
                                    std::this_thread::sleep_for(scaled(300ms));
                                    finished = true;
                                  },
                                  asio::use_future)
                 .get();
  redis.server.command({"PUBLISH", "slow", "1"});
  REQUIRE(wait_until([&] { return started.load(); }));
  sub.reset();  // waits for the call in progress
  CHECK(finished);
  const int seen = calls;
  redis.server.command({"PUBLISH", "slow", "2"});
  std::this_thread::sleep_for(scaled(200ms));
  CHECK(calls == seen);
}

TEST_CASE("a listener may end its own subscription", "[pubsub]") {
  private_redis redis;
  dlock::redis::subscription sub;
  std::atomic<dlock::redis::subscription*> own{nullptr};
  std::atomic<int> calls{0};
  std::atomic<bool> ended{false};
  sub = redis.backend
            .async_subscribe("once",
                             [&](std::optional<std::string_view> m) {
                               if (!m) return;
                               ++calls;
                               if (auto* s = own.load()) s->reset();  // from inside: no wait on itself
                               ended = true;
                             },
                             asio::use_future)
            .get();
  own = &sub;
  redis.server.command({"PUBLISH", "once", "1"});
  REQUIRE(wait_until([&] { return ended.load(); }));
  CHECK(wait_until([&] { return redis.backend.subscriber().channel_count() == 0; }));
  redis.server.command({"PUBLISH", "once", "2"});
  std::this_thread::sleep_for(scaled(100ms));
  CHECK(calls == 1);
}

TEST_CASE("many listeners share one channel subscription", "[pubsub]") {
  private_redis redis;
  inbox a, b;
  auto s1 = subscribe(redis.backend, "ch", a);
  auto s2 = subscribe(redis.backend, "ch", b);
  CHECK(redis.backend.subscriber().channel_count() == 1);
  CHECK(numsub(redis.server, "ch") == 1);
  redis.server.command({"PUBLISH", "ch", "1"});
  CHECK(wait_until([&] { return a.count("1") == 1 && b.count("1") == 1; }));

  s1.reset();
  redis.server.command({"PUBLISH", "ch", "2"});
  CHECK(wait_until([&] { return b.count("2") == 1; }));
  CHECK(a.count("2") == 0);
  CHECK(numsub(redis.server, "ch") == 1);

  s2.reset();
  CHECK(wait_until([&] { return numsub(redis.server, "ch") == 0; }));
  CHECK(redis.backend.subscriber().channel_count() == 0);
}

TEST_CASE("a thousand subscriptions use one connection", "[pubsub]") {
  private_redis redis;
  inbox box;
  std::vector<std::future<dlock::redis::subscription>> pending;
  for (int i = 0; i < 1000; ++i)
    pending.push_back(
        redis.backend.async_subscribe("ch:" + std::to_string(i % 100), box.listener(), asio::use_future));
  std::vector<dlock::redis::subscription> subs;
  for (auto& f : pending) subs.push_back(f.get());
  CHECK(redis.backend.subscriber().channel_count() == 100);
  auto clients = redis.server.command({"CLIENT", "LIST"});
  CHECK(std::count(clients.begin(), clients.end(), '\n') + 1 == 3);  // commands, subscriber, redis-cli
  redis.server.command({"PUBLISH", "ch:7", "x"});
  CHECK(wait_until([&] { return box.count("x") == 10; }));
  subs.clear();
  CHECK(wait_until([&] { return redis.backend.subscriber().channel_count() == 0; }));
}

TEST_CASE("subscriptions are restored after the server restarts", "[pubsub][reconnect]") {
  private_redis redis;
  inbox box;
  auto sub = subscribe(redis.backend, "events", box);
  redis.server.restart();
  // Listeners hear that messages may have been missed, once resubscribed.
  REQUIRE(wait_until([&] { return box.count("<resync>") >= 1; }));
  CHECK(numsub(redis.server, "events") == 1);
  redis.server.command({"PUBLISH", "events", "after restart"});
  CHECK(wait_until([&] { return box.count("after restart") == 1; }));
}

TEST_CASE("a subscription on an unreachable server fails with a clear error", "[pubsub]") {
  private_redis redis(dlock::test::adjusted([](dlock::redis::config& cfg) { cfg.command_timeout = scaled(300ms); }));
  redis.server.stop();
  inbox box;
  auto f = redis.backend.async_subscribe("x", box.listener(), asio::use_future);
  try {
    f.get();
    FAIL("subscribed to a stopped server");
  } catch (const boost::system::system_error& e) {
    CHECK((e.code() == dlock::error::connection_refused || e.code() == dlock::error::outcome_unknown));
  }
  CHECK(wait_until([&] { return redis.backend.subscriber().channel_count() == 0; }));
}

TEST_CASE("a listener that throws does not break the subscriber", "[pubsub]") {
  private_redis redis;
  inbox box;
  auto bad = redis.backend.async_subscribe(
      "ch", [](std::optional<std::string_view>) { throw std::runtime_error("a listener broke its promise"); },
      asio::use_future).get();
  auto good = subscribe(redis.backend, "ch", box);  // after the bad one: it hears each message second
  redis.server.command({"PUBLISH", "ch", "1"});
  redis.server.command({"PUBLISH", "ch", "2"});
  CHECK(wait_until([&] { return box.count("1") == 1 && box.count("2") == 1; }));
  CHECK(box.count("<resync>") == 0);
  CHECK(redis.backend.subscriber().link().statistics().connects == 1);
}

TEST_CASE("a resubscribe answered after the channel was dropped and subscribed again confirms nothing",
          "[pubsub][reconnect]") {
  // The interleaving: after a reconnect the resubscribe of "ch" is answered
  // by the server, but before the client reads that answer the last
  // listener leaves (UNSUBSCRIBE queued) and a new one arrives (a new
  // SUBSCRIBE queued behind it). The old answer must not confirm the new
  // subscription while the server has not run its SUBSCRIBE.
  private_redis redis;
  auto& sub = redis.backend.subscriber();
  auto strand = sub.link().get_executor();
  inbox first, second;
  auto s1 = subscribe(redis.backend, "ch", first);
  std::future<dlock::redis::subscription> again;

  bool staged = false;
  for (int attempt = 0; attempt < 10 && !staged; ++attempt) {
    // 1 staged; 0 the client read the answer too early, try again; -1 stuck.
    std::promise<int> outcome;
    auto resyncs = first.count("<resync>");
    auto connects = sub.link().statistics().connects;
    std::size_t written = 0;
    // On the strand, until the resubscribe is written; then, holding the
    // strand's only thread so that no reply is read, wait for the server
    // to run it, pause the server, and swap the listeners.
    std::function<void()> watch = [&] {
      auto st = sub.link().statistics();
      if (st.connects == connects || st.commands_written == written) {
        asio::post(strand, watch);
        return;
      }
      if (!wait_until([&] { return numsub(redis.server, "ch") == 1; }, scaled(2s))) return outcome.set_value(-1);
      if (first.count("<resync>") != resyncs) return outcome.set_value(0);
      redis.server.pause();
      s1.reset();
      again = redis.backend.async_subscribe("ch", second.listener(), asio::use_future);
      outcome.set_value(1);
    };
    asio::post(strand, [&] {
      written = sub.link().statistics().commands_written;
      sub.link().drop_connection();
      watch();
    });
    int r = outcome.get_future().get();
    REQUIRE(r >= 0);
    staged = r == 1;
    if (!staged) REQUIRE(wait_until([&] { return numsub(redis.server, "ch") == 1; }));
  }
  REQUIRE(staged);
  // The server (paused) has not run the new SUBSCRIBE.
  CHECK(again.wait_for(scaled(500ms)) == std::future_status::timeout);
  redis.server.resume();
  REQUIRE(again.wait_for(scaled(5s)) == std::future_status::ready);
  auto s2 = again.get();
  CHECK(s2.active());
  redis.server.command({"PUBLISH", "ch", "hello"});
  CHECK(wait_until([&] { return second.count("hello") == 1; }));
  CHECK(second.count("<resync>") == 0);  // it subscribed after the reconnect
  CHECK(sub.channel_count() == 1);
  s2.reset();
  CHECK(wait_until([&] { return sub.channel_count() == 0; }));
  CHECK(wait_until([&] { return numsub(redis.server, "ch") == 0; }));
  // And the channel can be subscribed again from scratch.
  inbox third;
  auto s3 = subscribe(redis.backend, "ch", third);
  redis.server.command({"PUBLISH", "ch", "again"});
  CHECK(wait_until([&] { return third.count("again") == 1; }));
}

TEST_CASE("a resubscribe that fails is retried, and listeners are told", "[pubsub][reconnect]") {
  // The retry interval: reconnects wait at most 500 ms.
  private_redis redis(dlock::test::adjusted([](dlock::redis::config& cfg) { cfg.reconnect_wait_max = 500ms; }));
  inbox box;
  auto s = subscribe(redis.backend, "ch", box);
  // Forbid the channel (Redis disconnects subscribers of channels an ACL
  // change forbids; drop the connection too, in case it does not): the
  // resubscribe after the reconnect fails with NOPERM.
  redis.server.command({"ACL", "SETUSER", "default", "resetchannels", "&other"});
  redis.backend.subscriber().link().drop_connection();
  // The listener hears that it may miss messages.
  CHECK(wait_until([&] { return box.count("<resync>") >= 1; }));
  redis.server.command({"ACL", "SETUSER", "default", "allchannels"});
  // And the subscription comes back by itself.
  CHECK(wait_until([&] {
    redis.server.command({"PUBLISH", "ch", "back"});
    return box.count("back") >= 1;
  }));
  CHECK(box.count("<resync>") >= 2);  // once more when resubscribed
  CHECK(redis.backend.subscriber().channel_count() == 1);
}

TEST_CASE("a SUNSUBSCRIBE answered after its command timeout does not shift the replies that follow",
          "[pubsub][sharded]") {
  // Sharded pub/sub (which a server outside a cluster has too): the reply
  // to SUNSUBSCRIBE looks like the node's own push. Here it comes after the
  // command timed out (the server was stopped), on the same connection: it
  // must not pass for a push and leave its slot to the next reply.
  private_redis redis(dlock::test::adjusted([](dlock::redis::config& cfg) {
    cfg.sharded_pubsub = true;
    cfg.command_timeout = 300ms;
    cfg.health_check_interval = 60s;  // no health verdict closes the link meanwhile
  }));
  inbox box;
  auto sub = subscribe(redis.backend, "gone", box);
  redis.server.pause();
  sub.reset();  // SUNSUBSCRIBE written, not answered
  std::this_thread::sleep_for(1s);  // past its command timeout
  redis.server.resume();
  inbox later;
  auto next = redis.backend.async_subscribe("later", later.listener(), asio::use_future);
  REQUIRE(next.wait_for(scaled(10s)) == std::future_status::ready);
  auto s = next.get();  // throws if its reply went to the dead SUNSUBSCRIBE
  CHECK(wait_until([&] {
    redis.server.command({"SPUBLISH", "later", "hi"});
    return later.count("hi") >= 1;
  }));
  CHECK(later.count("hi") >= 1);
}
