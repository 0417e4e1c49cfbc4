// ClusterBackend on real Redis Clusters started by the harness: the URL, the
// routing of every lock's keys to its slot's master, the redirections
// (MOVED, ASK), sharded pub/sub, a slot that moves while locks in it are
// held and waited on, and the representative combinations.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <set>
#include <thread>

#include <boost/asio/post.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>
#include <boost/hana/for_each.hpp>

#include <dlock/backend/cluster.hpp>
#include <dlock/combinations.hpp>
#include <support/hold_history.hpp>
#include <support/polling.hpp>
#include <support/redis_server.hpp>
#include <support/server_fixture.hpp>

#include "backend_fixtures.hpp"
#include "combination_tests.hpp"
#include "lock_support.hpp"
#include "backend_instances.hpp"  // their Sentinel and Cluster locks, compiled once
#include "shared_kinds.hpp"

using namespace std::chrono_literals;
using dlock::test::scaled;

namespace {

namespace o = dlock::ownership;
namespace r = dlock::renewal;
namespace w = dlock::wait;

using ClusterHashPubSub = dlock::Lock<dlock::ClusterBackend, o::ReentrantHash, r::Watchdog, w::PubSub>;
using ClusterTokenSpin = dlock::Lock<dlock::ClusterBackend, o::Token, r::Watchdog, w::Spin>;
using ClusterQueue = dlock::Lock<dlock::ClusterBackend, o::Queue, r::Watchdog, w::HandOff>;

std::uint16_t slot_of(const std::string& key) { return dlock::detail::key_slot(key); }

std::uint16_t cluster_keyslot(dlock::test::redis_cluster& c, const std::string& key) {
  return static_cast<std::uint16_t>(std::stoi(c.node(c.masters().front()).command({"CLUSTER", "KEYSLOT", key})));
}

// A name of the form "<prefix>-<n>" whose slot is served by node `node`.
std::string name_on(dlock::test::redis_cluster& c, std::size_t node, const std::string& prefix) {
  for (int n = 0;; ++n) {
    auto name = prefix + "-" + std::to_string(n);
    if (c.master_of_slot(slot_of(name)) == node) return name;
  }
}

std::size_t other_master(dlock::test::redis_cluster& c, std::size_t not_this) {
  for (auto m : c.masters())
    if (m != not_this) return m;
  throw std::runtime_error("no other master");
}

// Takes `lock` within 20 s (then releases it): whether it did, and how long
// it waited.
template <class L>
std::pair<bool, std::chrono::steady_clock::duration> timed_take(L& lock) {
  auto t0 = std::chrono::steady_clock::now();
  auto h = lock.try_acquire_for(scaled(20s));
  auto took = std::chrono::steady_clock::now() - t0;
  if (h) h->release();
  return std::pair{h.has_value(), took};
}

// What a subscriber of `channel` on `node` hears when `act()` runs (empty
// when nothing came in 5 s); it unsubscribes on return.
template <class Act>
std::string heard_after(dlock::RedisBackend& node, const std::string& channel, Act act) {
  std::promise<std::string> heard;
  auto sub = node.async_subscribe(channel,
                                  [&](std::optional<std::string_view> m) {
                                    if (m) heard.set_value(std::string(*m));
                                  },
                                  boost::asio::use_future)
                 .get();
  act();
  auto f = heard.get_future();
  if (f.wait_for(scaled(5s)) != std::future_status::ready) return {};
  return f.get();
}

// What a Redisson waiter (a subscriber of `channel` on `node`) hears when
// `holder` takes its lock and releases it.
template <class L>
std::string heard_on_release(dlock::RedisBackend& node, const std::string& channel, L& holder) {
  return heard_after(node, channel, [&] { holder.acquire().release(); });
}

// Waiter numbers in the line of lock `name` (on its master): a waiter
// registers only once its subscription is up, so it hears the release.
long long registered(dlock::RedisBackend& master, const std::string& name) {
  return master.command(dlock::redis::request().push("LLEN", o::ReentrantHash::waiters_key(name))).integer;
}

template <class F>
std::error_code thrown_code(F f) {
  try {
    f();
  } catch (const std::system_error& e) {
    return e.code();
  }
  return {};
}

}  // namespace

TEST_CASE("cluster URLs: seed lists, credentials, and what a cluster cannot have", "[cluster][url]") {
  auto cfg = dlock::redis::parse_cluster_url("redis://user:p%40ss@10.0.0.1:7000,10.0.0.2,[::1]:7002");
  REQUIRE(cfg.seeds.size() == 3);
  CHECK(cfg.seeds[0].host == "10.0.0.1");
  CHECK(cfg.seeds[0].port == 7000);
  CHECK(cfg.seeds[1].port == dlock::redis::default_tcp_port);
  CHECK(cfg.seeds[2].host == "::1");
  CHECK(cfg.node.user == "user");
  CHECK(cfg.node.password == "p@ss");
  CHECK(cfg.describe() == "redis://user:***@10.0.0.1:7000,10.0.0.2:6379,[::1]:7002");
  CHECK(dlock::redis::parse_cluster_url("redis://h:1/0").seeds.size() == 1);

  for (const char* bad : {"redis://h:1/2", "redis://", "redis://h:1,,h:2", "redis-sentinel://h:1#m", "h:1",
                          "redis://h:1?x=1", "redis://h:99999"}) {
    CAPTURE(bad);
    std::error_code ec;
    std::string why;
    dlock::redis::parse_cluster_url(bad, ec, &why);
    CHECK(ec == dlock::error::invalid_url);
    CHECK_FALSE(why.empty());
  }
  std::string why;
  std::error_code ec;
  dlock::redis::parse_cluster_url("redis://:secret@h:1/3", ec, &why);
  CHECK(why.find("only database 0") != std::string::npos);
  CHECK(why.find("secret") == std::string::npos);
}

