// RedlockBackend against 3 and 5 real redis-servers: construction and its
// errors, the vote (every subset of nodes held by another owner), dead
// nodes, renewal and release counted on a majority, a reentrant hash, and
// a contended run under the hold-history checker.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <latch>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <dlock/backend/redlock.hpp>
#include <dlock/dlock.hpp>
#include <support/fault_proxy.hpp>
#include <support/hold_history.hpp>
#include <support/polling.hpp>
#include <support/redis_server.hpp>

#include "../../examples/fenced_store.hpp"
#include "../../examples/redlock_story.hpp"
#include "backend_fixtures.hpp"
#include "lock_support.hpp"

using namespace std::chrono_literals;
using dlock::test::redis_server;
using dlock::test::scaled;
namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;

using RedlockToken = dlock::Lock<dlock::RedlockBackend, o::Token, r::FixedLease, w::TryOnce>;
using RedlockTokenSpin = dlock::Lock<dlock::RedlockBackend, o::Token, r::FixedLease, w::Spin>;
using RedlockWatchdog = dlock::Lock<dlock::RedlockBackend, o::Token, r::Watchdog, w::TryOnce>;
using RedlockHash = dlock::Lock<dlock::RedlockBackend, o::ReentrantHash, r::Watchdog, w::Backoff>;

namespace {

// N servers, and the Redlock URL that names them.
struct quorum_servers {
  explicit quorum_servers(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) servers.push_back(std::make_unique<redis_server>());
  }
  std::string url() const {
    std::string out = "redis://";
    for (std::size_t i = 0; i < servers.size(); ++i)
      out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(servers[i]->port());
    return out;
  }
  redis_server& operator[](std::size_t i) { return *servers[i]; }
  std::size_t size() const { return servers.size(); }
  // How many nodes hold `key` now.
  std::size_t holding(const std::string& key) {
    std::size_t n = 0;
    for (auto& s : servers)
      if (s->running() && s->command({"EXISTS", key}) == "1") ++n;
    return n;
  }
  std::vector<std::unique_ptr<redis_server>> servers;
};

// The backend's settings with a reply timeout that a loaded machine meets.
dlock::redis::redlock_config settings(const quorum_servers& q) {
  auto cfg = dlock::redis::parse_redlock_url(q.url());
  cfg.reply_timeout = scaled(300ms);
  for (auto& n : cfg.nodes) {
    n.connect_timeout = scaled(500ms);
    n.reconnect_wait_max = 200ms;
  }
  return cfg;
}

// Waits until the backend sees node `i` down (or up).
void wait_node(dlock::RedlockBackend& b, std::size_t i, bool up) {
  REQUIRE(dlock::test::wait_until([&] { return b.node_available(i) == up; }));
}

// The message of the std::system_error that `f()` throws, or none.
template <class F>
std::string message_of(F&& f) {
  return dlock::test::thrown_error(std::forward<F>(f)).second;
}

}  // namespace

TEST_CASE("RedlockBackend: its URL and its nodes are checked before anything runs", "[redlock]") {
  auto cfg = dlock::redis::parse_redlock_url("redis://u:secret@127.0.0.1:7000,127.0.0.1:7001,[::1]:7002/3");
  REQUIRE(cfg.nodes.size() == 3);
  CHECK(cfg.nodes[0].user == "u");
  CHECK(cfg.nodes[2].password == "secret");
  CHECK(cfg.nodes[2].host == "::1");
  CHECK(cfg.nodes[1].database == 3);
  CHECK(cfg.describe() == "redis://u:***@127.0.0.1:7000,127.0.0.1:7001,[::1]:7002/3");

  CHECK(dlock::test::thrown_by([] { dlock::redis::parse_redlock_url("redis://127.0.0.1:1,,127.0.0.1:3"); }) ==
        dlock::error::invalid_url);
  CHECK(dlock::test::thrown_by([] { dlock::redis::parse_redlock_url("http://127.0.0.1:1"); }) == dlock::error::invalid_url);
  CHECK(dlock::test::thrown_by([] { dlock::RedlockBackend b("redis://127.0.0.1:1,127.0.0.1:2"); }) ==
        dlock::error::invalid_argument);
  CHECK(message_of([] { dlock::RedlockBackend b("redis://127.0.0.1:1"); }).find("odd number of nodes") !=
        std::string::npos);
  CHECK(message_of([] { dlock::RedlockBackend b("redis://127.0.0.1:1,127.0.0.1:2,127.0.0.1:1"); })
            .find("127.0.0.1:1 is named twice") != std::string::npos);
  CHECK(dlock::test::thrown_by([] {
          dlock::RedlockBackend b(std::vector<std::string>{"redis://127.0.0.1:1", "unix:///tmp/x.sock", "nope"});
        }) == dlock::error::invalid_url);
}

