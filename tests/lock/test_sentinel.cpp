// SentinelBackend against real sentinels: finding the master, refusing what
// is not one, following a failover with locks held and waiters waiting, and
// the representative combinations on a Sentinel deployment.
#include "combination_tests.hpp"
#include "backend_instances.hpp"  // their Sentinel and Cluster locks, compiled once
#include "shared_kinds.hpp"

#include <dlock/backend/sentinel.hpp>
#include <dlock/redis/address_source.hpp>
#include <support/hold_history.hpp>
#include <support/sentinel_deployment.hpp>

#include <boost/asio/post.hpp>

namespace {

using namespace std::chrono_literals;
using dlock::test::scaled;

using SentinelToken = dlock::Lock<dlock::SentinelBackend, dlock::ownership::Token, dlock::renewal::Watchdog,
                                  dlock::wait::TryOnce>;
using SentinelHashPubSub = dlock::Lock<dlock::SentinelBackend, dlock::ownership::ReentrantHash,
                                       dlock::renewal::Watchdog, dlock::wait::PubSub>;

std::string sentinel_url(const std::vector<std::uint16_t>& ports, const std::string& name) {
  std::string out = "redis-sentinel://";
  for (std::size_t i = 0; i < ports.size(); ++i) out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(ports[i]);
  return out + "#" + name;
}

// An address source a test moves by hand. `move_quietly` changes the
// address without telling blocking connections (no new generation), as a
// failover nobody has announced yet.
class hand_source final : public dlock::redis::address_source {
 public:
  explicit hand_source(dlock::redis::address a) : at_(std::move(a)) {}
  void async_find(boost::asio::any_io_executor ex,
                  std::function<void(dlock::redis::error_code, dlock::redis::address)> done) override {
    boost::asio::post(ex, [done = std::move(done), a = last_found().value()] { done({}, a); });
  }
  std::optional<dlock::redis::address> last_found() const override {
    std::lock_guard g(mutex_);
    return at_;
  }
  std::uint64_t generation() const override { return generation_.load(); }
  void move_quietly(dlock::redis::address a) {
    std::lock_guard g(mutex_);
    at_ = std::move(a);
  }

 private:
  mutable std::mutex mutex_;
  dlock::redis::address at_;
  std::atomic<std::uint64_t> generation_{1};
};

dlock::redis::address local(std::uint16_t port) {
  return {dlock::redis::config::transport::tcp, "127.0.0.1", port, {}};
}

}  // namespace

TEST_CASE("the master is found through a dead sentinel and a live one", "[lock][sentinel]") {
  dlock::test::sentinel_deployment d({.replicas = 1, .sentinels = 1, .quorum = 1});
  auto dead = dlock::test::free_port();
  dlock::SentinelBackend backend(sentinel_url({dead, d.sentinels().ports()[0]}, d.master_name()));
  REQUIRE(backend.master_address());
  CHECK(backend.master_address()->port == d.node(0).port());
  SentinelToken lock(backend, "found", {}, dlock::renewal::Watchdog{scaled(10s)});
  auto hold = lock.acquire();
  CHECK(d.node(0).command({"EXISTS", "found"}) == "1");
  hold.release();
  // The live sentinel answered, so it is asked first from now on.
  CHECK(backend.sentinel_settings().sentinels.size() == 2);
}

TEST_CASE("a master name no sentinel knows, and sentinels nobody can reach, are clear errors", "[lock][sentinel]") {
  dlock::test::sentinel_deployment d({.replicas = 1, .sentinels = 1, .quorum = 1});
  auto started = std::chrono::steady_clock::now();
  auto ec = dlock::test::thrown_by([&] { dlock::SentinelBackend b(sentinel_url(d.sentinels().ports(), "nosuchmaster")); });
  CHECK(ec == dlock::error::unknown_master);
  ec = dlock::test::thrown_by(
      [&] { dlock::SentinelBackend b(sentinel_url({dlock::test::free_port(), dlock::test::free_port()}, "m")); });
  CHECK(ec == dlock::error::no_sentinel);
  CHECK(ec == dlock::condition::not_sent);
  // Both answer within the connect timeout, not after a hang.
  CHECK(std::chrono::steady_clock::now() - started < scaled(10s));
  ec = dlock::test::thrown_by([] { dlock::SentinelBackend b("redis-sentinel://127.0.0.1:1"); });
  CHECK(ec == dlock::error::invalid_url);
}

