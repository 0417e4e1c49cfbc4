// ownership::ReadWrite against a real redis-server: readers together and a
// writer alone (std::shared_lock and std::unique_lock over threads),
// Redisson's layout, reentrancy with downgrade and a refused upgrade, the
// writer's intent that keeps new readers out (and goes when the writer
// wins or gives up), a dead reader that stops counting at its lease's end,
// the watchdog, pub/sub wake-ups of every reader, and the async interface.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
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

using Spin = dlock::Lock<dlock::RedisBackend, o::ReadWrite, r::FixedLease, w::Spin>;
using Watched = dlock::Lock<dlock::RedisBackend, o::ReadWrite, r::Watchdog, w::Spin>;
using Woken = dlock::Lock<dlock::RedisBackend, o::ReadWrite, r::FixedLease, w::PubSub>;

static_assert(dlock::detail::shares<o::ReadWrite>());

// Runs `f` on a thread of its own (a thread is an owner) and returns its result.
template <class F>
auto on_other_thread(F f) {
  return std::async(std::launch::async, std::move(f)).get();
}

}  // namespace

TEST_CASE("ReadWrite: readers hold together, a writer alone, over 8 threads", "[read_write]") {
  dlock::test::redis_server server;
  std::atomic<int> readers{0}, writers{0}, most_readers{0}, bad{0}, errors{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 8; ++t) {
    pool.emplace_back([&, t] {
      try {
        dlock::RedisBackend backend(server.url());
        Spin lock(backend, "rw", {}, r::FixedLease(scaled(10s)), w::Spin{2ms});
        for (int i = 0; i < 12; ++i) {
          if ((t + i) % 4 == 0) {
            std::unique_lock hold(lock);
            if (++writers != 1 || readers != 0) ++bad;
            std::this_thread::sleep_for(1ms);
            --writers;
          } else {
            std::shared_lock hold(lock);
            const int now = ++readers;
            if (writers != 0) ++bad;
            int seen = most_readers.load();
            while (now > seen && !most_readers.compare_exchange_weak(seen, now)) {
            }
            std::this_thread::sleep_for(3ms);
            --readers;
          }
        }
      } catch (const std::exception& e) {
        ++errors;
        UNSCOPED_INFO(e.what());
      }
    });
  }
  for (auto& t : pool) t.join();
  CHECK(errors == 0);
  CHECK(bad == 0);
  CHECK(most_readers > 1);  // readers did share
  CHECK(server.command({"EXISTS", "rw", o::ReadWrite::intent_key("rw")}) == "0");
}

TEST_CASE("ReadWrite: 2 processes of 4 threads mixing readers and writers: writers overlap nothing, readers share",
          "[read_write][history]") {
  // Each process has one backend and one lock (watchdog, pub/sub); each
  // thread writes every fourth round and reads the others. The hold-history
  // checker takes every hold's span on CLOCK_MONOTONIC, from both
  // processes: no write may overlap any hold, reads may overlap reads.
  dlock::test::redis_server server;
  const std::vector<std::string> args{"rw-crowd", server.url(), "mix", "4", "24"};
  auto crowd = dlock::test::run_crowd({args, args}, scaled(90s));
  INFO(crowd.failures);
  REQUIRE(crowd.failed == 0);
  auto spans = crowd.history.spans();
  CHECK(spans.size() == 2 * 4 * 24);
  CHECK(std::count_if(spans.begin(), spans.end(), [](auto& s) { return !s.shared; }) == 2 * 4 * 6);
  auto overlaps = crowd.history.overlaps();
  for (auto& o : overlaps) UNSCOPED_INFO(o.earlier.format() << " and " << o.later.format());
  CHECK(overlaps.empty());
  CHECK(crowd.history.most_at_once("mix") >= 2);  // readers did share
  CHECK(server.command({"EXISTS", "mix", o::ReadWrite::intent_key("mix")}) == "0");
}