TEST_CASE("RedlockBackend: a majority must be reachable to start, and the message names the others",
          "[redlock]") {
  quorum_servers q(3);
  auto cfg = settings(q);
  q[1].kill();
  {
    dlock::RedlockBackend b(cfg);  // a minority down: it starts, and that node votes no
    CHECK_FALSE(b.node_available(1));
    RedlockToken lock(b, "start", {}, r::FixedLease(5s));
    CHECK(lock.try_acquire().has_value());
  }
  q[2].kill();
  auto what = message_of([&] { dlock::RedlockBackend b(cfg); });
  INFO(what);
  CHECK(what.find("1 of 3 nodes could be reached") != std::string::npos);
  CHECK(what.find("127.0.0.1:" + std::to_string(q[1].port())) != std::string::npos);
  CHECK(what.find("127.0.0.1:" + std::to_string(q[2].port())) != std::string::npos);
  CHECK(dlock::test::thrown_by([&] { dlock::RedlockBackend b(cfg); }) == dlock::error::no_quorum);
}

TEST_CASE("Redlock: an acquire succeeds exactly when a majority of nodes is free", "[redlock]") {
  for (std::size_t n : {3u, 5u}) {
    quorum_servers q(n);
    dlock::RedlockBackend b(settings(q));
    RedlockToken token(b, "vote", {}, r::FixedLease(10s));
    RedlockHash hash(b, "vote-hash", {}, r::Watchdog(10s));
    const std::size_t need = n / 2 + 1;
    for (unsigned subset = 0; subset < (1u << n); ++subset) {
      std::size_t taken = 0;
      for (std::size_t i = 0; i < n; ++i) {
        if (!(subset & (1u << i))) continue;
        ++taken;
        q[i].command({"SET", "vote", "someone-else", "PX", "60000"});
        q[i].command({"HSET", "vote-hash", "someone:else", "1"});
        q[i].command({"PEXPIRE", "vote-hash", "60000"});
      }
      INFO("nodes " << n << ", held beforehand on " << taken << " (subset " << subset << ")");
      auto hold = token.try_acquire();
      CHECK(hold.has_value() == (taken < need));
      auto other = hash.try_acquire();
      CHECK(other.has_value() == (taken < need));
      if (hold) {
        CHECK(q.holding("vote") == n);  // every free node voted for it
        hold->release();
      }
      if (other) other->release();
      // Whatever the vote, nothing of ours is left: only the other owner's keys.
      CHECK(q.holding("vote") == taken);
      CHECK(q.holding("vote-hash") == taken);
      for (std::size_t i = 0; i < n; ++i) q[i].command({"DEL", "vote", "vote-hash"});
    }
  }
}

TEST_CASE("Redlock: with 1 or 2 of 5 nodes dead locking goes on; with 3, a clear error and nothing held",
          "[redlock]") {
  quorum_servers q(5);
  dlock::RedlockBackend b(settings(q));
  RedlockToken lock(b, "dead", {}, r::FixedLease(10s));
  for (std::size_t dead = 1; dead <= 2; ++dead) {
    q[dead - 1].kill();
    wait_node(b, dead - 1, false);
    auto hold = lock.try_acquire();
    REQUIRE(hold.has_value());
    CHECK(q.holding("dead") == 5 - dead);
    hold->release();
    CHECK(q.holding("dead") == 0);
  }
  q[2].kill();
  wait_node(b, 2, false);
  std::error_code ec;
  auto hold = lock.try_acquire(ec);
  CHECK_FALSE(hold.has_value());
  CHECK(ec == dlock::error::no_quorum);
  auto what = message_of([&] { lock.lock(); });
  INFO(what);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(what.find("127.0.0.1:" + std::to_string(q[i].port())) != std::string::npos);
  CHECK(what.find("2 of 5 nodes answered") != std::string::npos);
  CHECK(q.holding("dead") == 0);
  // A node back (empty, as after a crash without persistence): a majority again.
  q[0].start();
  wait_node(b, 0, true);
  CHECK(lock.try_acquire().has_value());
}