TEST_CASE("sentinels that want a password: auth_failed without it, found with it", "[lock][sentinel]") {
  dlock::test::sentinel_deployment d({.replicas = 1, .sentinels = 1, .quorum = 1});
  d.sentinels().command(0, {"ACL", "SETUSER", "default", "on", ">sentinel-secret"});
  auto ec = dlock::test::thrown_by([&] { dlock::SentinelBackend b(d.url()); });
  CHECK(ec == dlock::error::auth_failed);
  auto cfg = dlock::redis::parse_sentinel_url(d.url());
  cfg.sentinel_password = "wrong";
  CHECK(dlock::test::thrown_by([&] { dlock::SentinelBackend b(cfg); }) == dlock::error::auth_failed);
  cfg.sentinel_password = "sentinel-secret";
  dlock::SentinelBackend backend(cfg);
  CHECK(backend.master_address()->port == d.node(0).port());
}

TEST_CASE("a connection that must reach a master refuses a replica", "[lock][sentinel]") {
  dlock::test::redis_server master;
  dlock::test::server_options o;
  o.replica_of = master.port();
  dlock::test::redis_server replica(o);
  auto cfg = dlock::redis::parse_url(replica.url());
  cfg.require_master = true;
  CHECK(dlock::test::thrown_by([&] { dlock::RedisBackend b(cfg); }) == dlock::error::not_master);
  cfg = dlock::redis::parse_url(master.url());
  cfg.require_master = true;
  CHECK_FALSE(dlock::test::thrown_by([&] { dlock::RedisBackend b(cfg); }));
}

TEST_CASE("a READONLY reply from a demoted master moves the connections to the new one", "[lock][sentinel]") {
  dlock::test::redis_server first;
  dlock::test::server_options o;
  o.replica_of = first.port();
  dlock::test::redis_server second(o);
  second.wait_until_synced();
  auto source = std::make_shared<hand_source>(local(first.port()));
  auto cfg = dlock::redis::parse_url(first.url());
  cfg.source = source;
  cfg.require_master = true;
  dlock::RedisBackend backend(cfg);
  dlock::Lock<dlock::RedisBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::TryOnce> lock(
      backend, "demoted", {}, dlock::renewal::FixedLease{scaled(10s)});
  REQUIRE(lock.try_lock());
  lock.unlock();

  // A failover nobody announced: `first` is a replica of `second` now.
  second.command({"REPLICAOF", "NO", "ONE"});
  first.command({"REPLICAOF", "127.0.0.1", std::to_string(second.port())});
  source->move_quietly(local(second.port()));

  // The blocking path: the write is refused (not run), and the next call
  // connects where the source says the master is.
  try {
    (void)lock.try_lock();
    FAIL("a write on a replica must fail");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::server_error);
  }
  REQUIRE(lock.try_lock());
  CHECK(second.command({"EXISTS", "demoted"}) == "1");
  lock.unlock();

  // The shared connection: one READONLY, then it reconnects by itself.
  auto set = [&] {
    return backend.async_exec(dlock::redis::request().push("SET", "shared", "1"), boost::asio::use_future).get().at(0);
  };
  auto first_reply = set();
  CHECK(first_reply.is_error());
  CHECK(first_reply.str.rfind("READONLY", 0) == 0);
  CHECK(dlock::test::wait_until([&] { return !set().is_error(); }, scaled(5s)));
  CHECK(second.command({"GET", "shared"}) == "1");
}

