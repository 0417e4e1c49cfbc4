// ownership::Queue with wait::HandOff against a real redis-server: FIFO
// order across processes, dead waiters skipped, a release racing a timeout,
// a lost grant message, and what an uncontended acquire costs.
#include <catch2/catch.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <dlock/dlock.hpp>
#include <support/child_process.hpp>
#include <support/fault_proxy.hpp>
#include <support/polling.hpp>
#include <support/server_fixture.hpp>

#include "lock_support.hpp"

namespace {

using namespace std::chrono_literals;
using dlock::test::command_calls;
using dlock::test::scaled;
namespace asio = boost::asio;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;
using QueueLock = dlock::Lock<dlock::RedisBackend, o::Queue, r::FixedLease, w::HandOff>;

long long integer(const dlock::redis::value& v) { return v.integer; }

long long queued(dlock::RedisBackend& redis, const std::string& name) {
  return integer(redis.command(dlock::redis::request().push("LLEN", o::Queue::queue_key(name))));
}

bool exists(dlock::RedisBackend& redis, const std::string& name) {
  return integer(redis.command(dlock::redis::request().push("EXISTS", name))) == 1;
}

// Whether `n` waiters are in the line of `name` within 10 s (scaled).
bool line_reaches(dlock::RedisBackend& redis, const std::string& name, long long n) {
  return dlock::test::wait_until([&] { return queued(redis, name) == n; }, scaled(10s));
}

// A thread that tries `lock` for 20 s (scaled), records whether it got it
// in `got`, and releases it.
std::thread try_and_release(QueueLock& lock, std::atomic<bool>& got) {
  return std::thread([&lock, &got] {
    got = lock.try_lock_for(scaled(20s));
    if (got) lock.unlock();
  });
}


}  // namespace

TEST_CASE("hand-off: 16 waiters in 16 processes get the lock in the order they queued", "[lock][queue]") {
  dlock::test::private_redis redis;
  const std::string name = "line";
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  holder.lock();
  std::vector<std::unique_ptr<dlock::test::child_process>> workers;
  for (int i = 0; i < 16; ++i) {
    workers.push_back(std::make_unique<dlock::test::child_process>(
        dlock::test::worker_path(), std::vector<std::string>{"line", redis.server.url(), "queue/fixed/handoff", name,
                                                             std::to_string(i)}));
    REQUIRE(workers.back()->read_line() == "waiting");
    // The next one starts only when this one is in the line.
    REQUIRE(line_reaches(redis.backend, name, i + 1));
  }
  holder.unlock();
  for (auto& worker : workers) {
    CHECK(worker->read_line(scaled(30s)) == "done");
    CHECK(worker->wait() == 0);
  }
  auto order = redis.backend.command(dlock::redis::request().push("LRANGE", name + ":order", 0, -1));
  REQUIRE(order.elements.size() == 16);
  for (int i = 0; i < 16; ++i) CHECK(order.elements[static_cast<std::size_t>(i)].str == std::to_string(i));
  CHECK(queued(redis.backend, name) == 0);
  CHECK_FALSE(exists(redis.backend, name));
}

TEST_CASE("hand-off: a waiter killed while queued is skipped once its entry lapses", "[lock][queue]") {
  dlock::test::private_redis redis;
  const std::string name = "dead-waiter";
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  holder.lock();
  dlock::test::child_process dead(dlock::test::worker_path(),
                                  {"line", redis.server.url(), "queue/fixed/handoff", name, "0"});
  REQUIRE(dead.read_line() == "waiting");
  REQUIRE(line_reaches(redis.backend, name, 1));
  dead.kill();
  dead.wait();
  // Its entry lives entry_ttl (3 s by default) past its last refresh.
  std::this_thread::sleep_for(3500ms);
  auto other = redis.another_backend();
  QueueLock waiter(other, name, {}, r::FixedLease{scaled(30s)});
  std::thread t([&] {
    // queues behind the dead entry, which the release skips
    REQUIRE(waiter.try_lock_for(scaled(10s)));
    waiter.unlock();
  });
  REQUIRE(line_reaches(redis.backend, name, 2));
  auto t0 = std::chrono::steady_clock::now();
  holder.unlock();
  t.join();
  CHECK(std::chrono::steady_clock::now() - t0 < scaled(2s));  // not a lapsed grant's 30 s lease
  CHECK(queued(redis.backend, name) == 0);
}

