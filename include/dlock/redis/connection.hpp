// One connection to one Redis server that pipelines every concurrent request
// over a single socket, reconnects with backoff, checks its own health, and
// tells "not sent" apart from "sent but not answered".
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/config.hpp>
#include <dlock/redis/error_code.hpp>
#include <dlock/redis/detail/exec_op.hpp>
#include <dlock/redis/request.hpp>
#include <dlock/redis/script_cache.hpp>

namespace dlock::redis {

namespace asio = boost::asio;

namespace detail {

class connection_impl;

// An exec_op whose completion goes to an Asio handler, on its own executor.
template <class Handler, class IoExecutor>
class exec_op_with : public exec_op {
 public:
  exec_op_with(Handler h, const IoExecutor& io)
      : handler_(std::move(h)),
        work_(asio::make_work_guard(asio::get_associated_executor(handler_, io))) {}

  Handler& handler() noexcept { return handler_; }

  void complete(error_code ec, response r) override {
    auto ex = work_.get_executor();
    // Post, never dispatch: the handler may start the next command at once,
    // and must not re-enter the connection while it walks its queues.
    // The cancellation slot belongs to the caller's context, where it may be
    // emitted at any time: clear it there, not on the connection's strand.
    // The work guard goes with the handler and ends there: released here,
    // after the post, it could touch a context whose owner, told by the
    // handler, had already destroyed it (AddressSanitizer found one).
    asio::post(ex, [h = std::move(handler_), work = std::move(work_), ec, r = std::move(r)]() mutable {
      auto slot = asio::get_associated_cancellation_slot(h);
      if (slot.is_connected()) slot.clear();
      std::move(h)(ec, std::move(r));
      work.reset();
    });
  }

 private:
  Handler handler_;
  asio::executor_work_guard<asio::associated_executor_t<Handler, IoExecutor>> work_;
};

void enqueue(const std::shared_ptr<connection_impl>& impl, std::shared_ptr<exec_op> op);
// A cancellation: on the strand, takes `op` back if it is still queued.
void cancel(const std::weak_ptr<connection_impl>& impl, const std::weak_ptr<exec_op>& op);
asio::any_io_executor impl_executor(const connection_impl& impl) noexcept;

}  // namespace detail

/// A multiplexed connection. Create it, call `start()`, then issue requests
/// from any thread or coroutine; they share the socket, their writes are
/// coalesced into as few syscalls as possible, and replies are matched in
/// order. The connection reconnects by itself (exponential backoff from
/// `config::reconnect_wait` up to `reconnect_wait_max`) and checks its health
/// with PING every `config::health_check_interval`.
///
/// Thread safety: all member functions may be called from any thread.
class connection {
 public:
  using executor_type = asio::any_io_executor;  ///< the type of get_executor()

  /// Runs on a strand of `ex`; nothing happens until start(). Throws
  /// std::system_error (invalid_argument) when the TLS settings cannot be used.
  connection(executor_type ex, config cfg);
  /// Stops the connection: queued commands complete with shutting_down,
  /// written ones with outcome_unknown.
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// The connection's strand; a handler without an executor of its own
  /// completes there.
  executor_type get_executor() const noexcept;
  const config& settings() const noexcept;  ///< the settings it was made with

  /// Starts connecting (and reconnecting) in the background.
  void start();
  /// Closes the socket and stops reconnecting; see the destructor.
  void stop();

