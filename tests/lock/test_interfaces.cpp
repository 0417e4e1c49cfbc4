// The host's interfaces as a user meets them: the complete sync pairs, any
// duration or clock on timed acquires, and a renewal policy written by a
// user, whose keeper the host calls (it does not branch on the policy).
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <future>
#include <thread>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/dlock.hpp>
#include <support/polling.hpp>
#include <support/server_fixture.hpp>

#include "lock_support.hpp"

using namespace std::chrono_literals;
using dlock::test::private_redis;
using dlock::test::scaled;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;

namespace {

using TokenLock = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;

// Runs `f` on another thread (another owner) and returns its result.
template <class F>
auto elsewhere(F f) {
  return std::async(std::launch::async, std::move(f)).get();
}

}  // namespace

TEST_CASE("acquire(ec) and try_acquire(ec) report instead of throwing", "[interfaces]") {
  private_redis redis;
  using L = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::TryOnce>;
  L lock(redis.backend, "api:ec", {}, r::FixedLease{scaled(10s)});

  std::error_code ec;
  auto hold = lock.acquire(ec);
  REQUIRE(!ec);
  REQUIRE(hold);
  CHECK(hold->owns_lock());
  CHECK(redis.server.command({"EXISTS", "api:ec"}) == "1");

  // Another thread: TryOnce's acquire gives up at once, through ec.
  auto [other_ec, other] = elsewhere([&] {
    std::error_code e;
    auto h = lock.acquire(e);
    return std::pair{e, h.has_value()};
  });
  CHECK(other_ec == dlock::error::not_acquired);
  CHECK_FALSE(other);
  auto [try_ec, tried] = elsewhere([&] {
    std::error_code e;
    auto h = lock.try_acquire(e);
    return std::pair{e, h.has_value()};
  });
  CHECK(try_ec == dlock::error::not_acquired);
  CHECK_FALSE(tried);

  // The same thread again: not reentrant.
  auto again = lock.acquire(ec);
  CHECK(ec == dlock::error::already_held);
  CHECK_FALSE(again);

  hold->release(ec);
  CHECK(!ec);
  CHECK(redis.server.command({"EXISTS", "api:ec"}) == "0");
}

TEST_CASE("try_acquire_until takes any clock", "[interfaces]") {
  private_redis redis;
  TokenLock lock(redis.backend, "api:until", {}, r::FixedLease{scaled(10s)}, w::Spin{5ms});

  auto hold = lock.try_acquire_until(std::chrono::system_clock::now() + scaled(1s));
  REQUIRE(hold);
  // Held: another thread waits until its deadline and gets nothing.
  auto waited = elsewhere([&] {
    auto start = std::chrono::steady_clock::now();
    auto h = lock.try_acquire_until(std::chrono::steady_clock::now() + 100ms);
    return std::pair{h.has_value(), std::chrono::steady_clock::now() - start};
  });
  CHECK_FALSE(waited.first);
  CHECK(waited.second >= 100ms);
  std::error_code ec;
  auto none = elsewhere([&] {
    std::error_code e;
    auto h = lock.try_acquire_until(std::chrono::system_clock::now() - 1s, e);  // past: one try
    return std::pair{e, h.has_value()};
  });
  CHECK(none.first == dlock::error::not_acquired);
  CHECK_FALSE(none.second);
  hold->release(ec);
  CHECK(!ec);
}

