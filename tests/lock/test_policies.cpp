// Policy behaviour against one real redis-server: batched renewals, expiry
// after a crash, lost replies and retried releases (pub/sub wake-ups:
// test_pubsub.cpp). What does not depend on one server runs on every backend
// fixture (test_policies_backends.cpp, which says what stays here, and why).
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/detail/lease_watch.hpp>
#include <dlock/detail/renewal_service.hpp>
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
using FixedToken = dlock::Lock<dlock::RedisBackend, o::Token, r::FixedLease, w::Spin>;
using FixedHash = dlock::Lock<dlock::RedisBackend, o::ReentrantHash, r::FixedLease, w::Spin>;
using SpinHash = dlock::Lock<dlock::RedisBackend, o::ReentrantHash, r::Watchdog, w::Spin>;

namespace {

long long pttl(const redis_server& s, const std::string& key) { return std::stoll(s.command({"PTTL", key})); }

// Makes the server hold every client's commands for `d` (as a slow network
// would), starting before this returns: what is sent next is answered late,
// after the client's command timeout.
void stall_server(const redis_server& s, std::chrono::milliseconds d) {
  s.command({"CLIENT", "PAUSE", std::to_string(d.count()), "ALL"});
}

}  // namespace

TEST_CASE("one round trip renews many held locks", "[watchdog]") {
  private_redis redis;
  auto& renewals = redis.backend.use_service<dlock::detail::renewal_service<dlock::RedisBackend>>();
  std::vector<std::unique_ptr<WatchdogHash>> locks;
  std::vector<WatchdogHash::hold_type> holds;
  for (int i = 0; i < 40; ++i) {
    locks.push_back(std::make_unique<WatchdogHash>(redis.backend, "many:" + std::to_string(i), o::ReentrantHash{},
                                                   r::Watchdog{scaled(600ms)}));
    holds.push_back(locks.back()->acquire());
  }
  auto batches0 = renewals.batches_sent(), renewals0 = renewals.renewals_sent();
  std::this_thread::sleep_for(scaled(1300ms));  // more than two leases
  auto batches = renewals.batches_sent() - batches0, sent = renewals.renewals_sent() - renewals0;
  CHECK(sent >= 80);                 // every lock renewed at least twice
  CHECK(batches * 10 <= sent);       // in few round trips, not one each
  for (int i = 0; i < 40; ++i) CHECK(pttl(redis.server, "many:" + std::to_string(i)) > 0);
  holds.clear();
  CHECK(renewals.size() == 0);
}

namespace {

// Holds `n` locks of ownership O (Watchdog, `lease`) named prefix0..n-1 on
// one backend, for the batch tests below.
template <class O>
struct held_locks {
  using L = dlock::Lock<dlock::RedisBackend, O, r::Watchdog, w::Spin>;
  std::vector<std::unique_ptr<L>> locks;
  std::vector<typename L::hold_type> holds;
  held_locks(dlock::RedisBackend& b, const std::string& prefix, int n, std::chrono::milliseconds lease) {
    for (int i = 0; i < n; ++i) {
      locks.push_back(std::make_unique<L>(b, prefix + std::to_string(i), O{}, r::Watchdog{lease}));
      holds.push_back(locks.back()->acquire());
    }
  }
};

// Renewals of `n` held O locks over about two periods: what the client sent
// (script calls, holds renewed) and the scripts the server ran.
struct renewal_counts {
  std::size_t calls = 0, renewed = 0;
  long long scripts = 0;
};
// Each count starts just after a round of renewals went out, when its
// replies are likely in: the client counts a call when it sends it and the
// server when it runs it, and a round between the two would count on one
// side only.
template <class S>
renewal_counts count_renewals(S& renewals, const redis_server& server, std::chrono::milliseconds d) {
  auto after_a_round = [&] {
    auto round = renewals.batches_sent();
    dlock::test::wait_until([&] { return renewals.batches_sent() > round; });
    std::this_thread::sleep_for(scaled(30ms));
  };
  after_a_round();
  auto calls = renewals.calls_sent(), sent = renewals.renewals_sent();
  auto scripts = script_calls(server);
  std::this_thread::sleep_for(d);
  after_a_round();
  return {renewals.calls_sent() - calls, renewals.renewals_sent() - sent, script_calls(server) - scripts};
}

// Whether the server ran the calls the client sent (one round of `round`
// calls may still fall on one side only on a loaded machine) and nothing
// else.
bool ran_what_was_sent(const renewal_counts& c, std::size_t round) {
  auto sent = static_cast<long long>(c.calls), slack = static_cast<long long>(round);
  return c.scripts >= sent - slack && c.scripts <= sent + slack;
}

}  // namespace

