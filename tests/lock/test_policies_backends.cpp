// Policy behaviour that does not depend on there being one server, run on
// every backend fixture of the combination suite (one server, two servers
// behind examples::ShardedBackend, Sentinel, Cluster): the watchdog, leases
// and their limits, pub/sub waiters, cancellation.
//
// What stays on one server (test_policies.cpp, test_loss.cpp), and why:
// the tests that put a fault between the client and the server
// (fault_proxy: a Cluster's nodes and a Sentinel announce their own
// addresses, so a proxy cannot stand in front of them; lost replies and the
// loss signal are about the client, the same code on every backend), the
// ones that count what one server ran or one backend's internal engines did
// (batched renewals, one wake per release), Redisson's wire format, and the
// API checks that send nothing (error conditions, blocking calls refused).
// test_replies.cpp stays on its fake server: it feeds replies no real Redis
// sends (wrong types, errors where a script returns a number).
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/detail/renewal_service.hpp>
#include <dlock/dlock.hpp>
#include <support/polling.hpp>

#include "backend_fixtures.hpp"
#include "backend_instances.hpp"
#include "lock_support.hpp"
#include "shard_instances.hpp"

using namespace std::chrono_literals;
using dlock::test::scaled;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;
namespace asio = boost::asio;

#define DLOCK_EVERY_BACKEND \
  dlock::test::one_server, dlock::test::two_servers, dlock::test::sentinel_servers, dlock::test::cluster_servers

namespace {

template <class F, class O, class R, class W>
using lock_on = dlock::Lock<typename F::backend_type, O, R, W>;

template <class F>
long long pttl(const F& f, const std::string& key) {
  return std::stoll(f.command(key, {"PTTL", key}));
}

template <class F>
bool exists(const F& f, const std::string& key) {
  return f.command(key, {"EXISTS", key}) == "1";
}

// The scripts (EVALSHA and EVAL) the server that holds `key` has run.
template <class F>
long long scripts_run(const F& f, const std::string& key) {
  auto info = f.command(key, {"INFO", "commandstats"});
  return dlock::test::command_calls_in(info, "evalsha") + dlock::test::command_calls_in(info, "eval");
}

// Waits until a waiter on `lock`, started when the key's server had run
// `before` scripts (and nothing else ran scripts there meanwhile), has
// tried (PubSub: tried, subscribed, tried again) and sleeps.
template <class F, class L>
bool waiter_asleep(const F& f, const L& lock, long long before) {
  const long long tries = std::is_same_v<typename L::wait_type, w::PubSub> ? 2 : 1;
  bool tried = dlock::test::wait_until([&] { return scripts_run(f, lock.name()) >= before + tries; });
  std::this_thread::sleep_for(scaled(50ms));  // from its last reply to its sleep
  return tried;
}

// The subscriptions of a backend that has one subscriber connection end
// with the waits that needed them.
template <class F>
bool subscriptions_end(F& f) {
  if constexpr (requires { f.backend.subscriber().channel_count(); })
    return dlock::test::wait_until([&] { return f.backend.subscriber().channel_count() == 0; });
  return true;
}

// Makes the server that holds `key` hold every client's commands for `d`.
template <class F>
void stall_server_of(const F& f, const std::string& key, std::chrono::milliseconds d) {
  f.command(key, {"CLIENT", "PAUSE", std::to_string(d.count()), "ALL"});
}

}  // namespace

TEMPLATE_TEST_CASE("the watchdog keeps a lock for more than three leases and stops at release", "[watchdog]",
                   DLOCK_EVERY_BACKEND) {
  TestType f;
  using B = typename TestType::backend_type;
  const auto lease = scaled(300ms);
  lock_on<TestType, o::Token, r::Watchdog, w::Spin> lock(f.backend, "job", {}, r::Watchdog{lease}, w::Spin{10ms});
  auto& renewals = f.backend.template use_service<dlock::detail::renewal_service<B>>();
  {
    auto hold = lock.acquire();
    std::this_thread::sleep_for(lease * 11 / 3);  // more than three leases
    CHECK(exists(f, "job"));
    CHECK(pttl(f, "job") > 0);
    CHECK_FALSE(hold.lost());
    CHECK(hold.remaining_lease() > 0ms);
    CHECK(renewals.size() == 1);
    CHECK(renewals.renewals_sent() >= 3);
  }
  CHECK(renewals.size() == 0);
  CHECK_FALSE(exists(f, "job"));
  auto sent = renewals.renewals_sent();
  std::this_thread::sleep_for(lease * 4 / 3);  // a renewal would have come by now
  CHECK(renewals.renewals_sent() == sent);  // nothing renews a released lock
}