TEST_CASE("Redlock: a wait votes again while too few nodes answer, and reports no_quorum after one lease",
          "[redlock]") {
  quorum_servers q(3);
  dlock::RedlockBackend b(settings(q));
  auto majority_down = [&] {
    q[0].kill();
    q[1].kill();
    wait_node(b, 0, false);
    wait_node(b, 1, false);
  };
  // A majority back within the wait: the acquire goes on voting and wins
  // (it used to fail at its first vote). So does the default lock, whose
  // pub/sub wait must also subscribe on a majority. Leases long enough for
  // a loaded machine to restart the nodes well within them. The servers
  // restart on this thread: PR_SET_PDEATHSIG kills a server when the
  // thread that started it ends.
  {
    RedlockTokenSpin spin(b, "outage", {}, r::FixedLease(scaled(5s)), w::Spin(20ms));
    dlock::Lock<dlock::RedlockBackend> by_default(b, "outage:default", {}, r::Watchdog(scaled(5s)));
    for (bool pubsub : {false, true}) {
      INFO((pubsub ? "Lock<RedlockBackend>" : "token/fixed/spin"));
      majority_down();
      std::error_code ec;
      auto waiting = std::async(std::launch::async, [&] {
        auto take = [&](auto& l) {
          auto hold = l.try_acquire_for(scaled(10s), ec);
          if (hold) hold->release();
          return hold.has_value();
        };
        return pubsub ? take(by_default) : take(spin);
      });
      std::this_thread::sleep_for(scaled(300ms));
      q[0].start();
      q[1].start();
      const bool won = waiting.get();
      INFO(ec.message());
      CHECK_FALSE(ec);
      CHECK(won);
    }
    CHECK(q.holding("outage") == 0);
    CHECK(q.holding("outage:default") == 0);
  }

  // Down for good: a wait longer than the lease votes for one lease, then
  // fails with the last vote's words (the default lock's SUBSCRIBE, which
  // fails too, has none of its own).
  majority_down();
  const auto lease = scaled(1s);
  RedlockTokenSpin spin(b, "outage", {}, r::FixedLease(lease), w::Spin(20ms));
  dlock::Lock<dlock::RedlockBackend> by_default(b, "outage:default", {}, r::Watchdog(lease));
  auto ends_after_a_lease = [&](auto& lock) {
    std::error_code ec;
    auto began = std::chrono::steady_clock::now();
    auto hold = lock.try_acquire_for(scaled(10s), ec);
    auto took = std::chrono::steady_clock::now() - began;
    CHECK_FALSE(hold.has_value());
    CHECK(ec == dlock::error::no_quorum);
    CHECK(took >= lease);
    CHECK(took < scaled(9s));  // not the deadline: the lease ended it
    auto what = message_of([&] { lock.try_lock_for(scaled(10s)); });
    INFO(what);
    CHECK(what.find("1 of 3 nodes answered") != std::string::npos);
    CHECK(what.find("127.0.0.1:" + std::to_string(q[0].port())) != std::string::npos);
  };
  ends_after_a_lease(spin);
  ends_after_a_lease(by_default);
  // A shorter wait ends at its deadline, with no_quorum (not not_acquired).
  std::error_code ec;
  CHECK_FALSE(spin.try_acquire_for(scaled(100ms), ec).has_value());
  CHECK(ec == dlock::error::no_quorum);
  // TryOnce: one vote, its verdict at once.
  RedlockToken once(b, "outage", {}, r::FixedLease(lease));
  CHECK_FALSE(once.try_acquire(ec).has_value());
  CHECK(ec == dlock::error::no_quorum);
  CHECK(q.holding("outage") == 0);
}