TEMPLATE_TEST_CASE("held locks renew up to 100 per script call, and each lost lock is its own", "[watchdog]",
                   o::ReentrantHash, o::Token) {
  private_redis redis;
  auto& renewals = redis.backend.use_service<dlock::detail::renewal_service<dlock::RedisBackend>>();
  REQUIRE(renewals.batch_limit() == 100);
  const auto lease = scaled(900ms);
  held_locks<TestType> held(redis.backend, "batch:", 250, lease);
  auto c = count_renewals(renewals, redis.server, lease * 2 / 3 + lease / 6);  // two periods and a half
  CHECK(c.renewed >= 500);           // every lock at least twice
  CHECK(c.calls * 50 <= c.renewed);  // up to 100 per call: 3 calls a round, or a few more when split in time
  CHECK(ran_what_was_sent(c, 3));  // the server ran each call once (3 a round), and nothing else
  // Two locks go wrong: one key deleted, one overwritten by a value of
  // another type (the hash ownership's HEXISTS would fail on it; the batch
  // script reads it as not ours instead of failing the whole call).
  redis.server.command({"DEL", "batch:17"});
  redis.server.command({"SET", "batch:204", "someone else's"});
  CHECK(dlock::test::wait_until([&] { return held.holds[17].lost() && held.holds[204].lost(); }, lease));
  c = count_renewals(renewals, redis.server, lease);  // three more periods
  CHECK(c.calls * 50 <= c.renewed);
  for (int i = 0; i < 250; ++i) {
    if (i == 17 || i == 204) continue;
    INFO("lock " << i);
    CHECK_FALSE(held.holds[static_cast<std::size_t>(i)].lost());
    CHECK(pttl(redis.server, "batch:" + std::to_string(i)) > lease.count() / 3);  // renewed within a period
  }
  CHECK(redis.server.command({"GET", "batch:204"}) == "someone else's");  // not ours: left as it is
  held.holds.clear();
  CHECK(renewals.size() == 0);
  for (int i = 0; i < 250; ++i)
    if (i != 204) CHECK(redis.server.command({"EXISTS", "batch:" + std::to_string(i)}) == "0");
}

TEST_CASE("with a batch limit of 1 each held lock sends its own extend script", "[watchdog]") {
  private_redis redis;
  auto& renewals = redis.backend.use_service<dlock::detail::renewal_service<dlock::RedisBackend>>();
  renewals.batch_limit(1);
  const auto lease = scaled(600ms);
  held_locks<o::ReentrantHash> held(redis.backend, "alone:", 20, lease);
  auto c = count_renewals(renewals, redis.server, lease * 2 / 3 + lease / 6);
  CHECK(c.renewed >= 40);
  CHECK(c.calls == c.renewed);
  CHECK(ran_what_was_sent(c, 20));
  for (int i = 0; i < 20; ++i) CHECK(pttl(redis.server, "alone:" + std::to_string(i)) > 0);
  renewals.batch_limit(0);  // at least 1
  CHECK(renewals.batch_limit() == 1);
}

TEST_CASE("a lock taken and released over and over does not wake the renewal timer per hold", "[watchdog]") {
  private_redis redis;
  auto& renewals = redis.backend.use_service<dlock::detail::renewal_service<dlock::RedisBackend>>();
  auto& watch = redis.backend.use_service<dlock::detail::lease_watch<dlock::RedisBackend>>();
  WatchdogHash lock(redis.backend, "busy");
  lock.acquire().release();
  auto renewal_steps = renewals.steps(), watch_steps = watch.steps();
  for (int i = 0; i < 200; ++i) {
    lock.lock();
    lock.unlock();
  }
  // Each hold is due for renewal later than the one before: one step of
  // each loop arms its timer for the first, and the rest need none. (Each
  // hold used to wake the renewal loop: its entry was gone, taken off
  // before the release was sent, by the time the loop stepped, and the
  // timer stayed disarmed.)
  CHECK(renewals.steps() - renewal_steps <= 5);
  CHECK(watch.steps() - watch_steps <= 5);
}

