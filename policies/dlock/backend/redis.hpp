// RedisBackend: locks on one Redis server. Owns a command connection and a
// subscriber connection, on the caller's executor or on a private I/O thread.
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include <boost/asio/compose.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/backend/core.hpp>
#include <dlock/ext.hpp>
#include <dlock/redis/acknowledged.hpp>
#include <dlock/redis/blocking_connection.hpp>
#include <dlock/redis/config.hpp>
#include <dlock/redis/connection.hpp>
#include <dlock/redis/script.hpp>
#include <dlock/redis/subscriber.hpp>

namespace dlock {

namespace redis::lane_engine {
// Not ext: RedisBackend acknowledges writes on lanes of dlock's own client
// (redis::connection), framing them with ROLE and WAIT by that client's
// internals; a backend written outside dlock acknowledges through its own.
using script_slot = detail::script_cache::slot;
using detail::acknowledged_request;
using detail::call_replies;
using detail::replicas_in_role;
using detail::split_acknowledged;
}  // namespace redis::lane_engine

/// One Redis server. Construct it from a URL and it runs its own I/O thread,
/// so blocking code needs no Asio; or give it an executor and it runs there.
///
/// Thread safety: every member function may be called from any thread. The
/// blocking helpers (`exec`, `eval`, `command`) must not be called from the
/// backend's own I/O thread (they would wait for themselves); they throw
/// std::logic_error if they are.
///
/// Known limit: `async_eval` and `async_command` with `asio::use_future`
/// complete on Asio's system thread, which can still be releasing this
/// backend's executor a moment after the future became ready. Do not destroy
/// the backend right after `.get()` on such a future; the blocking helpers
/// and the Lock API have no such window.
///
/// Destroying it (after the locks that use it): with its own I/O thread,
/// operations still in flight end first (`shutting_down`, or
/// `outcome_unknown` for a request already written), their handlers run on
/// that thread, and the thread stops before the connections are freed. On
/// your executor, destroy it only once none of its operations is in flight,
/// as any Asio I/O object.
class RedisBackend {
 public:
  using executor_type = redis::asio::any_io_executor;  ///< the type of get_executor()
  /// One server holds every key, so one script may name keys of any slots
  /// (the watchdog renews many locks per script call).
  static constexpr bool cross_slot_scripts = true;

  /// Parses `url` (see redis::parse_url), starts a private I/O thread and
  /// connects. Throws std::system_error when the URL is malformed
  /// (error::invalid_url), when the settings cannot work (invalid_argument:
  /// `acknowledge`, TLS settings) or when the first connect fails
  /// (connection_refused, auth_failed, connect_timeout, ...).
  explicit RedisBackend(std::string_view url);
  /// As above, from settings.
  explicit RedisBackend(redis::config cfg);
  /// Runs on `ex` (which the caller keeps running). Starts connecting in the
  /// background and does not wait: the first commands wait for the connect.
  /// Throws std::system_error only for settings that cannot work
  /// (invalid_argument).
  RedisBackend(executor_type ex, redis::config cfg);
  /// As above, from `url` (see redis::parse_url; invalid_url when malformed).
  RedisBackend(executor_type ex, std::string_view url);

  /// Stops both connections (queued commands complete with shutting_down)
  /// and joins the private I/O thread, if any.
  ~RedisBackend();

  /// Stops every connection now: queued commands, and any sent later,
  /// complete with shutting_down. (The destructor does this; a backend
  /// built on this one stops its servers before it is destroyed.)
  void stop();

  RedisBackend(const RedisBackend&) = delete;
  RedisBackend& operator=(const RedisBackend&) = delete;

