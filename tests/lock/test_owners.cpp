// One owner used from several places at once, holds that outlive their
// lease or their release, and the edges of the API: each case here broke an
// earlier version of the Lock host.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/dlock.hpp>
#include <dlock/ownership/naive_expiry.hpp>
#include <support/polling.hpp>
#include <support/server_fixture.hpp>

#include "lock_support.hpp"

using namespace std::chrono_literals;
using dlock::test::private_redis;
using dlock::test::redis_server;
using dlock::test::scaled;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;
namespace asio = boost::asio;

using HashLock = dlock::Lock<>;
using TokenLock = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;
using Renewals = dlock::detail::renewal_service<dlock::RedisBackend>;

TEST_CASE("two releases of one reentrant owner at once both count", "[owners]") {
  private_redis redis;
  HashLock lock(redis.backend, "twin");
  auto& renewals = redis.backend.use_service<Renewals>();
  for (int round = 0; round < 20; ++round) {
    auto h1 = lock.async_acquire("w", asio::use_future).get();
    auto h2 = lock.async_acquire("w", asio::use_future).get();
    REQUIRE(lock.held_by("w") == 2);
    auto a = h1.async_release(asio::use_future);
    auto b = h2.async_release(asio::use_future);
    a.get();  // throws on any error
    b.get();
    CHECK(lock.held_by("w") == 0);
    CHECK(redis.server.command({"EXISTS", "twin"}) == "0");
    CHECK(renewals.size() == 0);
  }
}

TEST_CASE("two first acquires of one async owner at once share one hold", "[owners]") {
  private_redis redis;
  HashLock lock(redis.backend, "pair");
  for (int round = 0; round < 20; ++round) {
    auto f1 = lock.async_acquire("w", asio::use_future);
    auto f2 = lock.async_acquire("w", asio::use_future);
    auto h1 = f1.get();
    auto h2 = f2.get();
    REQUIRE(lock.held_by("w") == 2);
    CHECK(redis.server.command({"HGET", "pair", redis.backend.client_id() + ":async:w"}) == "2");
    std::error_code e1, e2;
    h1.release(e1);
    h2.release(e2);
    CHECK(e1 == std::error_code{});
    CHECK(e2 == std::error_code{});
    CHECK(redis.server.command({"EXISTS", "pair"}) == "0");
  }
}

TEST_CASE("a hold found lost does not poison the owner's next acquire", "[owners][watchdog]") {
  private_redis redis;
  const auto lease = scaled(450ms);
  HashLock lock(redis.backend, "phoenix", {}, r::Watchdog{lease});
  auto& renewals = redis.backend.use_service<Renewals>();
  auto old_hold = lock.acquire();
  redis.server.command({"DEL", "phoenix"});
  REQUIRE(dlock::test::wait_until([&] { return old_hold.lost(); }, scaled(3s)));

  auto hold = lock.acquire();  // the same thread: a new hold, not a re-entry
  CHECK_FALSE(hold.lost());
  CHECK(lock.held_by_this_thread() == 1);
  CHECK(renewals.size() == 1);
  std::this_thread::sleep_for(lease * 8 / 3);  // more than two leases: renewed
  CHECK(redis.server.command({"EXISTS", "phoenix"}) == "1");
  CHECK_FALSE(hold.lost());

  std::error_code ec;
  old_hold.release(ec);
  CHECK(ec == dlock::error::lease_lost);
  CHECK(redis.server.command({"EXISTS", "phoenix"}) == "1");  // the old hold touched nothing
  hold.release();
  CHECK(redis.server.command({"EXISTS", "phoenix"}) == "0");
}

TEST_CASE("thread owners and async owner ids never collide", "[owners]") {
  private_redis redis;
  HashLock lock(redis.backend, "names");
  std::scoped_lock held(lock);
  // An async owner spelled like this thread's number is another owner.
  CHECK(dlock::test::error_of(lock.async_try_acquire_for(HashLock::thread_owner(), 50ms, asio::use_future)) ==
        dlock::error::not_acquired);
  CHECK(lock.held_by_this_thread() == 1);
  // Empty owner ids are refused.
  CHECK(dlock::test::error_of(lock.async_try_acquire_for("", 0ms, asio::use_future)) ==
        dlock::error::invalid_argument);
}