TEMPLATE_TEST_CASE("locks in one slot renew in one script call, locks in many slots each where its key is",
                   "[watchdog]", DLOCK_EVERY_BACKEND) {
  TestType f;
  using B = typename TestType::backend_type;
  using L = lock_on<TestType, o::ReentrantHash, r::Watchdog, w::Spin>;
  // Long enough that a stall of the machine (CI runs three test processes
  // on two CPUs) does not cost the locks their leases: that once failed
  // this test at 450 ms, every lock lost with its key, on a machine busy
  // compiling. The test counts calls; the watchdog's timing is tested above.
  const auto lease = scaled(1200ms);
  auto& renewals = f.backend.template use_service<dlock::detail::renewal_service<B>>();
  std::vector<std::string> names;
  for (int i = 0; i < 12; ++i) names.push_back("{batch}:" + std::to_string(i));  // one slot
  for (int i = 0; i < 12; ++i) names.push_back("spread:" + std::to_string(i));   // 12 slots
  std::vector<std::unique_ptr<L>> locks;
  std::vector<typename L::hold_type> holds;
  for (auto& n : names) {
    locks.push_back(std::make_unique<L>(f.backend, n, o::ReentrantHash{}, r::Watchdog{lease}));
    holds.push_back(locks.back()->acquire());
  }
  auto calls = renewals.calls_sent(), sent = renewals.renewals_sent();
  std::this_thread::sleep_for(lease * 11 / 6);  // five periods and a half
  calls = renewals.calls_sent() - calls, sent = renewals.renewals_sent() - sent;
  for (std::size_t i = 0; i < names.size(); ++i) {
    INFO(names[i]);
    CHECK_FALSE(holds[i].lost());  // a call that named keys of several slots on a cluster would have failed
    CHECK(pttl(f, names[i]) > 0);
  }
  CHECK(sent >= 5 * names.size());
  // A round renews 24 locks. One server merges them all into one call (two
  // allowed); by slot, the 12 tagged locks share one call and the others
  // are each alone: 13 calls (14 allowed), where 24 went before batching.
  if constexpr (dlock::detail::cross_slot_scripts<B>()) CHECK(calls * 12 <= sent);
  else CHECK(calls * 24 <= sent * 14);
}

TEMPLATE_TEST_CASE("destroying the lock object stops its renewals and releases", "[watchdog]", DLOCK_EVERY_BACKEND) {
  TestType f;
  using B = typename TestType::backend_type;
  auto& renewals = f.backend.template use_service<dlock::detail::renewal_service<B>>();
  {
    lock_on<TestType, o::ReentrantHash, r::Watchdog, w::PubSub> lock(f.backend, "scoped", {},
                                                                     r::Watchdog{scaled(300ms)});
    lock.lock();
    lock.lock();
    CHECK(renewals.size() == 1);
  }
  CHECK(renewals.size() == 0);
  CHECK_FALSE(exists(f, "scoped"));
}

TEMPLATE_TEST_CASE("a renewal that finds the lock gone signals loss to the holder", "[watchdog]", DLOCK_EVERY_BACKEND) {
  TestType f;
  lock_on<TestType, o::ReentrantHash, r::Watchdog, w::PubSub> lock(f.backend, "fragile", {},
                                                                   r::Watchdog{scaled(300ms)});
  auto hold = lock.acquire();
  std::atomic<bool> told{false};
  hold.on_lost([&] { told = true; });
  f.command("fragile", {"DEL", "fragile"});
  // lost() turns true just before the callbacks run: wait for the callback.
  CHECK(dlock::test::wait_until([&] { return told.load(); }, scaled(2s)));
  CHECK(hold.lost());
  CHECK(hold.remaining_lease() == 0ms);
  std::error_code ec;
  hold.release(ec);
  CHECK(ec == dlock::error::lease_lost);
}