  /// The executor that lock operations run on (each on a strand of its own).
  executor_type get_executor() const noexcept { return core_.get_executor(); }
  /// A random 128-bit id for this backend: Redisson's client id, the first
  /// part of a reentrant lock's owner field `<client id>:<thread id>`.
  const std::string& client_id() const noexcept { return core_.client_id(); }
  /// The connection settings, as given or parsed from the URL.
  const redis::config& settings() const noexcept { return commands_->settings(); }
  /// Whether its waits listen on Redis 7's shard channels
  /// (settings().sharded_pubsub: SSUBSCRIBE), and so its locks' scripts
  /// publish with SPUBLISH: a client of one cluster node, as ClusterBackend
  /// is of each. Off by default.
  bool sharded_pubsub() const noexcept { return settings().sharded_pubsub; }
  /// A script on its server counts every subscriber of a channel (PUBSUB
  /// NUMSUB, or SHARDNUMSUB): its waiters are all on that server.
  static constexpr bool counts_subscribers() noexcept { return true; }
  /// The shared command connection (async_exec, async_eval, async_command).
  redis::connection& connection() noexcept { return *commands_; }
  /// The shared subscriber connection (async_subscribe).
  redis::subscriber& subscriber() noexcept { return *subscriber_; }

  ///@{
  /// Sends a pipeline; completion `void(error_code, redis::response)`.
  /// `key` routes it (one server: every request goes to it).
  template <class CompletionToken>
  auto async_exec(std::string_view /*key*/, redis::request req, CompletionToken&& token) {
    return commands_->async_exec(std::move(req), std::forward<CompletionToken>(token));
  }
  template <class CompletionToken>
  auto async_exec(redis::request req, CompletionToken&& token) {
    return commands_->async_exec(std::move(req), std::forward<CompletionToken>(token));
  }
  ///@}

  /// Runs a script by SHA (NOSCRIPT handled); completion
  /// `void(error_code, redis::value)`. See redis::async_eval.
  template <class CompletionToken>
  auto async_eval(const redis::script& s, std::vector<std::string> keys,
                  std::vector<std::string> args, CompletionToken&& token) {
    return redis::async_eval(*commands_, s, std::move(keys), std::move(args),
                             std::forward<CompletionToken>(token));
  }

  /// Runs many scripts in one round trip; completion
  /// `void(std::vector<redis::call_result>)`, one result per call: on one
  /// server a failed round trip fails every call with the same error. See
  /// redis::async_eval_all.
  template <class CompletionToken>
  auto async_eval_all(std::vector<redis::script_call> calls, CompletionToken&& token) {
    const auto n = calls.size();
    return redis::asio::async_compose<CompletionToken, void(std::vector<redis::call_result>)>(
        [this, n, calls = std::move(calls), started = false](auto& self, redis::error_code ec = {},
                                                             std::vector<redis::value> replies = {}) mutable {
          if (!std::exchange(started, true)) {
            redis::async_eval_all(*commands_, std::move(calls), std::move(self));
            return;
          }
          self.complete(ext::call_results(ec, std::move(replies), n));
        },
        token, core_.get_executor());
  }

  /// One command; completion `void(error_code, redis::value)`.
  template <class CompletionToken>
  auto async_command(redis::request req, CompletionToken&& token) {
    return redis::async_command(*commands_, std::move(req), std::forward<CompletionToken>(token));
  }

  ///@{
  /// Subscribes on the shared subscriber connection; completion
  /// `void(error_code, redis::subscription)`. See redis::subscriber. `key`
  /// routes it (one server: every channel is on it).
  template <class CompletionToken>
  auto async_subscribe(std::string_view /*key*/, std::string channel, redis::listener l, CompletionToken&& token) {
    return subscriber_->async_subscribe(std::move(channel), std::move(l), std::forward<CompletionToken>(token));
  }
  template <class CompletionToken>
  auto async_subscribe(std::string channel, redis::listener l, CompletionToken&& token) {
    return subscriber_->async_subscribe(std::move(channel), std::move(l), std::forward<CompletionToken>(token));
  }
  ///@}