TEST_CASE("a failover while a lock is held: the watchdog renews on the new master", "[lock][sentinel][failover]") {
  dlock::test::sentinel_deployment d;
  dlock::SentinelBackend backend(d.url());
  dlock::SentinelBackend other(d.url());
  const auto lease = scaled(12s);
  SentinelToken lock(backend, "held", {}, dlock::renewal::Watchdog{lease});
  auto hold = lock.acquire();
  REQUIRE(dlock::test::wait_until([&] { return d.node(1).command({"EXISTS", "held"}) == "1"; }, scaled(5s)));

  auto old_port = d.node(0).port();
  auto killed_at = std::chrono::steady_clock::now();
  d.node(0).kill();
  // The first lock taken after the master died, by another client.
  SentinelToken probe(other, "probe", {}, dlock::renewal::Watchdog{lease});
  std::optional<std::chrono::steady_clock::duration> first_acquire;
  while (!first_acquire && std::chrono::steady_clock::now() - killed_at < scaled(60s)) {
    std::error_code ec;
    if (auto h = probe.try_acquire_for(100ms, ec)) {
      first_acquire = std::chrono::steady_clock::now() - killed_at;
      h->release(ec);
    }
  }
  REQUIRE(first_acquire);
  auto new_port = d.wait_for_new_master(old_port);
  WARN("from the master's death to the first acquire on the new master: "
       << std::chrono::duration_cast<std::chrono::milliseconds>(*first_acquire).count() << " ms");
  // The holder's backend follows too: from the sentinels' announcement, or
  // at the latest from its next renewal. (The other client can get there a
  // few ms first, by asking a sentinel after its own command failed.)
  CHECK(dlock::test::wait_until(
      [&] {
        auto at = backend.master_address();
        return at && at->port == new_port && backend.failovers_seen() >= 1;
      },
      lease / 2));

  // Two renewal periods on the new master: the hold is kept, not lost.
  std::this_thread::sleep_for(lease * 2 / 3 + 200ms);
  CHECK_FALSE(hold.lost());
  auto& master = d.master();
  INFO("the sentinels named " << new_port << " first, " << master.port() << " now");
  CHECK(master.port() == backend.master_address()->port);
  auto pttl = std::stoll(master.command({"PTTL", "held"}));
  CHECK(pttl > (lease / 3).count());
  hold.release();
  CHECK(master.command({"EXISTS", "held"}) == "0");
}

TEST_CASE("seed 003's failover, reproduced: a lock the replicas never got is granted twice",
          "[lock][sentinel][failover][story]") {
  // Client A takes the lock while replication is held back; the master
  // dies with the write; Sentinel promotes a replica that never had it;
  // client B takes the same lock there while A still holds it (A's next
  // renewal, 10 s after its acquire, is what would tell it otherwise).
  // Replica acknowledgement, on by default, would prevent it: turned off.
  dlock::test::sentinel_deployment d;
  auto off = dlock::redis::parse_sentinel_url(d.url());
  off.master.acknowledge = dlock::redis::replica_ack{.replicas = dlock::redis::replica_ack::none};
  dlock::SentinelBackend a_side(off);
  dlock::SentinelBackend b_side(off);
  SentinelToken a(a_side, "story", {}, dlock::renewal::Watchdog{scaled(30s)});
  SentinelToken b(b_side, "story", {}, dlock::renewal::Watchdog{scaled(30s)});
  dlock::test::hold_history history;

  d.hold_replication();
  auto a_hold = a.acquire();
  const auto a_start = dlock::test::monotonic_ns();
  CHECK(d.node(0).command({"EXISTS", "story"}) == "1");
  for (std::size_t r = 1; r < d.nodes(); ++r) CHECK(d.node(r).command({"EXISTS", "story"}) == "0");

  auto old_port = d.node(0).port();
  d.node(0).kill();
  d.lose_held_replication();  // the write dies with the master
  d.wait_for_new_master(old_port);
  std::error_code ec;
  auto b_hold = b.try_acquire_for(scaled(20s), ec);
  REQUIRE_FALSE(ec);
  REQUIRE(b_hold);
  const auto b_start = dlock::test::monotonic_ns();
  CHECK_FALSE(a_hold.lost());  // A has not heard: it still holds, as far as it knows
  const auto both_held = dlock::test::monotonic_ns();
  b_hold->release(ec);
  CHECK_FALSE(ec);
  history.add({"story", "A", a_start, both_held});
  history.add({"story", "B", b_start, both_held});
  auto found = history.overlaps();
  REQUIRE(found.size() == 1);
  CHECK(found[0].earlier.worker == "A");
  CHECK(found[0].later.worker == "B");
  // A's release finds the key gone (B released) or not its own: the lock was lost.
  a_hold.release(ec);
  CHECK(ec == dlock::error::lease_lost);
}

