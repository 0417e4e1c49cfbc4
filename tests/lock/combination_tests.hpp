// The tests every valid combination must pass, instantiated per ownership
// policy (one translation unit each, so they build in parallel).
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <optional>
#include <future>
#include <thread>
#include <vector>

#include <boost/asio/use_future.hpp>

#include <dlock/combinations.hpp>
#include <support/polling.hpp>
#include <support/server_fixture.hpp>

#include "backend_fixtures.hpp"

#include "lock_support.hpp"

namespace dlock::test {

// What a combination promises when things go wrong; printed by the
// exclusion test so a reader sees which ones are unsafe, and why.
template <class L>
std::string safety_note() {
  using O = typename L::ownership_type;
  using R = typename L::renewal_type;
  std::string note;
  if constexpr (!R::expires) note += "a crashed holder keeps it forever; ";
  if constexpr (!O::owner_checked) note += "any client's release deletes it, even after expiry; ";
  if constexpr (std::is_same_v<O, ownership::SetNx> && std::is_same_v<R, renewal::FixedLease>)
    note += "a crash between SETNX and EXPIRE leaves it without expiry; ";
  if constexpr (std::is_same_v<O, ownership::GetSetExpiry>) note += "depends on every client's wall clock; ";
  if constexpr (R::expires && !R::renews) note += "work longer than the lease overlaps the next holder; ";
  if (note.empty()) note = "safe on one server (a failover can still lose it)";
  return note;
}

template <class F, class L>
void mutual_exclusion_test() {
  F redis;
  const std::string name = "excl:" + L::combination_name();
  const std::string counter = name + ":counter";
  constexpr int threads = 8, per_thread = 25, processes = 4, per_process = 25;

  // Four processes and eight threads contend at the same time.
  std::vector<std::unique_ptr<worker>> children;
  for (int p = 0; p < processes; ++p)
    children.push_back(std::make_unique<worker>(std::vector<std::string>{
        "count", redis.worker_spec(), L::combination_name(), name, std::to_string(per_process)}));
  std::atomic<int> unlock_errors{0}, thrown{0};
  {
    auto lock = make_lock<L>(redis.backend, name);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        try {
          for (int i = 0; i < per_thread; ++i)
            if (increment_under(*lock, redis.plain(counter), counter)) ++unlock_errors;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "mutual exclusion worker thread: %s\n", e.what());
          ++thrown;
        }
      });
    }
    for (auto& t : pool) t.join();
  }
  CHECK(thrown == 0);
  CHECK(unlock_errors == 0);
  for (auto& c : children) {
    CHECK(c->read_line(scaled(60s)) == "done");
    CHECK(c->wait() == 0);
  }
  CHECK(redis.command(counter, {"GET", counter}) ==
        std::to_string(threads * per_thread + processes * per_process));
  WARN(L::combination_name() << ": exact under contention; when things fail: " << safety_note<L>());
}

/// A holder process is killed; a lock with a lease frees within it (plus one
/// renewal period for the watchdog, whose last renewal may just have run);
/// a lock without one is still held seconds later, and stays so.
template <class F, class L>
void killed_holder_test() {
  F redis;
  const auto lease = scaled(600ms);
  const std::string name = "crash:" + L::combination_name();
  worker holder({"hold", redis.worker_spec(), L::combination_name(), name, std::to_string(lease.count())});
  REQUIRE(holder.read_line() == "acquired");
  if constexpr (!has_lease<L>) {
    holder.kill();
    auto lock = make_lock<L>(redis.backend, name);
    std::error_code ec;
    auto deadline = std::chrono::steady_clock::now() + 3s;  // several seconds of trying
    do {
      auto hold = lock->try_acquire_for(std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()), ec);
      if (ec == error::not_acquired) std::this_thread::sleep_for(10ms);  // TryOnce returns at once
    } while (ec == error::not_acquired && std::chrono::steady_clock::now() < deadline);
    CHECK(ec == error::not_acquired);
    CHECK(redis.command(name, {"EXISTS", name}) == "1");
    CHECK(redis.command(name, {"PTTL", name}) == "-1");  // and it never will free
  } else {
    constexpr bool watchdog = L::renewal_type::renews;
    if constexpr (watchdog) std::this_thread::sleep_for(lease);  // it renews meanwhile
    REQUIRE(redis.command(name, {"EXISTS", name}) == "1");
    auto killed = std::chrono::steady_clock::now();
    holder.kill();
    auto lock = make_lock<L>(redis.backend, name);
    std::error_code ec;
    std::optional<typename L::hold_type> hold;
    auto deadline = killed + scaled(5s);
    // TryOnce does not wait: poll it. Its single vote on a quorum may hear
    // too few nodes on a loaded machine (no_quorum): that is a try to repeat.
    do {
      hold = lock->try_acquire_for(std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now()), ec);
    } while ((ec == error::not_acquired || ec == error::no_quorum) && std::chrono::steady_clock::now() < deadline);
    REQUIRE(!ec);
    auto freed_after = std::chrono::steady_clock::now() - killed;
    auto bound = lease + (watchdog ? lease / 3 : 0ms);
    CHECK(freed_after < bound + scaled(500ms));  // slack for a loaded machine
  }
}

