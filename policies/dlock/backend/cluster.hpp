// ClusterBackend: locks on a Redis Cluster. Every call goes to the master
// that owns its key's slot, over that master's own connections (a
// RedisBackend per master, on one executor); redirections, failovers and
// slot migrations are followed; waits use the cluster's sharded pub/sub.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <boost/asio/async_result.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <dlock/backend/core.hpp>
#include <dlock/backend/redis.hpp>
#include <dlock/ext.hpp>
#include <dlock/redis/acknowledged.hpp>
#include <dlock/redis/cluster.hpp>

namespace dlock {

namespace redis::detail {

class cluster_router;

using exec_done = std::function<void(error_code, response, replica_acks)>;
using eval_done = std::function<void(error_code, value)>;
using batch_done = std::function<void(std::vector<call_result>, replica_acks)>;
using subscribe_done = std::function<void(error_code, subscription)>;

// The compiled operations the template members below start (each completes
// once, on an executor of the router's).
void cluster_exec(const std::shared_ptr<cluster_router>& r, std::uint16_t slot, request req, bool acknowledged,
                  exec_done done);
void cluster_eval(const std::shared_ptr<cluster_router>& r, const script& s, std::vector<std::string> keys,
                  std::vector<std::string> args, eval_done done);
void cluster_eval_all(const std::shared_ptr<cluster_router>& r, std::vector<script_call> calls, bool acknowledged,
                      batch_done done);
void cluster_subscribe(const std::shared_ptr<cluster_router>& r, std::string channel, listener l,
                       subscribe_done done);

/// The message of a cross_slot error: the keys and their slots.
std::string cross_slot_message(const std::vector<std::string>& keys);

}  // namespace redis::detail

namespace redis::cluster_engine {
// Not ext: ClusterBackend's engine (the slot map, redirections, failover,
// sharded subscriptions) is compiled into libdlock, and these entry points
// are its own; a backend written outside dlock brings its own engine.
using detail::cluster_eval;
using detail::cluster_eval_all;
using detail::cluster_exec;
using detail::cluster_router;
using detail::cluster_subscribe;
}  // namespace redis::cluster_engine

/// A Redis Cluster (Redis 7.0 or later for sharded pub/sub). Everything
/// RedisBackend does, on the master of each key's slot:
/// - it starts from one or more seed nodes (any live one will do), reads
///   the slot map (`CLUSTER SHARDS`, or `CLUSTER SLOTS` on a server
///   without it), and sends each call to the master that owns the slot of
///   its key, never to a replica. One connection per master carries the
///   commands (pipelined, as on one server); a second carries its sharded
///   subscriptions; replica acknowledgement adds up to
///   RedisBackend::max_acknowledgement_lanes per master, and blocking
///   callers one pooled connection per thread per master;
/// - a `MOVED` reply updates that slot and sends the command where the
///   slot is now (the map is read again in the background); `ASK` sends it
///   once to the importing node, behind `ASKING`; `TRYAGAIN` (a multi-key
///   script while its slot migrates) and `CLUSTERDOWN` are retried after
///   short pauses for up to `retry_for`; a command never written because
///   its master cannot be reached, or because the node the map names is a
///   replica now (not_master: a failover the map has not caught up with),
///   is sent again once a fresh map names another, for up to `retry_for`
///   (after a not_master, a fresh map that names another node is followed
///   even later, as a `MOVED` reply is, within `max_redirects`: the command
///   may have waited in the queue of a master that died and came back as a
///   replica). Each of these replies means the command did not run, so
///   sending it again cannot run it twice. A command written and not
///   answered is outcome_unknown, as on one server, and is never sent
///   again;
/// - a script whose keys lie in different slots is refused before it is
///   sent (error::cross_slot; the blocking forms name the keys);
/// - the backend contract's ordering rule holds for calls that go straight
///   to their slot's master (the usual case: each is queued on that
///   master's connection before the call returns); a call that is
///   redirected, or waits for a fresh map, is sent again later and may then
///   reach its master after calls made after it, which the ownerships'
///   owner checks allow for (as on an acknowledgement lane);
/// - waits use sharded pub/sub (`SSUBSCRIBE`, and `SPUBLISH` in the
///   scripts), so a release's message reaches only the shard that owns the
///   lock's slot. When a slot moves, its old master drops the shard
///   channel subscriptions of that slot (an unsolicited `sunsubscribe`):
///   they are subscribed again at the slot's new master at once, and their
///   waiters look at the lock again (`settings().sharded_pubsub` false:
///   classic pub/sub, whose messages the cluster copies to every node);
/// - with replica acknowledgement (`settings().node.acknowledge`) a write
///   waits (`WAIT`) for the replicas of the master that took it.
///
/// Thread safety: as RedisBackend. The blocking helpers must not be called
/// from the backend's own I/O thread.
class ClusterBackend {
 public:
  using executor_type = boost::asio::any_io_executor;  ///< the type of get_executor()
  /// A script goes to its first key's master, and Redis refuses one whose
  /// keys lie in several slots (CROSSSLOT): the watchdog batches per slot.
  static constexpr bool cross_slot_scripts = false;

