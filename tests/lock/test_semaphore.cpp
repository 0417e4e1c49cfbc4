// ownership::Semaphore against a real redis-server: never more holders
// than permits, all of them at once, permits that expire by the server's
// clock (a killed holder's comes back after its lease, never sooner),
// renewal, a count that clients disagree on, and bad arguments.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <dlock/dlock.hpp>
#include <support/polling.hpp>
#include <support/redis_server.hpp>
#include <support/server_fixture.hpp>

#include "lock_support.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::scaled;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;

using Fixed = dlock::Lock<dlock::RedisBackend, o::Semaphore, r::FixedLease, w::Spin>;
using Watched = dlock::Lock<dlock::RedisBackend, o::Semaphore, r::Watchdog, w::Spin>;
using Forever = dlock::Lock<dlock::RedisBackend, o::Semaphore, r::None, w::TryOnce>;

w::Spin quick_spin() { return w::Spin{2ms}; }

}  // namespace

TEST_CASE("Semaphore{3}: never a fourth holder over 12 threads, and three at once", "[semaphore]") {
  dlock::test::redis_server server;
  std::atomic<int> inside{0}, most{0};
  std::atomic<int> errors{0};
  const int threads = 12, rounds = 15;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      try {
        dlock::RedisBackend backend(server.url());
        Fixed lock(backend, "pool", o::Semaphore{3}, r::FixedLease(scaled(10s)), quick_spin());
        for (int i = 0; i < rounds; ++i) {
          auto hold = lock.acquire();
          const int now = ++inside;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          std::this_thread::sleep_for(2ms);
          --inside;
          hold.release();
        }
      } catch (const std::exception& e) {
        ++errors;
        UNSCOPED_INFO(e.what());
      }
    });
  }
  for (auto& t : pool) t.join();
  CHECK(errors == 0);
  CHECK(most.load() <= 3);
  CHECK(most.load() == 3);
  // Every permit given back: nothing left in Redis.
  CHECK(server.command({"EXISTS", "pool", o::Semaphore::permits_key("pool")}) == "0");
}

TEST_CASE("Semaphore{3}: never a fourth holder over 2 processes of 6 threads, and three at once", "[semaphore]") {
  dlock::test::redis_server server;
  std::vector<std::unique_ptr<dlock::test::worker>> crowd;
  for (int p = 0; p < 2; ++p)
    crowd.push_back(std::make_unique<dlock::test::worker>(
        std::vector<std::string>{"semaphore-crowd", server.url(), "crowd", "3", "10", "6"}));
  for (auto& c : crowd) {
    CHECK(c->read_line(scaled(60s)) == "done");
    CHECK(c->wait() == 0);
  }
  CHECK(server.command({"GET", "crowd:most"}) == "3");
  CHECK(server.command({"GET", "crowd:inside"}) == "0");
  CHECK(server.command({"EXISTS", "crowd", o::Semaphore::permits_key("crowd")}) == "0");
}

TEST_CASE("Semaphore: each owner holds one permit; the permits run out, and come back on release",
          "[semaphore]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  Fixed lock(backend, "two", o::Semaphore{2}, r::FixedLease(scaled(10s)), quick_spin());
  auto first = lock.acquire();
  // The same owner again: not reentrant.
  CHECK(dlock::test::thrown_by([&] { lock.acquire(); }) == dlock::error::already_held);
  std::optional<Fixed::hold_type> second, third;
  std::thread([&] { second = lock.try_acquire(); }).join();
  REQUIRE(second.has_value());
  CHECK(server.command({"ZCARD", "two"}) == "2");
  CHECK(server.command({"GET", o::Semaphore::permits_key("two")}) == "2");  // the count, stored beside
  std::thread([&] { third = lock.try_acquire(); }).join();
  CHECK_FALSE(third.has_value());  // both permits in use
  second->release();
  std::thread([&] { third = lock.try_acquire(); }).join();
  CHECK(third.has_value());
  third->release();
  first.release();
  CHECK(server.command({"EXISTS", "two", o::Semaphore::permits_key("two")}) == "0");
}

TEST_CASE("Semaphore: a killed holder's permit comes back when its lease ends, never sooner", "[semaphore]") {
  dlock::test::redis_server server;
  const auto lease = scaled(1500ms);
  dlock::test::worker holder({"semaphore-hold", server.url(), "crash", "1", std::to_string(lease.count())});
  REQUIRE(holder.read_line() == "acquired");
  const auto acquired = std::chrono::steady_clock::now();
  holder.kill();  // a crash: nothing is given back
  dlock::RedisBackend backend(server.url());
  Fixed lock(backend, "crash", o::Semaphore{1}, r::FixedLease(scaled(10s)), quick_spin());
  // Well inside the dead holder's lease, the one permit is still in use.
  std::optional<Fixed::hold_type> early;
  while (std::chrono::steady_clock::now() < acquired + lease / 2)
    if ((early = lock.try_acquire())) break;
  CHECK_FALSE(early.has_value());
  auto later = lock.try_acquire_for(lease * 2);
  REQUIRE(later.has_value());
  CHECK(std::chrono::steady_clock::now() - acquired >= lease - scaled(50ms));
}