  // ---- Replica acknowledgement (settings().acknowledge) -------------------
  //
  // WAIT holds the connection it is sent on until it answers (up to its
  // timeout), so acknowledged writes never go on the shared connection,
  // where releases, checks and every other lock's commands would queue
  // behind it: a blocking caller sends them on its own blocking
  // connection, and the asynchronous path on an acknowledgement lane, one
  // of a few connections of their own (up to max_acknowledgement_lanes,
  // opened as needed: a write takes an idle one, or a new one, or the
  // least busy one when all are open and busy).

  /// Whether lock writes wait for replicas (settings().acknowledge is set:
  /// in code, in the URL, or by SentinelBackend's default).
  bool acknowledges() const noexcept { return settings().acknowledge.has_value(); }
  /// Whether a lock that cannot be acknowledged (its ownership is not
  /// owner-checked) is refused (true) or runs unacknowledged (false: the
  /// default's replica_ack::owner_checked_only).
  bool acknowledges_every_lock() const noexcept {
    return acknowledges() && !settings().acknowledge->owner_checked_only;
  }
  /// How many replicas a write's WAIT asks for now: the setting's count, or
  /// every replica the master listed in its last ROLE reply (at least one
  /// under replica_ack::all, and under replica_ack::if_any once the master
  /// has listed one);
  /// -1 before any ROLE reply was read, and when acknowledgement is off.
  int replicas_wanted() const;
  /// How many lanes the asynchronous path may open.
  static constexpr std::size_t max_acknowledgement_lanes = 8;
  /// The lanes open now (for tests and benchmarks).
  std::size_t acknowledgement_lanes() const;

  /// Sends `req` as `ROLE; req; WAIT n timeout` on an acknowledgement lane
  /// (before the first write, a ROLE alone when the count of replicas is
  /// not known yet). Completion `void(error_code, response,
  /// redis::replica_acks)`: the replies to `req` alone, and what WAIT found.
  /// Errors as async_exec; `key` routes it (one server: every request goes
  /// to it).
  template <class CompletionToken>
  auto async_exec_acknowledged(std::string_view /*key*/, redis::request req, CompletionToken&& token) {
    return redis::asio::async_compose<CompletionToken, void(redis::error_code, redis::response, redis::replica_acks)>(
        acknowledged_op<exec_body>{this, exec_body{std::move(req)}}, token, core_.get_executor());
  }

  /// Runs many scripts in one acknowledged round trip (the watchdog's
  /// renewals), on an acknowledgement lane. Completion
  /// `void(std::vector<redis::call_result>, redis::replica_acks)`, one
  /// result per call as async_eval_all gives them.
  template <class CompletionToken>
  auto async_eval_all_acknowledged(std::vector<redis::script_call> calls, CompletionToken&& token) {
    return redis::asio::async_compose<CompletionToken, void(std::vector<redis::call_result>, redis::replica_acks)>(
        acknowledged_op<eval_all_body>{this, eval_all_body{std::move(calls), {}}}, token, core_.get_executor());
  }

  /// The blocking fast path of async_exec_acknowledged: on this thread's
  /// blocking_scope connection; nullopt without a scope, or when the
  /// request could not be written there.
  std::optional<std::tuple<redis::error_code, redis::response, redis::replica_acks>> blocking_exec_acknowledged(
      std::string_view key, const redis::request& req);

  /// The master is at `to` now (a failover, for a backend built on this
  /// one): every connection to another address is closed and connects
  /// again. A count of replicas read at another master is asked again.
  void server_moved(const redis::address& to);

  /// True where a blocking call would wait for itself: on the private I/O
  /// thread, or inside a caller's io_context or thread_pool (or a strand of
  /// one) that runs this backend. (Other executor types cannot be asked;
  /// there the caller must not block the executor's threads.)
  bool on_io_thread() const noexcept { return core_.on_io_thread(); }

