// A Sentinel deployment for tests: a master, replicas that follow it through
// fault proxies (so a test can hold replication back), and sentinels, all on
// free 127.0.0.1 ports. Plain POSIX and the standard library only, like the
// rest of the harness.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <support/fault_proxy.hpp>
#include <support/redis_server.hpp>

namespace dlock::test {

struct sentinel_options {
  int replicas = 2;
  int sentinels = 3;
  int quorum = 2;
  int down_after_ms = 1000;
  /// Long, because Sentinel "fixes" a replica that follows another address
  /// than the master's (here: the proxy) once this much time has passed;
  /// a deployment lives shorter than that.
  int failover_timeout_ms = 60000;
  std::string master_name = "dlockmaster";
  /// Replicas follow the master through fault proxies (so that replication
  /// can be held back); false: directly, as in production (for measuring:
  /// the replication helpers then throw).
  bool proxied = true;
  /// Clients too reach the master through a fault proxy (client_proxy()):
  /// the sentinels monitor the proxy's port, so that is the address they
  /// give. For the network faults (a lost reply, an unreachable master,
  /// latency) on Sentinel; the sentinels' own link goes through it too,
  /// so a stall must stay shorter than down_after_ms. Not for failovers:
  /// the proxy forwards to node 0 only.
  bool client_proxied = false;
  /// Added to each replica's environment (a preloaded clock skew).
  std::vector<std::string> replica_environment{};
  /// TLS only, everywhere: the master, the replicas (replicating over
  /// TLS, through the proxies when proxied) and the sentinels; url() is
  /// rediss-sentinel://.
  std::shared_ptr<const tls_files> tls{};
};

/// Starts on construction, ready for a failover (every sentinel knows every
/// replica and every other sentinel); everything is killed on destruction.
class sentinel_deployment {
 public:
  explicit sentinel_deployment(sentinel_options opts = {});
  ~sentinel_deployment();
  sentinel_deployment(const sentinel_deployment&) = delete;
  sentinel_deployment& operator=(const sentinel_deployment&) = delete;

  /// "redis-sentinel://127.0.0.1:<p1>,127.0.0.1:<p2>,...#<master name>"
  /// ("rediss-sentinel://...?ca_file=<the CA>#<master name>" with TLS).
  std::string url() const;
  const std::string& master_name() const { return opts_.master_name; }

  /// Node 0 is the first master, nodes 1.. its replicas.
  redis_server& node(std::size_t i) { return *nodes_.at(i); }
  const redis_server& node(std::size_t i) const { return *nodes_.at(i); }
  std::size_t nodes() const { return nodes_.size(); }
  /// The node the sentinels name as master now.
  redis_server& master();
  sentinel_group& sentinels() { return *sentinels_; }
  /// The proxy in front of the master (options' client_proxied); throws
  /// std::logic_error without one.
  fault_proxy& client_proxy();

  /// Replication to every replica is held back (the proxies stop
  /// forwarding master -> replica); writes stay on the master alone.
  void hold_replication();
  /// Replication to replica `node` (1..) alone is held back.
  void hold_replication_to(std::size_t node);
  /// Forwards again, held bytes first.
  void release_replication();
  /// Drops whatever replication the proxies held back, and cuts their
  /// connections: for a master that dies with writes its replicas never got.
  void lose_held_replication();

  /// Polls until the sentinels name a master other than `old_port` and
  /// that node answers ROLE as a master; returns its port.
  std::uint16_t wait_for_new_master(std::uint16_t old_port,
                                    std::chrono::milliseconds limit = std::chrono::seconds(30));

 private:
  sentinel_options opts_;
  std::vector<std::unique_ptr<redis_server>> nodes_;
  std::vector<std::unique_ptr<fault_proxy>> proxies_;  // proxies_[i] carries replica i+1's link
  std::unique_ptr<fault_proxy> client_proxy_;          // in front of node 0, when client_proxied
  std::unique_ptr<sentinel_group> sentinels_;
};

}  // namespace dlock::test
