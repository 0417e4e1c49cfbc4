// The test harness: private redis-server, replica, Sentinel and Cluster
// processes on free 127.0.0.1 ports, stopped when their owner is destroyed.
// Plain POSIX and the standard library only, independent of the code under
// test.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dlock::test {

/// A TCP port on 127.0.0.1 that was free a moment ago (never 6379).
std::uint16_t free_port();

/// For the harness's own tests: called with each port the harness picks
/// for a server or sentinel, just before it is started (empty: none). A
/// hook that binds the port reproduces another process taking it between
/// the check and the bind.
void set_port_picked_hook(std::function<void(std::uint16_t)> hook);

/// Runs a program (argv, no shell) and returns its output (stdout and
/// stderr), without the trailing newline; throws when it fails or outlasts
/// `limit`.
std::string run_program(const std::vector<std::string>& argv,
                        std::chrono::milliseconds limit = std::chrono::seconds(30));

/// Certificates for TLS tests, made by the openssl command in a temp
/// folder (removed on destruction): EC P-256 keys, valid for two days.
class tls_files {
 public:
  struct pair {
    std::string cert, key;
  };
  tls_files();
  ~tls_files();
  tls_files(const tls_files&) = delete;
  tls_files& operator=(const tls_files&) = delete;

  const std::string& dir() const { return dir_; }
  /// The CA that signed the server and client certificates below.
  std::string ca() const { return dir_ + "/ca.crt"; }
  /// Another CA, which signed only untrusted_server().
  std::string other_ca() const { return dir_ + "/other-ca.crt"; }
  /// For DNS:localhost and IP:127.0.0.1 (serverAuth), signed by ca().
  pair server() const { return {dir_ + "/server.crt", dir_ + "/server.key"}; }
  /// For DNS:elsewhere.example only, signed by ca().
  pair wrong_name() const { return {dir_ + "/elsewhere.crt", dir_ + "/elsewhere.key"}; }
  /// For DNS:localhost and IP:127.0.0.1, signed by other_ca().
  pair untrusted_server() const { return {dir_ + "/untrusted.crt", dir_ + "/untrusted.key"}; }
  /// A client certificate (clientAuth), signed by ca().
  pair client() const { return {dir_ + "/client.crt", dir_ + "/client.key"}; }

 private:
  void make_ca(const std::string& name, const std::string& subject) const;
  void make_leaf(const std::string& name, const std::string& ca_name, const std::string& subject,
                 const std::string& extensions) const;
  std::string dir_;
};

struct server_options {
  std::string password;                 ///< requirepass, when not empty
  bool unix_socket = false;             ///< also listen on a socket in the server's temp dir
  std::vector<std::string> extra_args;  ///< appended to the command line
  std::uint16_t replica_of = 0;         ///< start as a replica of 127.0.0.1:<port>
  bool cluster = false;                 ///< --cluster-enabled yes (port and port+10000 free)
  int cluster_node_timeout_ms = 2000;   ///< --cluster-node-timeout, when `cluster`
  std::vector<std::string> environment{};  ///< "NAME=value" added to the server's environment
  /// TLS only (--port 0, --tls-port): the server presents tls->server(),
  /// trusts tls->ca() for client certificates, and the harness speaks TLS
  /// itself (readiness, command()) with tls->client().
  std::shared_ptr<const tls_files> tls{};
  /// --tls-auth-clients: "no", "yes" (a client certificate is required) or
  /// "optional". With `tls` only.
  std::string tls_auth_clients = "no";
  /// With `tls`: also a plain-text port (plain_port()), on the same server.
  bool plain_port_too = false;
};

/// One redis-server process with no persistence, in its own temp dir.
/// Starts on construction (waiting until it answers PING); killed, reaped
/// and cleaned up on destruction, and killed by the kernel if the test
/// process dies first (PR_SET_PDEATHSIG). That signal comes when the
/// *thread* that started the server ends, not only the process: start (or
/// construct) a server on a thread that outlives it, such as the test's own.
class redis_server {
 public:
  explicit redis_server(server_options opts = {});
  ~redis_server();
  redis_server(redis_server&&) noexcept;
  redis_server& operator=(redis_server&&) = delete;
  redis_server(const redis_server&) = delete;