  /// One `Service` per backend, made on first use as `Service(*this)` and
  /// destroyed before the connections (the watchdog's renewal timer is one).
  template <class Service>
  Service& use_service() {
    return core_.use_service<Service>(*this);
  }

  /// Blocking calls without the thread hops. While a blocking_scope lives,
  /// commands that lock policies send from this thread on this backend go
  /// over a blocking connection of the scope's own (redis::
  /// blocking_connection), written and read by this thread, instead of
  /// through the I/O thread: one send() and one recv() instead of two thread
  /// wake-ups around them. Lock's blocking calls open one for their
  /// duration and run their operation on the calling thread. The
  /// connections are pooled: there are as many as threads that block on
  /// this backend at the same moment, and they stay open for reuse. A
  /// command that cannot be written on one (it cannot connect) goes through
  /// the shared connection instead, with that connection's reconnect
  /// handling. Scopes nest (the innermost of a backend is the one used;
  /// scopes of several backends may be open at once, as ClusterBackend's
  /// are, one per master it sends to); a scope is not movable.
  class blocking_scope {
   public:
    /// Takes a pooled blocking connection of `backend` (it connects on first
    /// use) and becomes this thread's innermost scope on it.
    explicit blocking_scope(RedisBackend& backend);
    ~blocking_scope();
    blocking_scope(const blocking_scope&) = delete;
    blocking_scope& operator=(const blocking_scope&) = delete;

   private:
    friend class RedisBackend;
    RedisBackend& backend_;
    std::unique_ptr<redis::blocking_connection> conn_;
    const blocking_scope* outer_;  // this thread's scope before this one
  };

  /// The connection of this thread's innermost blocking_scope on this
  /// backend, or nullptr.
  redis::blocking_connection* blocking_here() const noexcept;

  ///@{
  /// The blocking fast path of the backend contract: sends on this thread's
  /// blocking_scope connection; nullopt without a scope, or when the command
  /// could not be written (it then goes through the shared connection).
  std::optional<std::pair<redis::error_code, redis::response>> blocking_exec(std::string_view key,
                                                                          const redis::request& req);
  std::optional<std::pair<redis::error_code, redis::value>> blocking_eval(const redis::script& s,
                                                                       const std::vector<std::string>& keys,
                                                                       const std::vector<std::string>& args);
  ///@}

  ///@{
  /// Blocking forms: each throws std::system_error (whose what() carries the
  /// server's message for server_error), or reports through `ec`. exec gives
  /// error replies as values; command and eval report one as server_error,
  /// with the reply as the value. They use a pooled blocking connection, as a
  /// blocking_scope does (the shared one when it cannot connect), and throw
  /// std::logic_error on the backend's own I/O thread.
  redis::response exec(redis::request req);
  redis::response exec(redis::request req, std::error_code& ec);
  redis::value command(redis::request req);
  redis::value command(redis::request req, std::error_code& ec);
  redis::value eval(const redis::script& s, std::vector<std::string> keys,
                    std::vector<std::string> args);
  redis::value eval(const redis::script& s, std::vector<std::string> keys,
                    std::vector<std::string> args, std::error_code& ec);
  ///@}

 protected:
  /// The shared part, for a backend built on this one (SentinelBackend).
  backend_core& core() noexcept { return core_; }

 private:
  void check_not_io_thread() const;
  void wait_first_connect();
  std::unique_ptr<redis::blocking_connection> take_blocking();
  void give_back(std::unique_ptr<redis::blocking_connection> c);
  template <class T, class Direct, class Shared>
  std::pair<std::error_code, T> blocking_call(Direct&& direct, Shared&& shared);

  redis::connection* take_lane();
  void lane_done(redis::connection* lane);
  void note_replicas(int reported);
  // The master as far as this backend knows: its address source's last
  // answer, or the settings' address.
  std::optional<redis::address> current_master() const;
  const redis::replica_ack& ack_settings() const noexcept { return *settings().acknowledge; }