// A PubSub waiter waits while `fail_over` moves the master away from node
// 0; the holder releases on the new master, and the waiter gets the lock.
template <class FailOver>
void waiter_across_failover(const std::string& name, FailOver fail_over) {
  dlock::test::sentinel_deployment d;
  dlock::SentinelBackend holder_side(d.url());
  dlock::SentinelBackend waiter_side(d.url());
  SentinelHashPubSub holder(holder_side, name, {}, dlock::renewal::Watchdog{scaled(12s)});
  SentinelHashPubSub waiter(waiter_side, name, {}, dlock::renewal::Watchdog{scaled(12s)});
  holder.lock();
  REQUIRE(dlock::test::wait_until([&] { return d.node(1).command({"EXISTS", name}) == "1"; }, scaled(5s)));
  // The owner of a ReentrantHash hold is a thread: the waiter's thread
  // releases what it got.
  auto got = std::async(std::launch::async, [&] {
    if (!waiter.try_lock_for(scaled(60s))) return false;
    waiter.unlock();
    return true;
  });
  auto channel = dlock::ownership::ReentrantHash::channel(name);
  REQUIRE(dlock::test::wait_until([&] { return dlock::test::numsub(d.node(0), channel) == 1; }, scaled(5s)));

  auto old_port = d.node(0).port();
  fail_over(d);
  d.wait_for_new_master(old_port);
  auto& master = d.master();
  // The waiter's subscription moves to the new master, and leaves the old.
  CHECK(dlock::test::wait_until([&] { return dlock::test::numsub(master, channel) == 1; }, scaled(10s)));
  if (d.node(0).running()) CHECK(dlock::test::numsub(d.node(0), channel) == 0);
  CHECK(got.wait_for(0s) == std::future_status::timeout);  // still held: it waits on
  INFO("the key on the new master: " << master.command({"HGETALL", name}));
  CHECK(master.command({"EXISTS", name}) == "1");
  holder.unlock();
  REQUIRE(got.wait_for(scaled(10s)) == std::future_status::ready);
  CHECK(got.get());
  CHECK(master.command({"EXISTS", name}) == "0");
}

TEST_CASE("a failover while waiters wait: they resubscribe on the new master and get the lock",
          "[lock][sentinel][failover]") {
  waiter_across_failover("waited", [](dlock::test::sentinel_deployment& d) { d.node(0).kill(); });
}

TEST_CASE("a failover with the old master alive: the announcement moves the waiter's subscription",
          "[lock][sentinel][failover]") {
  // SENTINEL FAILOVER demotes a live master: nothing breaks the subscriber's
  // connection to it, and no READONLY reaches a connection that only
  // listens; only +switch-master tells it to move.
  waiter_across_failover("handed", [](dlock::test::sentinel_deployment& d) {
    d.sentinels().command(0, {"SENTINEL", "FAILOVER", d.master_name()});
  });
}

// The representative combinations (one per ownership and wait) on a
// master, a replica and a sentinel.
TEMPLATE_LIST_TEST_CASE("mutual exclusion through Sentinel: 8 threads, then 4 processes", "[lock][sentinel]",
                        dlock::combinations::representative_t<dlock::SentinelBackend>) {
  dlock::test::mutual_exclusion_test<dlock::test::sentinel_servers, TestType>();
}

TEMPLATE_LIST_TEST_CASE("a hold through Sentinel reports its lease and keeps others out", "[lock][sentinel]",
                        dlock::combinations::representative_t<dlock::SentinelBackend>) {
  dlock::test::hold_test<dlock::test::sentinel_servers, TestType>();
}