  std::uint16_t port() const { return port_; }
  /// The plain-text port of a TLS server started with plain_port_too (0
  /// otherwise); a plain server's is port().
  std::uint16_t plain_port() const { return opts_.tls ? plain_port_ : port_; }
  /// "redis://127.0.0.1:<port>", with ":password@" when there is one; with
  /// TLS, "rediss://127.0.0.1:<port>?ca_file=<the CA>" (and no client
  /// certificate).
  std::string url() const;
  std::string unix_path() const;
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  void kill();     ///< SIGKILL and reap: a crash
  void stop();     ///< SIGTERM, wait for exit: a clean shutdown
  void start();    ///< start again on the same port
  void restart();  ///< kill, then start
  void pause();    ///< SIGSTOP: clients hang
  void resume();   ///< SIGCONT

  /// Runs one command through redis-cli (arguments as argv, no shell) and
  /// returns its output without the trailing newline; throws on failure.
  /// An error reply is output too, not a failure (redis-cli prints it and
  /// exits 0): "MOVED 12182 127.0.0.1:<port>", "ERR unknown command ...".
  std::string command(const std::vector<std::string>& args) const;
  /// redis-cli's arguments to reach this server (TLS and password included).
  std::vector<std::string> cli() const;
  /// The last lines of the server's log, for failure messages.
  std::string log_tail(std::size_t lines = 20) const;
  /// Polls until `INFO replication` says master_link_status:up (replicas).
  void wait_until_synced(std::chrono::milliseconds limit = std::chrono::seconds(10)) const;
  /// Polls until this master's ROLE lists `replicas` replicas and they
  /// acknowledge a write within 100 ms (a WAIT for every replica counts the
  /// listed ones, and a replica just synced may not be sent the stream
  /// until its first acknowledgement, up to a second after its link is up).
  void wait_until_listed(int replicas, std::chrono::milliseconds limit = std::chrono::seconds(10)) const;

 private:
  void spawn();
  void wait_ready(std::chrono::milliseconds limit);
  void end_with(int signal);

  server_options opts_;
  std::uint16_t port_ = 0;
  std::uint16_t plain_port_ = 0;  // a TLS server's plain-text port, if any
  std::string dir_;
  pid_t pid_ = -1;
};

/// How often `server` ran `command` (lower case, as INFO commandstats names
/// it: "evalsha", "subscribe"), 0 if never.
long long command_calls(const redis_server& server, const std::string& command);
/// The same, read from an INFO commandstats text (any server's).
long long command_calls_in(const std::string& info_commandstats, const std::string& command);
/// Every command `server` has run, the sum of INFO commandstats' counts
/// (scripts' own commands included). The INFO that reads it is counted in
/// the next reading, not in its own.
long long all_calls(const redis_server& server);
/// The scripts `server` has run (EVALSHA and EVAL), counted by the server
/// itself: a lock's tries and releases on any connection, the blocking
/// ones included.
long long script_calls(const redis_server& server);


/// N Sentinel processes watching a master named `master_name`.
class sentinel_group {
 public:
  /// With `tls`: the sentinels listen on TLS only, and reach the master and
  /// replicas over TLS (tls-replication); redis-cli speaks TLS to them.
  sentinel_group(std::string master_name, std::uint16_t master_port, int count = 3, int quorum = 2,
                 int down_after_ms = 1000, int failover_timeout_ms = 3000,
                 std::shared_ptr<const tls_files> tls = nullptr);
  ~sentinel_group();
  std::vector<std::uint16_t> ports() const;
  const std::string& master_name() const { return name_; }
  /// SENTINEL get-master-addr-by-name, asked of the first live sentinel.
  std::uint16_t current_master_port() const;
  void kill(std::size_t i);
  bool running(std::size_t i) const { return pids_.at(i) > 0; }
  /// Runs one command on sentinel `i` through redis-cli (see redis_server::command).
  std::string command(std::size_t i, const std::vector<std::string>& args) const;
  /// Polls until every live sentinel knows `replicas` replicas of the
  /// master and every other live sentinel: then a failover can be agreed.
  void wait_ready(int replicas, std::chrono::milliseconds limit = std::chrono::seconds(20)) const;