TEST_CASE("the async timed acquire takes any duration and any clock", "[interfaces]") {
  private_redis redis;
  TokenLock lock(redis.backend, "api:async", {}, r::FixedLease{scaled(10s)}, w::Spin{5ms});

  // Seconds, and a fractional duration.
  auto first = lock.async_try_acquire_for("a", std::chrono::duration_cast<std::chrono::seconds>(scaled(1s)),
                                         boost::asio::use_future).get();
  REQUIRE(first);
  auto start = std::chrono::steady_clock::now();
  auto f = lock.async_try_acquire_for("b", std::chrono::duration<double>(0.1), boost::asio::use_future);
  CHECK(dlock::test::error_of(std::move(f)) == dlock::error::not_acquired);
  CHECK(std::chrono::steady_clock::now() - start >= 100ms);

  // A system_clock deadline; b gets the lock once a lets go.
  auto g = lock.async_try_acquire_until("b", std::chrono::system_clock::now() + scaled(5s),
                                        boost::asio::use_future);
  first.async_release(boost::asio::use_future).get();
  auto second = g.get();
  CHECK(second);
  CHECK(second.owner_id() == "b");
  second.async_release(boost::asio::use_future).get();
}

namespace {

// A renewal policy written by a user: a fixed lease whose keeper counts
// what the host tells it, so the test sees when it is called.
struct keeper_log {
  std::atomic<int> started{0}, paused{0}, ended{0};
};

struct CountingLease {
  static constexpr const char* policy_name = "counting";
  static constexpr bool expires = true;
  static constexpr bool renews = false;

  std::chrono::milliseconds duration{10000};
  keeper_log* log = nullptr;

  std::chrono::milliseconds lease() const { return duration; }
  std::chrono::milliseconds period() const { return {}; }
  std::chrono::milliseconds margin() const { return std::chrono::milliseconds(5); }
  std::error_code validate() const { return log ? std::error_code{} : make_error_code(dlock::error::invalid_argument); }

  template <class B>
  struct keeper {
    keeper(const CountingLease& p, B& backend) : inner(p, backend), log(p.log) {}
    template <class O>
    void start(const std::shared_ptr<dlock::detail::hold_record>& rec, const O& ownership) {
      ++log->started;
      inner.start(rec, ownership);
    }
    void pause(const dlock::detail::hold_record* rec) {
      ++log->paused;
      inner.pause(rec);
    }
    void end(const dlock::detail::hold_record* rec) {
      ++log->ended;
      inner.end(rec);
    }
    dlock::keepers::lease<B> inner;
    keeper_log* log;
  };
};

}  // namespace

TEST_CASE("the host tells a renewal policy's keeper when a hold starts, pauses and ends", "[interfaces]") {
  private_redis redis;
  keeper_log log;
  CountingLease policy;
  policy.duration = scaled(10s);
  policy.log = &log;
  dlock::Lock<dlock::RedisBackend, o::ReentrantHash, CountingLease, w::Spin> lock(redis.backend, "api:keeper", {},
                                                                                    policy, w::Spin{5ms});

  // Reentrant: two acquires are one hold, started once.
  lock.lock();
  lock.lock();
  CHECK(log.started == 1);
  lock.unlock();  // not the last hold: nothing paused, nothing ended
  CHECK(log.paused == 0);
  CHECK(log.ended == 0);
  lock.unlock();  // the last: paused before the release, ended after it
  CHECK(log.paused == 1);
  CHECK(log.ended == 1);
  CHECK(redis.server.command({"EXISTS", "api:keeper"}) == "0");

  // A hold found lost ends too, and its lease watch fires for it.
  auto hold = lock.acquire();
  CHECK(log.started == 2);
  redis.server.command({"DEL", "api:keeper"});
  std::error_code ec;
  hold.release(ec);
  CHECK(ec == dlock::error::lease_lost);
  CHECK(log.paused == 2);
  CHECK(log.ended == 2);  // once per hold
}