TEST_CASE("hand-off: a grant to a waiter killed right after it passes on when its lease ends", "[lock][queue]") {
  dlock::test::private_redis redis;
  const std::string name = "granted-then-killed";
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  holder.lock();
  // The first waiter holds its grant with the worker's 1 s lease, and dies.
  dlock::test::child_process first(dlock::test::worker_path(),
                                   {"hold", redis.server.url(), "queue/fixed/handoff", name, "1000"});
  REQUIRE(line_reaches(redis.backend, name, 1));
  auto other = redis.another_backend();
  QueueLock second(other, name, {}, r::FixedLease{scaled(30s)});
  std::atomic<bool> got{false};
  auto t = try_and_release(second, got);
  REQUIRE(line_reaches(redis.backend, name, 2));
  holder.unlock();
  REQUIRE(first.read_line() == "acquired");
  first.kill();
  first.wait();
  auto t0 = std::chrono::steady_clock::now();
  t.join();
  REQUIRE(got);
  // The dead holder's 1 s lease ran out, and the second waiter's backend's
  // next refresh (or its own try when the lease could end) found the lock
  // free and handed it on.
  CHECK(std::chrono::steady_clock::now() - t0 < scaled(5s));
}

// Whether process `pid` is stopped (state T in /proc/<pid>/stat), within 5 s.
bool stopped(pid_t pid) {
  return dlock::test::wait_until([pid] {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    auto close = all.rfind(')');
    return close != std::string::npos && close + 2 < all.size() && all[close + 2] == 'T';
  }, scaled(5s));
}

TEST_CASE("hand-off: a waiter stopped past its grant's lease does not take the lapsed grant", "[lock][queue]") {
  // Found by dlock-soak: a waiter stopped (SIGSTOP) in the line is granted
  // the lock, the grant lapses and another client takes it; when the
  // waiter resumes, the grant message in its socket must not become a hold
  // (it had no lease left, and the key is another's by then).
  dlock::test::private_redis redis;
  const std::string name = "granted-while-stopped";
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  holder.lock();
  const auto lease = scaled(1000ms);
  dlock::test::child_process waiter(dlock::test::worker_path(),
                                    {"pause-hold", redis.server.url(), "queue/fixed/handoff", name,
                                     std::to_string(lease.count())},
                                    true);
  REQUIRE(line_reaches(redis.backend, name, 1));
  ::kill(waiter.pid(), SIGSTOP);
  REQUIRE(stopped(waiter.pid()));
  holder.unlock();  // granted to the stopped waiter, with its lease
  auto other = redis.another_backend();
  QueueLock next(other, name, {}, r::FixedLease{scaled(30s)});
  REQUIRE(dlock::test::wait_until([&] { return next.try_lock(); }, lease * 5));  // once the grant lapsed
  ::kill(waiter.pid(), SIGCONT);
  const auto early = waiter.read_line(scaled(1500ms));
  INFO("the resumed waiter said: " << early);
  CHECK(early.empty());  // it waits on: the lock is next's
  next.unlock();
  const auto got = early.empty() ? waiter.read_line(scaled(10s)) : early;
  REQUIRE(got.rfind("acquired ", 0) == 0);
  REQUIRE(waiter.write("go\n"));
  bool complete = false;
  const auto rest = waiter.read_rest(scaled(10s), complete);
  INFO("then: " << rest);
  CHECK(rest.find("release ok\n") != std::string::npos);
  CHECK(rest.find("remaining 0\n") == std::string::npos);
}