  // The request body of an acknowledged exec: as given.
  struct exec_body {
    redis::request req;
    redis::request encode(redis::connection&) { return std::move(req); }
    template <class Self>
    void complete(Self& self, redis::connection&, redis::error_code ec, redis::response r, redis::replica_acks acks) {
      self.complete(ec, std::move(r), acks);
    }
  };
  // The body of an acknowledged batch of scripts: loaded on the lane as
  // needed (redis::async_eval_all's encoding), one result per call.
  struct eval_all_body {
    std::vector<redis::script_call> calls;
    std::vector<redis::lane_engine::script_slot> at;
    redis::request encode(redis::connection& lane) {
      redis::request req;
      for (auto& c : calls) at.push_back(lane.scripts().push(req, c));
      return req;
    }
    template <class Self>
    void complete(Self& self, redis::connection& lane, redis::error_code ec, redis::response r,
                  redis::replica_acks acks) {
      std::vector<redis::value> replies;
      if (!ec) std::tie(ec, replies) = redis::lane_engine::call_replies(lane.scripts(), calls, at, r);
      self.complete(ext::call_results(ec, std::move(replies), calls.size()), acks);
    }
  };
  // ROLE first when the count of replicas is not known yet, then the body
  // framed by ROLE and WAIT, on a lane taken for the operation.
  template <class Body>
  struct acknowledged_op {
    RedisBackend* backend;
    Body body;
    redis::connection* lane = nullptr;
    int wanted = -1;
    int step = 0;

    template <class Self>
    void operator()(Self& self, redis::error_code ec = {}, redis::response r = {}) {
      if (step == 0) {
        lane = backend->take_lane();
        wanted = backend->replicas_wanted();
        if (wanted < 0) {
          step = 1;
          lane->async_exec(redis::request().push("ROLE"), std::move(self));
          return;
        }
      } else if (step == 1) {
        if (!ec && r.size() == 1) backend->note_replicas(redis::lane_engine::replicas_in_role(r[0]));
        wanted = backend->replicas_wanted();
        // Nothing of the body was sent: ROLE did not come back (whatever
        // became of it, the write did not run), or the node is not a master.
        if (ec) return finish(self, ec == condition::not_sent ? ec : redis::error_code(error::not_connected), {}, {});
        if (wanted < 0) return finish(self, redis::error_code(error::not_master), {}, {});
      }
      if (step <= 1) {
        step = 2;
        lane->async_exec(redis::lane_engine::acknowledged_request(body.encode(*lane), wanted, backend->ack_settings().timeout),
                         std::move(self));
        return;
      }
      auto out = redis::lane_engine::split_acknowledged(ec, std::move(r), wanted);
      backend->note_replicas(out.reported);
      finish(self, out.ec, std::move(out.body), out.acks);
    }

    template <class Self>
    void finish(Self& self, redis::error_code ec, redis::response r, redis::replica_acks acks) {
      auto* used = std::exchange(lane, nullptr);
      backend->lane_done(used);
      body.complete(self, *used, ec, std::move(r), acks);
    }
  };

  mutable std::mutex seen_mutex_;          // guards the three below
  int reported_replicas_ = -1;             // ROLE's count of replicas, last read
  std::optional<redis::address> reported_at_;  // the master it was read at
  std::optional<redis::address> seen_at_;  // the master that listed a replica (replica_ack::if_any)
  mutable std::mutex lanes_mutex_;
  struct lane {
    std::unique_ptr<redis::connection> conn;
    std::size_t busy = 0;
  };
  std::vector<lane> lanes_;

  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<redis::blocking_connection>> idle_;  // the blocking connections not in use

  backend_core core_;  // the I/O thread or the caller's executor, the client id, the services
  std::unique_ptr<redis::connection> commands_;
  std::unique_ptr<redis::subscriber> subscriber_;
};

}  // namespace dlock
