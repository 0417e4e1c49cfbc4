// dlock-compare's results: the figures of one run, its environment, the
// table on stdout and the JSON file.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "timeline.hpp"

namespace dlock::compare {

/// Percentiles of a set of durations, in microseconds.
struct latency {
  double p50_us = 0, p99_us = 0;
  std::size_t samples = 0;
};

/// The p50 and p99 of `samples_us` (which it sorts).
latency percentiles(std::vector<double>& samples_us);

/// One contention run: `workers` workers over two processes, each on its
/// own connections, running the inventory's critical section (GET, then SET
/// one higher) on one lock.
struct contention_result {
  int workers = 0;
  double seconds = 0;
  std::size_t cycles = 0;
  double cycles_per_s = 0;
  /// Acquisitions by a worker other than the previous holder, per second:
  /// the throughput that reaches the waiters, where cycles/s also counts a
  /// releasing worker taking the lock straight back.
  double handoffs_per_s = 0;
  /// From a release's reply to the next holder's acquire reply, when the
  /// next holder is another worker (0 when its acquire was answered first;
  /// no samples when one worker kept taking the lock back).
  latency handoff;
  std::size_t most = 0, fewest = 0;  ///< acquisitions of the busiest and the idlest worker
  /// Redis commands per acquisition, besides the critical section's two:
  /// the server's work from INFO commandstats before and after, so a
  /// script counts with every command it runs, and the workers' connects
  /// and health checks count too.
  double commands_per_acquisition = 0;
  /// The same, command by command (INFO commandstats' names: "get",
  /// "evalsha"), the critical section's GET and SET included: what each
  /// acquisition costs the server, in compare.json.
  std::map<std::string, double> commands_by_name;
  /// The server's CPU time (INFO cpu, user + sys) over the run per
  /// acquisition: its networking included, the critical section's two
  /// commands and the workers' connects too.
  double server_cpu_us_per_acquisition = 0;
  std::size_t overlaps = 0;     ///< holds that began before the previous one ended
  long long lost_updates = 0;   ///< cycles minus the counter's final value
  std::size_t errors = 0;       ///< failed operations reported by workers
  /// A window from the middle of the 8-worker run, for the report page:
  /// a lane per worker, its holds as bars.
  std::optional<timeline> strip;
};

/// The fault stories of one ownership and renewal pair (see faults.hpp).
struct fault_result {
  std::string combination, ownership, renewal;
  double lease_ms = 0, period_ms = 0, waited_ms = 0;
  std::optional<double> killed_freed_ms;  ///< nullopt: never, within waited_ms
  bool paused_other_acquired = false;     ///< someone else got it while the holder was stopped
  bool paused_overlap = false;            ///< and the two critical sections overlapped
  std::string paused_release;             ///< what the resumed holder's release reported
  std::optional<bool> late_release_deleted_other;  ///< nullopt: no lease that runs out
  /// A client whose wall clock runs `skew_s` ahead tried the lock while an
  /// honest client held it: did it get in? nullopt: the ownership reads no
  /// client clock.
  std::optional<bool> skewed_clock_stole;
  double skew_s = 0;
  /// The paused holder again with fencing tokens (ownerships that have
  /// them, with a lease): was its late write refused by the store? nullopt:
  /// not run.
  std::optional<bool> fenced_late_write_refused;
  /// Each story as it happened, for the report page.
  std::vector<timeline> timelines;
};

/// Everything measured for one combination.
struct combination_result {
  std::string name;  ///< "token/fixed/spin"
  std::string ownership, renewal, wait;
  std::string reproduces;  ///< the article algorithm, as docs/algorithms.md names it
  latency uncontended;     ///< one acquire + release, blocking interface
  latency ping;            ///< PINGs in a block after each block of those cycles: their ratio's unit
  /// Against the reference, measured by alternating: a block of this row's
  /// cycles, then a block of redis-py's, and again (A B A B ...); per pair,
  /// redis-py's p50 over this row's p50 (how many times redis-py's cycle
  /// rate this row's is). Empty when the reference did not run.
  std::vector<double> vs_reference_pairs;
  std::vector<contention_result> contention;
};

/// The median of `v` (0 when empty).
double median(std::vector<double> v);

/// redis-py's Lock (Debian's python3-redis), run through the uncontended
/// and contention phases in the same run (compare/redis_py_lock.py). Its
/// uncontended cycles are the B blocks alternating with every row's, each
/// followed by a PING exactly as a row's cycles are: the same yardstick.
struct reference_result {
  std::string version;  ///< redis-py's version
  std::string skipped;  ///< why it was not measured; empty when it was
  combination_result row;
};

/// One combination on every backend of the run, its uncontended cycle
/// measured in alternating blocks on the same thread (pinned with the
/// servers as --placement says): one server,
/// the Sentinel deployment's master, the same with replica acknowledgement,
/// and again (A B C A B C ...). Each pair's ratio is that block's median
/// over the one-server block's median next to it.
struct backend_row {
  std::string name;
  latency single, sentinel;
  std::optional<latency> acknowledged;  ///< owner-checked ownerships only
  std::vector<double> sentinel_pairs, acknowledged_pairs;
};

/// Seed 003's failover story (examples/failover_story.hpp), counted.
struct failover_row {
  int runs = 0;
  int reproduced_overlaps = 0;
  int prevented_overlaps = 0, prevented_refused = 0, prevented_b_alone = 0;
  int fenced_overlaps = 0, fenced_late_refused = 0;
  double kill_to_lock_min_ms = 0, kill_to_lock_max_ms = 0;
  std::vector<timeline> timelines;  ///< each act's first run, drawn
};

/// One combination on a Redis Cluster against one server (--backend
/// cluster): its uncontended cycle in alternating blocks (as backend_row:
/// one server, the cluster, the cluster without replicas, again ...), and
/// W workers on one lock, each with its own backend, in one process,
/// in runs that alternate one server and the cluster.
struct cluster_row {
  std::string name;
  latency single, cluster;            ///< the uncontended cycle
  latency bare_cluster;               ///< the same on three masters without replicas
  std::vector<double> cycle_pairs;    ///< each pair's p50 on the cluster over one server's
  std::vector<double> bare_cycle_pairs;  ///< and without replicas over one server's
  int workers = 0;
  contention_result single_contended, cluster_contended;  ///< the last run of each
  /// Each pair of runs' hand-offs per second, and hand-off p50, on the
  /// cluster over one server's.
  std::vector<double> handoff_rate_pairs, handoff_latency_pairs;
  std::size_t cluster_overlaps = 0, cluster_errors = 0;  ///< over every cluster run
};

/// Many locks at once (--backend cluster): `workers` threads over
/// `backends` backends, each thread on a lock of its own (the names spread
/// evenly over the masters of the larger cluster), uncontended lock() and
/// unlock() for a fixed time, in runs that alternate a one-master cluster
/// and a three-master one.
struct many_locks_row {
  std::string combination;
  int workers = 0, backends = 0;
  std::vector<double> one_master_per_s, three_masters_per_s;  ///< each run's cycles per second
  std::vector<double> pairs;                                  ///< three over one, per pair of runs
  /// Each run's busiest master: its CPU time (INFO cpu) over the run's
  /// wall time. Near 1, that master was the bottleneck; well below, the
  /// clients were.
  std::vector<double> one_master_busiest_cpu, three_masters_busiest_cpu;
  std::size_t errors = 0;
};

/// Waiting on pub/sub on the cluster, sharded or classic: W workers on one
/// lock, and what the cluster did per acquisition.
struct pubsub_row {
  std::string combination, mode;  ///< mode: "sharded" or "classic"
  int workers = 0;
  std::size_t cycles = 0;
  double cycles_per_s = 0;
  /// Commands the masters ran per acquisition (INFO commandstats, the
  /// critical section's two and the counting's INFO left out).
  double commands_per_acquisition = 0;
  /// Pub/sub messages that crossed the cluster bus per acquisition
  /// (CLUSTER INFO cluster_stats_messages_publish_sent and
  /// ..._publishshard_sent, summed over every node): a classic PUBLISH
  /// goes to every other node, a sharded one to its shard's replicas.
  double bus_messages_per_acquisition = 0;
  std::size_t errors = 0;
};

/// The cluster part of a run (--backend cluster).
struct cluster_result {
  std::string deployment;  ///< the clusters, and the placement of the uncontended phase
  std::vector<cluster_row> rows;
  std::optional<many_locks_row> many;
  std::vector<pubsub_row> pubsub;
};

/// One row of the TLS phase (--backend tls): the same measurement over
/// plain TCP and over TLS to the same server, in alternating blocks.
struct tls_row {
  std::string name;           ///< "PING" or a combination
  latency plain, tls;
  std::vector<double> pairs;  ///< per pair of blocks: the TLS block's median over the plain one's
};

/// The TLS phase.
struct tls_result {
  std::string deployment;
  std::vector<tls_row> rows;  ///< PING first
};

/// One Redlock deployment's side of a combination (--backend redlock3,
/// redlock5): its uncontended cycle in blocks that alternate with one
/// server's, and W workers on one lock in runs that alternate with one
/// server's.
struct quorum_side {
  int nodes = 0;
  latency cycle;
  std::vector<double> cycle_pairs;  ///< each block's p50 over the one-server block's next to it
  contention_result contended;      ///< the last contended run
  /// Commands every node ran per acquisition in the last contended run
  /// (INFO commandstats summed over the nodes; the critical section's two
  /// left out).
  double commands_per_acquisition = 0;
  std::vector<double> handoff_rate_pairs, handoff_latency_pairs;  ///< over one server's, per pair of runs
  std::size_t overlaps = 0, errors = 0;                           ///< over every contended run
};

/// One combination that a quorum allows, on one server and on each Redlock
/// deployment of the run.
struct redlock_row {
  std::string name;
  latency single;
  int workers = 0;
  contention_result single_contended;
  double single_commands_per_acquisition = 0;
  std::vector<quorum_side> quorums;  ///< in the order of redlock_result::sizes
};

/// Nodes of an N-node deployment killed one at a time (SIGKILL) under a
/// client that locks and unlocks without pause, up to a minority; then
/// one more, with the client idle.
struct node_loss_row {
  int nodes = 0, runs = 0;
  /// [k-1]: from the k-th kill to the answer of the client's first acquire
  /// begun after it, each run (ms).
  std::vector<std::vector<double>> death_to_acquire_ms;
  double healthy_gap_ms = 0;  ///< the median time between acquires before any kill
  /// Runs in which, with a majority dead, lock() failed with no_quorum
  /// naming every dead node; and runs in which a live node held the lock
  /// afterwards.
  int majority_lost_refused = 0, left_held = 0;
};

/// One node of N stalled (SIGSTOP): try_lock() votes, each released.
struct stalled_row {
  int nodes = 0, attempts = 0, acquired = 0;
  double reply_timeout_ms = 0;
  latency healthy_acquire, stalled_acquire;  ///< try_lock()'s duration, every node answering and one stalled
  std::size_t errors = 0;
  std::string first_error;
};

/// The restart story (examples/redlock_story.hpp), counted.
struct restart_row {
  int runs = 0;
  double lease_ms = 0, delayed_ms = 0;  ///< the lease, and how long the delayed act keeps the node out
  int at_once_overlaps = 0, at_once_b_held = 0, delayed_overlaps = 0, delayed_b_held = 0;
  std::vector<double> at_once_b_after_ms, delayed_b_after_ms;  ///< from the crash to B's lock
  std::vector<timeline> timelines;  ///< each act's first run, drawn
};

/// The Redlock part of a run.
struct redlock_result {
  std::string deployment;
  std::vector<int> sizes;  ///< the deployments' node counts (3, 5)
  std::vector<redlock_row> rows;
  std::vector<node_loss_row> losses;
  std::vector<stalled_row> stalls;
  std::optional<restart_row> restart;
};

/// The backends part of a run (--backend): empty rows when only "single"
/// ran.
struct backends_result {
  std::vector<std::string> names;  ///< the run's backends, as given
  std::string deployment;          ///< what the Sentinel rows ran on
  std::vector<backend_row> rows;
  std::optional<failover_row> failover;
  std::optional<cluster_result> cluster;
  std::optional<tls_result> tls;
  std::optional<redlock_result> redlock;
};

/// Where and how the run happened.
struct environment {
  std::string redis_version;
  std::string redis_target;  ///< "private" or the URL without credentials
  latency ping;              ///< PING round trip through the same blocking path
  std::string placement;     ///< where the PING and the uncontended phase ran: "same (server on CPU 0, client on CPU 0)"
  unsigned cpu_count = 0;
  std::string compiler, dlock_version, git_commit, depth;
  /// Whether this dlock-compare was compiled with optimization: a build
  /// that only tests it (-Dmeasured_optimization=false) was not, and its
  /// figures are not dlock's.
  bool optimized = true;
};

/// The table for stdout: one row per combination, times as ratios of the
/// PING round trip, then the reference's row and dlock's figures against
/// it; then the fault stories, one row per pair.
std::string table(const environment& env, const std::vector<combination_result>& rows,
                  const reference_result& ref, const std::vector<fault_result>& faults);
/// The backends' table: one row per combination, the cycle on each backend
/// and its ratio to one server's; then the failover story's counts.
std::string backends_table(const backends_result& b);

/// The cluster's tables: the cycle and the hand-off per combination
/// against one server, many locks on one master and three, and pub/sub
/// waiting sharded and classic.
std::string cluster_table(const cluster_result& c);
/// The cluster part as a JSON object.
std::string cluster_json(const cluster_result& c);

/// The Redlock tables: each combination's cycle and hand-off against one
/// server, then the fault rows.
std::string redlock_table(const redlock_result& r);
/// The Redlock part as a JSON object.
std::string redlock_json(const redlock_result& r);

/// The TLS phase's table: PING and each combination's cycle, plain and
/// TLS, and the ratio.
std::string tls_table(const tls_result& t);
/// The TLS phase as a JSON object.
std::string tls_json(const tls_result& t);

/// The whole run as JSON (an object with "environment", "combinations",
/// "reference", "faults", "renewals" and "backends"; each combination
/// names its backend, "single"). `renewals` is the renewal phase's object
/// (renewals_json), or "null" when it did not run; `permits` the permits
/// phase's (permits_json), `readers` the readers phase's (readers_json),
/// or "null".
std::string json(const environment& env, const std::vector<combination_result>& rows,
                 const reference_result& ref, const std::vector<fault_result>& faults,
                 const backends_result& backends, const std::string& renewals = "null",
                 const std::string& permits = "null", const std::string& readers = "null");

}  // namespace dlock::compare