  /// Parses `url` (see redis::parse_cluster_url), starts a private I/O
  /// thread and reads the slot map from the first seed that answers.
  /// Throws std::system_error when the URL is malformed (invalid_url), when
  /// the settings cannot work (invalid_argument), or when no seed gives a
  /// slot map (the last seed's error: connection_refused, connect_timeout,
  /// auth_failed, ...; cluster_down when the nodes answer without one).
  explicit ClusterBackend(std::string_view url);
  /// As above, from settings.
  explicit ClusterBackend(redis::cluster_config cfg);
  /// Runs on `ex` (which the caller keeps running); reads the slot map in
  /// the background, and the first commands wait for it. Throws
  /// std::system_error only for settings that cannot work (invalid_argument).
  ClusterBackend(executor_type ex, redis::cluster_config cfg);
  /// As above, from `url` (see redis::parse_cluster_url; invalid_url when
  /// malformed).
  ClusterBackend(executor_type ex, std::string_view url);
  /// Stops every connection (queued commands complete with
  /// shutting_down) and joins the private I/O thread, if any.
  ~ClusterBackend();

  ClusterBackend(const ClusterBackend&) = delete;
  ClusterBackend& operator=(const ClusterBackend&) = delete;

  /// The executor that lock operations run on: the private I/O thread's, or `ex`.
  executor_type get_executor() const noexcept { return core_.get_executor(); }
  /// A random 128-bit id for this backend (see RedisBackend::client_id).
  const std::string& client_id() const noexcept { return core_.client_id(); }
  /// The cluster settings, as given or parsed from the URL.
  const redis::cluster_config& settings() const noexcept { return cfg_; }
  /// Whether release and hand-off messages travel on sharded pub/sub
  /// (`settings().sharded_pubsub`, true unless told otherwise).
  bool sharded_pubsub() const noexcept { return cfg_.sharded_pubsub; }
  /// True where a blocking call would wait for itself (see
  /// RedisBackend::on_io_thread).
  bool on_io_thread() const noexcept { return core_.on_io_thread(); }

  /// One `Service` per backend, made on first use as `Service(*this)` and
  /// destroyed before the connections.
  template <class Service>
  Service& use_service() {
    return core_.use_service<Service>(*this);
  }

  /// Sends a pipeline to the master of `key`'s slot (every command of it
  /// must name keys of that slot only); completion
  /// `void(error_code, redis::response)`.
  template <class CompletionToken>
  auto async_exec(std::string_view key, redis::request req, CompletionToken&& token) {
    return ext::initiate_through_function<redis::error_code, redis::response>(
        std::forward<CompletionToken>(token), get_executor(),
        [r = router_, slot = ext::key_slot(key), req = std::move(req)](auto done) mutable {
          redis::cluster_engine::cluster_exec(r, slot, std::move(req), false,
                                      [done = std::move(done)](redis::error_code ec, redis::response resp,
                                                               redis::replica_acks) { done(ec, std::move(resp)); });
        });
  }