TEST_CASE("hand-off: a grant found by the leave with no lease left to trust is given back, not handed out",
          "[lock][queue]") {
  // Found by dlock-soak (a waiter stopped just after its last try was
  // sent): the try finds the lock held, the release then grants it to the
  // waiter, and the waiter's leave finds the grant when the lease, counted
  // from that try (the last moment it was seen queued), may have ended.
  // Here the waiter's link takes `way` each way instead of a stop.
  dlock::test::private_redis redis;
  dlock::test::fault_proxy proxy(redis.server.port());
  dlock::RedisBackend waiter_redis(proxy.url());
  const std::string name = "late-grant-on-leave";
  const auto way = scaled(400ms), lease = scaled(1000ms), patience = scaled(1500ms);
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  QueueLock waiter(waiter_redis, name, {}, r::FixedLease{lease});
  holder.lock();
  std::error_code ec;
  bool held = false;
  auto left = std::chrono::milliseconds(-1);
  const auto start = std::chrono::steady_clock::now();
  std::thread t([&] {
    auto hold = waiter.try_acquire_for(patience, ec);
    held = hold.has_value();
    if (hold) {
      left = hold->remaining_lease();
      hold->release(ec);
    }
  });
  REQUIRE(line_reaches(redis.backend, name, 1));
  proxy.delay(way);
  // The waiter's last try leaves at its deadline and runs `way` later; its
  // leave runs `way` after its reply came. The release comes between them.
  std::this_thread::sleep_until(start + patience + way * 3 / 2);
  holder.unlock();
  const bool granted = exists(redis.backend, name);  // to the waiter, still in the line
  t.join();
  REQUIRE(granted);
  INFO("the waiter's hold had " << left.count() << " ms left");
  CHECK_FALSE(held);
  CHECK(ec == dlock::error::not_acquired);
  CHECK_FALSE(exists(redis.backend, name));  // given back at once, not left to lapse
  CHECK(queued(redis.backend, name) == 0);
}

TEST_CASE("hand-off: a grant found by the leave waits for its own replica acknowledgement", "[lock][queue]") {
  // The case above with a long lease and replica acknowledgement on: the
  // last try's WAIT was answered in full, then replication stops and the
  // release grants the lock. The releaser's write was on no replica, so the
  // grant the leave finds must be acknowledged afresh (and is given back
  // when it cannot be), not kept on the strength of the try's WAIT.
  dlock::test::private_redis redis;
  dlock::test::fault_proxy replication(redis.server.port());
  dlock::test::redis_server replica;
  replica.command({"REPLICAOF", "127.0.0.1", std::to_string(replication.port())});
  redis.server.wait_until_listed(1, scaled(10s));
  dlock::test::fault_proxy proxy(redis.server.port());
  auto cfg = dlock::redis::parse_url(proxy.url());
  cfg.acknowledge = dlock::redis::replica_ack{1, scaled(300ms)};
  dlock::RedisBackend waiter_redis(cfg);
  const std::string name = "grant-on-leave-acknowledged";
  const auto way = scaled(400ms), patience = scaled(1500ms);
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  QueueLock waiter(waiter_redis, name, {}, r::FixedLease{scaled(30s)});
  holder.lock();
  std::error_code ec;
  bool held = false;
  const auto start = std::chrono::steady_clock::now();
  std::thread t([&] {
    auto hold = waiter.try_acquire_for(patience, ec);
    held = hold.has_value();
    if (hold) hold->release(ec);
  });
  REQUIRE(line_reaches(redis.backend, name, 1));
  proxy.delay(way);
  // The last try (and its WAIT) runs at the deadline plus `way`; then
  // replication stops, and the release grants the lock before the leave runs.
  std::this_thread::sleep_until(start + patience + way * 7 / 5);
  replication.stall();
  std::this_thread::sleep_until(start + patience + way * 17 / 10);
  holder.unlock();
  const bool granted = exists(redis.backend, name);
  t.join();
  REQUIRE(granted);
  CHECK_FALSE(held);
  CHECK(ec == dlock::error::not_acquired);
  CHECK_FALSE(exists(redis.backend, name));  // given back
  replication.resume();
}

