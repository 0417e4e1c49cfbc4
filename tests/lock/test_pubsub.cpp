// wait::PubSub against one real redis-server: who a release wakes, counted
// by the server (one waiter across all clients, with ReentrantHash's named
// wake-ups), Redisson's messages both ways, a lost wake-up recovered, and
// the backend's line of waiters (ext::wake_groups).
#include <catch2/catch.hpp>

#include <atomic>
#include <charconv>
#include <cstdint>
#include <future>
#include <mutex>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/detail/wake_groups.hpp>
#include <dlock/dlock.hpp>
#include <support/polling.hpp>
#include <support/server_fixture.hpp>

#include "lock_support.hpp"

using namespace std::chrono_literals;
using dlock::test::private_redis;
using dlock::test::redis_server;
using dlock::test::scaled;
using dlock::test::script_calls;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;
namespace asio = boost::asio;

using WatchdogHash = dlock::Lock<>;
using SpinHash = dlock::Lock<dlock::RedisBackend, o::ReentrantHash, r::Watchdog, w::Spin>;

namespace {

// A PubSub whose bounded re-check never comes within a test: every wake is
// a message's.
const w::PubSub no_recheck{.linger = 2000ms, .recheck = 600s};

// Waiter numbers in the line of lock `name`.
long long registered(const redis_server& server, const std::string& name) {
  return std::stoll(server.command({"LLEN", o::ReentrantHash::waiters_key(name)}));
}

// A message as Redisson's waiters read it: a Java long (Long.parseLong), or
// nullopt where that would throw.
std::optional<std::int64_t> java_long(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// What a subscriber (Redisson's waiters, on the wire) hears on a channel.
struct listener {
  std::mutex m;
  std::vector<std::string> heard;
  dlock::redis::subscription sub;

  listener(dlock::RedisBackend& backend, const std::string& channel) {
    sub = backend
              .async_subscribe(channel,
                               [this](std::optional<std::string_view> message) {
                                 std::lock_guard g(m);
                                 if (message) heard.emplace_back(*message);
                               },
                               asio::use_future)
              .get();
  }
  std::vector<std::string> messages() {
    std::lock_guard g(m);
    return heard;
  }
  bool hears(std::size_t n) {
    return dlock::test::wait_until([&] { return messages().size() >= n; }, scaled(5s));
  }
};

// Waits until a waiter on `lock`, started when `server` had run
// `scripts_before` scripts (and running nothing else meanwhile but a
// holder's rare renewals), has tried and, for pub/sub, subscribed: it
// sleeps now. (Counting the backend's shared connection does not do: a
// blocking acquire tries on a blocking connection, and the shared one's
// health PING would be taken for the try.)
template <class L>
bool waiter_asleep(const L& lock, const redis_server& server, long long scripts_before) {
  constexpr bool pubsub = std::is_same_v<typename L::wait_type, w::PubSub>;
  // PubSub tries, subscribes, and tries again before it sleeps.
  const long long tries = pubsub ? 2 : 1;
  return dlock::test::wait_until([&] {
    return script_calls(server) >= scripts_before + tries &&
           (!pubsub || dlock::test::numsub(server, o::ReentrantHash::channel(lock.name())) == 1);
  });
}

}  // namespace

TEST_CASE("pub/sub wakes a waiter long before a spin interval would", "[pubsub]") {
  private_redis redis;
  auto& a = redis.backend;
  auto b = redis.another_backend();
  const auto spin = scaled(1000ms);
  auto measure = [&](auto& waiter_lock, auto& holder_lock) {
    auto hold = holder_lock.acquire();
    auto before = script_calls(redis.server);
    auto waiting = std::async(std::launch::async, [&] {
      auto h = waiter_lock.acquire();
      return std::chrono::steady_clock::now();
    });
    REQUIRE(waiter_asleep(waiter_lock, redis.server, before));  // it has tried and sleeps
    auto released = std::chrono::steady_clock::now();
    hold.release();
    return waiting.get() - released;
  };
  WatchdogHash holder(a, "door"), pubsub_waiter(b, "door");
  auto woken = measure(pubsub_waiter, holder);
  SpinHash spin_holder(a, "door2", {}, r::Watchdog{}, w::Spin{spin});
  SpinHash spin_waiter(b, "door2", {}, r::Watchdog{}, w::Spin{spin});
  auto polled = measure(spin_waiter, spin_holder);
  WARN("pub/sub woke the waiter after " << std::chrono::duration_cast<std::chrono::microseconds>(woken).count()
       << " us; a " << spin.count() << " ms spin after "
       << std::chrono::duration_cast<std::chrono::microseconds>(polled).count() << " us");
  CHECK(woken < scaled(250ms));
  CHECK(woken * 3 < polled);
  // the wait's subscription ended (after its linger)
  CHECK(dlock::test::wait_until([&] { return b.subscriber().channel_count() == 0; }));
}

TEST_CASE("a release wakes one pub/sub waiter of a backend, not all of them", "[pubsub]") {
  private_redis redis;
  auto waiters_backend = redis.another_backend();
  constexpr int waiters = 6;
  WatchdogHash holder(redis.backend, "herd");
  auto hold = holder.acquire();
  std::vector<std::unique_ptr<WatchdogHash>> locks;
  std::vector<std::future<void>> done;
  for (int i = 0; i < waiters; ++i) locks.push_back(std::make_unique<WatchdogHash>(waiters_backend, "herd"));
  auto& line = waiters_backend.use_service<dlock::detail::wake_groups<dlock::RedisBackend>>();
  const auto channel = o::ReentrantHash::channel("herd");
  for (auto& l : locks)
    done.push_back(std::async(std::launch::async, [&l] {
      l->lock();  // each takes the lock once, in turn, and lets it go
      l->unlock();
    }));
  // All of them in line and asleep: each has its number in the lock's line.
  REQUIRE(dlock::test::wait_until([&] { return line.waiting(channel) == waiters; }));
  REQUIRE(dlock::test::wait_until([&] { return registered(redis.server, "herd") == waiters; }));
  std::this_thread::sleep_for(scaled(100ms));
  auto before = script_calls(redis.server);
  hold.release();
  for (auto& f : done) REQUIRE(f.wait_for(scaled(30s)) == std::future_status::ready);
  // Seven releases (the holder's and each waiter's), and the tries: with
  // one waiter woken per release, about one try per waiter (more only if a
  // re-check comes meanwhile); waking all of them would take 6 + 5 + ... +
  // 1 = 21.
  auto scripts = script_calls(redis.server) - before;
  auto tries = scripts - (waiters + 1);
  INFO("tries after the first release: " << tries);
  CHECK(tries >= waiters);
  CHECK(tries <= waiters + 4);
  CHECK(dlock::test::wait_until([&] { return line.waiting(channel) == 0; }));
  CHECK(dlock::test::wait_until([&] { return waiters_backend.subscriber().channel_count() == 0; }));
}

TEST_CASE("a pub/sub waiter that leaves with an unused wake passes it to the next", "[pubsub]") {
  private_redis redis;
  using groups = dlock::detail::wake_groups<dlock::RedisBackend>;
  auto& line = redis.backend.use_service<groups>();
  std::atomic<int> woke_first{0}, woke_second{0};
  auto join = [&](std::atomic<int>& counter) {
    return asio::co_spawn(redis.backend.get_executor(), line.join("news", "news", [&counter] { ++counter; }), asio::use_future)
        .get();
  };
  auto [ec1, first] = join(woke_first);
  auto [ec2, second] = join(woke_second);
  REQUIRE_FALSE(ec1);
  REQUIRE_FALSE(ec2);
  CHECK(redis.server.command({"PUBLISH", "news", "0"}) == "1");  // one subscriber connection
  REQUIRE(dlock::test::wait_until([&] { return woke_first == 1; }));
  std::this_thread::sleep_for(scaled(50ms));
  CHECK(woke_second == 0);  // one message, one wake: the one that waited longest
  first.reset();            // it leaves without using its wake
  CHECK(woke_second == 1);  // which passes to the next in line
  second->consumed();
  redis.server.command({"PUBLISH", "news", "0"});
  CHECK(dlock::test::wait_until([&] { return woke_second == 2; }));
  second.reset();
  CHECK(line.waiting("news") == 0);
  CHECK(dlock::test::wait_until([&] { return redis.backend.subscriber().channel_count() == 0; }));
}

TEST_CASE("a release makes one waiting client try, however many clients wait", "[pubsub]") {
  for (int clients : {8, 32}) {
    DYNAMIC_SECTION(clients << " clients") {
      private_redis redis;
      const std::string name = "crowd";
      WatchdogHash holder(redis.backend, name, {}, {}, no_recheck);
      auto hold = holder.acquire();
      std::vector<std::unique_ptr<dlock::RedisBackend>> backends;
      std::vector<std::unique_ptr<WatchdogHash>> locks;
      for (int i = 0; i < clients; ++i) {
        backends.push_back(std::make_unique<dlock::RedisBackend>(redis.server.url()));
        locks.push_back(std::make_unique<WatchdogHash>(*backends.back(), name, o::ReentrantHash{}, r::Watchdog{},
                                                       no_recheck));
      }
      std::vector<std::future<void>> done;
      for (auto& l : locks)
        done.push_back(std::async(std::launch::async, [&l] {
          l->lock();  // each takes the lock once, in turn, and lets it go
          l->unlock();
        }));
      // Every waiter has its number in the line: all are asleep.
      REQUIRE(dlock::test::wait_until([&] { return registered(redis.server, name) == clients; }, scaled(30s)));
      std::this_thread::sleep_for(scaled(100ms));
      auto heard = [&] {
        std::size_t n = 0;
        for (auto& b : backends) n += b->subscriber().message_count();
        return n;
      };
      const auto heard_before = heard();
      auto before = script_calls(redis.server);
      hold.release();
      for (auto& f : done) REQUIRE(f.wait_for(scaled(30s)) == std::future_status::ready);
      // The holder's release and each waiter's, and one try per waiter: each
      // release named one waiter, which won. A release that woke one waiter
      // per client would cost clients + (clients - 1) + ... tries.
      CHECK(script_calls(redis.server) - before == 2 * clients + 1);
      CHECK(registered(redis.server, name) == 0);
      // Who heard them: each named release reached one client (on its own
      // channel; no "00", for nobody but dlock listens), and the last, with
      // the line empty, every client ("0", on the lock's channel: their
      // subscriptions linger). A release heard by every client would make
      // clients * clients messages.
      CHECK(dlock::test::wait_until([&] { return heard() - heard_before >= std::size_t(2 * clients); }));
      std::this_thread::sleep_for(scaled(100ms));
      CHECK(heard() - heard_before == std::size_t(2 * clients));
    }
  }
}

TEST_CASE("Redisson interop both ways: dlock's release wakes Redisson's waiters, Redisson's unlock wakes dlock's",
          "[pubsub][wire-compat]") {
  private_redis redis;
  const std::string name = "shared-door";
  auto other = redis.another_backend();
  WatchdogHash holder(redis.backend, name, {}, {}, no_recheck), waiter(other, name, {}, {}, no_recheck);
  listener redisson(redis.backend, o::ReentrantHash::channel(name));  // Redisson's waiters, on the wire

  SECTION("a dlock release names a dlock waiter, then tells Redisson's") {
    auto hold = holder.acquire();
    auto waiting = std::async(std::launch::async, [&] { waiter.acquire().release(); });
    REQUIRE(dlock::test::wait_until([&] { return registered(redis.server, name) == 1; }));
    hold.release();
    REQUIRE(waiting.wait_for(scaled(5s)) == std::future_status::ready);
    REQUIRE(redisson.hears(2));
    auto heard = redisson.messages();
    // The waiter's number went to its own client's channel; the lock's
    // channel has a subscriber that is not dlock's, so "00" follows there.
    CHECK(java_long(heard[0]) == 0);  // "00": Redisson's unlock message, which dlock ignores
    CHECK(heard[0] != "0");
    CHECK(heard[1] == "0");  // the waiter's release, with nobody in the line: "0", as Redisson's
  }

  SECTION("Redisson's unlock wakes a dlock waiter") {
    // A Redisson client holds the lock (its hash field, its 30 s lease).
    redis.server.command({"HSET", name, "5f3e-redisson-uuid:1", "1"});
    redis.server.command({"PEXPIRE", name, "30000"});
    auto waiting = std::async(std::launch::async, [&] { waiter.acquire().release(); });
    REQUIRE(dlock::test::wait_until([&] { return registered(redis.server, name) == 1; }));
    // Redisson's unlock: the count reaches 0, the key goes, "0" is
    // published; dlock's line is not touched.
    redis.server.command({"DEL", name});
    redis.server.command({"PUBLISH", o::ReentrantHash::channel(name), "0"});
    CHECK(waiting.wait_for(scaled(5s)) == std::future_status::ready);  // not the lease, not the re-check
    CHECK(registered(redis.server, name) == 0);  // its winning try took its number out
  }
}

TEST_CASE("a wake named for a waiter that died is recovered by the re-check", "[pubsub]") {
  private_redis redis;
  const std::string name = "dead-waiter";
  auto other = redis.another_backend();
  WatchdogHash holder(redis.backend, name);  // Watchdog: a 30 s lease
  auto hold = holder.acquire();
  // A waiter that died after it registered: its entry first in the line.
  redis.server.command({"RPUSH", o::ReentrantHash::waiters_key(name), "4242424242:0badc0de"});
  auto wait_behind_it = [&](const w::PubSub& wait, std::chrono::milliseconds limit) {
    return std::async(std::launch::async, [&name, wait, limit, &other] {
      WatchdogHash waiter(other, name, {}, {}, wait);
      bool got = waiter.try_lock_for(limit);
      if (got) waiter.unlock();
      return got;
    });
  };
  SECTION("with the re-check, the live waiter gets the lock") {
    // Its deadline is far: only a re-check can end its sleep soon.
    auto waiting = wait_behind_it(w::PubSub{.linger = 2000ms, .recheck = scaled(300ms)}, scaled(60s));
    REQUIRE(dlock::test::wait_until([&] { return registered(redis.server, name) == 2; }));
    hold.release();  // names the dead waiter: nobody hears it
    REQUIRE(waiting.wait_for(scaled(5s)) == std::future_status::ready);
    CHECK(waiting.get());
  }
  SECTION("without it, the lost wake leaves the lock free until the waiter's deadline") {
    auto waiting = wait_behind_it(no_recheck, scaled(2s));
    REQUIRE(dlock::test::wait_until([&] { return registered(redis.server, name) == 2; }));
    hold.release();
    std::this_thread::sleep_for(scaled(1s));
    CHECK(redis.server.command({"EXISTS", name}) == "0");  // nobody woke to take it
    waiting.get();  // its last try, at its deadline, finds it free
  }
}

TEST_CASE("when a backend's first waiter leaves, the re-check bounds the next one's sleep", "[pubsub]") {
  private_redis redis;
  const std::string name = "next-first";
  auto waiters = redis.another_backend();  // both waiters: one client, one line
  const w::PubSub quick{.linger = 2000ms, .recheck = scaled(300ms)};
  WatchdogHash holder(redis.backend, name), first(waiters, name, {}, {}, quick), second(waiters, name, {}, {}, quick);
  auto hold = holder.acquire();  // Watchdog: a 30 s lease
  auto first_done = std::async(std::launch::async, [&] { first.acquire().release(); });
  REQUIRE(dlock::test::wait_until([&] { return registered(redis.server, name) == 1; }));
  // A waiter that died, between the two: the first's release names it.
  redis.server.command({"RPUSH", o::ReentrantHash::waiters_key(name), "4242424242:0badc0de"});
  auto second_got = std::async(std::launch::async, [&] {
    bool got = second.try_lock_for(scaled(60s));
    if (got) second.unlock();
    return got;
  });
  REQUIRE(dlock::test::wait_until([&] { return registered(redis.server, name) == 3; }));
  std::this_thread::sleep_for(scaled(100ms));  // the second sleeps, not first in its line: until the lease
  hold.release();  // names the first, which takes the lock and lets it go to the dead one
  REQUIRE(first_done.wait_for(scaled(5s)) == std::future_status::ready);
  // The second became the first of its line: its sleep is now bounded by
  // the re-check, not by the 30 s lease it read.
  REQUIRE(second_got.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(second_got.get());
}

TEST_CASE("a pub/sub waiter that gives up takes its number out of the line", "[pubsub]") {
  private_redis redis;
  auto other = redis.another_backend();
  WatchdogHash holder(redis.backend, "patience"), waiter(other, "patience", {}, {}, no_recheck);
  auto hold = holder.acquire();
  CHECK_FALSE(waiter.try_lock_for(scaled(300ms)));
  CHECK(registered(redis.server, "patience") == 0);
}

TEST_CASE("a waiter that gives up after it was named passes the turn on", "[pubsub][wire-compat]") {
  private_redis redis;
  const std::string name = "turn";
  const o::ReentrantHash hash;
  listener heard(redis.backend, o::ReentrantHash::channel(name));
  auto run = [&](auto op) { return asio::co_spawn(redis.backend.get_executor(), std::move(op), asio::use_future).get(); };
  o::ReentrantHash::record rec;
  rec.name = name;
  rec.state.number = "1111:00ff";  // a release took it and named it; "2222:beef" waits behind
  listener next_client(redis.backend, o::ReentrantHash::channel(name) + ":beef");  // that waiter's client
  redis.server.command({"RPUSH", o::ReentrantHash::waiters_key(name), "2222:beef"});
  SECTION("the lock is free: the next waiter is named") {
    CHECK_FALSE(run(hash.forget_waiter(redis.backend, rec, true)));
    REQUIRE(next_client.hears(1));
    CHECK(next_client.messages() == std::vector<std::string>{"2222"});
    REQUIRE(heard.hears(1));  // a subscriber that is not dlock's: "00" for it
    CHECK(heard.messages() == std::vector<std::string>{"00"});
    CHECK(registered(redis.server, name) == 0);
  }
  SECTION("an entry of an older dlock (a bare number) is published on the lock's channel") {
    redis.server.command({"LPOP", o::ReentrantHash::waiters_key(name)});
    redis.server.command({"RPUSH", o::ReentrantHash::waiters_key(name), "3333"});
    CHECK_FALSE(run(hash.forget_waiter(redis.backend, rec, true)));
    REQUIRE(heard.hears(2));
    CHECK(heard.messages() == std::vector<std::string>{"3333", "00"});
    CHECK(next_client.messages().empty());
  }
  SECTION("the lock is held again: its holder's release will name the next") {
    redis.server.command({"HSET", name, "someone:1", "1"});
    CHECK_FALSE(run(hash.forget_waiter(redis.backend, rec, true)));
    std::this_thread::sleep_for(scaled(100ms));
    CHECK(heard.messages().empty());
    CHECK(registered(redis.server, name) == 1);
  }
}

TEST_CASE("a RedisBackend set to sharded pub/sub wakes its waiters: its scripts publish with SPUBLISH",
          "[pubsub]") {
  private_redis redis;
  auto cfg = dlock::redis::parse_url(redis.server.url());
  cfg.sharded_pubsub = true;  // a client of one cluster node; standalone Redis 7 serves shard channels too
  dlock::RedisBackend a(cfg), b(cfg);
  REQUIRE(dlock::ext::sharded_pubsub(a));
  CHECK(dlock::ext::counts_subscribers(a));  // one server: every subscriber is on it
  CHECK(dlock::ext::counts_subscribers(redis.backend));
  const std::string name = "sharded-door";
  WatchdogHash holder(a, name), waiter(b, name, {}, {}, no_recheck);
  auto hold = holder.acquire();
  auto waiting = std::async(std::launch::async, [&] {
    bool got = waiter.try_lock_for(scaled(60s));  // only the release's message can end it soon
    if (got) waiter.unlock();
    return got;
  });
  const auto shard_subscribers = [&] {
    auto reply = redis.server.command({"PUBSUB", "SHARDNUMSUB", o::ReentrantHash::channel(name)});
    return std::stoi(reply.substr(reply.find_last_of('\n', reply.size() - 2) + 1));
  };
  REQUIRE(dlock::test::wait_until([&] { return shard_subscribers() == 1 && registered(redis.server, name) == 1; }));
  hold.release();
  REQUIRE(waiting.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(waiting.get());
  CHECK(redis.server.command({"INFO", "commandstats"}).find("cmdstat_spublish:calls=") != std::string::npos);
}