  /// Sends `req` and completes with its replies.
  ///
  /// Completion signature: `void(error_code, response)`.
  /// - success: one value per command, in order; error replies are values of
  ///   kind::error, not error codes (a pipeline may partly fail).
  /// - error::outcome_unknown: the request was (maybe partly) written and the
  ///   connection broke or `command_timeout` passed before all replies came.
  ///   Some of its commands may have run.
  /// - error::command_timeout, not_connected, connection_refused,
  ///   connect_timeout, resolve_failed, auth_failed, select_failed: the request
  ///   was never written; none of it ran. While the server is unreachable a
  ///   request waits (up to `command_timeout`) for a reconnect, and then
  ///   reports the last connect error; an auth_failed or select_failed
  ///   connect fails queued requests at once.
  /// - error::shutting_down: stop() was called before the request was written.
  /// - asio::error::operation_aborted: cancelled before it was written.
  ///
  /// Cancellation (any type: terminal, partial, total): a request not yet
  /// written is removed and completes with operation_aborted; a written one
  /// cannot be taken back, so cancellation is ignored and it completes as
  /// described above.
  template <class CompletionToken>
  auto async_exec(request req, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(error_code, response)>(
        [impl = impl_](auto handler, request r) {
          using handler_t = std::decay_t<decltype(handler)>;
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto op = std::make_shared<detail::exec_op_with<handler_t, executor_type>>(
              std::move(handler), detail::impl_executor(*impl));
          op->expected = r.size();
          op->payload = r.payload();
          // Installed here, in the caller's context, as Asio requires (and
          // so before the request reaches the strand: no emit is lost).
          if (slot.is_connected()) {
            slot.assign([weak_impl = std::weak_ptr<detail::connection_impl>(impl),
                         weak_op = std::weak_ptr<detail::exec_op>(op)](asio::cancellation_type) {
              detail::cancel(weak_impl, weak_op);
            });
          }
          detail::enqueue(impl, std::move(op));
        },
        token, std::move(req));
  }

  /// Waits for the first connect attempt after start() to finish: success, or
  /// the error that made it fail: connection_refused, resolve_failed,
  /// connect_timeout, auth_failed, select_failed, or not_connected for any
  /// other failure (the server hung up or answered PING with an error).
  /// Completion signature: `void(error_code)`. Completes at once when already
  /// connected.
  void async_wait_connected(std::function<void(error_code)> handler);

  /// Subscriber mode: replies that may be pushes (arrays starting with
  /// "message", "pmessage", "smessage" or "sunsubscribe") are offered to
  /// `handler`, on the connection's strand; it returns true when it took
  /// the value as a push (which then is not matched to a request), false
  /// when the value answers a request (a SUNSUBSCRIBE's reply looks like
  /// the push a cluster node sends when it drops a shard channel). Set
  /// before start().
  void set_push_handler(std::function<bool(value&)> handler);
  /// Called on the connection's strand after every successful (re)connect,
  /// before queued requests are written; it may issue requests.
  void set_connect_handler(std::function<void()> handler);

  /// The scripts this connection has loaded, as far as it knows (cleared on
  /// every reconnect); see async_eval_all.
  detail::script_cache& scripts() noexcept;

  /// Counters for tests and benchmarks.
  struct stats {
    std::size_t connects = 0;       ///< successful handshakes
    std::size_t writes = 0;         ///< socket writes (one per coalesced batch)
    std::size_t commands_written = 0;  ///< commands written, health-check PINGs included
    bool up = false;  ///< a connection is established now (a moment ago, when read from another thread)
    /// New requests fail at once: the last connect failed in a way that
    /// retrying cannot fix (auth_failed, select_failed, a rejected
    /// certificate), until a connect succeeds; or it found a replica where
    /// `config::require_master` asks for a master at a fixed address (a
    /// cluster node), until the next connect attempt begins; or stop() was
    /// called.
    bool refusing = false;
  };
  stats statistics() const;  ///< the counters now; any thread

  /// Why the last connect failed, in more words than its error code (a TLS
  /// failure: OpenSSL's reason and the verify result, "certificate verify
  /// failed: hostname mismatch"); empty once a connect succeeds, or when
  /// there is no more to say. Any thread.
  std::string last_connect_failure() const;

  /// The current connection's socket: closes it as if the network dropped
  /// (for fault tests and for callers who need to force a reconnect).
  void drop_connection();

  /// The server is at `to` now (a failover): a connection to another
  /// address is closed (what was written on it and not answered completes
  /// with outcome_unknown), and a connection waiting out a reconnect
  /// backoff connects at once. The next connect asks the settings' address
  /// source where to go.
  void server_moved(address to);

 private:
  std::shared_ptr<detail::connection_impl> impl_;
};

}  // namespace dlock::redis