TEST_CASE("Redlock: once a vote hears a majority again, a wait that times out is not_acquired, not no_quorum",
          "[redlock]") {
  quorum_servers q(5);
  dlock::RedlockBackend b(settings(q));
  RedlockTokenSpin lock(b, "taken", {}, r::FixedLease(scaled(5s)), w::Spin(20ms));
  for (std::size_t i : {3u, 4u}) q[i].command({"SET", "taken", "someone else", "PX", "60000"});
  for (std::size_t i = 0; i < 3; ++i) {
    q[i].kill();
    wait_node(b, i, false);
  }
  // The first votes hear 2 of 5; once node 0 is back they hear 3 (a
  // majority), and 2 of them say held: the lock is held, not unreachable.
  std::error_code ec;
  auto waiting = std::async(std::launch::async, [&] { return lock.try_acquire_for(scaled(3s), ec).has_value(); });
  std::this_thread::sleep_for(scaled(300ms));
  q[0].start();
  CHECK_FALSE(waiting.get());
  CHECK(ec == dlock::error::not_acquired);
}

TEST_CASE("Redlock: the watchdog renews on a majority, and the loss is signalled once no majority can",
          "[redlock]") {
  quorum_servers q(3);
  dlock::RedlockBackend b(settings(q));
  const auto lease = scaled(900ms);
  RedlockWatchdog lock(b, "renewed", {}, r::Watchdog(lease));
  auto hold = lock.try_acquire();
  REQUIRE(hold.has_value());
  q[0].kill();
  std::this_thread::sleep_for(lease * 2);
  CHECK_FALSE(hold->lost());  // renewed on the two nodes left
  CHECK(q.holding("renewed") == 2);
  q[1].kill();
  CHECK(dlock::test::wait_until([&] { return hold->lost(); }, lease * 3));
  // Too few nodes answer the release to say what became of the hold there.
  auto what = message_of([&] { hold->release(); });
  INFO(what);
  CHECK(what.find("outcome unknown") != std::string::npos);
  CHECK(what.find("127.0.0.1:" + std::to_string(q[1].port()) + " (not connected") != std::string::npos);
  lock.set_error_handler([](std::error_code, const std::string&) {});  // ~Hold's retry meets the same
}

TEST_CASE("Redlock: a release that too few nodes answered is outcome_unknown, and a retry settles it",
          "[redlock]") {
  quorum_servers q(3);
  dlock::RedlockBackend b(settings(q));
  RedlockToken lock(b, "release", {}, r::FixedLease(scaled(10s)));
  auto hold = lock.try_acquire();
  REQUIRE(hold.has_value());
  q[0].kill();
  q[1].kill();
  wait_node(b, 0, false);
  wait_node(b, 1, false);
  std::error_code ec;
  hold->release(ec);
  CHECK(ec == dlock::error::outcome_unknown);
  CHECK(q.holding("release") == 0);  // the live node released its part
  q[0].start();
  q[1].start();
  wait_node(b, 0, true);
  wait_node(b, 1, true);
  // The retry reaches every node. The two restarted without persistence
  // forgot the hold before its release was sent: it was lost then (a
  // majority was free for anyone), and the retry says so.
  hold->release(ec);
  CHECK(ec == dlock::error::lease_lost);
  CHECK(q.holding("release") == 0);
}

TEST_CASE("Redlock: a release retried after a partition deletes what is still there", "[redlock]") {
  quorum_servers q(3);
  dlock::RedlockBackend b(settings(q));
  RedlockToken lock(b, "partition", {}, r::FixedLease(scaled(10s)));
  auto hold = lock.try_acquire();
  REQUIRE(hold.has_value());
  q[0].pause();
  q[1].pause();
  std::error_code ec;
  hold->release(ec);  // two nodes stall: no reply within the reply timeout
  CHECK(ec == dlock::error::outcome_unknown);
  q[0].resume();
  q[1].resume();
  // The stalled nodes ran the release once they woke (it was queued): the
  // retry finds the key gone, and knows the first attempt left in time.
  hold->release(ec);
  CHECK_FALSE(ec);
  CHECK(q.holding("partition") == 0);
}