  /// Runs a script on the master of its first key's slot; completion
  /// `void(error_code, redis::value)`. Keys in different slots:
  /// error::cross_slot, nothing sent.
  template <class CompletionToken>
  auto async_eval(const redis::script& s, std::vector<std::string> keys, std::vector<std::string> args,
                  CompletionToken&& token) {
    return ext::initiate_through_function<redis::error_code, redis::value>(
        std::forward<CompletionToken>(token), get_executor(),
        [r = router_, &s, keys = std::move(keys), args = std::move(args)](auto done) mutable {
          redis::cluster_engine::cluster_eval(r, s, std::move(keys), std::move(args), std::move(done));
        });
  }

  /// Runs many scripts, one pipeline per master, all masters at once;
  /// completion `void(std::vector<redis::call_result>)`, one result per
  /// call in order, each with its own error.
  template <class CompletionToken>
  auto async_eval_all(std::vector<redis::script_call> calls, CompletionToken&& token) {
    return ext::initiate_through_function<std::vector<redis::call_result>>(
        std::forward<CompletionToken>(token), get_executor(),
        [r = router_, calls = std::move(calls)](auto done) mutable {
          redis::cluster_engine::cluster_eval_all(
              r, std::move(calls), false,
              [done = std::move(done)](std::vector<redis::call_result> out, redis::replica_acks) {
                done(std::move(out));
              });
        });
  }

  /// Subscribes (SSUBSCRIBE) at the master of `channel`'s slot, which must
  /// be `key`'s; completion `void(error_code, redis::subscription)`. The
  /// subscription follows the slot when it moves.
  template <class CompletionToken>
  auto async_subscribe(std::string_view /*key*/, std::string channel, redis::listener l, CompletionToken&& token) {
    return ext::initiate_through_function<redis::error_code, redis::subscription>(
        std::forward<CompletionToken>(token), get_executor(),
        [r = router_, channel = std::move(channel), l = std::move(l)](auto done) mutable {
          redis::cluster_engine::cluster_subscribe(r, std::move(channel), std::move(l), std::move(done));
        });
  }

  // ---- Replica acknowledgement (settings().node.acknowledge) --------------

  /// Whether lock writes wait for replicas (settings().node.acknowledge is
  /// set: in code, in the URL, or by default).
  bool acknowledges() const noexcept { return cfg_.node.acknowledge.has_value(); }
  /// As RedisBackend's: false under the default, which acknowledges
  /// owner-checked locks only.
  bool acknowledges_every_lock() const noexcept {
    return acknowledges() && !cfg_.node.acknowledge->owner_checked_only;
  }

  /// As RedisBackend's, on the master of `key`'s slot (WAIT counts that
  /// master's replicas).
  template <class CompletionToken>
  auto async_exec_acknowledged(std::string_view key, redis::request req, CompletionToken&& token) {
    return ext::initiate_through_function<redis::error_code, redis::response, redis::replica_acks>(
        std::forward<CompletionToken>(token), get_executor(),
        [r = router_, slot = ext::key_slot(key), req = std::move(req)](auto done) mutable {
          redis::cluster_engine::cluster_exec(r, slot, std::move(req), true, std::move(done));
        });
  }

  /// As RedisBackend's: one acknowledged pipeline per master. A call whose
  /// master's replicas did not acknowledge in time completes with
  /// error::not_acknowledged (its reply is not counted); the acks given
  /// are those of the masters whose calls have replies.
  template <class CompletionToken>
  auto async_eval_all_acknowledged(std::vector<redis::script_call> calls, CompletionToken&& token) {
    return ext::initiate_through_function<std::vector<redis::call_result>, redis::replica_acks>(
        std::forward<CompletionToken>(token), get_executor(),
        [r = router_, calls = std::move(calls)](auto done) mutable {
          redis::cluster_engine::cluster_eval_all(r, std::move(calls), true, std::move(done));
        });
  }