template <class F, class L>
void hold_test() {
  F redis;
  const auto lease = scaled(5s);
  auto lock = make_lock<L>(redis.backend, "hold:" + L::combination_name(), lease);
  auto hold = lock->acquire();
  REQUIRE(hold);
  CHECK_FALSE(hold.lost());
  if constexpr (has_lease<L>) {
    CHECK(hold.remaining_lease() > lease - scaled(1s));
    CHECK(hold.remaining_lease() <= lease);
  } else {
    CHECK(hold.remaining_lease() == std::chrono::milliseconds::max());
  }
  CHECK(redis.command(lock->name(), {"EXISTS", lock->name()}) == "1");

  // Another owner (another thread) does not get it while it is held. A
  // quorum's vote must hear from a majority within the wait to say "held"
  // rather than no_quorum: on a loaded machine 50 ms was not always enough
  // (CI saw no_quorum once), so it gets longer.
  const auto wait = contract::backend_quorum<typename F::backend_type> ? scaled(500ms) : 50ms;
  auto other = std::async(std::launch::async, [&] {
    std::error_code ec;
    auto h = lock->try_acquire_for(wait, ec);
    return ec;
  });
  CHECK(other.get() == error::not_acquired);

  hold.release();
  CHECK_FALSE(hold);
  CHECK(redis.command(lock->name(), {"EXISTS", lock->name()}) == "0");
  // A released hold cannot be released again.
  std::error_code ec;
  hold.release(ec);
  CHECK(ec == error::not_owner);
}

template <class F, class L>
void async_test() {
  F redis;
  auto lock = make_lock<L>(redis.backend, "async:" + L::combination_name());
  auto hold = lock->async_acquire("worker-1", asio::use_future).get();
  REQUIRE(hold);
  CHECK(hold.owner_id() == "worker-1");
  CHECK(lock->held_by("worker-1") == 1);
  // A different owner id is a different owner, even on this thread.
  CHECK(error_of(lock->async_try_acquire_for("worker-2", 30ms, asio::use_future)) == error::not_acquired);
  hold.async_release(asio::use_future).get();
  CHECK(lock->held_by("worker-1") == 0);
  CHECK(redis.command(lock->name(), {"EXISTS", lock->name()}) == "0");
}

template <class F, class L>
void bad_input_test() {
  F redis;
  auto code = [](auto make) -> std::error_code {
    try {
      make();
    } catch (const std::system_error& e) {
      return e.code();
    }
    return {};
  };
  CHECK(code([&] { make_lock<L>(redis.backend, ""); }) == error::invalid_name);
  CHECK(code([&] { make_lock<L>(redis.backend, std::string(4097, 'x')); }) == error::invalid_name);
  CHECK(code([&] { make_lock<L>(redis.backend, std::string(4096, 'x')); }) == std::error_code{});
  if constexpr (has_lease<L>) {
    CHECK(code([&] { make_lock<L>(redis.backend, "n", 0ms); }) == error::invalid_lease);
    CHECK(code([&] { make_lock<L>(redis.backend, "n", -5ms); }) == error::invalid_lease);
  }
  using W = typename L::wait_type;
  if constexpr (std::is_same_v<W, wait::Spin>) {
    CHECK(code([&] { L(redis.backend, "n", {}, test_renewal<L>(1s), W{0ms}); }) == error::invalid_interval);
    // Longer would overflow the sleep's clock arithmetic (signed overflow).
    CHECK(code([&] { L(redis.backend, "n", {}, test_renewal<L>(1s), W{max_lease + 1ms}); }) ==
          error::invalid_interval);
    CHECK(code([&] { L(redis.backend, "n", {}, test_renewal<L>(1s), W{max_lease}); }) == std::error_code{});
  }
  if constexpr (std::is_same_v<W, wait::Backoff>) {
    CHECK(code([&] { L(redis.backend, "n", {}, test_renewal<L>(1s), W{0ms, 10ms}); }) == error::invalid_interval);
    CHECK(code([&] { L(redis.backend, "n", {}, test_renewal<L>(1s), W{10ms, 5ms}); }) == error::invalid_interval);
    // A longer cap overflowed bound()'s doubling (a negative bound: undefined behaviour).
    CHECK(code([&] { L(redis.backend, "n", {}, test_renewal<L>(1s), W{10ms, max_lease + 1ms}); }) ==
          error::invalid_interval);
    CHECK(code([&] { L(redis.backend, "n", {}, test_renewal<L>(1s), W{10ms, max_lease}); }) == std::error_code{});
  }
  // Nothing reached Redis.
  CHECK(redis.dbsize() == 0);
}