TEST_CASE("Redlock: a reentrant hash counts on every node", "[redlock]") {
  quorum_servers q(3);
  dlock::RedlockBackend b(settings(q));
  RedlockHash lock(b, "reentrant", {}, r::Watchdog(10s));
  lock.lock();
  lock.lock();
  // Each node's hash counts two holds (beside the first acquire's win marker).
  for (std::size_t i = 0; i < 3; ++i) CHECK(q[i].command({"HVALS", "reentrant"}).find("2") != std::string::npos);
  lock.unlock();
  CHECK(q.holding("reentrant") == 3);
  lock.unlock();
  CHECK(q.holding("reentrant") == 0);
}

TEST_CASE("Redlock: contended by several clients, no two holds overlap, also with a node stalled",
          "[redlock]") {
  const bool stalled = GENERATE(false, true);
  INFO((stalled ? "node 2 stalled (SIGSTOP)" : "every node answers"));
  quorum_servers q(3);
  auto cfg = settings(q);
  if (stalled) cfg.reply_timeout = scaled(50ms);  // each vote waits this long for node 2
  const int per_worker = stalled ? 8 : 15;
  dlock::test::hold_history history;
  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  std::latch connected(4), go(1);
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      try {
        std::optional<dlock::RedlockBackend> b;
        try {
          b.emplace(cfg);
        } catch (...) {
          connected.count_down();
          throw;
        }
        connected.count_down();
        go.wait();
        RedlockTokenSpin lock(*b, "contended", {}, r::FixedLease(scaled(5s)), w::Spin(2ms));
        for (int i = 0; i < per_worker; ++i) {
          auto hold = lock.acquire();
          auto start = dlock::test::monotonic_ns();
          std::this_thread::sleep_for(1ms);
          history.add({"contended", "w" + std::to_string(t), start, dlock::test::monotonic_ns()});
          hold.release();
        }
      } catch (const std::exception& e) {
        UNSCOPED_INFO("worker " << t << ": " << e.what());
        ++failures;
      }
    });
  }
  connected.wait();
  if (stalled) q[2].pause();  // every worker is connected to it: their votes wait for it
  go.count_down();
  for (auto& th : workers) th.join();
  if (stalled) q[2].resume();
  CHECK(failures == 0);
  CHECK(history.size() == static_cast<std::size_t>(4 * per_worker));
  CHECK(history.overlaps().empty());
  CHECK(dlock::test::wait_until([&] { return q.holding("contended") == 0; }, scaled(5s)));
}

TEST_CASE("Redlock: a vote that needs a node answering after the lease is not granted, and is given back",
          "[redlock]") {
  quorum_servers q(3);
  dlock::test::fault_proxy slow(q[1].port());
  auto cfg = settings(q);
  cfg.nodes[1].port = slow.port();
  cfg.reply_timeout = scaled(5s);  // the lease, not the reply timeout, ends this vote
  dlock::RedlockBackend b(cfg);
  const auto lease = scaled(400ms);
  RedlockToken lock(b, "slow", {}, r::FixedLease(lease));
  q[0].command({"SET", "slow", "someone-else", "PX", "60000"});
  slow.delay(lease * 5, dlock::test::fault_proxy::direction::to_client);
  const auto began = std::chrono::steady_clock::now();
  std::error_code ec;
  auto hold = lock.try_acquire(ec);
  CHECK_FALSE(hold.has_value());
  CHECK(ec == dlock::error::not_acquired);
  // It waited for no reply of the slow node: the vote (at most the lease),
  // the give-back and a split vote's pause (as long again each), no more.
  CHECK(std::chrono::steady_clock::now() - began < lease * 4);
  // The slow node ran the try, then the give-back queued behind it: once
  // its replies are through, only the other owner's key is left anywhere.
  slow.delay(0ms);
  CHECK(dlock::test::wait_until([&] { return q.holding("slow") == 1; }, scaled(5s)));
  CHECK(q[0].command({"GET", "slow"}) == "someone-else");
}

