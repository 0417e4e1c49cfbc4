// The backends the combination suite runs on, each as a fixture: a backend
// on private servers, and what the tests need to look behind it.
//
//   backend            the backend the locks run on
//   worker_spec()      how a lock_worker process reaches the same servers
//   command(key, args) a command on the server that holds `key` (redis-cli)
//   dbsize()           the keys on all its servers
//   plain(key)         a RedisBackend on the server that holds `key` (the
//                      tests' own counters)
//   another()          a second backend on the same servers (another client)
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <dlock/backend/cluster.hpp>
#include <dlock/backend/redlock.hpp>
#include <dlock/backend/sentinel.hpp>
#include <support/redis_server.hpp>
#include <support/sentinel_deployment.hpp>
#include <support/server_fixture.hpp>

#include "../../examples/sharded_backend.hpp"
#include "redlock_settings.hpp"

namespace dlock::test {

/// One private redis-server.
struct one_server : private_redis {
  using backend_type = RedisBackend;
  std::string worker_spec() const { return server.url(); }
  std::string command(std::string_view, const std::vector<std::string>& args) const { return server.command(args); }
  long long dbsize() const { return std::stoll(server.command({"DBSIZE"})); }
  RedisBackend& plain(std::string_view) { return backend; }
  std::unique_ptr<RedisBackend> another() const { return std::make_unique<RedisBackend>(server.url()); }
};

/// Two private redis-servers behind examples::ShardedBackend: every key on
/// the server its cluster slot picks.
struct two_servers {
  using backend_type = examples::ShardedBackend;
  redis_server first, second;
  examples::ShardedBackend backend{{first.url(), second.url()}};

  /// "shards:<url>,<url>": lock_worker makes the same ShardedBackend.
  std::string worker_spec() const { return "shards:" + first.url() + "," + second.url(); }
  const redis_server& server_for(std::string_view key) const {
    return &backend.shard_for(key) == &backend.shard(0) ? first : second;
  }
  std::string command(std::string_view key, const std::vector<std::string>& args) const {
    return server_for(key).command(args);
  }
  long long dbsize() const {
    return std::stoll(first.command({"DBSIZE"})) + std::stoll(second.command({"DBSIZE"}));
  }
  RedisBackend& plain(std::string_view key) { return backend.shard_for(key); }
  std::unique_ptr<examples::ShardedBackend> another() const {
    return std::make_unique<examples::ShardedBackend>(std::vector<std::string>{first.url(), second.url()});
  }
};

/// The settings of `url` (redis-sentinel://) with replica acknowledgement
/// on: every replica, within 2 s.
inline redis::sentinel_config acknowledged_sentinel_config(std::string_view url) {
  auto cfg = redis::parse_sentinel_url(url);
  cfg.master.acknowledge = redis::replica_ack{redis::replica_ack::all, std::chrono::milliseconds(2000)};
  return cfg;
}

/// The process's Sentinel deployment for the combination suites and the
/// policy tests: a master with one replica and one sentinel (quorum 1:
/// quick to start; the failover tests start three of their own), started
/// on first use and kept until the process ends. Starting and stopping one
/// takes about 5 s: one per test case made the Sentinel suites the longest.
sentinel_deployment& shared_sentinel();

/// Empties the shared deployment's master (the replica follows).
inline bool flush(sentinel_deployment& d) {
  d.node(0).command({"FLUSHALL"});
  return true;
}

/// A Sentinel deployment (by default the shared one), emptied, behind a
/// SentinelBackend.
template <sentinel_deployment& (*Deployment)() = shared_sentinel>
struct basic_sentinel_servers {
  using backend_type = SentinelBackend;
  sentinel_deployment& deployment = Deployment();
  SentinelBackend backend{(flush(deployment), deployment.url())};

  std::string worker_spec() const { return deployment.url(); }
  std::string command(std::string_view, const std::vector<std::string>& args) const {
    return deployment.node(0).command(args);
  }
  long long dbsize() const { return std::stoll(deployment.node(0).command({"DBSIZE"})); }
  RedisBackend& plain(std::string_view) { return backend; }
  std::unique_ptr<SentinelBackend> another() const { return std::make_unique<SentinelBackend>(deployment.url()); }
};
using sentinel_servers = basic_sentinel_servers<>;

/// As sentinel_servers (the same shared deployment), with replica acknowledgement on (every replica,
/// within 2 s): the locks of combinations::acknowledgeable. Its worker
/// spec is the URL after "ack:", which lock_worker reads the same way.
struct acknowledged_sentinel_servers {
  using backend_type = SentinelBackend;
  sentinel_deployment& deployment = shared_sentinel();
  SentinelBackend backend{(flush(deployment), acknowledged_sentinel_config(deployment.url()))};

