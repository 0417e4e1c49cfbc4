// docs/acl.md's Cluster and Sentinel ACL rules, read from that page: each
// pair of ownership and wait works as a user with exactly such a rule (made
// on every node, and on the sentinels), through a slot migration and a
// failover, and every command a rule grants is used.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/hana/for_each.hpp>

#include <dlock/backend/cluster.hpp>
#include <dlock/backend/sentinel.hpp>
#include <dlock/combinations.hpp>
#include <support/polling.hpp>
#include <support/sentinel_deployment.hpp>

#include "acl_support.hpp"
#include "backend_instances.hpp"  // their Sentinel and Cluster locks, compiled once

using namespace std::chrono_literals;
using dlock::test::redis_server;
using namespace dlock::test::acl;

namespace {

std::string refusals_of(const redis_server& s) { return s.command({"ACL", "LOG"}); }

}  // namespace

TEST_CASE("Cluster: each pair of ownership and wait as a user with exactly docs/acl.md's cluster rule", "[acl][cluster]") {
  const auto rule = documented_rule("cluster");
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3});
  std::vector<const redis_server*> nodes;
  for (std::size_t i = 0; i < cluster.nodes(); ++i) {
    make_user(cluster.node(i), "locks", rule);
    nodes.push_back(&cluster.node(i));
  }
  auto cfg = dlock::redis::parse_cluster_url(cluster.url());
  cfg.node.user = "locks";
  cfg.node.password = "change-me";
  auto all_refusals = [&] {
    std::string out;
    for (const auto* n : nodes) out += refusals_of(*n);
    return out;
  };
  try {
    dlock::ClusterBackend a(cfg), b(cfg);
    boost::hana::for_each(dlock::combinations::representative<dlock::ClusterBackend>(), [&](auto t) {
      using L = typename decltype(t)::type;
      exercise<L>(a, b, {"app:orders:1", "app:{orders}:2"});
    });
    exercise_rare_paths(a, b, [&] {
      for (auto i : cluster.masters()) REQUIRE(cluster.node(i).command({"SCRIPT", "FLUSH"}) == "OK");
    });
    // A lock whose slot is being migrated: the old node answers ASK for a
    // key it does not hold, and the client asks the new one (ASKING).
    const std::string name = "app:moving";
    const auto slot = static_cast<std::uint16_t>(std::stoi(cluster.node(0).command({"CLUSTER", "KEYSLOT", name})));
    const auto from = cluster.master_of_slot(slot);
    const auto to = (from + 1) % 3;
    cluster.begin_migration(slot, from, to);
    using Token = dlock::Lock<dlock::ClusterBackend, dlock::ownership::Token, dlock::renewal::FixedLease,
                              dlock::wait::TryOnce>;
    Token moving(a, name);
    moving.acquire().release();
    cluster.finish_migration(slot, to);
  } catch (const std::system_error& e) {
    FAIL(e.what() << "; ACL LOG: " << all_refusals());
  }
  CHECK(all_refusals() == "");
  std::vector<std::string> stats;
  for (const auto* n : nodes) stats.push_back(commandstats(*n));
  check_every_command_used(rule, stats);
}

TEST_CASE("Cluster: a refused SSUBSCRIBE reads as the server's words", "[acl][cluster]") {
  auto rule = without(documented_rule("cluster"), "&redisson_lock__channel:{app:*");
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3});
  for (std::size_t i = 0; i < cluster.nodes(); ++i) make_user(cluster.node(i), "locks", rule);
  auto cfg = dlock::redis::parse_cluster_url(cluster.url());
  cfg.node.user = "locks";
  cfg.node.password = "change-me";
  dlock::ClusterBackend a(cfg), b(cfg);
  dlock::Lock<dlock::ClusterBackend> first(a, "app:sharded"), second(b, "app:sharded");
  auto hold = first.acquire();
  CHECK_THROWS_WITH(second.try_acquire_for(dlock::test::scaled(3s)),
                    Catch::Contains("acquire 'app:sharded' (Redis replied: NOPERM") &&
                        Catch::Contains("access one of the channels"));
  // The release's SPUBLISH is refused too, inside its script.
  CHECK_THROWS_WITH(hold.release(), Catch::Contains("can't publish to the channel"));
}