TEST_CASE("a killed holder's lock frees within its lease", "[lease][process]") {
  private_redis redis;
  const std::string url = redis.server.url();
  SECTION("fixed lease") {
    const auto lease = scaled(800ms);
    dlock::test::worker holder({"hold", url, "token/fixed/spin", "crashy", std::to_string(lease.count())});
    REQUIRE(holder.read_line() == "acquired");
    auto killed = std::chrono::steady_clock::now();
    holder.kill();
    FixedToken lock(redis.backend, "crashy", {}, r::FixedLease{scaled(10s)}, w::Spin{10ms});
    auto hold = lock.try_acquire_for(scaled(5s));
    REQUIRE(hold);
    CHECK(std::chrono::steady_clock::now() - killed < lease + scaled(300ms));
  }
  SECTION("watchdog: within one lease plus one renewal period") {
    const auto lease = scaled(600ms);
    dlock::test::worker holder({"hold", url, "hash/watchdog/pubsub", "crashy", std::to_string(lease.count())});
    REQUIRE(holder.read_line() == "acquired");
    std::this_thread::sleep_for(lease * 5 / 3);  // renewed meanwhile
    CHECK(redis.server.command({"EXISTS", "crashy"}) == "1");
    auto killed = std::chrono::steady_clock::now();
    holder.kill();
    WatchdogHash lock(redis.backend, "crashy", {}, r::Watchdog{scaled(10s)});
    auto hold = lock.try_acquire_for(scaled(5s));
    REQUIRE(hold);
    CHECK(std::chrono::steady_clock::now() - killed < lease + lease / 3 + scaled(300ms));
  }
}

// Backends whose commands time out after 300 ms (scaled), for lost replies.
struct impatient_redis : private_redis {
  static constexpr auto timeout = 300ms;
  impatient_redis() : private_redis(dlock::test::impatient(scaled(timeout))) {}
};

TEST_CASE("an acquire whose reply never came is outcome_unknown, not 'not acquired'", "[unknown]") {
  impatient_redis redis;
  FixedToken lock(redis.backend, "limbo", {}, r::FixedLease{scaled(30s)}, w::Spin{10ms});
  redis.server.pause();
  std::error_code ec;
  auto hold = lock.try_acquire_for(0ms, ec);
  redis.server.resume();
  CHECK(ec == dlock::error::outcome_unknown);
  CHECK_FALSE(hold);
}

TEST_CASE("a lost acquire reply is resolved by asking Redis whose the lock is", "[unknown]") {
  impatient_redis redis;
  FixedHash lock(redis.backend, "limbo", {}, r::FixedLease{scaled(30s)}, w::Spin{10ms});
  lock.lock();  // load the scripts: a late NOSCRIPT would mean "did not run"
  lock.unlock();
  // The acquire script's reply comes after the command timeout.
  stall_server(redis.server, scaled(impatient_redis::timeout * 3 / 2));
  std::error_code ec;
  auto hold = lock.try_acquire_for(0ms, ec);
  // The script ran once the server was free; its win marker says so.
  CHECK(!ec);
  REQUIRE(hold);
  CHECK(redis.server.command({"HGET", "limbo", redis.backend.client_id() + ":" + FixedHash::thread_owner()}) == "1");
}

TEST_CASE("a lost re-entrant acquire reply is resolved from its marker key", "[unknown][reentrancy]") {
  impatient_redis redis;
  FixedHash lock(redis.backend, "limbo2", {}, r::FixedLease{scaled(30s)}, w::Spin{10ms});
  auto field = redis.backend.client_id() + ":" + FixedHash::thread_owner();
  auto outer = lock.acquire();  // also loads the scripts
  stall_server(redis.server, scaled(impatient_redis::timeout * 3 / 2));
  std::error_code ec;
  auto inner = lock.try_acquire_for(0ms, ec);
  // A re-entry's marker is a key of its own (a first acquire's is a field
  // of the hash, which was already there).
  CHECK(!ec);
  REQUIRE(inner);
  CHECK(redis.server.command({"HGET", "limbo2", field}) == "2");
  inner->release();
  outer.release();
  CHECK(redis.server.command({"EXISTS", "limbo2"}) == "0");
}

TEST_CASE("a retried release never decrements a reentrant count twice", "[unknown][reentrancy]") {
  impatient_redis redis;
  FixedHash lock(redis.backend, "twice", {}, r::FixedLease{scaled(30s)}, w::Spin{10ms});
  auto field = redis.backend.client_id() + ":" + FixedHash::thread_owner();
  lock.lock();  // load the scripts: a late NOSCRIPT would mean "did not run"
  lock.unlock();
  lock.lock();
  lock.lock();
  CHECK(redis.server.command({"HGET", "twice", field}) == "2");

  stall_server(redis.server, scaled(impatient_redis::timeout * 3 / 2));
  std::error_code ec;
  lock.unlock(ec);
  CHECK(ec == dlock::error::outcome_unknown);
  CHECK(redis.server.command({"HGET", "twice", field}) == "1");  // the first attempt did run (after the pause)

  lock.unlock(ec);  // the retry: answered from the marker, no second decrement
  CHECK(!ec);
  CHECK(redis.server.command({"HGET", "twice", field}) == "1");
  CHECK(lock.held_by_this_thread() == 1);
  lock.unlock();
  CHECK(redis.server.command({"EXISTS", "twice"}) == "0");
}