  // ---- The blocking fast path -------------------------------------------

  /// As RedisBackend::blocking_scope: while it lives, a lock's commands
  /// from this thread go out on this thread, over a pooled blocking
  /// connection to each master they reach (taken on first use). A reply
  /// that redirects (the map is stale) sends the command the asynchronous
  /// way, which follows it.
  class blocking_scope {
   public:
    /// Becomes this thread's innermost scope on `backend`; a master's
    /// connection is taken when a command first goes to that master.
    explicit blocking_scope(ClusterBackend& backend);
    ~blocking_scope();
    blocking_scope(const blocking_scope&) = delete;
    blocking_scope& operator=(const blocking_scope&) = delete;

   private:
    friend class ClusterBackend;
    struct node_scope;
    RedisBackend* enter(const std::shared_ptr<void>& node, RedisBackend& backend);

    ClusterBackend& backend_;
    const blocking_scope* outer_;
    std::vector<std::unique_ptr<node_scope>> nodes_;
  };

  ///@{
  /// The blocking fast path, as RedisBackend's, on this thread's scope's
  /// connection to the master of the key's slot (a script's keys must share
  /// one). Nullopt without a scope, when the map names no master for the
  /// slot, when the command could not be written, or when the reply
  /// redirects (MOVED updates the map; the asynchronous path follows it).
  std::optional<std::pair<redis::error_code, redis::response>> blocking_exec(std::string_view key,
                                                                          const redis::request& req);
  std::optional<std::pair<redis::error_code, redis::value>> blocking_eval(const redis::script& s,
                                                                       const std::vector<std::string>& keys,
                                                                       const std::vector<std::string>& args);
  std::optional<std::tuple<redis::error_code, redis::response, redis::replica_acks>> blocking_exec_acknowledged(
      std::string_view key, const redis::request& req);
  ///@}

  // ---- Blocking forms ----------------------------------------------------

  ///@{
  /// Blocking forms: each throws std::system_error (with the server's
  /// message for server_error; eval names the keys for cross_slot), or
  /// reports through `ec`, as RedisBackend's. Each goes out on the calling
  /// thread, over a pooled blocking connection to the master of its slot;
  /// the asynchronous path takes it when that cannot (no map yet, a
  /// redirection, no connection). std::logic_error on the backend's own
  /// I/O thread.
  redis::response exec(std::string_view key, redis::request req);
  redis::response exec(std::string_view key, redis::request req, std::error_code& ec);
  redis::value command(std::string_view key, redis::request req);
  redis::value command(std::string_view key, redis::request req, std::error_code& ec);
  redis::value eval(const redis::script& s, std::vector<std::string> keys, std::vector<std::string> args);
  redis::value eval(const redis::script& s, std::vector<std::string> keys, std::vector<std::string> args,
                    std::error_code& ec);
  ///@}

  // ---- What the backend knows of the cluster (for tests and tools) -------

  /// The master the slot map names for `key`'s slot (nullopt: none known).
  std::optional<redis::address> master_of(std::string_view key) const;
  /// The counters of the shared connection to the node at `at` (nullopt:
  /// no node there is known). Its `refusing` is true while a connection
  /// that found a replica there fails new commands at once, until its next
  /// connect attempt.
  std::optional<redis::connection::stats> node_statistics(const redis::address& at) const;
  /// The masters that own slots in the map, in no particular order.
  std::vector<redis::address> masters() const;
  /// Slot maps read so far.
  std::size_t map_reads() const noexcept;
  std::size_t moved_followed() const noexcept;  ///< MOVED replies followed so far
  std::size_t ask_followed() const noexcept;  ///< ASK replies followed so far
  /// Channels subscribed now (across masters).
  std::size_t channel_count() const;

 private:
  struct scope_tag {};
  void start(bool wait);
  void check_not_io_thread() const;
  const blocking_scope* scope_here() const noexcept;

  redis::cluster_config cfg_;
  backend_core core_;
  std::shared_ptr<redis::cluster_engine::cluster_router> router_;
};

}  // namespace dlock