TEST_CASE("releasing an empty hold asynchronously is not_owner", "[owners][api]") {
  private_redis redis;
  HashLock lock(redis.backend, "nothing");
  HashLock::hold_type empty;
  CHECK(dlock::test::error_of(empty.async_release(asio::use_future)) == dlock::error::not_owner);
}

TEST_CASE("a hold dropped inside a coroutine on the caller's io_context releases without deadlock", "[owners][api]") {
  asio::io_context io;
  private_redis redis(io.get_executor());
  TokenLock lock(redis.backend, "inside", {}, r::FixedLease{scaled(30s)}, w::Spin{10ms});
  std::atomic<bool> held{false};
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto [ec, hold] = co_await lock.async_acquire("job", asio::as_tuple(asio::use_awaitable));
        held = !ec && hold;
        // `hold` is destroyed here, on the only thread that runs `io`.
      },
      asio::detached);
  std::promise<void> ran;
  std::thread runner([&] {
    io.run_for(scaled(3s));
    ran.set_value();
  });
  if (ran.get_future().wait_for(scaled(10s)) != std::future_status::ready) {
    FAIL_CHECK("the io_context deadlocked in ~Hold");
    std::_Exit(1);  // the runner thread cannot be joined
  }
  runner.join();
  CHECK(held);
  CHECK(redis.server.command({"EXISTS", "inside"}) == "0");
}