TEST_CASE("hand-off: a release racing a waiter's timeout never grants to a waiter that left", "[lock][queue]") {
  dlock::test::private_redis redis;
  auto other = redis.another_backend();
  const std::string name = "race";
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  QueueLock waiter(other, name, {}, r::FixedLease{scaled(30s)});
  int won = 0, lost = 0;
  for (int round = 0; round < 40; ++round) {
    holder.lock();
    std::atomic<bool> got{false}, held{false};
    std::thread t([&] {
      // (the std interface's owner is the thread: unlock where it locked)
      got = waiter.try_lock_for(50ms);
      if (got) {
        held = exists(redis.backend, name);
        waiter.unlock();
      }
    });
    // Release somewhere around the waiter's deadline.
    std::this_thread::sleep_for(std::chrono::milliseconds(35 + round % 20));
    holder.unlock();
    t.join();
    if (got) {
      ++won;
      CHECK(held);
    } else {
      ++lost;
    }
    // Either way nobody holds it now: no grant went to a waiter that left.
    CHECK_FALSE(exists(redis.backend, name));
    CHECK(queued(redis.backend, name) == 0);
  }
  WARN("waiter got the lock in " << won << " rounds, timed out in " << lost);
}

TEST_CASE("hand-off: a grant message lost to a subscriber reconnect is recovered", "[lock][queue]") {
  dlock::test::private_redis redis;
  auto other = redis.another_backend();
  const std::string name = "lost-grant";
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  QueueLock waiter(other, name, {}, r::FixedLease{scaled(30s)}, w::HandOff{scaled(3s)});
  holder.lock();
  std::atomic<bool> got{false};
  auto t = try_and_release(waiter, got);
  REQUIRE(line_reaches(redis.backend, name, 1));
  // Drop every subscriber connection, then release at once: the grant is
  // published while the waiter's subscriber is down.
  redis.backend.command(dlock::redis::request().push("CLIENT", "KILL", "TYPE", "pubsub"));
  holder.unlock();
  t.join();
  CHECK(got);
}

TEST_CASE("hand-off: a grant message that does not name the waiter's current place is not a grant", "[lock][queue]") {
  dlock::test::private_redis redis;
  auto other = redis.another_backend();
  const std::string name = "stale-grant";
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  QueueLock waiter(other, name, {}, r::FixedLease{scaled(30s)});
  holder.lock();
  std::atomic<bool> got{false};
  auto t = try_and_release(waiter, got);
  REQUIRE(line_reaches(redis.backend, name, 1));
  auto line = redis.backend.command(dlock::redis::request().push("LRANGE", o::Queue::queue_key(name), 0, -1));
  REQUIRE(line.elements.size() == 1);
  // A place is "<token>:<stay>".
  const std::string token = line.elements[0].str.substr(0, line.elements[0].str.rfind(':'));
  const std::string place = line.elements[0].str.substr(line.elements[0].str.rfind(':') + 1);
  // Messages like a late grant's (an earlier place), a forged one, and a
  // bare token: none of them may make the waiter believe it holds the lock.
  for (const std::string& message : {token + ":" + std::to_string(std::stoll(place) - 1), token + ":999999", token})
    redis.backend.command(dlock::redis::request().push("PUBLISH", o::Queue::channel(name) + ":" + other.client_id(), message));
  std::this_thread::sleep_for(scaled(500ms));
  CHECK_FALSE(got);
  CHECK(queued(redis.backend, name) == 1);  // still in the line
  holder.unlock();
  t.join();
  CHECK(got);
}

TEST_CASE("hand-off: a waiter that cannot leave the line releases a grant that comes after it gave up", "[lock][queue]") {
  dlock::test::private_redis redis;
  dlock::test::fault_proxy proxy(redis.server.port());
  dlock::RedisBackend waiter_redis(dlock::test::impatient(proxy.url(), scaled(300ms)));
  const std::string name = "cannot-leave";
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  QueueLock waiter(waiter_redis, name, {}, r::FixedLease{scaled(30s)});
  holder.lock();
  std::error_code waiter_error;
  std::thread t([&] {
    try {
      if (waiter.try_lock_for(scaled(800ms))) waiter.unlock();
    } catch (const std::system_error& e) {
      waiter_error = e.code();
    }
  });
  REQUIRE(line_reaches(redis.backend, name, 1));
  // The waiter's connections go silent: its last try and its leave time out.
  proxy.stall();
  std::this_thread::sleep_for(scaled(300ms));
  holder.unlock();  // grants the lock to the waiter, whose entry is alive
  t.join();
  CHECK(waiter_error);  // outcome unknown: it could not tell whether it left
  CHECK(exists(redis.backend, name));
  auto granted = redis.backend.command(dlock::redis::request().push("GET", name)).str;
  auto resumed = std::chrono::steady_clock::now();
  proxy.resume();
  // The waiter's background leave finds the grant and releases it, long
  // before the grant's 30 s lease would end. Not at once: its connection
  // may be in a reconnect backoff (up to 2 s) after its connects failed
  // during the stall, and on a loaded machine (three test processes on two
  // CPUs) the 4 s this waited once were not enough.
  bool released = dlock::test::wait_until([&] { return !exists(redis.backend, name); }, scaled(10s));
  if (!released) {
    // What was there, to tell a grant never given back from a key taken
    // again after the leave (by a try the proxy delivered late).
    auto holder = redis.backend.command(dlock::redis::request().push("GET", name));
    auto left = redis.backend.command(dlock::redis::request().push("PTTL", name));
    auto since = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - resumed);
    UNSCOPED_INFO("granted to '" << granted << "'; " << since.count() << " ms after the resume the key holds '"
                  << holder.str << "' for " << left.integer << " ms more; line: " << queued(redis.backend, name)
                  << "; connections through the proxy: " << proxy.accepted());
  }
  CHECK(released);
}