TEST_CASE("Redlock: a node restarted without persistence lets a second holder in; a delayed restart does not",
          "[redlock]") {
  const auto lease = scaled(1500ms);
  dlock::examples::redlock_story::stage stage(lease);
  // Back at once, empty: B wins nodes 1 and 2 while A still holds on node
  // 0 and believes its hold valid. The checker sees two holders.
  auto at_once = stage.play(0ms);
  CHECK(at_once.a_held);
  CHECK(at_once.b_held);
  CHECK(at_once.overlap);
  // Back after longer than the longest lease: A's hold has ended (its loss
  // signal fired) before B can win. No overlap.
  auto delayed = stage.play(lease + scaled(300ms));
  CHECK(delayed.a_held);
  CHECK(delayed.b_held);
  CHECK_FALSE(delayed.overlap);
}

TEST_CASE("Redlock: a stalled node costs a vote its wait, never the hold, whatever the reply timeout",
          "[redlock]") {
  quorum_servers q(3);
  auto cfg = settings(q);
  cfg.reply_timeout = scaled(5s);  // longer than the lease
  dlock::RedlockBackend b(cfg);
  const auto lease = scaled(600ms);
  RedlockToken lock(b, "stalled", {}, r::FixedLease(lease));
  q[2].pause();  // up, but silent: its vote is waited for until the deadline
  auto hold = lock.try_acquire();
  REQUIRE(hold.has_value());  // the vote waits half the lease at most, and half is left
  CHECK(hold->remaining_lease() > 0ms);
  hold->release();
  q[2].resume();
  CHECK(dlock::test::wait_until([&] { return q.holding("stalled") == 0; }, scaled(5s)));
}

TEST_CASE("Redlock: a release that finds no majority holding is lease_lost, not unknown", "[redlock]") {
  quorum_servers q(3);
  dlock::RedlockBackend b(settings(q));
  RedlockToken lock(b, "gone", {}, r::FixedLease(scaled(10s)));
  auto hold = lock.try_acquire();
  REQUIRE(hold.has_value());
  q[1].command({"DEL", "gone"});  // lost there (an expiry, a restart)
  q[2].kill();
  wait_node(b, 2, false);
  std::error_code ec;
  hold->release(ec);  // one released, one gone, one silent: no majority holds it now
  CHECK(ec == dlock::error::lease_lost);
  CHECK(q.holding("gone") == 0);
}

TEST_CASE("Redlock: Lock<RedlockBackend> is Redisson's lock on a quorum, its waiters woken by any node's release",
          "[redlock]") {
  quorum_servers q(3);
  dlock::RedlockBackend holder_side(settings(q)), waiter_side(settings(q));
  dlock::Lock<dlock::RedlockBackend> holder(holder_side, "pubsub");
  dlock::Lock<dlock::RedlockBackend> waiter(waiter_side, "pubsub");
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      q[0].kill();  // a node down: the others carry the release's message
      wait_node(holder_side, 0, false);
      wait_node(waiter_side, 0, false);
    }
    auto hold = holder.acquire();
    auto waiting = std::async(std::launch::async, [&] {
      const auto began = std::chrono::steady_clock::now();
      auto got = waiter.try_acquire_for(scaled(20s));  // released when it goes
      return std::pair{got.has_value(), std::chrono::steady_clock::now() - began};
    });
    std::this_thread::sleep_for(scaled(300ms));  // the waiter tried, subscribed, and sleeps
    hold.release();
    auto [won, took] = waiting.get();
    INFO("round " << round << ": " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms");
    CHECK(won);
    // Woken by the release, not by the 5 s recheck nor the 30 s lease.
    CHECK(took < scaled(300ms) + scaled(2s));
  }
}