TEST_CASE("a cluster's replies read: MOVED, ASK, TRYAGAIN, CLUSTERDOWN", "[cluster][url]") {
  using dlock::redis::value;
  using kind = dlock::redis::detail::redirect::kind;
  const dlock::redis::address from{dlock::redis::config::transport::tcp, "10.0.0.9", 7000, {}};
  auto read = [&](std::string text) {
    return dlock::redis::detail::read_redirect(value::make_string(std::move(text), dlock::redis::kind::error), from);
  };
  auto moved = read("MOVED 3999 127.0.0.1:6381");
  CHECK(moved.what == kind::moved);
  CHECK(moved.slot == 3999);
  CHECK(moved.to.host == "127.0.0.1");
  CHECK(moved.to.port == 6381);
  auto empty_host = read("ASK 12 :7001");
  CHECK(empty_host.what == kind::ask);
  CHECK(empty_host.to.host == "10.0.0.9");
  CHECK(read("MOVED 1 [::1]:7000").to.host == "::1");
  CHECK(read("TRYAGAIN Multiple keys request during rehashing of slot").what == kind::try_again);
  CHECK(read("CLUSTERDOWN Hash slot not served").what == kind::cluster_down);
  CHECK(read("MOVED 16384 h:1").what == kind::none);
  CHECK(read("MOVED x h:1").what == kind::none);
  CHECK(read("MOVEDX 1 h:1").what == kind::none);
  CHECK(read("ERR MOVED 1 h:1").what == kind::none);
  CHECK(dlock::redis::detail::read_redirect(value::make_string("MOVED 1 h:1"), from).what == kind::none);
}

TEST_CASE("ClusterBackend starts from any live seed, and says why when none answers", "[cluster]") {
  auto& cluster = dlock::test::shared_cluster();
  const auto dead = dlock::test::free_port();
  const std::string dead_seed = "127.0.0.1:" + std::to_string(dead);
  // The first seed is dead: the second is enough.
  auto url = cluster.seed_url({cluster.masters().front()});
  dlock::ClusterBackend backend("redis://" + dead_seed + "," + url.substr(8));
  CHECK(backend.masters().size() == 3);
  CHECK(backend.command("k", dlock::redis::request().push("PING")).str == "PONG");

  const auto t0 = std::chrono::steady_clock::now();
  CHECK(thrown_code([&] { dlock::ClusterBackend none("redis://" + dead_seed); }) == dlock::error::connection_refused);
  CHECK(std::chrono::steady_clock::now() - t0 < scaled(5s));
  // A plain server is no cluster node.
  dlock::test::redis_server plain;
  CHECK(thrown_code([&] { dlock::ClusterBackend lone(plain.url()); }) == dlock::error::cluster_down);
  CHECK(thrown_code([&] { dlock::ClusterBackend bad("redis://h:1/4"); }) == dlock::error::invalid_url);
}

TEST_CASE("every lock's keys go to the master of its slot: 300 names over three masters", "[cluster]") {
  dlock::test::cluster_servers redis;
  auto& cluster = redis.cluster;
  std::set<std::size_t> used;
  for (int i = 0; i < 300; ++i) {
    const std::string name = i % 3 == 0 ? "spread:" + std::to_string(i)
                             : i % 3 == 1 ? "{tag" + std::to_string(i) + "}:x"
                                          : "odd}" + std::to_string(i) + "{";
    CAPTURE(name);
    REQUIRE(slot_of(name) == cluster_keyslot(cluster, name));
    auto master = cluster.master_of_slot(slot_of(name));
    used.insert(master);
    auto at = redis.backend.master_of(name);
    REQUIRE(at);
    CHECK(at->port == cluster.node(master).port());
  }
  CHECK(used.size() == 3);

  // Each ownership's lock (its key, and its companion keys) lives on the
  // master of its name's slot.
  std::vector<std::string> names{"plain", "a{b}c", "x}y", "q{", "{ab}{cd}", "{}z"};
  boost::hana::for_each(dlock::combinations::representative<dlock::ClusterBackend>(), [&](auto tag) {
    using L = typename decltype(tag)::type;
    for (auto& base : names) {
      auto name = base + ":" + L::combination_name();
      CAPTURE(name);
      auto lock = dlock::test::make_lock<L>(redis.backend, name);
      std::error_code ec;
      auto hold = lock->try_acquire_for(scaled(5s), ec);
      REQUIRE_FALSE(ec);
      CHECK(redis.command(name, {"EXISTS", name}) == "1");
      hold->release(ec);
      CHECK_FALSE(ec);
      CHECK(redis.command(name, {"EXISTS", name}) == "0");
    }
  });
}

TEMPLATE_TEST_CASE("no two holders overlap: contended locks in several slots, on every master", "[cluster][history]",
                   ClusterTokenSpin, ClusterHashPubSub, ClusterQueue) {
  dlock::test::cluster_servers redis;
  auto& cluster = redis.cluster;
  // Two locks on each master.
  std::vector<std::string> names;
  for (auto m : cluster.masters())
    for (int i = 0; i < 2; ++i) names.push_back(name_on(cluster, m, "history-" + std::to_string(i)));
  dlock::test::hold_history history;
  std::vector<std::unique_ptr<TestType>> locks;
  for (auto& n : names)
    locks.push_back(
        std::make_unique<TestType>(redis.backend, n, typename TestType::ownership_type{}, r::Watchdog{scaled(10s)}));
  constexpr int threads = 6, holds = 30;
  std::atomic<int> failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < holds; ++i) {
        auto k = static_cast<std::size_t>(t * 7 + i * 3) % locks.size();
        try {
          auto hold = locks[k]->acquire();
          dlock::test::hold_span span{names[k], "t" + std::to_string(t), dlock::test::monotonic_ns(), 0};
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          span.end_ns = dlock::test::monotonic_ns();
          history.add(span);
          hold.release();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "history worker: %s\n", e.what());
          ++failures;
        }
      }
    });
  for (auto& th : pool) th.join();
  CHECK(failures == 0);
  CHECK(history.size() == threads * holds);
  CHECK(history.overlaps().empty());
}