TEST_CASE("ReadWrite: a killed reader's hold ends with its lease, never sooner, while another reads on",
          "[read_write]") {
  dlock::test::redis_server server;
  const auto lease = scaled(1500ms);
  dlock::test::worker reader({"rw-hold", server.url(), "crash", std::to_string(lease.count())});
  REQUIRE(reader.read_line() == "acquired");
  const auto acquired = std::chrono::steady_clock::now();
  reader.kill();  // a crash: nothing is given back
  dlock::RedisBackend backend(server.url());
  Spin writer(backend, "crash", {}, r::FixedLease(scaled(10s)), w::Spin{5ms});
  // Well inside the dead reader's lease, a writer is kept out.
  bool early = false;
  while (!early && std::chrono::steady_clock::now() < acquired + lease / 3) early = writer.try_lock();
  CHECK_FALSE(early);
  // A live reader joins and reads on past the dead one's lease: the hash
  // lives on, with the dead reader's field in it.
  auto other = std::async(std::launch::async, [&] {
    Watched live(backend, "crash", {}, r::Watchdog(scaled(1s)), w::Spin{5ms});
    std::shared_lock held(live);
    std::this_thread::sleep_until(acquired + lease + scaled(200ms));
    return server.command({"HLEN", "crash"});  // mode and both readers
  });
  CHECK(other.get() == "3");
  // Its release finds no live reader: the writer gets in at its first try.
  CHECK(std::chrono::steady_clock::now() - acquired >= lease);
  CHECK(writer.try_lock());
  writer.unlock();
}

TEST_CASE("ReadWrite: Redisson's layout for readers and the writer", "[read_write]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  Spin lock(backend, "doc", {}, r::FixedLease(scaled(10s)), w::Spin{2ms});
  const auto reader = backend.client_id() + ":" + Spin::thread_owner();
  {
    std::shared_lock hold(lock);
    CHECK(server.command({"HGET", "doc", "mode"}) == "read");
    CHECK(server.command({"HGET", "doc", reader}) == "1");
    CHECK(server.command({"EXISTS", "{doc}:" + reader + ":rwlock_timeout:1"}) == "1");
    CHECK(lock.held_shared_by_this_thread() == 1);
    CHECK(lock.held_by_this_thread() == 0);  // shared and exclusive holds are counted apart
  }
  CHECK(server.command({"EXISTS", "doc", "{doc}:" + reader + ":rwlock_timeout:1"}) == "0");
  {
    std::unique_lock hold(lock);
    CHECK(server.command({"HGET", "doc", "mode"}) == "write");
    CHECK(server.command({"HGET", "doc", reader + ":write"}) == "1");
  }
  CHECK(server.command({"EXISTS", "doc"}) == "0");
}

TEST_CASE("ReadWrite: reentrant both ways, a writer may also read (downgrade), a reader may not write (upgrade)",
          "[read_write]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  Spin lock(backend, "re", {}, r::FixedLease(scaled(10s)), w::Spin{2ms});
  auto other_reads = [&] { return on_other_thread([&] { bool ok = lock.try_lock_shared(); if (ok) lock.unlock_shared(); return ok; }); };
  SECTION("shared twice, then released twice") {
    lock.lock_shared();
    lock.lock_shared();
    CHECK(lock.held_shared_by_this_thread() == 2);
    CHECK(server.command({"HGET", "re", backend.client_id() + ":" + Spin::thread_owner()}) == "2");
    lock.unlock_shared();
    CHECK(server.command({"HGET", "re", "mode"}) == "read");
    lock.unlock_shared();
    CHECK(server.command({"EXISTS", "re"}) == "0");
  }
  SECTION("exclusive, shared inside it, and the lock stays shared when the writer lets go") {
    lock.lock();
    lock.lock();  // reentrant
    CHECK_FALSE(other_reads());
    lock.lock_shared();  // a downgrade's first step
    lock.unlock();
    CHECK_FALSE(other_reads());  // still held exclusively once
    lock.unlock();
    CHECK(server.command({"HGET", "re", "mode"}) == "read");
    CHECK(other_reads());  // shared now: another reader enters
    lock.unlock_shared();
    CHECK(server.command({"EXISTS", "re"}) == "0");
  }
  SECTION("an upgrade is refused with already_held, and changes nothing") {
    lock.lock_shared();
    std::error_code ec;
    auto hold = lock.try_acquire_for(scaled(2s), ec);
    CHECK_FALSE(hold);
    CHECK(ec == dlock::error::already_held);
    CHECK(dlock::test::thrown_by([&] { lock.lock(); }) == dlock::error::already_held);
    CHECK(server.command({"HGET", "re", "mode"}) == "read");
    CHECK(server.command({"EXISTS", o::ReadWrite::intent_key("re")}) == "0");
    lock.unlock_shared();
    CHECK(server.command({"EXISTS", "re"}) == "0");
  }
}