 private:
  std::vector<std::string> cli(std::size_t i) const;  // redis-cli to sentinel i
  void stop();  // kills every sentinel, removes their folders

  std::string name_;
  std::shared_ptr<const tls_files> tls_;
  std::vector<std::uint16_t> ports_;
  std::vector<pid_t> pids_;
  std::vector<std::string> dirs_;
};

/// How a redis_cluster is laid out.
struct cluster_options {
  /// Masters, sharing the slots evenly: 3 or more (redis-cli refuses
  /// fewer), or 1 without replicas (which then takes every slot itself).
  int masters = 3;
  int replicas_per_master = 0;  ///< replicas of each master
  /// --cluster-node-timeout: how long a node must be unreachable before it
  /// is suspected (PFAIL); a failover takes about 2 s more than that.
  int node_timeout_ms = 2000;
  std::string password{};  ///< requirepass and masterauth on every node, when not empty
  /// TLS only, on every node, with TLS between the nodes too (--tls-cluster,
  /// --tls-replication): the nodes' ports are TLS ports; url() is rediss://.
  std::shared_ptr<const tls_files> tls{};
};

/// A Redis Cluster on 127.0.0.1, created with `redis-cli --cluster create`.
/// The constructor returns once the cluster has settled: every node says
/// cluster_state:ok, knows every other node (connected, none suspected), and
/// agrees on the whole layout (which node serves which slots, which node
/// replicates which master), and every replica is synced
/// (master_link_status:up). Nodes are numbered in creation order, and keep
/// their number (and port, and node ID) when they are killed or restarted;
/// which are masters and which replicas is up to redis-cli (and later
/// failovers): ask masters() and replica_of(). Nodes run with
/// --repl-diskless-sync-delay 0, so that a replica's first sync starts at
/// once rather than 5 s later (7.0's default).
///
/// Questions about the cluster (master_of_slot, masters, replica_of) are
/// asked of live nodes, through redis-cli (see redis_server::command): a
/// node that is paused (redis_server::pause) makes them hang. The errors
/// redis-cli prints for a redirection come back as command output, not as an
/// exception: "MOVED 12182 127.0.0.1:<port>", "ASK 12182 127.0.0.1:<port>".
///
///   dlock::test::redis_cluster cluster({.masters = 3, .replicas_per_master = 1});
///   auto slot = static_cast<std::uint16_t>(std::stoi(cluster.node(0).command({"CLUSTER", "KEYSLOT", "k"})));
///   auto owner = cluster.master_of_slot(slot);
///   cluster.move_slot(slot, owner, other);        // or begin_migration ... finish_migration
///   auto promoted = cluster.kill_master_and_wait(other);
class redis_cluster {
 public:
  explicit redis_cluster(cluster_options opts);
  explicit redis_cluster(int masters = 3, int replicas_per_master = 0);

  /// How many nodes the cluster was created with (live or not).
  std::size_t nodes() const { return nodes_.size(); }
  std::vector<std::uint16_t> ports() const;
  redis_server& node(std::size_t i) { return *nodes_.at(i); }
  const redis_server& node(std::size_t i) const { return *nodes_.at(i); }
  /// Node `i`'s cluster node ID (CLUSTER MYID, read when the cluster was
  /// created: it survives a kill and a restart).
  std::string node_id(std::size_t i) const { return ids_.at(i); }

  /// "redis://127.0.0.1:<p1>,127.0.0.1:<p2>,..." listing every node, live or
  /// not, in node order; "redis://:<password>@127.0.0.1:<p1>,..." with a
  /// password; with TLS, "rediss://...?ca_file=<the CA>".
  std::string url() const;
  /// The same for the nodes listed, in the order given (a client's seed list).
  std::string seed_url(const std::vector<std::size_t>& nodes) const;