TEST_CASE("a retried release is answered from its marker even after another hold's release", "[unknown][reentrancy]") {
  impatient_redis redis;
  FixedHash lock(redis.backend, "interleaved", {}, r::FixedLease{scaled(30s)}, w::Spin{10ms});
  auto field = redis.backend.client_id() + ":" + FixedHash::thread_owner();
  lock.acquire().release();  // load the scripts
  auto first = lock.acquire(), second = lock.acquire(), third = lock.acquire();
  CHECK(redis.server.command({"HGET", "interleaved", field}) == "3");
  stall_server(redis.server, scaled(impatient_redis::timeout * 3 / 2));
  std::error_code ec;
  first.release(ec);
  CHECK(ec == dlock::error::outcome_unknown);
  REQUIRE(dlock::test::wait_until([&] { return redis.server.command({"HGET", "interleaved", field}) == "2"; }));
  second.release(ec);  // a release of its own between the first's attempt and its retry
  CHECK(!ec);
  CHECK(redis.server.command({"HGET", "interleaved", field}) == "1");
  first.release(ec);  // the retry: answered from the first attempt's marker
  CHECK(!ec);
  CHECK(redis.server.command({"HGET", "interleaved", field}) == "1");
  third.release();
  CHECK(redis.server.command({"EXISTS", "interleaved"}) == "0");
}

TEST_CASE("a retried Token release is resolved from the key, with no marker left behind", "[unknown]") {
  impatient_redis redis;
  FixedToken lock(redis.backend, "once", {}, r::FixedLease{scaled(30s)}, w::Spin{10ms});
  lock.lock();  // load the script: a late NOSCRIPT would mean "did not run"
  lock.unlock();
  lock.lock();
  stall_server(redis.server, scaled(impatient_redis::timeout * 3 / 2));
  std::error_code ec;
  lock.unlock(ec);
  CHECK(ec == dlock::error::outcome_unknown);
  CHECK(lock.held_by_this_thread() == 1);  // not known to be released
  // The first attempt ran once the server was free.
  REQUIRE(dlock::test::wait_until([&] { return redis.server.command({"EXISTS", "once"}) == "0"; }));
  lock.unlock(ec);  // the retry finds the key gone, and the first attempt left well inside the lease
  CHECK(!ec);
  CHECK(lock.held_by_this_thread() == 0);
  CHECK(redis.server.command({"DBSIZE"}) == "0");  // a release writes nothing: no marker key

  // The same through a Hold: the retry is release() again.
  auto hold = lock.acquire();
  stall_server(redis.server, scaled(impatient_redis::timeout * 3 / 2));
  hold.release(ec);
  CHECK(ec == dlock::error::outcome_unknown);
  REQUIRE(dlock::test::wait_until([&] { return redis.server.command({"EXISTS", "once"}) == "0"; }));
  hold.release(ec);
  CHECK(!ec);
  CHECK(redis.server.command({"DBSIZE"}) == "0");
}

TEST_CASE("a retried Token release whose first attempt left after the lease reports lease_lost", "[unknown]") {
  impatient_redis redis;
  const auto lease = scaled(500ms);
  FixedToken lock(redis.backend, "late", {}, r::FixedLease{lease}, w::Spin{10ms});
  lock.lock();  // load the script
  lock.unlock();
  lock.lock();
  std::this_thread::sleep_for(lease + scaled(100ms));  // the key has expired
  stall_server(redis.server, scaled(impatient_redis::timeout * 3 / 2));
  std::error_code ec;
  lock.unlock(ec);
  CHECK(ec == dlock::error::outcome_unknown);
  std::this_thread::sleep_for(scaled(impatient_redis::timeout));  // the stall is over
  lock.unlock(ec);  // the retry cannot credit the first attempt: it left outside the lease
  CHECK(ec == dlock::error::lease_lost);
  CHECK(lock.held_by_this_thread() == 0);
}