TEST_CASE("ReadWrite: a waiting writer keeps new readers out; it goes first once the readers it waits for are done",
          "[read_write]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  Spin lock(backend, "intent", {}, r::FixedLease(scaled(10s)), w::Spin{5ms});
  lock.lock_shared();  // this thread: the reader the writer waits for
  std::atomic<bool> written{false};
  auto writer = std::async(std::launch::async, [&] {
    std::unique_lock hold(lock, std::defer_lock);
    REQUIRE(hold.try_lock_for(scaled(20s)));
    written = true;
  });
  REQUIRE(dlock::test::wait_until([&] { return server.command({"EXISTS", o::ReadWrite::intent_key("intent")}) == "1"; }));
  // A new reader is kept out, while the reader that holds may re-enter.
  CHECK_FALSE(on_other_thread([&] { return lock.try_lock_shared_for(scaled(200ms)); }));
  lock.lock_shared();
  lock.unlock_shared();
  CHECK_FALSE(written);
  lock.unlock_shared();
  writer.get();
  CHECK(written);
  CHECK(server.command({"EXISTS", o::ReadWrite::intent_key("intent")}) == "0");  // the winner took it away
}

TEST_CASE("ReadWrite: a writer that gives up takes its intent away; one that only tries leaves none", "[read_write]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  Spin lock(backend, "gives-up", {}, r::FixedLease(scaled(10s)), w::Spin{5ms});
  lock.lock_shared();
  CHECK_FALSE(on_other_thread([&] { return lock.try_lock(); }));  // loads the scripts
  // A try that will not wait leaves no intent, so it has none to take away:
  // one script call.
  server.command({"CONFIG", "RESETSTAT"});
  CHECK_FALSE(on_other_thread([&] { return lock.try_lock(); }));
  CHECK(server.command({"INFO", "commandstats"}).find("cmdstat_evalsha:calls=1,") != std::string::npos);
  CHECK(server.command({"EXISTS", o::ReadWrite::intent_key("gives-up")}) == "0");
  CHECK_FALSE(on_other_thread([&] { return lock.try_lock_for(scaled(300ms)); }));
  CHECK(server.command({"EXISTS", o::ReadWrite::intent_key("gives-up")}) == "0");
  CHECK(on_other_thread([&] { bool ok = lock.try_lock_shared(); if (ok) lock.unlock_shared(); return ok; }));
  lock.unlock_shared();
}

TEST_CASE("ReadWrite: a dead reader stops counting when its lease ends, with its field still in the hash",
          "[read_write]") {
  dlock::test::redis_server server;
  // Redisson's layout of a live reader and one whose client died: its field
  // stays, its timeout key ends with its lease.
  const auto lease = scaled(600ms);
  server.command({"HSET", "dead", "mode", "read", "gone:1", "1"});
  server.command({"SET", "{dead}:gone:1:rwlock_timeout:1", "1", "PX", std::to_string(lease.count())});
  server.command({"PEXPIRE", "dead", std::to_string(lease.count())});
  dlock::RedisBackend backend(server.url());
  Spin lock(backend, "dead", {}, r::FixedLease(scaled(10s)), w::Spin{5ms});
  // A reader joins, then leaves after the dead one's lease: its release
  // finds no live reader and frees the lock, dead field and all.
  lock.lock_shared();
  std::this_thread::sleep_for(lease + scaled(100ms));
  CHECK(server.command({"HEXISTS", "dead", "gone:1"}) == "1");
  lock.unlock_shared();
  CHECK(server.command({"EXISTS", "dead"}) == "0");
  CHECK(on_other_thread([&] { bool ok = lock.try_lock(); if (ok) lock.unlock(); return ok; }));
}

