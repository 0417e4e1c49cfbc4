// RedisBackend: locks on one Redis server. Owns a command connection and a
// subscriber connection, on the caller's executor or on a private I/O thread.
#pragma once

#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <boost/asio/compose.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <dlock/backend/core.hpp>
#include <dlock/redis/blocking_connection.hpp>
#include <dlock/redis/config.hpp>
#include <dlock/redis/connection.hpp>
#include <dlock/redis/script.hpp>
#include <dlock/redis/subscriber.hpp>

namespace dlock {

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
class RedisBackend {
 public:
  using executor_type = redis::asio::any_io_executor;

  /// Parses `url` (see redis::parse_url), starts a private I/O thread and
  /// connects. Throws std::system_error when the URL is malformed
  /// (error::invalid_url) or when the first connect fails
  /// (connection_refused, auth_failed, connect_timeout, ...).
  explicit RedisBackend(std::string_view url);
  /// As above, from settings.
  explicit RedisBackend(redis::config cfg);
  /// Runs on `ex` (which the caller keeps running). Starts connecting in the
  /// background and does not wait: the first commands wait for the connect.
  RedisBackend(executor_type ex, redis::config cfg);
  RedisBackend(executor_type ex, std::string_view url);

  /// Stops both connections (queued commands complete with shutting_down)
  /// and joins the private I/O thread, if any.
  ~RedisBackend();

  RedisBackend(const RedisBackend&) = delete;
  RedisBackend& operator=(const RedisBackend&) = delete;

  /// The executor that lock operations run on (each on a strand of its own).
  executor_type get_executor() const noexcept { return core_.get_executor(); }
  /// A random 128-bit id for this backend: Redisson's client id, the first
  /// part of a reentrant lock's owner field `<client id>:<thread id>`.
  const std::string& client_id() const noexcept { return core_.client_id(); }
  const redis::config& settings() const noexcept { return commands_->settings(); }
  redis::connection& connection() noexcept { return *commands_; }
  redis::subscriber& subscriber() noexcept { return *subscriber_; }

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
          self.complete(redis::detail::call_results(ec, std::move(replies), n));
        },
        token, core_.get_executor());
  }

  /// One command; completion `void(error_code, redis::value)`.
  template <class CompletionToken>
  auto async_command(redis::request req, CompletionToken&& token) {
    return redis::async_command(*commands_, std::move(req), std::forward<CompletionToken>(token));
  }

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
  /// handling. Scopes nest, one per backend; a scope is not movable.
  class blocking_scope {
   public:
    explicit blocking_scope(RedisBackend& backend);
    ~blocking_scope();
    blocking_scope(const blocking_scope&) = delete;
    blocking_scope& operator=(const blocking_scope&) = delete;

   private:
    RedisBackend& backend_;
    std::unique_ptr<redis::blocking_connection> conn_;
    const RedisBackend* outer_owner_;
    redis::blocking_connection* outer_conn_;
  };

  /// The connection of this thread's innermost blocking_scope on this
  /// backend, or nullptr.
  redis::blocking_connection* blocking_here() const noexcept;

  /// The blocking fast path of the backend contract: sends on this thread's
  /// blocking_scope connection; nullopt without a scope, or when the command
  /// could not be written (it then goes through the shared connection).
  std::optional<std::pair<redis::error_code, redis::response>> blocking_exec(std::string_view key,
                                                                          const redis::request& req);
  std::optional<std::pair<redis::error_code, redis::value>> blocking_eval(const redis::script& s,
                                                                       const std::vector<std::string>& keys,
                                                                       const std::vector<std::string>& args);

  // Blocking forms: each throws std::system_error (whose what() carries the
  // server's message for server_error), or reports through `ec`. They use a
  // pooled blocking connection, as a blocking_scope does.
  redis::response exec(redis::request req);
  redis::response exec(redis::request req, std::error_code& ec);
  redis::value command(redis::request req);
  redis::value command(redis::request req, std::error_code& ec);
  redis::value eval(const redis::script& s, std::vector<std::string> keys,
                    std::vector<std::string> args);
  redis::value eval(const redis::script& s, std::vector<std::string> keys,
                    std::vector<std::string> args, std::error_code& ec);

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

  std::mutex pool_mutex_;
  std::vector<std::unique_ptr<redis::blocking_connection>> idle_;  // the blocking connections not in use

  backend_core core_;  // the I/O thread or the caller's executor, the client id, the services
  std::unique_ptr<redis::connection> commands_;
  std::unique_ptr<redis::subscriber> subscriber_;
};

}  // namespace dlock