TEST_CASE("Semaphore: the watchdog keeps a permit past its lease; renewal::None keeps it until released",
          "[semaphore]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  {
    Watched lock(backend, "kept", o::Semaphore{1}, r::Watchdog(scaled(300ms)), quick_spin());
    auto hold = lock.acquire();
    std::this_thread::sleep_for(scaled(900ms));  // three leases: renewed on the way
    CHECK_FALSE(hold.lost());
    std::optional<Watched::hold_type> other;
    std::thread([&] { other = lock.try_acquire(); }).join();
    CHECK_FALSE(other.has_value());
    hold.release();
  }
  {
    Forever lock(backend, "forever", o::Semaphore{1}, r::None{}, w::TryOnce{});
    auto hold = lock.acquire();
    CHECK(server.command({"PTTL", "forever"}) == "-1");
    auto entries = server.command({"ZRANGE", "forever", "0", "-1", "WITHSCORES"});  // "token\ninf"
    CHECK(entries.size() > 4);
    CHECK(entries.substr(entries.size() - 4) == "\ninf");
    hold.release();
    CHECK(server.command({"EXISTS", "forever", o::Semaphore::permits_key("forever")}) == "0");
  }
}

TEST_CASE("Semaphore: a client that names another permit count is refused, and nothing changes",
          "[semaphore]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  Fixed three(backend, "count", o::Semaphore{3}, r::FixedLease(scaled(10s)), quick_spin());
  Fixed four(backend, "count", o::Semaphore{4}, r::FixedLease(scaled(10s)), quick_spin());
  auto hold = three.acquire();
  std::optional<Fixed::hold_type> other;
  std::pair<std::error_code, std::string> thrown;
  std::thread([&] { thrown = dlock::test::thrown_error([&] { four.try_acquire(); }); }).join();
  CHECK(thrown.first == dlock::error::server_error);
  INFO(thrown.second);
  CHECK(thrown.second.find("has 3 permits, this client asks for 4") != std::string::npos);
  CHECK(server.command({"ZCARD", "count"}) == "1");
  hold.release();
}

TEST_CASE("Semaphore: a permit count out of range is refused before anything is sent", "[semaphore]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  for (std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, o::Semaphore::max_permits + 1}) {
    INFO(bad);
    CHECK(dlock::test::thrown_by([&] { Fixed lock(backend, "bad", o::Semaphore{bad}); }) ==
          dlock::error::invalid_argument);
  }
  CHECK(server.command({"DBSIZE"}) == "0");
}

TEST_CASE("Semaphore: a release wakes a pub/sub waiter at once", "[semaphore]") {
  // The waiter's own re-check is 60 s, the holder's lease 60 s and the
  // waiter's deadline 20 s (where it would try once more): only the
  // release's message wakes it within 5 s of the release.
  using Woken = dlock::Lock<dlock::RedisBackend, o::Semaphore, r::FixedLease, w::PubSub>;
  dlock::test::redis_server server;
  dlock::RedisBackend a(server.url()), b(server.url());
  Woken holder(a, "woken", o::Semaphore{1}, r::FixedLease(60s));
  Woken waiter(b, "woken", o::Semaphore{1}, r::FixedLease(60s), w::PubSub{.linger = 2000ms, .recheck = 60s});
  auto hold = holder.acquire();
  std::promise<std::chrono::steady_clock::time_point> got;
  std::thread t([&] {
    if (auto h = waiter.try_acquire_for(20s)) {
      got.set_value(std::chrono::steady_clock::now());
      h->release();
    } else {
      got.set_value({});
    }
  });
  std::this_thread::sleep_for(scaled(300ms));  // the waiter is asleep by now
  CHECK(server.command({"PUBSUB", "NUMSUB", "{woken}:released"}) == "{woken}:released\n1");
  const auto released = std::chrono::steady_clock::now();
  hold.release();
  auto when = got.get_future().get();
  t.join();
  REQUIRE(when != std::chrono::steady_clock::time_point{});
  CHECK(when - released < 5s);
}

TEST_CASE("Semaphore: a lost acquire reply is resolved from the set by the server's time", "[semaphore]") {
  // The backend gives up on a reply after 300 ms; the server is paused for
  // longer while the acquire is on its way, and runs it afterwards.
  const auto timeout = scaled(300ms);
  dlock::test::private_redis redis(dlock::test::impatient(timeout));
  Fixed lock(redis.backend, "limbo", o::Semaphore{2}, r::FixedLease(scaled(30s)), quick_spin());
  lock.acquire().release();  // the scripts loaded: a late NOSCRIPT would mean "did not run"
  redis.server.command({"CLIENT", "PAUSE", std::to_string((timeout * 3 / 2).count()), "ALL"});
  std::error_code ec;
  auto hold = lock.try_acquire_for(0ms, ec);
  INFO(ec.message());
  CHECK_FALSE(ec);
  REQUIRE(hold.has_value());  // the entry was found live: the permit is ours
  CHECK(redis.server.command({"ZCARD", "limbo"}) == "1");
  hold->release();
  CHECK(redis.server.command({"EXISTS", "limbo"}) == "0");
}

TEST_CASE("Semaphore: permits in use without a stored count are refused, not counted afresh", "[semaphore]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  Fixed three(backend, "uncounted", o::Semaphore{3}, r::FixedLease(scaled(10s)), quick_spin());
  Fixed five(backend, "uncounted", o::Semaphore{5}, r::FixedLease(scaled(10s)), quick_spin());
  auto hold = three.acquire();
  server.command({"DEL", o::Semaphore::permits_key("uncounted")});  // evicted, or deleted by hand
  std::pair<std::error_code, std::string> thrown;
  std::thread([&] { thrown = dlock::test::thrown_error([&] { five.try_acquire(); }); }).join();
  CHECK(thrown.first == dlock::error::server_error);
  INFO(thrown.second);
  CHECK(thrown.second.find("1 permits in use but no stored count") != std::string::npos);
  hold.release();
  // Once the set is empty, the next client sets the count again.
  std::thread([&] { CHECK(five.try_acquire().has_value()); }).join();
}