TEST_CASE("ReadWrite: the watchdog keeps a reader past its lease, timeout key and hash", "[read_write]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  Watched lock(backend, "kept", {}, r::Watchdog(scaled(300ms)), w::Spin{5ms});
  auto hold = lock.acquire_shared();
  std::this_thread::sleep_for(scaled(1000ms));  // three leases: renewed on the way
  CHECK_FALSE(hold.lost());
  CHECK(server.command({"EXISTS", "{kept}:" + backend.client_id() + ":" + Watched::thread_owner() + ":rwlock_timeout:1"}) == "1");
  CHECK_FALSE(on_other_thread([&] { return lock.try_lock(); }));
  hold.release();
  CHECK(server.command({"EXISTS", "kept"}) == "0");
}

TEST_CASE("ReadWrite: a writer's release wakes every waiting reader (pub/sub)", "[read_write]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  // A long lease and re-check: a waiter wakes only on the release message.
  w::PubSub slow;
  slow.recheck = scaled(60s);
  Woken lock(backend, "wake", {}, r::FixedLease(scaled(60s)), slow);
  lock.lock();
  std::vector<std::future<bool>> readers;
  std::atomic<int> inside{0};
  std::promise<void> all_in;
  auto all_in_future = all_in.get_future().share();
  for (int i = 0; i < 3; ++i) {
    // Three threads of one client: "1" wakes them all, where "0" would wake one.
    readers.push_back(std::async(std::launch::async, [&] {
      if (!lock.try_lock_shared_for(scaled(20s))) return false;
      if (++inside == 3) all_in.set_value();
      // All three hold at once (with one woken at a time, the first would
      // wait here in vain).
      const bool together = all_in_future.wait_for(scaled(5s)) == std::future_status::ready;
      lock.unlock_shared();
      return together;
    }));
  }
  // All three have tried and wait (the intent-free lock is held exclusively).
  std::this_thread::sleep_for(scaled(500ms));
  lock.unlock();
  for (auto& f : readers) CHECK(f.get());
  CHECK(inside == 3);
}

TEST_CASE("ReadWrite: async shared holds by owner id; an id ending in :write is refused", "[read_write]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  Spin lock(backend, "async", {}, r::FixedLease(scaled(10s)), w::Spin{5ms});
  auto a = lock.async_acquire_shared("a", boost::asio::use_future).get();
  auto b = lock.async_acquire_shared("b", boost::asio::use_future).get();
  CHECK(lock.held_shared_by("a") == 1);
  CHECK(lock.held_shared_by("b") == 1);
  CHECK(a.owner_id() == "a");
  auto code_of = [](auto start) {
    std::promise<std::error_code> done;
    start([&](dlock::redis::error_code ec, Spin::hold_type) { done.set_value(std::error_code(ec)); });
    return done.get_future().get();
  };
  CHECK(code_of([&](auto h) { lock.async_try_acquire_for("c", 0ms, h); }) == dlock::error::not_acquired);
  CHECK(code_of([&](auto h) { lock.async_acquire_shared("x:write", h); }) == dlock::error::invalid_argument);
  a.release();
  b.release();
  CHECK(server.command({"EXISTS", "async"}) == "0");
}