TEST_CASE("a release that fails in ~Hold stops renewal; the lock lapses", "[owners][watchdog]") {
  redis_server server;
  // The backend logs in as its own user, so that the test can lock it out
  // while the server (and the lock's key) stays up.
  server.command({"ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all"});
  auto cfg = dlock::redis::parse_url("redis://locker:pw@127.0.0.1:" + std::to_string(server.port()));
  cfg.command_timeout = scaled(500ms);
  dlock::RedisBackend redis(cfg);
  auto& renewals = redis.use_service<Renewals>();
  HashLock lock(redis, "stuck", {}, r::Watchdog{scaled(900ms)});
  std::promise<std::error_code> reported;
  lock.set_error_handler([&](std::error_code ec, const std::string&) { reported.set_value(ec); });
  {
    auto hold = lock.acquire();
    server.command({"ACL", "SETUSER", "locker", "resetpass", ">changed"});
    server.command({"CLIENT", "KILL", "USER", "locker"});
  }  // the release cannot be sent: the reconnect fails its AUTH
  auto f = reported.get_future();
  REQUIRE(f.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(f.get() == dlock::error::auth_failed);
  CHECK(renewals.size() == 0);
  CHECK(lock.held_by_this_thread() == 0);
  // Let the backend back in: nothing renews the abandoned lock any more.
  server.command({"ACL", "SETUSER", "locker", "resetpass", ">pw"});
  CHECK(dlock::test::wait_until([&] { return server.command({"EXISTS", "stuck"}) == "0"; }, scaled(5s)));
}

// A stopped connection fails requests at once (shutting_down); a release
// on it must not wait for the connection to come back until the lease ends.
TEST_CASE("a release on a stopped connection fails at once with shutting_down", "[owners][watchdog]") {
  // A command timeout longer than the lease, so that a release on a
  // connection that is down would wait for one.
  private_redis redis(dlock::test::impatient(scaled(30s)));
  const auto lease = scaled(10s);
  HashLock lock(redis.backend, "stopped", {}, r::Watchdog{lease});
  auto hold = lock.async_acquire("a", asio::use_future).get();
  redis.backend.connection().stop();
  CHECK(dlock::test::wait_until([&] { return redis.backend.connection().statistics().refusing; }, scaled(2s)));
  std::promise<std::error_code> released;
  hold.async_release([&](std::error_code ec) { released.set_value(ec); });
  auto f = released.get_future();
  REQUIRE(f.wait_for(lease / 4) == std::future_status::ready);
  CHECK(f.get() == dlock::error::shutting_down);
}

TEST_CASE("a huge timeout means no deadline, not an overflow", "[owners][api]") {
  private_redis redis;
  auto other = redis.another_backend();
  TokenLock holder(redis.backend, "long", {}, r::FixedLease{scaled(30s)}, w::Spin{10ms});
  TokenLock waiter(other, "long", {}, r::FixedLease{scaled(30s)}, w::Spin{10ms});
  auto hold = holder.acquire();
  auto got = std::async(std::launch::async, [&] {
    bool ok = waiter.try_lock_for(std::chrono::hours::max());
    if (ok) waiter.unlock();
    return ok;
  });
  CHECK(got.wait_for(scaled(300ms)) == std::future_status::timeout);  // still waiting
  hold.release();
  REQUIRE(got.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK(got.get());
}

TEST_CASE("SetNx gives the key back when its EXPIRE fails", "[owners][setnx]") {
  const auto timeout = scaled(400ms);
  private_redis redis(dlock::test::impatient(timeout));
  o::SetNx cut;
  // Between SETNX and PEXPIRE the server stalls for 1.5 command timeouts:
  // the PEXPIRE's reply is lost (outcome_unknown), the DEL that follows is
  // answered in time.
  const auto stall = std::to_string((timeout * 3 / 2).count());
  cut.between_setnx_and_expire = [&] { redis.server.command({"CLIENT", "PAUSE", stall, "ALL"}); };
  dlock::Lock<dlock::RedisBackend, o::SetNx, r::FixedLease, w::TryOnce> lock(redis.backend, "naked", cut,
                                                                             r::FixedLease{scaled(30s)});
  std::error_code ec;
  try {
    lock.try_lock();
  } catch (const std::system_error& e) {
    ec = e.code();
  }
  CHECK(ec == dlock::error::outcome_unknown);
  // No key is left without an expiry.
  CHECK(redis.server.command({"EXISTS", "naked"}) == "0");
  CHECK(lock.held_by_this_thread() == 0);
}

TEST_CASE("the first renewal is timed from when the lease began, not from a late reply", "[owners][watchdog]") {
  private_redis redis;
  auto& renewals = redis.backend.use_service<Renewals>();
  // A hold registered late (its acquire reply was read 2 s after the lease
  // began, with 1 s of its 3 s lease left): its first renewal is overdue.
  // (All four times scaled together.)
  auto rec = std::make_shared<dlock::detail::hold_record>();
  rec->name = "late";
  rec->owner = "token";
  rec->lease = scaled(3s);
  rec->confirm(std::chrono::steady_clock::now() - scaled(2s));  // valid for 1 s more
  renewals.add(rec, o::Token{}.extend_call(*rec), scaled(1s));
  // Due at once, not one period (1 s, sent from half of it) after add().
  CHECK(dlock::test::wait_until([&] { return renewals.renewals_sent() >= 1; }, scaled(250ms)));
  renewals.remove(rec.get());
}

TEST_CASE("std::unique_lock, try_lock_for and try_lock_until on any clock", "[owners][api]") {
  private_redis redis;
  HashLock lock(redis.backend, "std");
  std::unique_lock guard(lock, std::defer_lock);
  REQUIRE(guard.try_lock_for(scaled(1s)));
  CHECK(lock.held_by_this_thread() == 1);
  // Another thread is another owner: it waits out its deadline (system_clock).
  auto other = std::async(std::launch::async, [&] {
    bool got = lock.try_lock_until(std::chrono::system_clock::now() + 100ms);
    if (got) lock.unlock();
    return got;
  });
  CHECK_FALSE(other.get());
  guard.unlock();
  CHECK(redis.server.command({"EXISTS", "std"}) == "0");
  CHECK(guard.try_lock_until(std::chrono::steady_clock::now() + scaled(1s)));
  CHECK(redis.server.command({"EXISTS", "std"}) == "1");
}

// An expiry-value lock reads its holder's expiration from the key, which
// any client may have written: an absurd time must give a bounded wait, not
// an overflowing (and on x86, negative: "never expires") duration.
TEMPLATE_TEST_CASE("an absurd stored expiration is held for at most max_lease", "[owners][expiry]", o::GetSetExpiry,
                   o::NaiveExpiry) {
  private_redis redis;
  redis.server.command({"SET", "absurd", "1e300"});
  dlock::detail::hold_record rec;
  rec.name = "absurd";
  rec.lease = 1s;
  TestType ownership;
  auto [ec, at] = asio::co_spawn(redis.backend.get_executor(), ownership.try_acquire(redis.backend, rec),
                                 asio::use_future)
                      .get();
  CHECK(!ec);
  CHECK_FALSE(at.acquired);
  REQUIRE(at.held_for);
  CHECK(*at.held_for == dlock::max_lease);
  CHECK(redis.server.command({"GET", "absurd"}) == "1e300");  // nobody stole it
}

TEST_CASE("a hash release that is not its owner's leaves the key as it found it", "[owners][hash]") {
  private_redis redis;
  const auto& release = o::ReentrantHash::release_script();
  auto run = [&](const std::string& name, const std::string& field) {
    // KEYS lock, release marker, waiters; ARGV unlock message, lease, field,
    // marker ttl, retry flag, channel, "1": it can count the channel's
    // subscribers.
    return redis.backend.eval(release, {name, "{" + name + "}:release:r", o::ReentrantHash::waiters_key(name)},
                              {"0", "30000", field, "10000", "0", o::ReentrantHash::channel(name), "1"})
        .integer;
  };
  // The release takes 1 first and looks after: each path must undo what
  // a count it did not have would leave.
  CHECK(run("gone", "me:1") == 2);  // lease_lost
  CHECK(redis.server.command({"EXISTS", "gone"}) == "0");

  redis.server.command({"HSET", "theirs", "them:1", "1"});
  redis.server.command({"PEXPIRE", "theirs", "30000"});
  CHECK(run("theirs", "me:1") == 3);  // not_owner
  CHECK(redis.server.command({"HLEN", "theirs"}) == "1");
  CHECK(redis.server.command({"HEXISTS", "theirs", "me:1"}) == "0");
  CHECK(redis.server.command({"HGET", "theirs", "them:1"}) == "1");
  CHECK(std::stoll(redis.server.command({"PTTL", "theirs"})) > 0);

  redis.server.command({"HSET", "mine", "me:1", "2"});
  CHECK(run("mine", "me:1") == 0);  // still held
  CHECK(redis.server.command({"HGET", "mine", "me:1"}) == "1");
  CHECK(run("mine", "me:1") == 1);  // released
  CHECK(redis.server.command({"EXISTS", "mine"}) == "0");
}

TEST_CASE("a first hash acquire keeps its win marker in the hash, a re-entry in a key", "[owners][hash]") {
  private_redis redis;
  HashLock lock(redis.backend, "marked");
  auto field = redis.backend.client_id() + ":" + HashLock::thread_owner();
  auto first = lock.acquire();
  // The owner's count and the first try's marker, in one HSET.
  CHECK(redis.server.command({"HLEN", "marked"}) == "2");
  CHECK(redis.server.command({"HGET", "marked", field}) == "1");
  CHECK(redis.server.command({"KEYS", "{marked}:acquire:*"}).empty());
  auto again = lock.acquire();
  CHECK(redis.server.command({"HGET", "marked", field}) == "2");
  CHECK(redis.server.command({"HLEN", "marked"}) == "2");
  CHECK_FALSE(redis.server.command({"KEYS", "{marked}:acquire:*"}).empty());
  again.release();
  first.release();
  CHECK(redis.server.command({"EXISTS", "marked"}) == "0");
}