TEMPLATE_TEST_CASE("a watchdog never extends someone else's lock", "[watchdog]", DLOCK_EVERY_BACKEND) {
  TestType f;
  lock_on<TestType, o::Token, r::Watchdog, w::Spin> lock(f.backend, "swapped", {}, r::Watchdog{scaled(300ms)},
                                                         w::Spin{10ms});
  auto hold = lock.acquire();
  // Someone else's value, with a short expiry of its own.
  const auto theirs = scaled(5000ms);
  f.command("swapped", {"SET", "swapped", "not-our-token", "PX", std::to_string(theirs.count())});
  CHECK(dlock::test::wait_until([&] { return hold.lost(); }, scaled(2s)));
  auto left = pttl(f, "swapped");
  CHECK(left <= theirs.count());
  CHECK(left > scaled(3000ms).count());  // not shortened to our 300 ms lease either
  CHECK(f.command("swapped", {"GET", "swapped"}) == "not-our-token");
}

namespace {

template <class F, class O>
void release_after_expiry() {
  F f;
  auto other = f.another();
  using L = lock_on<F, O, r::FixedLease, w::Spin>;
  const std::string name = std::string("coupon:") + O::policy_name;
  CAPTURE(name);
  L first(f.backend, name, {}, r::FixedLease{scaled(200ms)}, w::Spin{10ms});
  L second(*other, name, {}, r::FixedLease{scaled(10s)}, w::Spin{10ms});
  auto h1 = first.acquire();
  // The first lease runs out (GetSetExpiry's key has no TTL to watch).
  REQUIRE(dlock::test::wait_until([&] { return h1.lost(); }, scaled(2s)));
  auto h2 = second.acquire();
  std::error_code ec;
  h1.release(ec);
  CHECK(ec == dlock::error::lease_lost);
  CHECK(exists(f, name));  // the second owner's lock stands
  h2.release();
  CHECK_FALSE(exists(f, name));
}

}  // namespace

TEMPLATE_TEST_CASE("release after expiry never deletes the new owner's lock", "[lease]", DLOCK_EVERY_BACKEND) {
  release_after_expiry<TestType, o::Token>();
  release_after_expiry<TestType, o::ReentrantHash>();
  release_after_expiry<TestType, o::GetSetExpiry>();
}

TEMPLATE_TEST_CASE("pub/sub waiters queue up and each gets the lock", "[pubsub]", DLOCK_EVERY_BACKEND) {
  TestType f;
  lock_on<TestType, o::ReentrantHash, r::Watchdog, w::PubSub> lock(f.backend, "queue");
  std::atomic<int> inside{0}, max_inside{0}, done{0};
  std::vector<std::future<void>> waiters;
  for (int i = 0; i < 6; ++i) {
    waiters.push_back(std::async(std::launch::async, [&] {
      for (int k = 0; k < 5; ++k) {
        std::scoped_lock g(lock);
        int now = ++inside;
        int seen = max_inside.load();
        while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(scaled(2ms));  // the work: long enough for an overlap to show
        --inside;
      }
      ++done;
    }));
  }
  for (auto& fut : waiters) REQUIRE(fut.wait_for(scaled(60s)) == std::future_status::ready);
  CHECK(done == 6);
  CHECK(max_inside == 1);
  CHECK(subscriptions_end(f));
}