TEST_CASE("readers share and writers exclude in slots on every master, and a semaphore's permits count",
          "[cluster][history]") {
  dlock::test::cluster_servers redis;
  std::vector<std::string> names;
  for (auto m : redis.cluster.masters()) names.push_back(name_on(redis.cluster, m, "kinds-rw"));
  dlock::test::shared_kinds_test(redis, names, "kinds:permits");
}

TEST_CASE("a script whose keys span slots is refused before it is sent, naming the keys", "[cluster]") {
  dlock::test::cluster_servers redis;
  static const dlock::redis::script s("return 1");
  try {
    redis.backend.eval(s, {"a", "b"}, {});
    FAIL("no exception");
  } catch (const std::system_error& e) {
    CHECK(e.code() == dlock::error::cross_slot);
    CHECK(std::string(e.what()).find("\"a\" (slot 15495)") != std::string::npos);
    CHECK(std::string(e.what()).find("\"b\" (slot 3300)") != std::string::npos);
  }
  std::promise<std::error_code> async_ec;
  redis.backend.async_eval(s, {"a", "b"}, {}, [&](std::error_code ec, dlock::redis::value) { async_ec.set_value(ec); });
  CHECK(async_ec.get_future().get() == dlock::error::cross_slot);
  CHECK(redis.backend.eval(s, {"{a}1", "{a}2"}, {}).integer == 1);
}

TEST_CASE("pub/sub waits use sharded pub/sub: the release wakes a waiter on the lock's shard only", "[cluster]") {
  dlock::test::cluster_servers redis;
  auto& cluster = redis.cluster;
  const std::string name = "sharded-wait";
  const auto master = cluster.master_of_slot(slot_of(name));
  const auto other = other_master(cluster, master);
  const auto ssub_before = dlock::test::command_calls(cluster.node(master), "ssubscribe");
  const auto sub_before = dlock::test::command_calls(cluster.node(master), "subscribe");
  const auto publish_elsewhere = dlock::test::command_calls(cluster.node(other), "spublish");
  const auto publish_here = dlock::test::command_calls(cluster.node(master), "spublish");

  ClusterHashPubSub holder(redis.backend, name, {}, r::Watchdog{scaled(10s)});
  dlock::ClusterBackend second(cluster.url());
  ClusterHashPubSub waiter(second, name, {}, r::Watchdog{scaled(10s)});
  auto hold = holder.acquire();
  auto waiting = std::async(std::launch::async, [&] {
    auto t0 = std::chrono::steady_clock::now();
    auto h = waiter.try_acquire_for(scaled(20s));
    return std::pair{h.has_value(), std::chrono::steady_clock::now() - t0};
  });
  // The lock's channel, its presence channel and the backend's own.
  REQUIRE(dlock::test::wait_until([&] { return second.channel_count() == 3; }, scaled(5s)));
  std::this_thread::sleep_for(scaled(300ms));
  hold.release();
  auto [got, took] = waiting.get();
  CHECK(got);
  CHECK(took < scaled(5s));  // woken by the message, not by its lease (10 s)
  CHECK(dlock::test::command_calls(cluster.node(master), "ssubscribe") > ssub_before);
  CHECK(dlock::test::command_calls(cluster.node(master), "subscribe") == sub_before);
  // The release script's SPUBLISH (commandstats counts a script's commands).
  CHECK(dlock::test::command_calls(cluster.node(master), "spublish") > publish_here);
  CHECK(dlock::test::command_calls(cluster.node(other), "spublish") == publish_elsewhere);
}

TEST_CASE("Redisson's lock on a cluster and dlock's wake each other's waiters (sharded pub/sub, on the wire)",
          "[cluster][redisson]") {
  dlock::test::cluster_servers redis;
  for (const std::string name : {"redisson:plain", "redisson:{7}"}) {
    CAPTURE(name);
    const auto channel = o::ReentrantHash::channel(name);
    REQUIRE(slot_of(channel) == slot_of(name));
    auto& master = redis.plain(name);

    // Redisson holds it: its hash, its field "<uuid>:<thread>" and its
    // lease. A dlock waiter subscribes and waits.
    master.exec(dlock::redis::request().push("HSET", name, "c0ffee:1", 1).push("PEXPIRE", name, 30000));
    ClusterHashPubSub waiter(redis.backend, name, {}, r::Watchdog{scaled(10s)});
    auto waiting = std::async(std::launch::async, [&] { return timed_take(waiter); });
    REQUIRE(dlock::test::wait_until([&] { return registered(master, name) == 1; }, scaled(5s)));
    // Redisson's release, as it goes on the wire on a cluster with sharded
    // pub/sub: the channel passed as a key beside the lock, the publish
    // command as an argument ("SPUBLISH"), the message "0".
    static const dlock::redis::script redisson_unlock(
        "redis.call('del', KEYS[1]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1");
    std::this_thread::sleep_for(scaled(200ms));
    master.eval(redisson_unlock, {name, channel}, {"0", "SPUBLISH"});
    auto [got, took] = waiting.get();
    CHECK(got);
    CHECK(took < scaled(5s));  // the message, not the 30 s lease

    // dlock holds it; Redisson's waiter is a sharded subscriber of the same
    // channel on the lock's shard, and hears "0" when dlock releases.
    auto cfg = master.settings();
    cfg.sharded_pubsub = true;
    dlock::RedisBackend redisson(cfg);
    ClusterHashPubSub holder(redis.backend, name, {}, r::Watchdog{scaled(10s)});
    CHECK(heard_on_release(redisson, channel, holder) == "0");
  }
}

