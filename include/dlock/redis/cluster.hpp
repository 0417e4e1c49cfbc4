// Where a Redis Cluster is and how to talk to it: the seed nodes, the
// settings every node connection shares, the parser for the cluster's
// redis:// URL form, and the readers of what a node says about the cluster
// (its slot map, and its MOVED, ASK, TRYAGAIN and CLUSTERDOWN replies).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/redis/config.hpp>
#include <dlock/redis/resp.hpp>

namespace dlock::redis {

/// The number of hash slots of a Redis Cluster.
inline constexpr std::size_t cluster_slots{16384};

/// Settings of a Redis Cluster.
struct cluster_config {
  /// Nodes to ask for the slot map, in order, at start and whenever every
  /// node known from the map fails to answer. At least one; any live node
  /// (master or replica) is enough.
  std::vector<address> seeds;
  /// Every node connection's settings: user, password, client name,
  /// timeouts, parser limits and replica acknowledgement (`acknowledge`:
  /// WAIT on the master of the lock's slot). Its host, port, path and
  /// `source` are not used (the slot map says where each node is); its
  /// database must be 0 (a cluster has no other).
  config node;
  /// How often one command may be redirected (MOVED, ASK, or a fresh slot
  /// map that names another master after a not_master past `retry_for`)
  /// before it fails.
  int max_redirects = 5;
  ///@{
  /// How long a script whose keys are being migrated (TRYAGAIN), a node
  /// that answers CLUSTERDOWN, or a slot whose master cannot be reached or
  /// is a replica now (a failover) is waited for (`retry_for`, not
  /// negative), in pauses of `retry_pause` (positive) or reads of the slot
  /// map, before the command fails. A send that itself took longer (it
  /// waited in a dead master's connection queue) gets `retry_for` once
  /// more, from when it ended; a command may so take the command timeout
  /// of each node it waited at, plus twice `retry_for`.
  std::chrono::milliseconds retry_pause{25};
  std::chrono::milliseconds retry_for{1000};
  ///@}
  /// Waits on sharded pub/sub (SSUBSCRIBE, and SPUBLISH in the scripts:
  /// a release reaches only its slot's shard). False: classic pub/sub
  /// (SUBSCRIBE, PUBLISH), which the cluster copies to every node; for
  /// Redisson clients told not to use sharded pub/sub
  /// (`shardedSubscriptionMode` OFF) on the same locks, and to measure
  /// what sharding saves. The subscriptions stay at the master of the
  /// channel's slot either way.
  bool sharded_pubsub = true;

  /// "redis://127.0.0.1:7000,127.0.0.1:7001", without the password.
  std::string describe() const;
};

/// Parses `redis://[[user:]password@]host[:port][,host[:port]...]`: one or
/// more seed nodes (6379 when a port is not given; IPv6 hosts in brackets)
/// sharing one user and password, and a query that may set replica
/// acknowledgement (`?acknowledge=...`, as parse_url's; unset, the
/// backend's default); `rediss://...[?query]` is the same over
/// TLS to every node, with rediss://'s query (the nodes' TLS ports: their
/// "tls-port" in CLUSTER SHARDS). A database other than 0 is refused (a
/// cluster has only database 0). Throws std::system_error with
/// error::invalid_url and a message that names the bad part, never quoting
/// the user name or the password.
cluster_config parse_cluster_url(std::string_view url);

/// As above, without throwing: on failure sets `ec` to error::invalid_url
/// and, when given, `why` to the sentence that names the bad part.
cluster_config parse_cluster_url(std::string_view url, std::error_code& ec, std::string* why = nullptr);

namespace detail {

/// A master and the slot ranges it serves, as a node reported them.
struct cluster_shard {
  address master;
  std::vector<std::pair<std::uint16_t, std::uint16_t>> ranges;  ///< inclusive [first, last]
};

/// Reads a CLUSTER SHARDS reply (Redis 7.0; RESP2 maps as flat arrays):
/// for each shard, its online master (or, when none is online, its node
/// whose role is master) and its slot ranges; shards without slots are left
/// out. `replied_by` fills in a node's empty or "?" endpoint. Each master's
/// port is its "tls-port" for a `tls` client, its "port" otherwise (the
/// other when it lists only one). Nullopt when the reply is not one.
std::optional<std::vector<cluster_shard>> read_cluster_shards(const value& v, const address& replied_by,
                                                              bool tls = false);
/// Reads a CLUSTER SLOTS reply (the fallback before Redis 7.0).
std::optional<std::vector<cluster_shard>> read_cluster_slots(const value& v, const address& replied_by);

/// What a node's reply says about the cluster.
struct redirect {
  enum class kind : std::uint8_t {
    none,         ///< an ordinary reply
    moved,        ///< MOVED <slot> <host>:<port>: the slot lives there now
    ask,          ///< ASK <slot> <host>:<port>: this key is being migrated there (ASKING first)
    try_again,    ///< TRYAGAIN: a multi-key command during its slot's migration
    cluster_down  ///< CLUSTERDOWN: the cluster cannot serve the slot now
  };
  kind what = kind::none;
  std::uint16_t slot = 0;
  address to;
};

/// Reads a reply: an error reply of one of the kinds above, or none.
/// `replied_by` fills in an empty host ("MOVED 3999 :6380").
redirect read_redirect(const value& v, const address& replied_by);

}  // namespace detail
}  // namespace dlock::redis
