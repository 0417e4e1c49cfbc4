// The Sentinel and Cluster fixtures of the network fault scenarios
// (fault_scenarios_network.hpp). A client of either asks the deployment
// where its servers are, so a proxy in front of a server is only used when
// the deployment itself names the proxy: the sentinel monitors the master
// through its proxy (sentinel_options::client_proxied), and each cluster
// node announces its proxy's port (cluster-announce-port; the cluster bus
// keeps the node's own port + 10000, so the nodes still see each other
// while a proxy is stalled). The rival, which the faults must not touch,
// is a client of the server that holds the lock, not of the deployment.
#pragma once

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <dlock/detail/key_slot.hpp>

#include "fault_scenarios_network.hpp"

namespace dlock::test::faults {

/// A Sentinel deployment (a master, a replica, a sentinel that waits 10 s
/// before a failover: the stalls here last a few seconds, and the
/// sentinel's own link to the master goes through the proxy too) whose
/// clients reach the master through a fault proxy. Started on first use
/// and kept until the process ends.
inline sentinel_deployment& proxied_sentinel_deployment() {
  static sentinel_deployment deployment(sentinel_options{
      .replicas = 1, .sentinels = 1, .quorum = 1, .down_after_ms = 10000, .client_proxied = true});
  return deployment;
}

/// The proxy `p` forwarding again, without delay: a test that failed
/// midway may have left the shared proxy stalled or slow.
inline void reset(fault_proxy& p) {
  p.resume();
  p.delay(std::chrono::milliseconds(0));
  p.jitter(std::chrono::milliseconds(0));
}

/// The proxied Sentinel deployment, emptied, behind a SentinelBackend
/// (replica acknowledgement on, its default); the rival is a RedisBackend
/// straight to the master.
struct proxied_sentinel {
  using backend_type = SentinelBackend;
  using direct_backend_type = RedisBackend;
  sentinel_deployment& deployment = proxied_sentinel_deployment();
  SentinelBackend backend{(reset(deployment.client_proxy()), flush(deployment), deployment.url())};

  std::vector<fault_proxy*> proxies() { return {&deployment.client_proxy()}; }
  std::unique_ptr<RedisBackend> direct(const std::string&) const {
    return std::make_unique<RedisBackend>(deployment.node(0).url());
  }
};

/// A cluster of 3 masters (no replicas) whose nodes announce the ports of
/// fault proxies in front of them: CLUSTER SLOTS and MOVED name the
/// proxies. Set at run time (CONFIG SET cluster-announce-port), then
/// awaited until every node's CLUSTER NODES names every node by its proxy.
class announced_cluster {
 public:
  announced_cluster() {
    for (std::size_t i = 0; i < cluster.nodes(); ++i)
      proxies_.push_back(std::make_unique<fault_proxy>(cluster.node(i).port()));
    for (std::size_t i = 0; i < cluster.nodes(); ++i)
      cluster.node(i).command({"CONFIG", "SET", "cluster-announce-port", std::to_string(proxies_[i]->port())});
    if (!wait_until([&] { return announced(); }, std::chrono::seconds(20)))
      throw std::runtime_error("the cluster's nodes did not learn each other's proxy ports");
    cluster.wait_ok();
  }

  redis_cluster cluster{3, 0};

  /// The proxies' ports as a ClusterBackend's seed list.
  std::string url() const {
    std::string out = "redis://";
    for (std::size_t i = 0; i < proxies_.size(); ++i)
      out += (i ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(proxies_[i]->port());
    return out;
  }
  std::vector<fault_proxy*> proxies() {
    std::vector<fault_proxy*> out;
    for (auto& p : proxies_) out.push_back(p.get());
    return out;
  }

 private:
  std::vector<std::unique_ptr<fault_proxy>> proxies_;

  bool announced() const {
    for (std::size_t i = 0; i < cluster.nodes(); ++i) {
      auto nodes = cluster.node(i).command({"CLUSTER", "NODES"});
      for (std::size_t j = 0; j < cluster.nodes(); ++j) {
        // "<id> 127.0.0.1:<port>@<bus port> ..."
        auto at = nodes.find(cluster.node_id(j) + " ");
        if (at == std::string::npos) return false;
        auto address = nodes.substr(at, nodes.find('\n', at) - at);
        if (address.find(":" + std::to_string(proxies_[j]->port()) + "@") == std::string::npos) return false;
      }
    }
    return true;
  }
};

/// The announced cluster, started on first use and kept until the process
/// ends.
inline announced_cluster& proxied_cluster_nodes() {
  static announced_cluster nodes;
  return nodes;
}

/// The announced cluster, emptied, behind a ClusterBackend seeded with the
/// proxies; the rival is a RedisBackend on the master that serves the
/// lock's slot, on sharded pub/sub as ClusterBackend is (so that its
/// releases wake the cluster's waiters, and theirs wake it).
struct proxied_cluster {
  using backend_type = ClusterBackend;
  using direct_backend_type = RedisBackend;
  announced_cluster& nodes = proxied_cluster_nodes();
  redis_cluster& cluster = nodes.cluster;
  ClusterBackend backend{(reset_all(nodes), cluster_servers::flush(cluster), nodes.url())};

  std::vector<fault_proxy*> proxies() { return nodes.proxies(); }
  std::unique_ptr<RedisBackend> direct(const std::string& name) const {
    auto cfg = redis::parse_url(
        cluster.node(cluster.master_of_slot(static_cast<std::uint16_t>(detail::key_slot(name)))).url());
    cfg.sharded_pubsub = true;
    return std::make_unique<RedisBackend>(cfg);
  }

 private:
  static bool reset_all(announced_cluster& nodes) {
    for (auto* p : nodes.proxies()) reset(*p);
    return true;
  }
};

}  // namespace dlock::test::faults
