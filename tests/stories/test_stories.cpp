// The source articles' failure stories, each forced on a real redis-server:
// the failure happens with the policy that has it, and not with the one
// that fixes it.
#include <catch2/catch.hpp>

#include <future>
#include <latch>
#include <thread>

#include <dlock/dlock.hpp>
#include <dlock/ownership/naive_expiry.hpp>
#include <support/polling.hpp>
#include <support/server_fixture.hpp>

#include "../lock/lock_support.hpp"

using namespace std::chrono_literals;
using dlock::test::private_redis;
using dlock::test::scaled;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;

namespace {

// Two clients, B and C, each on its own backend (its own I/O thread), both
// find the lock expired; C completes its steal first, then B goes on.
// Returns how many of them ended up holding the lock.
template <class L, class O, class Hook>
int race_for_expired_lock(Hook hook_member) {
  private_redis redis;  // B's backend
  redis.server.command({"SET", "race", o::GetSetExpiry::format(o::GetSetExpiry{}.wall_clock() - 60)});
  auto& backend_b = redis.backend;
  auto backend_c = redis.another_backend();
  std::latch both_saw_it_expired(2);
  std::promise<void> c_done;
  auto c_finished = c_done.get_future().share();

  O ob, oc;
  ob.*hook_member = [&] {
    both_saw_it_expired.arrive_and_wait();
    c_finished.wait();  // B is slower: it acts only after C got the lock
  };
  oc.*hook_member = [&] { both_saw_it_expired.arrive_and_wait(); };
  L lock_b(backend_b, "race", ob, r::FixedLease{scaled(10s)}, w::TryOnce{});
  L lock_c(backend_c, "race", oc, r::FixedLease{scaled(10s)}, w::TryOnce{});

  auto b = std::async(std::launch::async, [&] { return lock_b.try_lock(); });
  auto c = std::async(std::launch::async, [&] {
    bool got = lock_c.try_lock();
    c_done.set_value();
    return got;
  });
  bool c_got = c.get(), b_got = b.get();
  int holders = int(b_got) + int(c_got);
  // Nobody releases here: with two holders, a release would hide the story.
  lock_b.set_error_handler([](std::error_code, const std::string&) {});
  lock_c.set_error_handler([](std::error_code, const std::string&) {});
  return holders;
}

}  // namespace

TEST_CASE("story: a crashed holder of a bare SETNX lock holds it forever (A1)", "[story]") {
  private_redis redis;
  const std::string url = redis.server.url();
  {
    dlock::test::worker holder({"hold", url, "setnx/none/tryonce", "stock", "0"});
    REQUIRE(holder.read_line() == "acquired");
    holder.kill();
  }
  CHECK(redis.server.command({"PTTL", "stock"}) == "-1");  // no expiry at all
  dlock::Lock<dlock::RedisBackend, o::SetNx, r::None, w::Spin> lock(redis.backend, "stock", {}, {}, w::Spin{50ms});
  CHECK_FALSE(lock.try_lock_for(1500ms));  // and it never frees

  // The fix: a lease. The same crash, and the lock frees by itself.
  const auto lease = scaled(500ms);
  dlock::test::worker holder({"hold", url, "token/fixed/tryonce", "stock2", std::to_string(lease.count())});
  REQUIRE(holder.read_line() == "acquired");
  holder.kill();
  dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin> fixed(redis.backend, "stock2", {},
                                                                          r::FixedLease{scaled(5s)}, w::Spin{20ms});
  CHECK(fixed.try_lock_for(lease * 3));
  fixed.unlock();
}

TEST_CASE("story: a crash between SETNX and EXPIRE leaves a lock with no expiry (A1b)", "[story]") {
  dlock::test::redis_server server;  // no backend: only the workers use the server
  const auto lease = std::to_string(scaled(30s).count());
  dlock::test::worker crasher({"crash-after-setnx", server.url(), "coupon", lease});
  CHECK(crasher.wait() == 3);  // died right after SETNX
  CHECK(server.command({"EXISTS", "coupon"}) == "1");
  CHECK(server.command({"PTTL", "coupon"}) == "-1");  // the EXPIRE never came

  // SET NX PX sets value and expiry in one command: there is no such window.
  dlock::test::worker holder({"hold", server.url(), "token/fixed/tryonce", "coupon2", lease});
  REQUIRE(holder.read_line() == "acquired");
  CHECK(std::stoll(server.command({"PTTL", "coupon2"})) > 0);
}