namespace {

// Each retrying wait ends differently (PubSub's timer, Spin's and Backoff's
// sleeps): each must end at once on cancellation.
template <class F, class W>
void cancel_waiting_acquire() {
  F f;
  using B = typename F::backend_type;
  const std::string name = std::string("busy:") + W::policy_name;
  CAPTURE(name);
  lock_on<F, o::ReentrantHash, r::Watchdog, W> lock(f.backend, name);
  auto hold = lock.async_acquire("holder", asio::use_future).get();
  auto& renewals = f.backend.template use_service<dlock::detail::renewal_service<B>>();
  CHECK(renewals.size() == 1);

  asio::cancellation_signal cancel;
  std::promise<std::pair<dlock::error_code, bool>> result;
  auto before = scripts_run(f, name);
  lock.async_acquire("waiter", asio::bind_cancellation_slot(cancel.slot(), [&](dlock::error_code ec, auto h) {
                       result.set_value({ec, bool(h)});  // assertions stay on the test's thread
                     }));
  REQUIRE(waiter_asleep(f, lock, before));  // cancel the wait, not the try
  // Emit on the operation's side: cancellation signals are not thread-safe.
  asio::post(f.backend.get_executor(), [&] { cancel.emit(asio::cancellation_type::terminal); });
  auto fut = result.get_future();
  REQUIRE(fut.wait_for(scaled(5s)) == std::future_status::ready);
  auto [ec, got_hold] = fut.get();
  CHECK(ec == asio::error::operation_aborted);
  CHECK_FALSE(got_hold);
  CHECK(lock.held_by("waiter") == 0);
  CHECK(renewals.size() == 1);
  CHECK(subscriptions_end(f));
  hold.release();
  std::this_thread::sleep_for(scaled(100ms));  // time for a waiter that lived on to take it
  CHECK_FALSE(exists(f, name));  // the cancelled waiter did not take it
  CHECK(renewals.size() == 0);
}

// A release is not cut short: once its command may have left, stopping it
// would leave the caller not knowing whether the lock is still held.
template <class F, class O, class R, class W>
void cancel_release_in_flight() {
  F f;
  const std::string name = std::string("leaving:") + O::policy_name;
  CAPTURE(name);
  lock_on<F, O, R, W> lock(f.backend, name);
  auto hold = lock.async_acquire("holder", asio::use_future).get();
  REQUIRE(exists(f, name));

  stall_server_of(f, name, scaled(300ms));  // the release's script waits in the server
  asio::cancellation_signal cancel;
  std::promise<dlock::error_code> result;
  lock.async_release(hold, asio::bind_cancellation_slot(cancel.slot(), [&](dlock::error_code ec) {
                       result.set_value(ec);  // assertions stay on the test's thread
                     }));
  std::this_thread::sleep_for(scaled(50ms));
  asio::post(f.backend.get_executor(), [&] { cancel.emit(asio::cancellation_type::terminal); });
  auto fut = result.get_future();
  REQUIRE(fut.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK_FALSE(fut.get());
  CHECK_FALSE(hold);
  CHECK(lock.held_by("holder") == 0);
  CHECK_FALSE(exists(f, name));
}

}  // namespace

TEMPLATE_TEST_CASE("cancelling a waiting async_acquire leaves nothing held and nothing renewing", "[cancel]",
                   DLOCK_EVERY_BACKEND) {
  cancel_waiting_acquire<TestType, w::PubSub>();
  cancel_waiting_acquire<TestType, w::Spin>();
  cancel_waiting_acquire<TestType, w::Backoff>();
}

TEMPLATE_TEST_CASE("cancelling an async_release in flight changes nothing: it completes with its own outcome",
                   "[cancel]", DLOCK_EVERY_BACKEND) {
  cancel_release_in_flight<TestType, o::ReentrantHash, r::Watchdog, w::PubSub>();
  cancel_release_in_flight<TestType, o::Token, r::FixedLease, w::Spin>();
}

// The release's first step is to wait for its turn among the operations of
// its owner (here a reentrant acquire whose script the paused server holds):
// a cancellation that comes while it waits there must not stop it once it
// gets its turn either.
TEMPLATE_TEST_CASE("cancelling an async_release waiting for its owner's turn changes nothing", "[cancel]",
                   DLOCK_EVERY_BACKEND) {
  TestType f;
  const std::string name = "turns";
  lock_on<TestType, o::ReentrantHash, r::Watchdog, w::PubSub> lock(f.backend, name);
  auto first = lock.async_acquire("holder", asio::use_future).get();
  REQUIRE(lock.held_by("holder") == 1);

  stall_server_of(f, name, scaled(400ms));
  auto second = lock.async_acquire("holder", asio::use_future);  // holds the owner's turn meanwhile
  std::this_thread::sleep_for(scaled(50ms));
  asio::cancellation_signal cancel;
  std::promise<dlock::error_code> result;
  lock.async_release(first, asio::bind_cancellation_slot(cancel.slot(), [&](dlock::error_code ec) {
                       result.set_value(ec);
                     }));
  std::this_thread::sleep_for(scaled(50ms));  // the release waits behind the acquire
  asio::post(f.backend.get_executor(), [&] { cancel.emit(asio::cancellation_type::terminal); });
  auto fut = result.get_future();
  REQUIRE(fut.wait_for(scaled(5s)) == std::future_status::ready);
  CHECK_FALSE(fut.get());  // released, not operation_aborted with the count still 2
  CHECK_FALSE(first);
  REQUIRE(second.wait_for(scaled(5s)) == std::future_status::ready);
  auto hold = second.get();
  CHECK(hold);
  CHECK(lock.held_by("holder") == 1);
  hold.release();
  CHECK_FALSE(exists(f, name));
}

TEMPLATE_TEST_CASE("a hold without expiry never signals, and an empty hold's token never stops", "[loss]",
                   DLOCK_EVERY_BACKEND) {
  TestType f;
  lock_on<TestType, o::SetNx, r::None, w::TryOnce> lock(f.backend, "forever");
  auto hold = lock.acquire();
  CHECK(hold.remaining_lease() == std::chrono::milliseconds::max());
  CHECK(hold.stop_token().stop_possible());
  std::this_thread::sleep_for(scaled(100ms));  // time for a signal that should never come
  CHECK_FALSE(hold.stop_token().stop_requested());
  hold.release();
  decltype(hold) empty;
  CHECK_FALSE(empty.stop_token().stop_possible());
  CHECK(empty.remaining_lease() == 0ms);
}

namespace {

template <class F, class O, class R>
void largest_lease(F& f) {
  using L = lock_on<F, O, R, w::Spin>;
  const std::string name = std::string("far:") + O::policy_name + ":" + R::policy_name;
  CAPTURE(name);
  CHECK(dlock::test::construction_error<L>(f.backend, R{dlock::max_lease + 1ms}) == dlock::error::invalid_lease);
  CHECK(dlock::test::construction_error<L>(f.backend, R{0ms}) == dlock::error::invalid_lease);
  CHECK(dlock::test::construction_error<L>(f.backend, R{-1ms}) == dlock::error::invalid_lease);

  L lock(f.backend, name, {}, R{dlock::max_lease}, w::Spin{10ms});
  auto hold = lock.acquire();
  CHECK(hold.remaining_lease() > dlock::max_lease - R{dlock::max_lease}.margin() - 60s);
  if constexpr (std::is_same_v<O, o::GetSetExpiry>) {
    // The value is the expiration in epoch seconds; the key has no TTL.
    auto now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    CHECK(std::stod(f.command(name, {"GET", name})) > now + 1e9 - 60);
  } else {
    CHECK(pttl(f, name) > dlock::max_lease.count() - 60000);
  }
  hold.release();
  CHECK_FALSE(exists(f, name));
}

}  // namespace

TEMPLATE_TEST_CASE("the largest lease is accepted and works; one millisecond more is refused", "[lease][limits]",
                   DLOCK_EVERY_BACKEND) {
  TestType f;
  largest_lease<TestType, o::SetNx, r::FixedLease>(f);
  largest_lease<TestType, o::Token, r::FixedLease>(f);
  largest_lease<TestType, o::ReentrantHash, r::FixedLease>(f);
  largest_lease<TestType, o::GetSetExpiry, r::FixedLease>(f);
  largest_lease<TestType, o::Token, r::Watchdog>(f);
  largest_lease<TestType, o::ReentrantHash, r::Watchdog>(f);
}