TEST_CASE("Redlock: what persistence does to the restart story (a node killed and back at once)", "[redlock]") {
  const auto lease = scaled(1500ms);
  auto with = [](std::vector<std::string> args) {
    dlock::test::server_options opts;
    opts.extra_args = std::move(args);
    return opts;
  };
  // The node comes back with A's key: B waits for A's lease to end.
  // everysec only delays the fsync; Redis writes the AOF before it answers,
  // so a killed process loses nothing (a machine that loses power could
  // lose the last second, the grant with it).
  auto fsync = GENERATE(as<std::string>{}, "always", "everysec");
  INFO("appendfsync " << fsync);
  dlock::examples::redlock_story::stage stage(lease, with({"--appendonly", "yes", "--appendfsync", fsync}));
  auto o = stage.play(0ms);
  CHECK(o.a_held);
  CHECK(o.b_held);
  CHECK_FALSE(o.overlap);
}

namespace {

using RedlockFenced = dlock::Lock<dlock::RedlockBackend, o::Token, r::FixedLease, w::TryOnce>;

o::Token fenced() {
  o::Token t;
  t.fencing = dlock::fencing_tokens{};
  return t;
}

// A token far above what any node's clock gives now (TIME in microseconds
// plus about 11 days): a counter that held it must carry the order.
std::uint64_t far_token() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count()) +
         1'000'000'000'000ULL;
}

}  // namespace

TEST_CASE("Redlock fencing: a win's token is the highest its nodes gave, written back to every node", "[redlock]") {
  quorum_servers q(3);
  dlock::RedlockBackend b(settings(q));
  RedlockFenced lock(b, "fenced", fenced(), r::FixedLease(scaled(10s)));
  // Node 0 alone once handed out a far higher number (as if it had been
  // part of a majority the others never heard of).
  const auto far = far_token();
  const auto counter = dlock::ext::fence_key("fenced");
  q[0].command({"SET", counter, std::to_string(far), "PX", "60000"});
  auto first = lock.try_acquire();
  REQUIRE(first.has_value());
  REQUIRE(first->fencing_token().has_value());
  const auto t1 = *first->fencing_token();
  CHECK(t1 > far);
  for (std::size_t i = 0; i < 3; ++i) CHECK(std::stoull(q[i].command({"GET", counter})) >= t1);
  first->release();
  // Node 0 restarts without persistence and forgets: the others, written
  // back, still carry the order.
  q[0].kill();
  q[0].start();
  wait_node(b, 0, true);
  auto second = lock.try_acquire();
  REQUIRE(second.has_value());
  CHECK(*second->fencing_token() > t1);
}

TEST_CASE("Redlock fencing: tokens only increase through a restart of every node, with persistence",
          "[redlock]") {
  dlock::test::server_options always;
  always.extra_args = {"--appendonly", "yes", "--appendfsync", "always"};
  std::vector<std::unique_ptr<redis_server>> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(std::make_unique<redis_server>(always));
  quorum_servers q(0);
  q.servers = std::move(nodes);
  const auto far = far_token();
  for (std::size_t i = 0; i < 3; ++i)
    q[i].command({"SET", dlock::ext::fence_key("kept"), std::to_string(far), "PX", "600000"});
  std::uint64_t before = 0;
  {
    dlock::RedlockBackend b(settings(q));
    RedlockFenced lock(b, "kept", fenced(), r::FixedLease(scaled(10s)));
    auto hold = lock.try_acquire();
    REQUIRE(hold.has_value());
    before = *hold->fencing_token();
    CHECK(before > far);
    hold->release();
  }
  for (std::size_t i = 0; i < 3; ++i) q[i].restart();  // SIGKILL, then back with the AOF
  dlock::RedlockBackend b(settings(q));
  RedlockFenced lock(b, "kept", fenced(), r::FixedLease(scaled(10s)));
  auto hold = lock.try_acquire();
  REQUIRE(hold.has_value());
  CHECK(*hold->fencing_token() > before);  // the clocks alone would give far less
}