// The blocking path: a blocking call runs its operation on the calling
// thread, over a connection that thread writes and reads itself.
TEMPLATE_TEST_CASE("blocking lock calls do not wait for the backend's I/O thread", "[interfaces][blocking]",
                   (dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>),
                   (dlock::Lock<dlock::RedisBackend, o::ReentrantHash, r::Watchdog, w::PubSub>)) {
  private_redis redis;
  TestType lock(redis.backend, "api:own-thread");
  // The I/O thread is kept busy until the lock has been taken and given
  // back (or 10 s pass: then the lock calls needed it).
  std::promise<void> started, done;
  auto finished = done.get_future().share();
  auto blocked = std::async(std::launch::async, [&] {
    std::promise<bool> timed_out;
    auto result = timed_out.get_future();
    boost::asio::post(redis.backend.get_executor(), [&] {
      started.set_value();
      timed_out.set_value(finished.wait_for(scaled(10s)) == std::future_status::timeout);
    });
    return result.get();
  });
  started.get_future().wait();
  lock.lock();
  CHECK(redis.server.command({"EXISTS", "api:own-thread"}) == "1");
  lock.unlock();
  CHECK(redis.server.command({"EXISTS", "api:own-thread"}) == "0");
  done.set_value();
  CHECK_FALSE(blocked.get());
}

TEST_CASE("a blocking acquire whose reply comes late is resolved after the acquire ran", "[interfaces][blocking]") {
  // Commands time out after 700 ms; writes are held for 1 s. The SET times
  // out; the question "is the key ours?" goes on the same connection, so it
  // is answered after the SET ran, and the acquire knows it won.
  private_redis redis(dlock::test::impatient(scaled(700ms)));
  dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::TryOnce> lock(redis.backend, "api:late",
                                                                              {}, r::FixedLease{scaled(30s)});
  REQUIRE(redis.backend.command(dlock::redis::request().push("PING")).str == "PONG");  // connected
  redis.server.command({"CLIENT", "PAUSE", std::to_string(scaled(1000ms).count()), "WRITE"});
  std::error_code ec;
  auto hold = lock.try_acquire(ec);
  CHECK(!ec);
  REQUIRE(hold);  // not "not acquired" while the key holds our token
  CHECK(redis.server.command({"EXISTS", "api:late"}) == "1");
  std::error_code rec;
  hold->release(rec);
  CHECK(!rec);
  CHECK(redis.server.command({"EXISTS", "api:late"}) == "0");
}

TEST_CASE("std::scoped_lock over dlock locks of any ownerships: two clients in opposite orders never deadlock",
          "[interfaces]") {
  // std::scoped_lock (std::lock's algorithm) takes the first lock, tries the
  // others, and on a refusal lets go of what it holds and starts with the
  // one it could not get: with try_lock and unlock it needs nothing else.
  // Two clients, each with its own backend, take the same three locks (a
  // token lock, a reentrant hash, a one-permit semaphore), in opposite
  // orders, over and over.
  private_redis redis;
  using Hash = dlock::Lock<dlock::RedisBackend, o::ReentrantHash, r::Watchdog, w::PubSub>;
  using Permit = dlock::Lock<dlock::RedisBackend, o::Semaphore, r::FixedLease, w::Backoff>;
  const int rounds = 40;
  std::atomic<int> inside{0}, overlaps{0};
  auto client = [&](bool reversed) {
    auto backend = redis.another_backend();
    TokenLock a(backend, "many:a", {}, r::FixedLease(scaled(10s)), w::Spin{2ms});
    Hash b(backend, "many:b");
    Permit c(backend, "many:c", o::Semaphore{1}, r::FixedLease(scaled(10s)), w::Backoff{1ms, 20ms});
    for (int i = 0; i < rounds; ++i) {
      auto work = [&] {
        if (++inside > 1) ++overlaps;
        std::this_thread::sleep_for(1ms);
        --inside;
      };
      if (reversed) {
        std::scoped_lock all(c, b, a);
        work();
      } else {
        std::scoped_lock all(a, b, c);
        work();
      }
    }
    return rounds;
  };
  auto first = std::async(std::launch::async, client, false);
  auto second = std::async(std::launch::async, client, true);
  // A deadlock would hold both for ever: each is given a minute.
  REQUIRE(first.wait_for(scaled(60s)) == std::future_status::ready);
  REQUIRE(second.wait_for(scaled(60s)) == std::future_status::ready);
  CHECK(first.get() + second.get() == 2 * rounds);
  CHECK(overlaps == 0);
  CHECK(redis.server.command({"EXISTS", "many:a", "many:b", "many:c"}) == "0");
}