TEST_CASE("classic pub/sub on a cluster (sharded_pubsub false): Redisson's PUBLISH on any node wakes a dlock "
          "waiter, and dlock's release reaches a SUBSCRIBE on any node",
          "[cluster][redisson]") {
  dlock::test::cluster_servers redis;
  auto cfg = dlock::redis::parse_cluster_url(redis.cluster.url());
  cfg.sharded_pubsub = false;
  dlock::ClusterBackend classic(cfg);
  REQUIRE_FALSE(dlock::ext::sharded_pubsub(classic));
  REQUIRE(dlock::ext::sharded_pubsub(redis.backend));
  // "x}y": Redisson's channel is in another slot than the lock; classic
  // pub/sub has no slots, so it stays Redisson's own.
  for (const std::string name : {"classic:plain", "x}y"}) {
    CAPTURE(name);
    const auto channel = o::ReentrantHash::channel(name);
    CHECK(dlock::ext::release_channel<o::ReentrantHash>(classic, name) == channel);
    auto& master = redis.plain(name);
    auto& cluster = redis.cluster;
    const auto channel_master = cluster.master_of_slot(slot_of(channel));
    auto& elsewhere =
        redis.plain(name_on(cluster, other_master(cluster, cluster.master_of_slot(slot_of(name))), "elsewhere"));
    const auto ssub_before = dlock::test::command_calls(cluster.node(channel_master), "ssubscribe");
    const auto sub_before = dlock::test::command_calls(cluster.node(channel_master), "subscribe");

    master.exec(dlock::redis::request().push("HSET", name, "c0ffee:1", 1).push("PEXPIRE", name, 30000));
    ClusterHashPubSub waiter(classic, name, {}, r::Watchdog{scaled(10s)});
    auto waiting = std::async(std::launch::async, [&] { return timed_take(waiter); });
    REQUIRE(dlock::test::wait_until([&] { return registered(master, name) == 1; }, scaled(5s)));
    std::this_thread::sleep_for(scaled(200ms));
    // Redisson's release with classic pub/sub: the key deleted on its
    // master, the message published wherever Redisson's connection is.
    master.command(dlock::redis::request().push("DEL", name));
    elsewhere.command(dlock::redis::request().push("PUBLISH", channel, "0"));
    auto [got, took] = waiting.get();
    CHECK(got);
    CHECK(took < scaled(5s));  // the message, not the 30 s lease
    CHECK(dlock::test::command_calls(cluster.node(channel_master), "ssubscribe") == ssub_before);
    CHECK(dlock::test::command_calls(cluster.node(channel_master), "subscribe") > sub_before);

    // dlock's release reaches Redisson's classic subscriber on another node.
    dlock::RedisBackend redisson(elsewhere.settings());
    ClusterHashPubSub holder(classic, name, {}, r::Watchdog{scaled(10s)});
    CHECK(heard_on_release(redisson, channel, holder) == "0");
  }
}

TEST_CASE("ClusterBackend's blocking forms go out on the calling thread, as one server's do", "[cluster]") {
  dlock::test::cluster_servers redis;
  dlock::ClusterBackend backend(redis.cluster.url());
  const std::string key = "{fast}:form";
  static const dlock::redis::script get("return redis.call('GET', KEYS[1])");
  backend.command(key, dlock::redis::request().push("SET", key, "0"));  // the map read, a connection made
  // The backend's I/O thread stays busy until the calls below are done (or
  // 10 s pass): calls that needed it would wait for it.
  std::promise<void> stuck, calls_done;
  auto finished = calls_done.get_future();
  std::promise<bool> io_thread_saw;
  boost::asio::post(backend.get_executor(), [&] {
    stuck.set_value();
    io_thread_saw.set_value(finished.wait_for(scaled(10s)) == std::future_status::ready);
  });
  stuck.get_future().wait();
  CHECK(backend.command(key, dlock::redis::request().push("SET", key, "1")).str == "OK");
  CHECK(backend.eval(get, {key}, {}).str == "1");
  CHECK(backend.exec(key, dlock::redis::request().push("INCR", key).push("GET", key)).at(1).str == "2");
  calls_done.set_value();
  CHECK(io_thread_saw.get_future().get());  // every call returned while the I/O thread was busy
}

TEST_CASE("a subscribe still on its way when the backend goes completes with shutting_down", "[cluster]") {
  dlock::test::cluster_servers redis;
  const std::string channel = "{going}:ch";
  const auto master = redis.cluster.master_of_slot(slot_of(channel));
  auto backend = std::make_unique<dlock::ClusterBackend>(redis.cluster.url());
  // Its master stopped: the SSUBSCRIBE waits (for the connect, or for its
  // reply) when the backend is destroyed.
  redis.cluster.node(master).pause();
  auto pending = backend->async_subscribe(channel, channel, [](std::optional<std::string_view>) {},
                                          boost::asio::use_future);
  std::this_thread::sleep_for(scaled(200ms));
  backend.reset();
  redis.cluster.node(master).resume();
  REQUIRE(pending.wait_for(scaled(5s)) == std::future_status::ready);
  try {
    pending.get();
    FAIL("the subscribe succeeded on a stopped master");
  } catch (const boost::system::system_error& e) {
    CHECK(e.code() == dlock::error::shutting_down);
  }  // a std::future_error (broken promise) fails the test: the callback was dropped
  redis.cluster.wait_ok();
}