TEST_CASE("readers share and writers exclude, and a semaphore's permits count, through Sentinel",
          "[lock][sentinel][history]") {
  dlock::test::sentinel_servers redis;
  dlock::test::shared_kinds_test(redis, {"kinds:rw-0", "kinds:rw-1"}, "kinds:permits");
}

TEST_CASE("blocking lock calls on Sentinel take the blocking fast path, not the shared connection", "[lock][sentinel]") {
  dlock::test::sentinel_deployment d({.replicas = 1, .sentinels = 1, .quorum = 1});
  dlock::SentinelBackend backend(d.url());
  SentinelHashPubSub lock(backend, "fast", {}, dlock::renewal::Watchdog{scaled(10s)});
  lock.acquire().release();  // warm: scripts loaded, connection open
  auto connections = [&] {
    auto info = d.node(0).command({"INFO", "stats"});
    auto at = info.find("total_connections_received:");
    return std::stoll(info.substr(at + 27));
  };
  const auto before = backend.connection().statistics().commands_written;
  const auto connected_before = connections();
  for (int i = 0; i < 200; ++i) lock.acquire().release();
  const auto shared = backend.connection().statistics().commands_written - before;
  INFO("commands written on the shared connection during 200 cycles: " << shared);
  CHECK(shared < 20);  // health-check PINGs only
  // One blocking connection, kept: not a connect per call (the INFO
  // commands of this test are two connections of redis-cli's).
  CHECK(connections() - connected_before <= 3);
}

TEST_CASE("a replica whose clock runs ahead ends the leases it inherits early (SET PX reaches it as PXAT)",
          "[lock][sentinel][failover][skew]") {
  // Redis 7 replicates `SET name token PX lease` as `SET ... PXAT <the
  // master's clock + lease>`: an absolute time, which the replica (and, once
  // promoted, the new master) reads on its own clock. A replica whose clock
  // runs 4 s ahead sees every lease 4 s shorter; after a failover the key
  // ends 4 s before the holder's own count says it can. (Debian's faketime
  // cannot start redis-server 7.0; the harness preloads its own wall-clock
  // shift, tests/support/skewed_clock.cpp.)
  const auto skew = 4000ms;
  dlock::test::sentinel_deployment d({.replicas = 1, .sentinels = 1, .quorum = 1,
                                      .replica_environment = {"LD_PRELOAD=" DLOCK_SKEWED_CLOCK_PATH,
                                                              "DLOCK_CLOCK_SKEW_MS=" + std::to_string(skew.count())}});
  dlock::SentinelBackend backend(d.url());
  const auto lease = scaled(20s);
  dlock::Lock<dlock::SentinelBackend, dlock::ownership::Token, dlock::renewal::FixedLease, dlock::wait::TryOnce> lock(
      backend, "skewed", {}, dlock::renewal::FixedLease{lease});
  auto hold = lock.acquire();
  REQUIRE(dlock::test::wait_until([&] { return d.node(1).command({"EXISTS", "skewed"}) == "1"; }, scaled(5s)));
  auto on_master = std::stoll(d.node(0).command({"PTTL", "skewed"}));
  auto on_replica = std::stoll(d.node(1).command({"PTTL", "skewed"}));
  INFO("PTTL on the master " << on_master << " ms, on the replica " << on_replica << " ms");
  CHECK(on_master - on_replica > skew.count() - 1000);
  CHECK(on_master - on_replica < skew.count() + 1000);

  auto old_port = d.node(0).port();
  d.node(0).kill();
  d.wait_for_new_master(old_port);
  auto left = std::stoll(d.node(1).command({"PTTL", "skewed"}));
  auto believed = hold.remaining_lease().count();
  INFO("after the failover: the holder counts " << believed << " ms, the new master " << left << " ms");
  CHECK(believed - left > skew.count() - 1000);  // the server ends it about 4 s before the holder's count
  std::error_code ec;
  hold.release(ec);
  CHECK_FALSE(ec);  // still there: released normally
}
