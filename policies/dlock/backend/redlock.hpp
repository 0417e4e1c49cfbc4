// RedlockBackend: locks on a majority of independent Redis masters
// (Redlock). Each node is a RedisBackend of its own, all on one executor;
// the host runs every ownership as ownership::Quorum over them.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>

#include <dlock/backend/core.hpp>
#include <dlock/backend/redis.hpp>
#include <dlock/ext.hpp>
#include <dlock/redis/redlock.hpp>
#include <dlock/ownership/quorum.hpp>

namespace dlock {

/// A quorum of independent Redis masters: a lock is held when a majority of
/// them granted it within the lease (Redis's "Redlock"). Choose it by the
/// backend alone: `Lock<RedlockBackend, ownership::Token, renewal::FixedLease,
/// wait::Spin>` is a Redlock lock with the same three interfaces as on one
/// server (see ownership::Quorum for how a vote is counted).
///
/// - Each node is a RedisBackend (two connections) on this backend's
///   executor; a node's commands are pipelined as on one server. Nodes are
///   asked at once, never one after another.
/// - A node whose connection is down is not asked (its vote is lost at
///   once); one that answers later than `reply_timeout` loses its vote for
///   that call, and its answer is dropped (its command still runs, and
///   what a try won there is given back behind it, on the same connection).
/// - The backend's own calls (async_exec, async_eval, async_eval_all: the
///   watchdog's renewals) run on every node, and each reply holds one
///   element per node, in node order: that node's reply, or an error value
///   `DLOCK <node>: <why>` for a node that gave none in time.
/// - Waits: wait::TryOnce, Spin, Backoff and PubSub (subscribed on every
///   node: a release's message on any node wakes the waiter).
///
/// Thread safety: every member function may be called from any thread.
class RedlockBackend {
 public:
  using executor_type = boost::asio::any_io_executor;  ///< the type of get_executor()
  /// The backend of each node.
  using node_type = RedisBackend;
  /// What the host runs for ownership `O`: O on every node, votes counted.
  template <class O>
  using ownership_for = ownership::Quorum<O>;
  /// Each node is one server, which holds every key.
  static constexpr bool cross_slot_scripts = true;

  /// Parses `url` (see redis::parse_redlock_url), starts a private I/O
  /// thread and connects to every node at once. Throws std::system_error:
  /// invalid_url; invalid_argument when the nodes are not an odd number of
  /// at least 3 distinct servers, or a setting cannot work; no_quorum when
  /// fewer than a majority could be reached (the message names the others
  /// and why). A minority that cannot be reached is no error: it is
  /// connected to in the background, and votes once it answers.
  explicit RedlockBackend(std::string_view url);
  /// As above, from one full URL per node (`redis://`, `rediss://` or
  /// `unix://`, each with its own settings).
  explicit RedlockBackend(const std::vector<std::string>& urls);
  /// As above, from settings.
  explicit RedlockBackend(redis::redlock_config cfg);
  /// Stops every node's connections (queued commands complete with
  /// shutting_down) and joins the private I/O thread.
  ~RedlockBackend();

  RedlockBackend(const RedlockBackend&) = delete;
  RedlockBackend& operator=(const RedlockBackend&) = delete;

  /// The executor that lock operations run on.
  executor_type get_executor() const noexcept { return core_.get_executor(); }
  /// A random 128-bit id for this backend (see RedisBackend::client_id).
  const std::string& client_id() const noexcept { return core_.client_id(); }
  /// The settings, as given or parsed.
  const redis::redlock_config& settings() const noexcept { return cfg_; }
  /// True on the private I/O thread (where a blocking call would wait for itself).
  bool on_io_thread() const noexcept { return core_.on_io_thread(); }

  /// One `Service` per backend, made on first use as `Service(*this)`.
  template <class Service>
  Service& use_service() {
    return core_.use_service<Service>(*this);
  }