TEST_CASE("a sharded subscription ends cleanly: SUNSUBSCRIBE's reply is not taken for a node's own push",
          "[cluster]") {
  dlock::test::cluster_servers redis;
  const std::string channel = "{ends}:ch";
  auto& master = redis.plain(channel);
  auto cfg = master.settings();
  cfg.sharded_pubsub = true;
  dlock::RedisBackend node(cfg);
  for (int round = 0; round < 3; ++round) {
    const auto message = "m" + std::to_string(round);
    CHECK(heard_after(node, channel, [&] {
            master.command(dlock::redis::request().push("SPUBLISH", channel, message));
          }) == message);
    CHECK(dlock::test::wait_until([&] {
      return master.command(dlock::redis::request().push("PUBSUB", "SHARDNUMSUB", channel)).elements.at(1).integer == 0;
    }));
  }
  // One connection all along: no reply was ever out of step.
  CHECK(node.subscriber().link().statistics().connects == 1);
}

TEST_CASE("a slot that moves: MOVED is followed, held locks stay held, and their waiters are woken",
          "[cluster][migration]") {
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .replicas_per_master = 0});
  dlock::ClusterBackend backend(cluster.url());
  dlock::ClusterBackend second(cluster.url());
  const auto from = cluster.masters().front();
  const auto to = other_master(cluster, from);
  const std::string name = name_on(cluster, from, "moving");
  const auto slot = slot_of(name);

  ClusterHashPubSub holder(backend, name, {}, r::Watchdog{scaled(3s)});
  ClusterHashPubSub waiter(second, name, {}, r::Watchdog{scaled(3s)});
  auto hold = holder.acquire();
  auto waiting = std::async(std::launch::async, [&] { return waiter.try_acquire_for(scaled(30s)).has_value(); });
  // The lock's channel, its presence channel and the backend's own.
  REQUIRE(dlock::test::wait_until([&] { return second.channel_count() == 3; }, scaled(5s)));

  // The whole slot moves, the lock's key with it (MIGRATE keeps its TTL).
  cluster.move_slot(slot, from, to);
  // The holder's next renewal finds the key on the new master through a
  // MOVED; a lease of 3 s is renewed three times over.
  std::this_thread::sleep_for(scaled(3500ms));
  CHECK(static_cast<bool>(hold));
  CHECK_FALSE(hold.lost());
  CHECK(cluster.node(to).command({"EXISTS", name}) == "1");
  CHECK(backend.moved_followed() >= 1);
  CHECK(backend.master_of(name)->port == cluster.node(to).port());
  // The waiter's subscription moved with the slot: the release on the new
  // master wakes it.
  REQUIRE(dlock::test::wait_until([&] { return dlock::test::command_calls(cluster.node(to), "ssubscribe") >= 1; },
                                  scaled(5s)));
  hold.release();
  CHECK(waiting.get());
}

TEST_CASE("a lock taken mid-migration is sent to the importing node behind ASKING", "[cluster][migration]") {
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .replicas_per_master = 0});
  dlock::ClusterBackend backend(cluster.url());
  const auto from = cluster.masters().front();
  const auto to = other_master(cluster, from);
  const std::string name = name_on(cluster, from, "asked");
  const auto slot = slot_of(name);
  // The slot is migrating and the key is not on the old owner: the old
  // owner answers ASK, and only ASKING gets the command into the new one.
  cluster.begin_migration(slot, from, to);
  ClusterTokenSpin lock(backend, name, {}, r::Watchdog{scaled(10s)});
  {
    auto hold = lock.acquire();
    CHECK(backend.ask_followed() >= 1);
    // The key is on the importing node, which shows it only behind ASKING.
    dlock::RedisBackend importing(cluster.node(to).url());
    auto r = importing.exec(dlock::redis::request().push("ASKING").push("EXISTS", name));
    REQUIRE(r.size() == 2);
    CHECK(r[1].integer == 1);
    CHECK(cluster.node(from).command({"EXISTS", name}).rfind("ASK ", 0) == 0);
    hold.release();
  }
  cluster.migrate_keys(slot, from, to);
  cluster.finish_migration(slot, to);
  auto hold = lock.acquire();
  CHECK(cluster.node(to).command({"EXISTS", name}) == "1");
  hold.release();
}

TEST_CASE("a release while its slot's keys are half migrated waits out TRYAGAIN", "[cluster][migration]") {
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .replicas_per_master = 0});
  auto cfg = dlock::redis::parse_cluster_url(cluster.url());
  cfg.retry_for = scaled(3s);
  dlock::ClusterBackend backend(cfg);
  const auto from = cluster.masters().front();
  const auto to = other_master(cluster, from);
  const std::string name = name_on(cluster, from, "half");
  const auto slot = slot_of(name);
  ClusterHashPubSub lock(backend, name, {}, r::Watchdog{scaled(10s)});
  auto hold = lock.acquire();
  // The lock's key moves to the importing node; its release marker's key
  // (the script's second key) exists nowhere yet. The old owner answers
  // ASK (none of the keys is there), the importing node TRYAGAIN (only some
  // are): a multi-key script cannot run until the slot's migration ends.
  cluster.begin_migration(slot, from, to);
  REQUIRE(cluster.migrate_key(name, from, to));
  auto finisher = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(scaled(500ms));
    cluster.migrate_keys(slot, from, to);
    cluster.finish_migration(slot, to);
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  hold.release(ec);
  const auto took = std::chrono::steady_clock::now() - t0;
  finisher.get();
  CHECK_FALSE(ec);
  CHECK(took >= scaled(400ms));  // it waited for the migration's end
  CHECK(backend.ask_followed() >= 1);
  CHECK(cluster.node(to).command({"EXISTS", name}) == "0");
}

