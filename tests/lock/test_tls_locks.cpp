// Every combination over mutual TLS (rediss:// with a client certificate,
// to a TLS-only server that requires one): the blocking and async
// interfaces, the renewals, and the waits that listen on the subscriber
// connection all run through TLS sessions. Then Sentinel and Cluster
// deployments that speak only TLS, among themselves too.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <boost/asio/use_future.hpp>

#include <dlock/backend/cluster.hpp>
#include <dlock/backend/sentinel.hpp>
#include <dlock/combinations.hpp>
#include <support/sentinel_deployment.hpp>
#include <support/redis_server.hpp>

#include "lock_support.hpp"
#include "backend_instances.hpp"  // their Sentinel and Cluster locks, compiled once

using namespace std::chrono_literals;
using dlock::test::redis_server;
using dlock::test::scaled;
using dlock::test::take_within;

namespace {

std::shared_ptr<const dlock::test::tls_files> files() {
  static const auto made = std::make_shared<const dlock::test::tls_files>();
  return made;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("every combination works over mutual TLS", "[tls]", dlock::combinations::all_t<>) {
  using L = TestType;
  dlock::test::server_options opts;
  opts.tls = files();
  opts.tls_auth_clients = "yes";
  redis_server server(opts);
  auto cfg = dlock::redis::parse_url(server.url() + "&cert_file=" + files()->client().cert +
                                     "&key_file=" + files()->client().key);
  dlock::RedisBackend a(cfg), b(cfg);
  const std::string name = "tls:" + L::combination_name();
  INFO(L::combination_name());
  auto first = dlock::test::make_lock<L>(a, name);
  auto second = dlock::test::make_lock<L>(b, name);
  {
    auto hold = first->acquire();  // the blocking path
    CHECK_FALSE(second->try_acquire());
    auto waiter = std::async(std::launch::async, [&] { return take_within(*second, scaled(5s)).has_value(); });
    std::this_thread::sleep_for(scaled(100ms));
    hold.release();
    CHECK(waiter.get());
  }
  // The async interface, on the shared connection.
  auto hold = first->async_try_acquire_for("async-owner", scaled(5s), boost::asio::use_future).get();
  CHECK(hold.owns_lock());
  CHECK_FALSE(second->try_acquire());
  first->async_release(hold, boost::asio::use_future).get();
  CHECK_FALSE(hold.owns_lock());
  CHECK(take_within(*second, scaled(5s)).has_value());
}

namespace {

template <class Backend>
using HashOn = dlock::Lock<Backend, dlock::ownership::ReentrantHash, dlock::renewal::Watchdog, dlock::wait::PubSub>;

// A lock taken on `a` keeps `b` out, and `b` gets it once it is released.
template <class L, class Backend>
void hold_and_hand_over(Backend& a, Backend& b, const std::string& name) {
  L first(a, name), second(b, name);
  auto hold = first.acquire();
  CHECK_FALSE(second.try_acquire());
  auto waiter = std::async(std::launch::async, [&] { return take_within(second, scaled(5s)).has_value(); });
  std::this_thread::sleep_for(scaled(100ms));
  hold.release();
  CHECK(waiter.get());
}

}  // namespace

TEST_CASE("a Sentinel deployment over TLS: sentinels, master and replica, through a failover", "[tls][sentinel]") {
  dlock::test::sentinel_deployment d(dlock::test::sentinel_options{
      .replicas = 1, .sentinels = 1, .quorum = 1, .proxied = false, .tls = files()});
  INFO(d.url());
  auto cfg = dlock::redis::parse_sentinel_url(d.url());
  REQUIRE(cfg.sentinel_tls);
  REQUIRE(cfg.master.tls);
  {
    // Sentinels whose certificate is not trusted: the reason, not "no sentinel".
    auto untrusted = cfg;
    untrusted.sentinel_tls->ca_file = files()->other_ca();
    CHECK(dlock::test::thrown_by([&] { dlock::SentinelBackend s(untrusted); }) ==
          dlock::error::tls_certificate_rejected);
  }
  dlock::SentinelBackend a(cfg), b(cfg);
  using Hash = HashOn<dlock::SentinelBackend>;
  using Token = dlock::Lock<dlock::SentinelBackend, dlock::ownership::Token, dlock::renewal::Watchdog,
                            dlock::wait::Spin>;
  hold_and_hand_over<Hash>(a, b, "tls:sentinel:hash");
  // The master dies: the sentinel (over TLS) promotes the replica
  // (replicating over TLS), and the backends follow it there.
  const auto old_port = d.node(0).port();
  d.node(0).kill();
  d.wait_for_new_master(old_port);
  Token probe(a, "tls:sentinel:after");
  std::optional<Token::hold_type> hold;
  const auto deadline = std::chrono::steady_clock::now() + scaled(30s);
  while (!hold && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    hold = probe.try_acquire_for(scaled(200ms), ec);
  }
  REQUIRE(hold);
  CHECK(a.master_address()->port != old_port);
  hold->release();
  hold_and_hand_over<Token>(a, b, "tls:sentinel:token");
}

TEST_CASE("a Redis Cluster over TLS: the slot map, each master, sharded pub/sub", "[tls][cluster]") {
  dlock::test::redis_cluster cluster(dlock::test::cluster_options{.masters = 3, .tls = files()});
  INFO(cluster.url());
  auto cfg = dlock::redis::parse_cluster_url(cluster.url());
  REQUIRE(cfg.node.tls);
  {
    // Nodes whose certificate is not for the name checked.
    auto elsewhere = cfg;
    elsewhere.node.tls->server_name = "elsewhere.example";
    CHECK(dlock::test::thrown_by([&] { dlock::ClusterBackend c(elsewhere); }) ==
          dlock::error::tls_hostname_mismatch);
  }
  dlock::ClusterBackend a(cfg), b(cfg);
  using Hash = HashOn<dlock::ClusterBackend>;
  using Queue = dlock::Lock<dlock::ClusterBackend, dlock::ownership::Queue, dlock::renewal::Watchdog,
                            dlock::wait::HandOff>;
  // Names until each master has served one.
  std::set<std::size_t> served;
  for (int n = 0; served.size() < 3 && n < 200; ++n) {
    const std::string name = "tls:cluster:" + std::to_string(n);
    const auto slot = static_cast<std::uint16_t>(std::stoi(cluster.node(0).command({"CLUSTER", "KEYSLOT", name})));
    if (!served.insert(cluster.master_of_slot(slot)).second) continue;
    INFO(name);
    hold_and_hand_over<Hash>(a, b, name);
    hold_and_hand_over<Queue>(a, b, name + ":queue");
  }
  CHECK(served.size() == 3);
}