TEST_CASE("Redisson's wire format: hash field, channel and unlock message", "[wire-compat]") {
  private_redis redis;
  // Redisson's channel name puts braces around the lock's name unless the
  // name has a '{' of its own (its prefixName); either way the channel is
  // in the lock's cluster slot.
  const std::pair<std::string, std::string> cases[] = {{"orders:42", "redisson_lock__channel:{orders:42}"},
                                                       {"orders:{7}", "redisson_lock__channel:orders:{7}"}};
  for (auto& [name, channel] : cases) {
    CAPTURE(name);
    CHECK(dlock::ownership::ReentrantHash::channel(name) == channel);
    WatchdogHash lock(redis.backend, name);
    std::promise<std::string> message;
    auto sub = redis.backend.async_subscribe(channel,
                                             [&](std::optional<std::string_view> m) {
                                               if (m) message.set_value(std::string(*m));
                                             },
                                             asio::use_future)
                   .get();
    lock.lock();
    CHECK(redis.server.command({"TYPE", name}) == "hash");
    CHECK(redis.server.command({"HGET", name, redis.backend.client_id() + ":" + WatchdogHash::thread_owner()}) ==
          "1");
    auto ttl = pttl(redis.server, name);  // Redisson's default 30 s watchdog
    CHECK(ttl > 29000);
    CHECK(ttl <= 30000);
    lock.unlock();
    auto f = message.get_future();
    REQUIRE(f.wait_for(scaled(2s)) == std::future_status::ready);
    CHECK(f.get() == "0");
  }
}

TEST_CASE("blocking calls on the backend's own thread are refused", "[api]") {
  private_redis redis;
  WatchdogHash lock(redis.backend, "self");
  std::promise<bool> refused;
  asio::post(redis.backend.get_executor(), [&] {
    try {
      lock.lock();
      refused.set_value(false);
    } catch (const std::logic_error&) {
      refused.set_value(true);
    }
  });
  CHECK(refused.get_future().get());

  // unlock() never throws (std::unique_lock calls it from a destructor): it
  // reports would_deadlock through the error handler, and nothing is sent.
  std::vector<std::error_code> reported;
  lock.set_error_handler([&](std::error_code ec, const std::string&) { reported.push_back(ec); });
  auto hold = lock.acquire();
  std::promise<std::error_code> release_ec;
  asio::post(redis.backend.get_executor(), [&] {
    lock.unlock();
    std::error_code ec;
    hold.release(ec);
    release_ec.set_value(ec);
  });
  CHECK(release_ec.get_future().get() == dlock::error::would_deadlock);
  REQUIRE(reported.size() == 1);
  CHECK(reported[0] == dlock::error::would_deadlock);
  CHECK(hold.owns_lock());  // still held, still releasable from a proper thread
  CHECK(redis.server.command({"EXISTS", "self"}) == "1");
  hold.release();
  CHECK(redis.server.command({"EXISTS", "self"}) == "0");
}

TEST_CASE("error conditions answer the caller's three questions", "[api][errors]") {
  using dlock::condition;
  using dlock::error;
  auto is = [](error e, condition c) { return make_error_code(e) == c; };
  for (auto e : {error::connection_refused, error::resolve_failed, error::connect_timeout, error::auth_failed,
                 error::select_failed, error::command_timeout, error::not_connected, error::shutting_down}) {
    CAPTURE(make_error_code(e).message());
    CHECK(is(e, condition::not_sent));
    CHECK_FALSE(is(e, condition::may_have_run));
    CHECK_FALSE(is(e, condition::lock_lost));
  }
  for (auto e : {error::outcome_unknown, error::unexpected_reply}) {
    CHECK(is(e, condition::may_have_run));
    CHECK_FALSE(is(e, condition::not_sent));
  }
  CHECK(is(error::lease_lost, condition::lock_lost));
  for (auto e : {error::not_acquired, error::not_owner, error::already_held, error::server_error,
                 error::invalid_lease, error::would_deadlock, error::unexpected_exception}) {
    CHECK_FALSE(is(e, condition::not_sent));
    CHECK_FALSE(is(e, condition::may_have_run));
    CHECK_FALSE(is(e, condition::lock_lost));
  }
  // Another category's code with the same value answers nothing.
  CHECK_FALSE(std::error_code(static_cast<int>(error::outcome_unknown), std::generic_category()) ==
              condition::may_have_run);
  // Async completions carry boost::system::error_code: the same answers.
  boost::system::error_code async_ec = error::outcome_unknown;
  CHECK(async_ec == std::error_condition(condition::may_have_run));
  CHECK(std::error_code(async_ec) == condition::may_have_run);
  CHECK(std::string(dlock::condition_category().name()) == "dlock.condition");
}