TEST_CASE("replica acknowledgement on a cluster: WAIT on the master of the lock's slot", "[cluster][acknowledge]") {
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .replicas_per_master = 1});
  auto cfg = dlock::redis::parse_cluster_url(cluster.url());
  // Long enough for a replica on a busy machine; a paused one waits it out.
  cfg.node.acknowledge = dlock::redis::replica_ack{dlock::redis::replica_ack::all, scaled(2s)};
  cfg.node.command_timeout = scaled(10s);
  dlock::ClusterBackend backend(cfg);
  REQUIRE(backend.acknowledges());
  const auto master = cluster.masters().front();
  const std::string name = name_on(cluster, master, "acked");
  auto [body, acks] = backend
                          .async_exec_acknowledged(name, dlock::redis::request().push("SET", name, "x"),
                                                   boost::asio::use_future)
                          .get();
  CHECK(body.at(0).str == "OK");
  CHECK(acks.wanted == 1);
  CHECK(acks.met());

  const std::string lock_name = name_on(cluster, master, "acked-lock");
  ClusterTokenSpin lock(backend, lock_name, {}, r::Watchdog{scaled(10s)});
  lock.acquire().release();
  // Its replica stops: no write of that master's slots can be acknowledged,
  // so no lock there is granted; another master's locks still are.
  const auto replica = cluster.replica_of(master);
  // (Asked before the pause: the harness's questions go to every node.)
  const auto elsewhere_name = name_on(cluster, other_master(cluster, master), "acked-elsewhere");
  cluster.node(replica).pause();
  std::error_code lock_ec;
  auto hold = lock.try_acquire_for(scaled(3s), lock_ec);
  CHECK_FALSE(hold);
  CHECK(lock_ec == dlock::error::not_acknowledged);
  CHECK(cluster.node(master).command({"EXISTS", lock_name}) == "0");  // given back
  ClusterTokenSpin elsewhere(backend, elsewhere_name, {}, r::Watchdog{scaled(10s)});
  elsewhere.acquire().release();
  cluster.node(replica).resume();
}

TEST_CASE("the FIFO hand-off keeps its order on a cluster", "[cluster][hand-off]") {
  dlock::test::cluster_servers redis;
  const std::string name = "line";
  const std::string line = o::Queue::queue_key(name);
  ClusterQueue holder(redis.backend, name, {}, r::Watchdog{scaled(10s)});
  auto hold = holder.acquire();
  std::vector<std::unique_ptr<dlock::test::worker>> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.push_back(std::make_unique<dlock::test::worker>(std::vector<std::string>{
        "line", redis.worker_spec(), ClusterQueue::combination_name(), name, std::to_string(i)}));
    REQUIRE(waiters.back()->read_line(scaled(20s)) == "waiting");
    // The next one starts only when this one is in the line.
    REQUIRE(dlock::test::wait_until([&] { return redis.command(line, {"LLEN", line}) == std::to_string(i + 1); }));
  }
  hold.release();
  for (auto& wk : waiters) {
    CHECK(wk->read_line(scaled(30s)) == "done");
    CHECK(wk->wait() == 0);
  }
  auto order = redis.plain(name + ":order").command(dlock::redis::request().push("LRANGE", name + ":order", 0, -1));
  REQUIRE(order.elements.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(order.elements[static_cast<std::size_t>(i)].str == std::to_string(i));
}

TEST_CASE("a master with no replica dies: its slots' commands fail with a clear error, no hang",
          "[cluster][failover]") {
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .replicas_per_master = 0});
  auto cfg = dlock::redis::parse_cluster_url(cluster.url());
  cfg.retry_for = scaled(1s);
  // On a loaded machine the try can be queued on the dead node's
  // connection before its death is seen, and then take two command
  // timeouts (the queued command, then its retry after the slot map is read
  // again): 10.0008 s with the default 5 s, against the 10 s below. The
  // bound is what this test is about, so it uses a shorter timeout.
  cfg.node.command_timeout = scaled(2s);
  dlock::ClusterBackend backend(cfg);
  const auto victim = cluster.masters().front();
  const std::string name = name_on(cluster, victim, "orphan");
  cluster.node(victim).kill();
  ClusterTokenSpin lock(backend, name, {}, r::Watchdog{scaled(10s)});
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  auto hold = lock.try_acquire_for(scaled(500ms), ec);
  CHECK_FALSE(hold);
  CHECK(ec);
  CHECK(ec != dlock::error::not_acquired);
  CHECK(std::chrono::steady_clock::now() - t0 < scaled(10s));
  // (Once the nodes agree that the master failed, every node refuses every
  // slot with CLUSTERDOWN, since Redis requires full slot coverage by
  // default: the other masters' locks then fail the same clear way.)
}

TEST_CASE("a master dies and its replica is promoted: locks on its slots work again", "[cluster][failover]") {
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .replicas_per_master = 1});
  dlock::ClusterBackend backend(cluster.url());
  const auto victim = cluster.masters().front();
  const std::string name = name_on(cluster, victim, "promoted");
  ClusterTokenSpin lock(backend, name, {}, r::Watchdog{scaled(10s)});
  lock.acquire().release();
  const auto t0 = std::chrono::steady_clock::now();
  const auto promoted = cluster.kill_master_and_wait(victim);
  std::error_code ec;
  auto hold = lock.try_acquire_for(scaled(20s), ec);
  REQUIRE_FALSE(ec);
  WARN("from the master's death to a lock on its promoted replica: "
       << std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()
       << " ms");
  CHECK(cluster.node(promoted).command({"EXISTS", name}) == "1");
  CHECK(backend.master_of(name)->port == cluster.node(promoted).port());
  hold->release();
}