  ///@{
  /// The quorum (see contract::backend_quorum).
  std::size_t node_count() const noexcept { return nodes_.size(); }
  RedisBackend& node(std::size_t i) noexcept { return *nodes_[i]; }
  std::string node_name(std::size_t i) const;
  bool node_available(std::size_t i) const noexcept;
  std::chrono::milliseconds reply_timeout() const noexcept { return cfg_.reply_timeout; }
  ///@}

  /// Sends `req` to every node; completion `void(error_code, redis::response)`,
  /// the response holding one element per node: an array of that node's
  /// replies, or an error value naming why it gave none. `key` routes
  /// nothing (every node holds every key).
  template <class CompletionToken>
  auto async_exec(std::string_view /*key*/, redis::request req, CompletionToken&& token) {
    return ext::initiate_through_function<redis::error_code, redis::response>(
        std::forward<CompletionToken>(token), get_executor(),
        [this, req = std::move(req)](auto done) mutable { exec_on_nodes(std::move(req), std::move(done)); });
  }

  /// Runs a script on every node; completion `void(error_code, redis::value)`,
  /// the value an array with each node's reply (or an error value naming
  /// why it gave none).
  template <class CompletionToken>
  auto async_eval(const redis::script& s, std::vector<std::string> keys, std::vector<std::string> args,
                  CompletionToken&& token) {
    return ext::initiate_through_function<redis::error_code, redis::value>(
        std::forward<CompletionToken>(token), get_executor(),
        [this, &s, keys = std::move(keys), args = std::move(args)](auto done) mutable {
          eval_on_nodes(s, std::move(keys), std::move(args), std::move(done));
        });
  }

  /// Runs many scripts on every node, one pipeline per node, all at once;
  /// completion `void(std::vector<redis::call_result>)`, one result per
  /// call, whose reply is an array with each node's reply to it (or an
  /// error value naming why it gave none).
  template <class CompletionToken>
  auto async_eval_all(std::vector<redis::script_call> calls, CompletionToken&& token) {
    return ext::initiate_through_function<std::vector<redis::call_result>>(
        std::forward<CompletionToken>(token), get_executor(),
        [this, calls = std::move(calls)](auto done) mutable { eval_all_on_nodes(std::move(calls), std::move(done)); });
  }

  /// Subscribes to `channel` on every node that is up (a release publishes
  /// on every node it reaches, so a waiter hears it from any of them);
  /// completion `void(error_code, redis::subscription)` once a majority has
  /// confirmed (a release that reaches a majority then reaches one of
  /// them), waited for up to `reply_timeout`. Fewer: no_quorum, or
  /// server_error with a node's words when nodes refused it. The one
  /// subscription ends every node's; a node that reconnects subscribes
  /// again and tells the listener it may have missed messages.
  template <class CompletionToken>
  auto async_subscribe(std::string_view /*key*/, std::string channel, redis::listener l, CompletionToken&& token) {
    return ext::initiate_through_function<redis::error_code, redis::subscription>(
        std::forward<CompletionToken>(token), get_executor(),
        [this, channel = std::move(channel), l = std::move(l)](auto done) mutable {
          subscribe_on_nodes(std::move(channel), std::move(l), std::move(done));
        });
  }

 private:
  void wait_first_connects();
  void exec_on_nodes(redis::request req, std::function<void(redis::error_code, redis::response)> done);
  void eval_on_nodes(const redis::script& s, std::vector<std::string> keys, std::vector<std::string> args,
                     std::function<void(redis::error_code, redis::value)> done);
  void eval_all_on_nodes(std::vector<redis::script_call> calls,
                         std::function<void(std::vector<redis::call_result>)> done);
  redis::value no_reply(std::size_t node, const redis::error_code& ec) const;
  void subscribe_on_nodes(std::string channel, redis::listener l,
                          std::function<void(redis::error_code, redis::subscription)> done);
  class channels;  // the subscriptions over every node (redlock.cpp)
  std::shared_ptr<channels> channels_;

  redis::redlock_config cfg_;
  backend_core core_;
  std::vector<std::unique_ptr<RedisBackend>> nodes_;
};

}  // namespace dlock