TEST_CASE("hand-off: a try that reaches the server after its waiter left does nothing", "[lock][queue]") {
  // The race of the case above, made certain: the waiter's last try was
  // sent, its reply never came, the waiter left the line (in the
  // background), and only then does the try reach the server. It must not
  // take the free lock for a waiter that is gone.
  dlock::test::private_redis redis;
  const o::Queue queue;
  auto run = [&](auto op) { return asio::co_spawn(redis.backend.get_executor(), std::move(op), asio::use_future).get(); };
  // A waiting hold's record, with a token of its own.
  auto waiting = [](o::Queue::record& r) {
    r.name = "late-try";
    r.owner = dlock::ext::random_hex(16);
    r.lease = scaled(30s);
    r.attempt_id = dlock::ext::unique_id();
    r.state.join = true;
    r.state.entry_ttl = scaled(3s);
  };
  o::Queue::record rec, next;
  waiting(rec);
  auto [left_ec, granted] = run(queue.leave(redis.backend, rec));
  REQUIRE_FALSE(left_ec);
  CHECK_FALSE(granted);
  auto [try_ec, at] = run(queue.try_acquire(redis.backend, rec));
  CHECK(try_ec == asio::error::operation_aborted);  // the late try's answer (nobody reads it)
  CHECK_FALSE(at.acquired);
  CHECK_FALSE(exists(redis.backend, rec.name));
  CHECK(queued(redis.backend, rec.name) == 0);  // nor did it join the line
  // Nor does a try of it that had not joined yet but was sent after it had.
  rec.state.join = false;
  rec.state.joined = true;
  auto [plain_ec, plain] = run(queue.try_acquire(redis.backend, rec));
  CHECK(plain_ec == asio::error::operation_aborted);
  CHECK_FALSE(plain.acquired);
  CHECK_FALSE(exists(redis.backend, rec.name));
  // The next acquire has a new token: the marker, its entry, does not stop it.
  waiting(next);
  auto [again_ec, again] = run(queue.try_acquire(redis.backend, next));
  REQUIRE_FALSE(again_ec);
  CHECK(again.acquired);
  CHECK(redis.backend.command(dlock::redis::request().push("GET", rec.name)).str == next.owner);
}