  std::string worker_spec() const { return "ack:" + deployment.url(); }
  std::string command(std::string_view, const std::vector<std::string>& args) const {
    return deployment.node(0).command(args);
  }
  long long dbsize() const { return std::stoll(deployment.node(0).command({"DBSIZE"})); }
  RedisBackend& plain(std::string_view) { return backend; }
};

/// The process's Redis Cluster for the combination suites: 3 masters with
/// a replica each, started on first use and kept until the process ends
/// (tests that kill nodes or move slots start their own).
redis_cluster& shared_cluster();

/// A RedisBackend on the master that serves `key` in `cluster` (now).
class cluster_masters {
 public:
  explicit cluster_masters(const ClusterBackend& cluster) : cluster_(cluster) {}
  /// Thread-safe (the contention tests' threads share it).
  RedisBackend& of(std::string_view key) {
    std::lock_guard g(m_);
    auto at = cluster_.master_of(key);
    if (!at) throw std::runtime_error("no master known for key " + std::string(key));
    auto& b = by_address_[at->describe()];
    if (!b) {
      auto cfg = cluster_.settings().node;
      cfg.host = at->host;
      cfg.port = at->port;
      b = std::make_unique<RedisBackend>(cfg);
    }
    return *b;
  }

 private:
  const ClusterBackend& cluster_;
  std::mutex m_;
  std::map<std::string, std::unique_ptr<RedisBackend>> by_address_;
};

/// The shared cluster, emptied, behind a ClusterBackend: the locks of
/// combinations::representative.
struct cluster_servers {
  using backend_type = ClusterBackend;
  redis_cluster& cluster = shared_cluster();
  ClusterBackend backend{(flush(cluster), cluster.url())};
  cluster_masters masters{backend};

  /// "cluster:<url>": lock_worker makes a ClusterBackend from the URL.
  std::string worker_spec() const { return "cluster:" + cluster.url(); }
  std::string command(std::string_view key, const std::vector<std::string>& args) const {
    auto slot = static_cast<std::uint16_t>(detail::key_slot(key));
    return cluster.node(cluster.master_of_slot(slot)).command(args);
  }
  long long dbsize() const {
    long long n = 0;
    for (auto m : cluster.masters()) n += std::stoll(cluster.node(m).command({"DBSIZE"}));
    return n;
  }
  RedisBackend& plain(std::string_view key) { return masters.of(key); }
  std::unique_ptr<ClusterBackend> another() const { return std::make_unique<ClusterBackend>(cluster.url()); }

  static bool flush(redis_cluster& c) {
    for (auto m : c.masters()) c.node(m).command({"FLUSHALL"});
    return true;
  }
};

/// Three private redis-servers behind a RedlockBackend: the valid
/// combinations on a quorum. A hold is on every node that answered in
/// time (all of them here), so the tests look at the first.
struct redlock_servers {
  using backend_type = RedlockBackend;
  std::vector<std::unique_ptr<redis_server>> nodes = three();
  RedlockBackend backend{loaded_machine_redlock(url())};

  /// "redlock:<url>": lock_worker makes a RedlockBackend from the URL.
  std::string worker_spec() const { return "redlock:" + url(); }
  std::string command(std::string_view, const std::vector<std::string>& args) const {
    return nodes.front()->command(args);
  }
  long long dbsize() const {
    long long n = 0;
    for (auto& s : nodes) n += std::stoll(s->command({"DBSIZE"}));
    return n;
  }
  RedisBackend& plain(std::string_view) { return backend.node(0); }
  std::unique_ptr<RedlockBackend> another() const {
    return std::make_unique<RedlockBackend>(loaded_machine_redlock(url()));
  }

  std::string url() const {
    std::string out = "redis://";
    for (std::size_t i = 0; i < nodes.size(); ++i) out += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(nodes[i]->port());
    return out;
  }
  static std::vector<std::unique_ptr<redis_server>> three() {
    std::vector<std::unique_ptr<redis_server>> out;
    for (int i = 0; i < 3; ++i) out.push_back(std::make_unique<redis_server>());
    return out;
  }
};

}  // namespace dlock::test