// A failover the client's slot map has not caught up with, met first by a
// blocking acquire with replica acknowledgement on (the default): its ROLE
// finds a replica where the map names the slot's master. Nothing was sent,
// so the acquire must read the map again and take the lock at the promoted
// node. It failed with not_master before, where a worker of the Cluster
// deployment fault met the restarted old master (CI, at 4db0410).
TEST_CASE("a blocking acquire that meets a demoted master reads the slot map again",
          "[cluster][failover][acknowledge]") {
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .replicas_per_master = 1});
  dlock::ClusterBackend backend(cluster.url());
  REQUIRE(backend.acknowledges());
  const auto master = cluster.masters().front();
  const auto replica = cluster.replica_of(master);
  const std::string name = name_on(cluster, master, "demoted");
  // No lock write has gone to `master` yet: its count of replicas is
  // unknown, so the acquire asks ROLE first. Either no connection to it is
  // open, and a new one's handshake finds a replica (each waited a whole
  // command timeout for a master before); or this thread's blocking
  // connection was opened before the failover, and ROLE on it says
  // "slave" (that reply was returned as the acquire's error).
  const bool opened_before = GENERATE(false, true);
  CAPTURE(opened_before);
  if (opened_before) CHECK(backend.command(name, dlock::redis::request().push("EXISTS", name)).integer == 0);
  REQUIRE(cluster.node(replica).command({"CLUSTER", "FAILOVER"}) == "OK");
  REQUIRE(dlock::test::wait_until([&] { return cluster.master_of_slot(slot_of(name)) == replica; }, scaled(30s)));
  cluster.wait_ok(scaled(30s));
  REQUIRE(cluster.node(master).command({"ROLE"}).rfind("slave", 0) == 0);
  REQUIRE(backend.master_of(name)->port == cluster.node(master).port());  // the map is behind
  ClusterTokenSpin lock(backend, name, {}, r::Watchdog{scaled(10s)});
  std::error_code ec;
  auto hold = lock.try_acquire_for(scaled(5s), ec);
  CHECK_FALSE(ec);
  REQUIRE(hold);
  CHECK(cluster.node(replica).command({"EXISTS", name}) == "1");
  CHECK(backend.master_of(name)->port == cluster.node(replica).port());
  hold->release();
}

// A failback: the node a client's connection refused as a replica (it
// found one where the map named a master) is promoted back. The connection
// tried again only after its reconnect backoff (up to `reconnect_wait_max`,
// 2 s by default, 30 s here), and until then every command for the node's
// slots failed with not_master once `retry_for` (1 s) ran out. Now a fresh
// map that still names the refused node tells its connection to connect at
// once, and commands wait for that attempt instead of being refused.
TEST_CASE("a node promoted back while its connection refuses it as a replica serves again at once",
          "[cluster][failover]") {
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .replicas_per_master = 1});
  auto cfg = dlock::redis::parse_cluster_url(cluster.url());
  // Refused connects come at 10, 20, 40 ms... after the kill below, the
  // waits doubling: by 6 s the connection waits from about 5.1 s to 10.2 s.
  cfg.node.reconnect_wait = 10ms;
  cfg.node.reconnect_wait_max = scaled(30s);
  dlock::ClusterBackend backend(cfg);
  const auto master = cluster.masters().front();
  const auto replica = cluster.replica_of(master);
  const std::string name = name_on(cluster, master, "failback");
  // SET name value, on the asynchronous (routed) path: its error, or
  // server_error for an error reply.
  auto set = [&](const std::string& value) {
    std::promise<std::error_code> done;
    backend.async_exec(name, dlock::redis::request().push("SET", name, value),
                       [&](dlock::redis::error_code ec, dlock::redis::response r) {
                         if (!ec && (r.size() != 1 || r[0].is_error())) ec = dlock::error::server_error;
                         done.set_value(ec);
                       });
    return done.get_future().get();
  };
  auto failover_to = [&](std::size_t to, std::size_t from) {
    REQUIRE(cluster.node(to).command({"CLUSTER", "FAILOVER"}) == "OK");
    REQUIRE(dlock::test::wait_until([&] { return cluster.master_of_slot(slot_of(name)) == to; }, scaled(30s)));
    cluster.wait_ok(scaled(30s));
    REQUIRE(dlock::test::wait_until([&] { return cluster.node(from).command({"ROLE"}).rfind("slave", 0) == 0; },
                                    scaled(30s)));
  };
  const auto at = *backend.master_of(name);
  REQUIRE(at.port == cluster.node(master).port());
  REQUIRE(dlock::test::wait_until([&] { return backend.node_statistics(at) && backend.node_statistics(at)->up; }));
  failover_to(replica, master);
  // The client's connection to `master` is closed; connecting again, it
  // finds a replica and refuses.
  REQUIRE(cluster.node(master).command({"CLIENT", "KILL", "TYPE", "normal"}) != "0");
  const auto killed = std::chrono::steady_clock::now();
  REQUIRE(dlock::test::wait_until([&] { return backend.node_statistics(at)->refusing; }, scaled(5s)));
  CHECK_FALSE(set("1"));  // refused there: the fresh map names `replica`
  CHECK(cluster.node(replica).command({"GET", name}) == "1");
  std::this_thread::sleep_until(killed + scaled(6s));
  failover_to(master, replica);
  WARN("after the failback, " << std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now() - killed)
                                     .count()
                              << " ms after the kill, the connection refuses: "
                              << backend.node_statistics(at)->refusing);
  const auto started = std::chrono::steady_clock::now();
  const auto ec = set("2");
  const auto took = std::chrono::steady_clock::now() - started;
  WARN("the command after the failback: " << ec.message() << " after "
                                          << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                          << " ms");
  CHECK_FALSE(ec);
  CHECK(cluster.node(master).command({"GET", name}) == "2");
  CHECK(backend.master_of(name) == at);
}