TEST_CASE("ReadWrite: a lost acquire reply is resolved from the win's marker, shared and exclusive", "[read_write]") {
  // The backend gives up on a reply after 300 ms; the server is paused for
  // longer while the acquire is on its way, and runs it afterwards.
  const auto timeout = scaled(300ms);
  dlock::test::private_redis redis(dlock::test::impatient(timeout));
  Spin lock(redis.backend, "limbo", {}, r::FixedLease(scaled(30s)), w::Spin{5ms});
  lock.acquire().release();  // the scripts loaded: a late NOSCRIPT would mean "did not run"
  lock.acquire_shared().release();
  for (bool shared : {true, false}) {
    INFO(shared);
    redis.server.command({"CLIENT", "PAUSE", std::to_string((timeout * 3 / 2).count()), "ALL"});
    std::error_code ec;
    auto hold = shared ? lock.try_acquire_shared() : lock.try_acquire_for(0ms, ec);
    INFO(ec.message());
    CHECK_FALSE(ec);
    REQUIRE(hold.has_value());  // the marker and the field were found: the hold is ours
    CHECK(redis.server.command({"HGET", "limbo", "mode"}) == (shared ? "read" : "write"));
    hold->release();
    CHECK(redis.server.command({"EXISTS", "limbo"}) == "0");
  }
}

TEST_CASE("ReadWrite: a re-entered read keeps the lock for the newest lease, not the first", "[read_write]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  const auto lease = scaled(800ms);
  Spin lock(backend, "renewed", {}, r::FixedLease(lease), w::Spin{5ms});
  lock.lock_shared();
  std::this_thread::sleep_for(lease / 2);
  lock.lock_shared();  // the hold is now trusted until half a lease later
  std::this_thread::sleep_for(lease * 3 / 4);  // past the first acquisition's lease
  std::error_code ec;
  lock.unlock_shared(ec);
  CHECK_FALSE(ec);
  CHECK(server.command({"HGET", "renewed", "mode"}) == "read");  // still held: the newest lease has not ended
  CHECK_FALSE(on_other_thread([&] { return lock.try_lock(); }));
  lock.unlock_shared(ec);
  CHECK_FALSE(ec);
  CHECK(server.command({"EXISTS", "renewed"}) == "0");
}

TEST_CASE("ReadWrite: a lapsed reader's field passes neither for a re-entry nor for an upgrade", "[read_write]") {
  dlock::test::redis_server server;
  dlock::RedisBackend backend(server.url());
  Spin first(backend, "lapsed", {}, r::FixedLease(scaled(10s)), w::Spin{5ms});
  Spin second(backend, "lapsed", {}, r::FixedLease(scaled(10s)), w::Spin{5ms});  // same thread: same field
  first.set_error_handler([](std::error_code, const std::string&) {});          // its release finds the hold gone
  const auto field = backend.client_id() + ":" + Spin::thread_owner();
  first.lock_shared();
  std::promise<void> release_other;
  auto other = std::async(std::launch::async, [&, f = release_other.get_future()]() mutable {
    first.lock_shared();  // another reader keeps the lock alive
    f.wait();
    first.unlock_shared();
  });
  REQUIRE(dlock::test::wait_until([&] { return server.command({"HLEN", "lapsed"}) == "3"; }));
  // This thread's read lapses (its lease key goes, as after a pause past
  // the lease), and a writer waits.
  server.command({"DEL", "{lapsed}:" + field + ":rwlock_timeout:1"});
  auto writer = std::async(std::launch::async, [&] {
    if (!second.try_lock_for(scaled(10s))) return false;
    second.unlock();  // by the thread that holds it
    return true;
  });
  REQUIRE(dlock::test::wait_until([&] { return server.command({"EXISTS", o::ReadWrite::intent_key("lapsed")}) == "1"; }));
  CHECK_FALSE(second.try_lock_shared_for(scaled(200ms)));  // a new reader: kept out
  CHECK(server.command({"HEXISTS", "lapsed", field}) == "0");  // the lapsed field was dropped
  release_other.set_value();
  other.get();
  CHECK(writer.get());  // the writer got in once the live reader left
}