TEST_CASE("Sentinel: each pair of ownership and wait as docs/acl.md's two users, through a failover", "[acl][sentinel]") {
  const auto data_rule = documented_rule("sentinel-data");
  const auto sentinel_rule = documented_rule("sentinels");
  dlock::test::sentinel_deployment d(
      dlock::test::sentinel_options{.replicas = 1, .sentinels = 1, .quorum = 1, .proxied = false});
  std::vector<const redis_server*> nodes;
  for (std::size_t i = 0; i < d.nodes(); ++i) {
    make_user(d.node(i), "locks", data_rule);
    nodes.push_back(&d.node(i));
  }
  {
    std::vector<std::string> args{"ACL", "SETUSER", "locks-sentinel"};
    args.insert(args.end(), sentinel_rule.begin(), sentinel_rule.end());
    REQUIRE(d.sentinels().command(0, args) == "OK");
    REQUIRE(d.sentinels().command(0, {"ACL", "LOG", "RESET"}) == "OK");
  }
  auto cfg = dlock::redis::parse_sentinel_url(d.url());
  cfg.master.user = "locks";
  cfg.master.password = "change-me";
  cfg.sentinel_user = "locks-sentinel";
  cfg.sentinel_password = "change-me-too";
  auto all_refusals = [&] {
    std::string out;
    for (const auto* n : nodes) out += refusals_of(*n);
    return out + d.sentinels().command(0, {"ACL", "LOG"});
  };
  try {
    dlock::SentinelBackend a(cfg), b(cfg);
    boost::hana::for_each(dlock::combinations::representative<dlock::SentinelBackend>(), [&](auto t) {
      using L = typename decltype(t)::type;
      exercise<L>(a, b, {"app:orders:1"});
    });
    exercise_rare_paths(a, b, [&] { REQUIRE(d.master().command({"SCRIPT", "FLUSH"}) == "OK"); });
    // The pub/sub waits' subscriptions linger after their last waiter (2 s):
    // their UNSUBSCRIBE counts too.
    CHECK(dlock::test::wait_until(
        [&] { return a.subscriber().channel_count() == 0 && b.subscriber().channel_count() == 0; }));
    CHECK(all_refusals() == "");
    std::vector<std::string> stats;
    for (const auto* n : nodes) stats.push_back(commandstats(*n));
    check_every_command_used(data_rule, stats);
    // The replica, promoted, knows the user too.
    auto& old_master = d.master();
    const auto old_port = old_master.port();
    old_master.kill();
    auto dead = std::find(nodes.begin(), nodes.end(), &old_master);
    REQUIRE(dead != nodes.end());
    nodes.erase(dead);
    d.wait_for_new_master(old_port);
    auto after = dlock::test::make_lock<dlock::Lock<dlock::SentinelBackend>>(a, "app:after");
    CHECK(dlock::test::take_within(*after, dlock::test::scaled(20s)).has_value());
  } catch (const std::system_error& e) {
    FAIL(e.what() << "; ACL LOG: " << all_refusals());
  }
  CHECK(all_refusals() == "");

  // A sentinel keeps no command counts (INFO has no commandstats there):
  // each permission of the sentinels' rule is shown needed instead, by a
  // user without it, whom the sentinel refuses. (Not +unsubscribe: a
  // stopping backend's UNSUBSCRIBE races the connection's close, so it is
  // sent only sometimes; it is granted so that ACL LOG stays clean then.)
  for (const auto& word : sentinel_rule) {
    if ((word[0] != '+' && word[0] != '&') || word == "+unsubscribe") continue;
    INFO("the sentinels' rule without " << word);
    std::vector<std::string> args{"ACL", "SETUSER", "locks-sentinel", "reset"};
    for (const auto& w : without(sentinel_rule, word)) args.push_back(w);
    REQUIRE(d.sentinels().command(0, args) == "OK");
    REQUIRE(d.sentinels().command(0, {"ACL", "LOG", "RESET"}) == "OK");
    // The backend lives until the refusal is seen: its watch subscribes to
    // +switch-master on a connection of its own, in the background, and a
    // backend destroyed first never asks (the lock's try and release take
    // a millisecond; this check failed now and then when `s` was gone by
    // then).
    std::optional<dlock::SentinelBackend> s;
    try {
      s.emplace(cfg);
      dlock::Lock<dlock::SentinelBackend> probe(*s, "app:probe");
      if (probe.try_lock()) probe.unlock();
    } catch (const std::system_error&) {
      // No master without SENTINEL GET-MASTER-ADDR-BY-NAME.
    }
    // The refusal names what was taken away: the command, or the channel.
    const auto what = word.substr(1);
    CHECK(dlock::test::wait_until(
        [&] { return d.sentinels().command(0, {"ACL", "LOG"}).find("object\n" + what + "\n") != std::string::npos; },
        5s));
  }
}