TEST_CASE("hand-off: an uncontended acquire is one script call, a contended one costs its try", "[lock][queue]") {
  dlock::test::private_redis redis;
  auto other = redis.another_backend();
  const std::string name = "cost";
  QueueLock a(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  QueueLock b(other, name, {}, r::FixedLease{scaled(30s)});
  a.lock();
  a.unlock();  // scripts loaded
  auto eval0 = command_calls(redis.server, "evalsha"), sub0 = command_calls(redis.server, "subscribe");
  a.lock();
  a.unlock();
  CHECK(command_calls(redis.server, "evalsha") - eval0 == 2);  // the acquire and the release
  CHECK(command_calls(redis.server, "subscribe") == sub0);     // no wait, no subscription
  // Contended, hand-offs back and forth: each acquisition costs its try and
  // its release, once the subscriptions are up (they linger between waits).
  const int rounds = 200;
  auto run = [&](QueueLock& lock) {
    for (int i = 0; i < rounds; ++i) {
      lock.lock();
      lock.unlock();
    }
  };
  std::thread ta([&] { run(a); }), tb([&] { run(b); });
  ta.join();
  tb.join();
  auto eval1 = command_calls(redis.server, "evalsha");
  std::thread tc([&] { run(a); }), td([&] { run(b); });
  tc.join();
  td.join();
  double per = double(command_calls(redis.server, "evalsha") - eval1) / (2 * rounds);
  WARN("script calls per contended acquisition: " << per);
  CHECK(per <= 3.0);
}

TEST_CASE("hand-off: a contended acquisition costs the server 11 commands, however many clients wait",
          "[lock][queue]") {
  // The floor of the line's design: a try that joins (the script call, GET,
  // SET ... GET of its entry, RPUSH, PEXPIRE) and a release that hands on
  // (the call, GET, LPOP, the next entry's GET, SET, PUBLISH).
  for (int clients : {8, 32}) {
    DYNAMIC_SECTION(clients << " clients") {
      dlock::test::private_redis redis;
      const std::string name = "crowd";
      std::vector<std::unique_ptr<dlock::RedisBackend>> backends;
      std::vector<std::unique_ptr<QueueLock>> locks;
      for (int i = 0; i < clients; ++i) {
        backends.push_back(std::make_unique<dlock::RedisBackend>(redis.server.url()));
        locks.push_back(std::make_unique<QueueLock>(*backends.back(), name, o::Queue{}, r::FixedLease{scaled(30s)}));
      }
      auto run = [&](int rounds) {
        std::vector<std::thread> threads;
        for (auto& l : locks)
          threads.emplace_back([&l, rounds] {
            for (int i = 0; i < rounds; ++i) {
              l->lock();
              l->unlock();
            }
          });
        for (auto& t : threads) t.join();
      };
      run(3);  // connections made, scripts loaded, grant subscriptions up (they linger)
      const int rounds = 20;
      auto before = dlock::test::all_calls(redis.server);
      run(rounds);
      auto commands = dlock::test::all_calls(redis.server) - before - 1;  // less the first reading's INFO
      double per = double(commands) / (clients * rounds);
      WARN(clients << " clients: " << per << " commands per acquisition");
      CHECK(per <= 11.5);  // the batched refreshes and the odd free lock add or take a little
    }
  }
}

TEST_CASE("hand-off: the entries of one backend's waiters are refreshed together, one script per period",
          "[lock][queue]") {
  dlock::test::private_redis redis;
  auto waiters_backend = redis.another_backend();
  const std::string name = "batched";
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  holder.lock();
  // Six waiters in one backend, entries of 150 ms: refreshed every 50 ms.
  const int n = 6;
  std::vector<std::unique_ptr<QueueLock>> locks;
  for (int i = 0; i < n; ++i)
    locks.push_back(std::make_unique<QueueLock>(waiters_backend, name, o::Queue{}, r::FixedLease{scaled(30s)},
                                                w::HandOff{scaled(150ms)}));
  std::atomic<int> got{0};
  std::vector<std::thread> threads;
  for (auto& l : locks)
    threads.emplace_back([&, lock = l.get()] {
      if (lock->try_lock_for(scaled(20s))) {
        ++got;
        lock->unlock();
      }
    });
  REQUIRE(line_reaches(redis.backend, name, n));
  auto& refresher = waiters_backend.use_service<dlock::detail::queue_refresher<dlock::RedisBackend, o::Queue>>();
  auto calls0 = command_calls(redis.server, "evalsha");
  auto batches0 = refresher.batches_sent(), refreshes0 = refresher.refreshes_sent();
  const auto window = scaled(1s);
  std::this_thread::sleep_for(window);
  auto calls = command_calls(redis.server, "evalsha") - calls0;
  auto batches = refresher.batches_sent() - batches0, refreshes = refresher.refreshes_sent() - refreshes0;
  const long long periods = window / scaled(50ms);
  WARN("in " << periods << " refresh periods: " << calls << " script calls, " << batches << " batches of "
             << refreshes << " refreshes");
  // About one script per period for all six (each waiter refreshing its
  // own entry would be six); a waiter's own tries add a few.
  CHECK(static_cast<long long>(batches) >= periods / 2);
  CHECK(refreshes >= static_cast<std::size_t>(n) * batches - static_cast<std::size_t>(n));
  CHECK(calls <= 2 * periods);
  // Every entry is alive, long after its own 150 ms would have run out.
  auto line = redis.backend.command(dlock::redis::request().push("LRANGE", o::Queue::queue_key(name), 0, -1));
  REQUIRE(line.elements.size() == static_cast<std::size_t>(n));
  for (auto& place : line.elements) {
    auto entry = o::Queue::entry_key(name, place.str.substr(0, place.str.rfind(':')));
    CHECK(integer(redis.backend.command(dlock::redis::request().push("PTTL", entry))) > 0);
  }
  holder.unlock();
  for (auto& th : threads) th.join();
  CHECK(got == n);
  CHECK(refresher.size() == 0);
}

TEST_CASE("hand-off: a grant's lease counts from the last batched refresh, not from when the waiter queued",
          "[lock][queue]") {
  dlock::test::private_redis redis;
  auto other = redis.another_backend();
  const std::string name = "since";
  QueueLock holder(redis.backend, name, {}, r::FixedLease{scaled(30s)});
  // An 800 ms lease and 300 ms entries: refreshed every 100 ms.
  QueueLock waiter(other, name, {}, r::FixedLease{scaled(800ms)}, w::HandOff{scaled(300ms)});
  holder.lock();
  std::chrono::milliseconds left{-1};
  std::thread t([&] {
    if (auto hold = waiter.try_acquire_for(scaled(20s))) left = hold->remaining_lease();
  });
  REQUIRE(line_reaches(redis.backend, name, 1));
  // Wait far longer than the lease, with only the batched refreshes running.
  std::this_thread::sleep_for(scaled(2s));
  holder.unlock();
  t.join();
  WARN("lease left right after the grant: " << left.count() << " ms of " << scaled(800ms).count());
  CHECK(left > scaled(400ms));
}

TEST_CASE("hand-off: the batched refresh keeps live places, reports void ones, and writes nothing on a bad ttl",
          "[lock][queue]") {
  dlock::test::private_redis redis;
  const std::string name = "refresh-script";
  auto run = [&](std::vector<std::pair<std::string, std::chrono::milliseconds>> waiters, std::error_code& ec) {
    auto call = o::Queue::refresh_call(name, waiters);
    return redis.backend.eval(*call.script, call.keys, call.args, ec);
  };
  auto cmd = [&](auto... parts) { return redis.backend.command(dlock::redis::request().push(parts...)); };
  const auto line = o::Queue::queue_key(name);
  // "a" waits in the line at stay 1, alive; the lock is free (its holder's
  // lease ran out).
  cmd("RPUSH", line, "a:1");
  cmd("SET", o::Queue::entry_key(name, "a"), "5000:1:listener", "PX", 60000);
  std::error_code ec;
  // A bad ttl for another waiter: an error, and nothing written (the free
  // lock is not handed on, "a"'s entry not refreshed).
  (void)run({{"a", 3000ms}, {"b", 0ms}}, ec);
  CHECK(ec);
  CHECK_FALSE(exists(redis.backend, name));
  CHECK(integer(cmd("PTTL", o::Queue::entry_key(name, "a"))) > 50000);
  CHECK(queued(redis.backend, name) == 1);
  // Refreshed, then handed the free lock: granted (-1), with its lease.
  ec.clear();
  auto v = run({{"a", 3000ms}}, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(v.elements.size() == 1);
  CHECK(v.elements[0].integer == -1);
  CHECK(cmd("GET", name).str == "a");
  CHECK(cmd("PTTL", name).integer > 4000);  // its entry's lease: 5000 ms
  CHECK(queued(redis.backend, name) == 0);
  // "c" waits at stay 7: refreshed to the ttl given, its stay answered.
  // "d"'s place is of an earlier stay than its entry's (void), "e" has a
  // place but no entry (it died), "gone" has neither: all three are 0.
  cmd("RPUSH", line, "d:1", "e:1", "c:7");
  cmd("SET", o::Queue::entry_key(name, "c"), "5000:7:listener", "PX", 60000);
  cmd("SET", o::Queue::entry_key(name, "d"), "5000:2:listener", "PX", 60000);
  v = run({{"c", 3000ms}, {"d", 3000ms}, {"e", 3000ms}, {"gone", 3000ms}}, ec);
  REQUIRE_FALSE(ec);
  REQUIRE(v.elements.size() == 4);
  CHECK(v.elements[0].integer == 7);
  CHECK(v.elements[1].integer == 0);
  CHECK(v.elements[2].integer == 0);
  CHECK(v.elements[3].integer == 0);
  CHECK(integer(cmd("PTTL", o::Queue::entry_key(name, "c"))) <= 3000);
  CHECK(integer(cmd("PTTL", o::Queue::entry_key(name, "d"))) > 50000);  // not refreshed
  // The release skips the void places and hands the lock to "c".
  auto release = o::Queue::release_script();
  v = redis.backend.eval(release, {name, line}, {"a", o::Queue::channel(name), o::Queue::entry_prefix(name)}, ec);
  REQUIRE_FALSE(ec);
  CHECK(v.integer == 1);
  CHECK(cmd("GET", name).str == "c");
  CHECK(queued(redis.backend, name) == 0);
}

TEST_CASE("hand-off: a try that keeps its place in the line keeps the line alive too", "[lock][queue]") {
  // A waiter whose batched refreshes go unanswered keeps its entry alive
  // with its own tries; the line must live as long, or every waiter in it
  // would lose its place (and FIFO order) when it lapsed.
  dlock::test::private_redis redis;
  const std::string name = "kept-place";
  auto cmd = [&](auto... parts) { return redis.backend.command(dlock::redis::request().push(parts...)); };
  const auto line = o::Queue::queue_key(name), entry = o::Queue::entry_key(name, "me");
  cmd("SET", name, "holder", "PX", 30000);
  cmd("RPUSH", line, "me:1");
  cmd("PEXPIRE", line, 200);  // about to lapse
  cmd("SET", entry, "30000:1:listener", "PX", 3000);
  // KEYS lock, line, entry, fence counter; ARGV token, lease, join, entry
  // ttl, channel, listener, fence idle, stay offered, joined before,
  // entries' prefix, leave memory.
  auto v = redis.backend.eval(o::Queue::acquire_script(), {name, line, entry, dlock::ext::fence_key(name)},
                              {"me", "30000", "1", "3000", o::Queue::channel(name), "listener", "0", "2", "1",
                               o::Queue::entry_prefix(name), "10000"});
  REQUIRE(v.elements.size() == 3);
  CHECK(v.elements[0].integer == 0);
  CHECK(v.elements[2].integer == 1);  // its old stay: it kept its place
  CHECK(cmd("LRANGE", line, 0, -1).elements.size() == 1);
  CHECK(integer(cmd("PTTL", line)) > 3000);  // pushed back with the entry (twice its ttl)
}

TEST_CASE("hand-off: the grant subscription outlives the last waiter by its linger, then ends", "[lock][queue]") {
  dlock::test::private_redis redis;
  auto other = redis.another_backend();
  const std::string name = "linger";
  QueueLock holder(redis.backend, name);
  QueueLock waiter(other, name, {}, {}, w::HandOff(3000ms, scaled(2s)));
  holder.lock();
  std::atomic<bool> got{false};
  auto t = try_and_release(waiter, got);
  REQUIRE(line_reaches(redis.backend, name, 1));
  holder.unlock();
  t.join();
  REQUIRE(got);
  // The waiter is gone; its backend stays subscribed for the linger (the
  // next contended acquire joins the line at once)...
  auto& router = other.use_service<dlock::detail::grant_router<dlock::RedisBackend>>();
  const auto channel = o::Queue::channel(name) + ":" + other.client_id();
  CHECK(router.waiting(channel) == 0);
  CHECK(router.subscribed(channel));
  CHECK(other.subscriber().channel_count() == 1);
  // ...and no longer.
  CHECK(dlock::test::wait_until([&] { return other.subscriber().channel_count() == 0; }, scaled(10s)));
  CHECK_FALSE(router.subscribed(channel));
}