template <class F, class L>
void ownership_rules_test() {
  F redis;
  auto lock = make_lock<L>(redis.backend, "owner:" + L::combination_name());

  // A thread that holds nothing cannot unlock, and the holder keeps it.
  lock->lock();
  auto stranger = std::async(std::launch::async, [&] {
    std::error_code ec;
    lock->unlock(ec);
    return ec;
  });
  CHECK(stranger.get() == error::not_owner);
  CHECK(redis.command(lock->name(), {"EXISTS", lock->name()}) == "1");

  if constexpr (L::ownership_type::reentrant) {
    lock->lock();
    lock->lock();
    CHECK(lock->held_by_this_thread() == 3);
    auto field = lock->ownership().make_owner(redis.backend.client_id(), L::thread_owner());
    CHECK(redis.command(lock->name(), {"HGET", lock->name(), field}) == "3");
    lock->unlock();
    CHECK(redis.command(lock->name(), {"HGET", lock->name(), field}) == "2");
    lock->unlock();
    CHECK(redis.command(lock->name(), {"EXISTS", lock->name()}) == "1");
  } else {
    try {
      lock->lock();
      FAIL("a non-reentrant lock was taken twice by one thread");
    } catch (const std::system_error& e) {
      CHECK(e.code() == error::already_held);
    }
  }
  lock->unlock();
  CHECK(redis.command(lock->name(), {"EXISTS", lock->name()}) == "0");
  std::error_code ec;
  lock->unlock(ec);
  CHECK(ec == error::not_owner);
}

}  // namespace dlock::test

// Every test above, for every valid combination with OWNERSHIP on the
// backend of FIXTURE (a type with `backend`, `worker_spec()`, `command(key,
// args)`, `dbsize()` and `plain(key)`: see support/backend_fixtures.hpp).
#define DLOCK_COMBINATION_TESTS_ON(FIXTURE, OWNERSHIP, TAG)                                                     \
  using DLOCK_LIST_NAME(__LINE__) = dlock::combinations::with_ownership_t<OWNERSHIP, FIXTURE::backend_type>;    \
  TEMPLATE_LIST_TEST_CASE("mutual exclusion: 8 threads, then 4 processes", "[lock][" TAG "]",                   \
                          DLOCK_LIST_NAME(__LINE__)) {                                          \
    dlock::test::mutual_exclusion_test<FIXTURE, TestType>();                                                    \
  }                                                                                                             \
  TEMPLATE_LIST_TEST_CASE("a killed holder's lock frees within its lease", "[lock][" TAG "]",                   \
                          DLOCK_LIST_NAME(__LINE__)) {                                          \
    dlock::test::killed_holder_test<FIXTURE, TestType>();                                                       \
  }                                                                                                             \
  TEMPLATE_LIST_TEST_CASE("a hold reports its lease and keeps others out", "[lock][" TAG "]",                   \
                          DLOCK_LIST_NAME(__LINE__)) {                                          \
    dlock::test::hold_test<FIXTURE, TestType>();                                                                \
  }                                                                                                             \
  TEMPLATE_LIST_TEST_CASE("the async interface with explicit owner ids", "[lock][" TAG "]",                    \
                          DLOCK_LIST_NAME(__LINE__)) {                                          \
    dlock::test::async_test<FIXTURE, TestType>();                                                               \
  }                                                                                                             \
  TEMPLATE_LIST_TEST_CASE("bad input is rejected before anything reaches Redis", "[lock][" TAG "]",             \
                          DLOCK_LIST_NAME(__LINE__)) {                                          \
    dlock::test::bad_input_test<FIXTURE, TestType>();                                                           \
  }                                                                                                             \
  TEMPLATE_LIST_TEST_CASE("owners: not_owner, reentrancy or already_held", "[lock][" TAG "]",                  \
                          DLOCK_LIST_NAME(__LINE__)) {                                          \
    dlock::test::ownership_rules_test<FIXTURE, TestType>();                                                     \
  }

// The list of one expansion, named by its line (a template argument list
// with a comma cannot be a macro argument).
#define DLOCK_LIST_NAME(LINE) DLOCK_LIST_NAME_(LINE)
#define DLOCK_LIST_NAME_(LINE) dlock_combinations_of_line_##LINE

// On one private redis-server.
#define DLOCK_COMBINATION_TESTS(OWNERSHIP, TAG) DLOCK_COMBINATION_TESTS_ON(dlock::test::one_server, OWNERSHIP, TAG)