TEST_CASE("story: without a token, a late release deletes the next owner's lock", "[story]") {
  private_redis redis;
  auto& a = redis.backend;
  auto b = redis.another_backend();
  const auto lease = scaled(200ms), work = lease * 3 / 2;
  SECTION("SetNx: the late DEL succeeds, and B's lock is gone") {
    using L = dlock::Lock<dlock::RedisBackend, o::SetNx, r::FixedLease, w::Spin>;
    L first(a, "order", {}, r::FixedLease{lease}, w::Spin{10ms});
    L second(b, "order", {}, r::FixedLease{scaled(10s)}, w::Spin{10ms});
    auto h1 = first.acquire();
    std::this_thread::sleep_for(work);  // A's work outlasts its lease
    auto h2 = second.acquire();
    CHECK(h1.lost());  // A's loss signal fired when its lease could end
    std::error_code ec;
    h1.release(ec);  // A hears lease_lost, but SetNx's DEL checks no owner: it runs
    CHECK(ec == dlock::error::lease_lost);
    CHECK(redis.server.command({"EXISTS", "order"}) == "0");  // B holds a lock that is gone
    L third(a, "order", {}, r::FixedLease{scaled(10s)}, w::Spin{10ms});
    auto intruder = std::async(std::launch::async, [&] { return third.try_lock(); });
    CHECK(intruder.get());  // a third client walks in beside B
    third.unlock(ec);
  }
  SECTION("Token: the late release is refused, and B keeps its lock") {
    using L = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;
    L first(a, "order", {}, r::FixedLease{lease}, w::Spin{10ms});
    L second(b, "order", {}, r::FixedLease{scaled(10s)}, w::Spin{10ms});
    auto h1 = first.acquire();
    std::this_thread::sleep_for(work);  // A's work outlasts its lease
    auto h2 = second.acquire();
    std::error_code ec;
    h1.release(ec);
    CHECK(ec == dlock::error::lease_lost);  // A learns it lost the lock
    CHECK(redis.server.command({"EXISTS", "order"}) == "1");
  }
}

TEST_CASE("story: two waiters steal an expired lock; GETSET lets only one in (A3)", "[story]") {
  SECTION("naive DEL + SETNX: both get the lock") {
    using L = dlock::Lock<dlock::RedisBackend, o::NaiveExpiry, r::FixedLease, w::TryOnce>;
    CHECK(race_for_expired_lock<L, o::NaiveExpiry>(&o::NaiveExpiry::between_get_and_del) == 2);
  }
  SECTION("GETSET: exactly one gets it") {
    using L = dlock::Lock<dlock::RedisBackend, o::GetSetExpiry, r::FixedLease, w::TryOnce>;
    CHECK(race_for_expired_lock<L, o::GetSetExpiry>(&o::GetSetExpiry::between_get_and_getset) == 1);
  }
}

TEST_CASE("story: a skewed wall clock lets GetSetExpiry steal a live lock (A3's flaw)", "[story]") {
  private_redis redis;
  auto other = redis.another_backend();
  using L = dlock::Lock<dlock::RedisBackend, o::GetSetExpiry, r::FixedLease, w::TryOnce>;
  const auto lease = scaled(30s);
  L honest(redis.backend, "skew", {}, r::FixedLease{lease}, w::TryOnce{});
  o::GetSetExpiry fast_clock;
  // Two leases ahead (a minute, unscaled): the honest holder's expiry looks past.
  const double skew = 2 * std::chrono::duration<double>(lease).count();
  fast_clock.wall_clock = [skew] { return o::GetSetExpiry{}.wall_clock() + skew; };
  L skewed(other, "skew", fast_clock, r::FixedLease{lease}, w::TryOnce{});
  REQUIRE(honest.try_lock());
  auto stolen = std::async(std::launch::async, [&] { return skewed.try_lock(); });
  CHECK(stolen.get());  // the live lock looked expired to the fast clock
  std::error_code ec;
  skewed.unlock(ec);
  honest.unlock(ec);
}

TEST_CASE("story: work that outlasts a fixed lease overlaps the next holder; the watchdog prevents it", "[story]") {
  private_redis redis;
  auto& a = redis.backend;
  auto b = redis.another_backend();
  // The work takes 7/3 of a lease (stretched together under sanitizers).
  const auto lease = scaled(300ms), work = lease * 7 / 3;
  auto run = [&](auto& first, auto& second) {
    auto hold = first.acquire();
    auto work_started = std::chrono::steady_clock::now();
    auto other = std::async(std::launch::async, [&] {
      auto h = second.try_acquire_for(work * 3);
      return std::pair{bool(h), std::chrono::steady_clock::now()};
    });
    std::this_thread::sleep_for(work);  // longer than the lease
    auto work_ended = std::chrono::steady_clock::now();
    std::error_code ec;
    hold.release(ec);
    auto [got, other_got_it] = other.get();
    return std::tuple{got, other_got_it < work_ended, ec, other_got_it - work_started};
  };
  SECTION("fixed lease: the second client gets in while the first still works") {
    using L = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;
    L first(a, "report", {}, r::FixedLease{lease}, w::Spin{10ms});
    L second(b, "report", {}, r::FixedLease{lease}, w::Spin{10ms});
    auto [got, overlapped, ec, after] = run(first, second);
    CHECK(got);
    CHECK(overlapped);
    CHECK(ec == dlock::error::lease_lost);  // the first learns it only at release
  }
  SECTION("watchdog: the lease is renewed while the work goes on") {
    using L = dlock::Lock<dlock::RedisBackend, o::Token, r::Watchdog, w::Spin>;
    L first(a, "report", {}, r::Watchdog{lease}, w::Spin{10ms});
    L second(b, "report", {}, r::Watchdog{lease}, w::Spin{10ms});
    auto [got, overlapped, ec, after] = run(first, second);
    CHECK(got);  // after the first released
    CHECK_FALSE(overlapped);
    CHECK(!ec);
    CHECK(after >= work - 10ms);
  }
}