namespace {

// A file whose first 8 bytes step the wall clock of a server started with
// clock_env() (tests/support/skewed_clock.cpp), by that many milliseconds.
class clock_step {
 public:
  clock_step() {
    char path[] = "/tmp/dlock-clock-XXXXXX";
    fd_ = ::mkstemp(path);
    REQUIRE(fd_ >= 0);
    path_ = path;
    set(0ms);
  }
  ~clock_step() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  clock_step(const clock_step&) = delete;
  clock_step& operator=(const clock_step&) = delete;
  std::vector<std::string> clock_env() const {
    return {"LD_PRELOAD=" DLOCK_SKEWED_CLOCK_PATH, "DLOCK_CLOCK_STEP_FILE=" + path_};
  }
  void set(std::chrono::milliseconds d) {
    long long ms = d.count();
    REQUIRE(::pwrite(fd_, &ms, sizeof ms, 0) == static_cast<ssize_t>(sizeof ms));
  }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace

TEST_CASE("Redlock: a node whose clock jumps lets a second holder in; fencing refuses the stale write",
          "[redlock]") {
  // Kleppmann's scenario on 5 nodes: A holds on nodes 0-2 (3 and 4 were
  // down); node 2's clock jumps forward past the lease, so it expires A's
  // key; B wins nodes 2-4 while A still holds by its own clock.
  clock_step step;
  quorum_servers q(0);
  for (int i = 0; i < 5; ++i) {
    dlock::test::server_options opts;
    if (i == 2) opts.environment = step.clock_env();
    q.servers.push_back(std::make_unique<redis_server>(opts));
  }
  const auto lease = scaled(5s);
  dlock::RedlockBackend a_side(settings(q));
  q[3].kill();
  q[4].kill();
  wait_node(a_side, 3, false);
  wait_node(a_side, 4, false);
  RedlockFenced a(a_side, "jump", fenced(), r::FixedLease(lease));
  auto a_hold = a.try_acquire();
  REQUIRE(a_hold.has_value());
  const auto a_start = dlock::test::monotonic_ns();
  const auto a_token = *a_hold->fencing_token();
  CHECK(q.holding("jump") == 3);
  q[3].start();
  q[4].start();
  step.set(lease * 2);  // node 2's clock jumps: A's key there is past its expiry
  CHECK(q[2].command({"EXISTS", "jump"}) == "0");
  dlock::RedlockBackend b_side(settings(q));
  RedlockFenced b(b_side, "jump", fenced(), r::FixedLease(lease));
  auto b_hold = b.try_acquire();
  REQUIRE(b_hold.has_value());
  const auto b_start = dlock::test::monotonic_ns();
  CHECK_FALSE(a_hold->lost());  // A's own clock says its lease runs on
  dlock::test::hold_history history;
  history.add({"jump", "a", a_start, dlock::test::monotonic_ns()});
  history.add({"jump", "b", b_start, dlock::test::monotonic_ns()});
  CHECK(history.overlaps().size() == 1);  // two holders: the checker says so
  // Fencing: B's token is higher, so the resource refuses A's late write.
  const auto b_token = *b_hold->fencing_token();
  CHECK(b_token > a_token);
  dlock::examples::fenced_store store;
  CHECK(store.write(b_token, "B"));
  CHECK_FALSE(store.write(a_token, "A, late"));
  CHECK(store.value() == "B");
  step.set(0ms);
}

TEST_CASE("Redlock: stepping the client's wall clock an hour either way changes no hold", "[redlock]") {
  // node-redlock took the vote's elapsed time from the wall clock: a step
  // during a vote changed the validity. dlock measures on the steady clock;
  // lock_worker's wall-clock-step mode (under skewed_clock) steps its own
  // wall clock while it holds, and checks the time left.
  const std::string combination = GENERATE("token/fixed/spin", "hash/watchdog/pubsub");
  INFO(combination);
  dlock::test::redlock_servers q;
  clock_step step;
  auto env = step.clock_env();
  std::vector<std::string> args{env[0], env[1], dlock::test::worker_path(), "wall-clock-step", q.worker_spec(),
                                combination, "stepped", std::to_string(scaled(10s).count())};
  dlock::test::worker client("/usr/bin/env", args);
  auto line = client.read_line(scaled(20s));
  INFO(line);
  CHECK(line.rfind("stepped: ", 0) == 0);
  CHECK(client.wait() == 0);
  for (auto& s : q.nodes) CHECK(s->command({"EXISTS", "stepped", "stepped:stepped"}) == "0");
}