  /// The node that serves `slot` now, as the first live node's CLUSTER NODES
  /// tells it (mid-migration, still the node it is migrating from). Throws
  /// when that node knows no owner, or the owner is not one of ours.
  std::size_t master_of_slot(std::uint16_t slot) const;
  /// The live nodes that are masters by their own account (whether or not
  /// they serve slots), in node order.
  std::vector<std::size_t> masters() const;
  /// A live node that is, by its own account, a replica of node `master`
  /// (the first, in node order); throws when there is none.
  std::size_t replica_of(std::size_t master) const;

  // --- Slot migration, the steps `redis-cli --cluster reshard` takes, one
  // at a time so a test can stop between them. Each throws (with the
  // server's reply) when a node refuses.

  /// Marks `slot` importing from `from` on `to`, then migrating to `to` on
  /// `from`. From here `from` answers ASK for keys of the slot it no longer
  /// holds (and for new keys), and `to` serves them only after ASKING.
  void begin_migration(std::uint16_t slot, std::size_t from, std::size_t to);
  /// Moves every key of `slot` from `from` to `to` (CLUSTER GETKEYSINSLOT,
  /// then MIGRATE ... KEYS, in batches, until `from` holds none); returns
  /// how many moved. Keys must not hold a newline (redis-cli lists them one
  /// a line); a key that `to` already holds is an error (no REPLACE).
  std::size_t migrate_keys(std::uint16_t slot, std::size_t from, std::size_t to);
  /// Moves one key from `from` to `to` (MIGRATE); false when `from` does not
  /// hold it. Mid-migration, `from` then answers ASK for it.
  bool migrate_key(const std::string& key, std::size_t from, std::size_t to);
  /// Gives `slot` to `to`: CLUSTER SETSLOT <slot> NODE <to> on `to`, then on
  /// the slot's old owner (which refuses while it still holds keys of the
  /// slot), then on every other live master, as redis-cli does; then waits
  /// (up to `limit`) until every live node, replicas too, says `to` serves it.
  void finish_migration(std::uint16_t slot, std::size_t to,
                        std::chrono::milliseconds limit = std::chrono::seconds(20));
  /// begin_migration, migrate_keys and finish_migration.
  void move_slot(std::uint16_t slot, std::size_t from, std::size_t to);

  // --- Failover.

  /// Kills node `master` (SIGKILL: redis_server::kill) and waits, up to
  /// `limit`, until one of its replicas has been promoted: it serves the
  /// dead master's slots by every live node's account, and wait_ok() holds.
  /// Returns the promoted node. Throws std::invalid_argument, killing
  /// nothing, when `master` is not a running master serving slots or has no
  /// live replica (no failover could follow); std::runtime_error when
  /// `limit` passes.
  /// With the default node timeout (2000 ms) a failover takes about 4 s on
  /// an idle machine: the other nodes suspect the master (PFAIL) after about
  /// 2.4 s, agree it has failed (FAIL) at about 3 s, and its replica waits
  /// 0.5 to 1 s more before it is elected. From FAIL to the election every
  /// node says cluster_state:fail and serves no slot at all (full coverage
  /// is required), not only the dead master's.
  std::size_t kill_master_and_wait(std::size_t master, std::chrono::milliseconds limit = std::chrono::seconds(30));
  /// Waits, up to `limit`, until every live node says cluster_state:ok and
  /// they all agree which node serves each of the 16384 slots, each a live
  /// node that none of them has marked as failing; throws if `limit` passes.
  void wait_ok(std::chrono::milliseconds limit = std::chrono::seconds(30)) const;

 private:
  cluster_options opts_;
  std::vector<std::unique_ptr<redis_server>> nodes_;
  std::vector<std::string> ids_;

  std::size_t index_of(const std::string& id) const;  // nodes() when not ours
  std::size_t first_live() const;
  void set_slot(std::size_t i, const std::vector<std::string>& args) const;
};

}  // namespace dlock::test