// Found by CI in deployment_cluster: a command sent while its master was
// dead waited in that master's connection queue (the map still named it:
// the cluster had not failed over yet). The master came back as a replica
// of the node promoted meanwhile, the connection found a replica and failed
// the command with not_master, and the routed path, its retry_for long
// over, returned that instead of following the fresh map as it follows a
// MOVED reply.
TEST_CASE("a command queued at a dead master that comes back as a replica follows the promoted one",
          "[cluster][failover]") {
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .replicas_per_master = 1});
  auto cfg = dlock::redis::parse_cluster_url(cluster.url());
  cfg.node.command_timeout = scaled(60s);  // the command outlasts the failover in the dead master's queue
  dlock::ClusterBackend backend(cfg);
  const auto master = cluster.masters().front();
  const std::string name = name_on(cluster, master, "queued");
  auto set = [&](const std::string& value) {
    auto done = std::make_shared<std::promise<std::error_code>>();
    backend.async_exec(name, dlock::redis::request().push("SET", name, value),
                       [done](dlock::redis::error_code ec, dlock::redis::response r) {
                         if (!ec && (r.size() != 1 || r[0].is_error())) ec = dlock::error::server_error;
                         done->set_value(ec);
                       });
    return done->get_future();
  };
  REQUIRE_FALSE(set("0").get());  // connected, the map known
  auto failover = std::async(std::launch::async, [&] { return cluster.kill_master_and_wait(master, scaled(30s)); });
  // The master is dead, and the cluster has not noticed yet (that takes
  // its node timeout, 2 s, not scaled by a sanitizer): the map still names it.
  std::this_thread::sleep_for(500ms);
  auto queued = set("1");
  const auto promoted = failover.get();
  REQUIRE(queued.wait_for(0s) == std::future_status::timeout);  // still waiting in the dead master's queue
  cluster.node(master).start();  // back as a replica of `promoted`
  REQUIRE(queued.wait_for(scaled(30s)) == std::future_status::ready);
  const auto ec = queued.get();
  INFO(ec.message());
  CHECK_FALSE(ec);
  CHECK(cluster.node(promoted).command({"GET", name}) == "1");
}

// Seed 003's failover story on a cluster. The replica is cut off from its
// master before A's acquire (stopped, and its replication link closed by
// the master, so not even the kernel's buffers carry the write to it);
// then the master dies, the replica comes back and is promoted without the
// lock's key, and B asks for the lock.
TEST_CASE("a master dies before its replica has the lock: two holders without WAIT, one with it (the default)",
          "[cluster][failover][acknowledge]") {
  // Off, `all` set in code, and the default (if_any: this master had a
  // replica, so one is wanted although none is connected when A asks).
  const int setting = GENERATE(0, 1, 2);
  const bool acknowledged = setting != 0;
  CAPTURE(setting);
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .replicas_per_master = 1});
  auto cfg = dlock::redis::parse_cluster_url(cluster.url());
  if (setting == 0) cfg.node.acknowledge = dlock::redis::replica_ack{.replicas = dlock::redis::replica_ack::none};
  if (setting == 1) cfg.node.acknowledge = dlock::redis::replica_ack{dlock::redis::replica_ack::all, scaled(500ms)};
  dlock::ClusterBackend a_side(cfg);
  const auto master = cluster.masters().front();
  const auto replica = cluster.replica_of(master);
  const std::string name = name_on(cluster, master, "story");
  ClusterTokenSpin a(a_side, name, {}, r::Watchdog{scaled(30s)});
  a.acquire().release();  // the script is loaded, the connections are up

  cluster.node(replica).pause();
  cluster.node(master).command({"CLIENT", "KILL", "TYPE", "replica"});
  std::error_code a_ec;
  auto a_hold = a.try_acquire_for(scaled(1500ms), a_ec);
  cluster.node(master).kill();
  cluster.node(replica).resume();
  cluster.wait_ok(scaled(30s));
  REQUIRE(cluster.master_of_slot(slot_of(name)) == replica);

  dlock::ClusterBackend b_side(cluster.url());
  ClusterTokenSpin b(b_side, name, {}, r::Watchdog{scaled(30s)});
  std::error_code b_ec;
  auto b_hold = b.try_acquire_for(scaled(10s), b_ec);
  REQUIRE_FALSE(b_ec);
  REQUIRE(b_hold);
  if (!acknowledged) {
    // Reproduced: A holds by its own account, and so does B.
    CHECK(a_hold);
    CHECK_FALSE(a_ec);
  } else {
    // Prevented: the replica never acknowledged A's write, so A's acquire
    // gave it back and failed; B alone holds it.
    CHECK_FALSE(a_hold);
    CHECK(a_ec == dlock::error::not_acknowledged);
  }
}

// The representative combinations (one per ownership and wait) on the
// process's cluster.
TEMPLATE_LIST_TEST_CASE("mutual exclusion on a cluster: 8 threads, then 4 processes", "[lock][cluster]",
                        dlock::combinations::representative_t<dlock::ClusterBackend>) {
  dlock::test::mutual_exclusion_test<dlock::test::cluster_servers, TestType>();
}

TEMPLATE_LIST_TEST_CASE("a hold on a cluster reports its lease and keeps others out", "[lock][cluster]",
                        dlock::combinations::representative_t<dlock::ClusterBackend>) {
  dlock::test::hold_test<dlock::test::cluster_servers, TestType>();
}