TEST_CASE("std::scoped_lock over four ownerships: two processes in opposite orders never deadlock or overlap",
          "[interfaces][history]") {
  // Two lock_worker processes of 2 threads each take a token lock, a
  // reentrant hash, a one-permit semaphore and a read-write lock's write
  // side with one std::scoped_lock, one process in each order. Every hold
  // of the four is one span of the hold-history checker.
  private_redis redis;
  auto run = [&](const char* order) {
    return std::vector<std::string>{"scoped-many", redis.server.url(), "many", order, "2", "20"};
  };
  // A deadlock would hold both for ever: each process is given a minute.
  auto crowd = dlock::test::run_crowd({run("forward"), run("reverse")}, scaled(60s));
  INFO(crowd.failures);
  REQUIRE(crowd.failed == 0);
  CHECK(crowd.history.size() == 2 * 2 * 20);
  CHECK(crowd.history.overlaps().empty());
  CHECK(redis.server.command({"EXISTS", "many:a", "many:b", "many:c", "many:d"}) == "0");
}

// Destroying a lock object ends its async waits in flight (as a
// cancellation would) and waits for them, its async releases too; a handler
// may destroy the lock object it came from, on the backend's thread or on
// its own.
TEST_CASE("a lock object destroyed with async operations in flight ends them first", "[interfaces][cancel]") {
  private_redis redis;
  using L = dlock::Lock<dlock::RedisBackend, o::ReentrantHash, r::Watchdog, w::PubSub>;
  L holder(redis.backend, "api:inflight", {}, r::Watchdog{scaled(2s)});
  auto held = holder.async_acquire("holder", boost::asio::use_future).get();

  SECTION("a wait ends with operation_aborted") {
    auto lock = std::make_unique<L>(redis.backend, "api:inflight", L::ownership_type{}, r::Watchdog{scaled(2s)});
    std::promise<dlock::error_code> done;
    lock->async_acquire("waiter", [&](dlock::error_code ec, L::hold_type h) {
      CHECK_FALSE(h);
      done.set_value(ec);
    });
    std::this_thread::sleep_for(scaled(50ms));  // it waits now
    lock.reset();  // returns once the wait no longer uses the lock; its handler may run later
    auto f = done.get_future();
    REQUIRE(f.wait_for(scaled(5s)) == std::future_status::ready);
    CHECK(f.get() == boost::asio::error::operation_aborted);
  }
  SECTION("a handler on the backend's thread destroys its own lock object") {
    auto lock = std::make_unique<L>(redis.backend, "api:inflight", L::ownership_type{}, r::Watchdog{scaled(2s)});
    std::atomic<int> reports{0};
    lock->set_error_handler([&](std::error_code, const std::string&) { ++reports; });
    std::promise<void> done;
    lock->async_try_acquire_for("once", 0ms, [&](dlock::error_code ec, L::hold_type) {
      CHECK(ec == dlock::error::not_acquired);
      CHECK(redis.backend.on_io_thread());
      lock.reset();  // nothing else in flight: nothing to report
      done.set_value();
    });
    REQUIRE(done.get_future().wait_for(scaled(5s)) == std::future_status::ready);
    CHECK(reports == 0);
  }
  SECTION("a handler on the caller's own context destroys its own lock object") {
    auto lock = std::make_unique<L>(redis.backend, "api:inflight", L::ownership_type{}, r::Watchdog{scaled(2s)});
    boost::asio::io_context mine;
    bool ran = false;
    lock->async_try_acquire_for("once", 0ms,
                                boost::asio::bind_executor(mine, [&](dlock::error_code ec, L::hold_type) {
                                  CHECK(ec == dlock::error::not_acquired);
                                  lock.reset();  // waits for nothing but this very operation
                                  ran = true;
                                }));
    mine.run_for(scaled(5s));  // would hang if ~Lock waited for its own handler
    CHECK(ran);
  }
  held.release();
}
