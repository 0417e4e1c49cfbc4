// A connection that its caller's thread drives itself: a blocking socket,
// written and read in the caller's own system calls. It is what a blocking
// call costs at best (one write, one read), with the same handshake, limits,
// script cache and error meanings as redis::connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <boost/system/error_code.hpp>

#include <dlock/error.hpp>
#include <dlock/redis/config.hpp>
#include <dlock/redis/request.hpp>
#include <dlock/redis/resp.hpp>
#include <dlock/redis/script_cache.hpp>
#include <dlock/redis/detail/receive_deadline.hpp>

struct ssl_st;  // OpenSSL's SSL, for a TLS session

namespace boost::asio::ssl {
class context;
}

namespace dlock::redis {

using error_code = boost::system::error_code;

/// One blocking socket to one server, used by one thread at a time (it has
/// no lock of its own; RedisBackend hands each to one caller at a time).
///
/// It connects on first use, within `connect_timeout`, with the handshake
/// redis::connection uses. With an address source in its settings, it
/// connects where the source found the server last (not_connected when it
/// has found none yet), and connects again when the source has found
/// another address since. After a failed connect it does not try again
/// before a backoff (`reconnect_wait` doubling to `reconnect_wait_max`)
/// has passed, and meanwhile fails at once with not_connected.
///
/// With TLS in its settings (rediss://), every connect makes a new TLS
/// session on the socket, under the same connect timeout; the same TLS
/// errors as redis::connection's. Its constructor throws std::system_error
/// (invalid_argument) when the TLS files cannot be used.
///
/// Errors keep redis::connection's meanings:
/// - nothing was written: a connect error (connection_refused,
///   resolve_failed, connect_timeout, auth_failed, select_failed) or
///   not_connected; all match condition::not_sent, so the caller may send
///   the command another way;
/// - written but not answered within `command_timeout`, or the connection
///   broke (end of file, reset, a reply the parser refuses): outcome_unknown.
///   A broken socket is closed and the next call reconnects. After a
///   timeout the socket stays open, as redis::connection's does: the next
///   command is answered after the late replies (which are dropped), so a
///   question about the unanswered command ("did my SET win?") is answered
///   after it ran, if it runs. A command that then times out without one
///   byte arriving closes the socket (the server is gone).
class blocking_connection {
 public:
  /// Does not connect yet (the first call does). Throws std::system_error
  /// (invalid_argument) when the TLS settings cannot be used.
  explicit blocking_connection(config cfg);
  ~blocking_connection();
  blocking_connection(const blocking_connection&) = delete;
  blocking_connection& operator=(const blocking_connection&) = delete;

  /// Writes `req` and reads its replies (one per command; error replies are
  /// values of kind::error).
  std::pair<error_code, response> exec(const request& req);

  /// Runs every call in one round trip, loading scripts this connection has
  /// not loaded in the same pipeline; one reply per call, as
  /// redis::async_eval_all gives them.
  std::pair<error_code, std::vector<value>> eval_all(const std::vector<script_call>& calls);

  /// Runs one script; a NOSCRIPT reply is answered by one EVAL of its
  /// source. An error reply is server_error with the reply as the value, as
  /// redis::async_eval gives it.
  std::pair<error_code, value> eval(const script& s, const std::vector<std::string>& keys,
                                    const std::vector<std::string>& args);

  /// Whether an open socket is still usable: false (and the socket closed)
  /// when the server has closed it or sent something nobody asked for. One
  /// non-blocking peek; call it before reusing a connection that sat idle.
  bool check_idle();

  /// A pooled connection that sat idle at least this long is checked
  /// (check_idle) before it is used again.
  static constexpr std::chrono::milliseconds idle_check_after{1};

  /// How long since its last command ended (or it connected), at `now`.
  std::chrono::steady_clock::duration idle_for(std::chrono::steady_clock::time_point now) const noexcept {
    return now - last_used_;
  }

  /// Whether it holds a socket now (it may still be dead: see check_idle).
  bool is_open() const noexcept { return fd_ >= 0; }
  /// Connects now, as the next call would (not before the backoff since a
  /// failed connect has passed; within `connect_timeout`), unless a socket
  /// is open: whether one is open afterwards.
  bool connect_now() {
    if (stale()) close();
    return fd_ >= 0 || !open();
  }
  /// Why the last connect failed, in more words than its error code (see
  /// connection::last_connect_failure).
  const std::string& last_connect_failure() const noexcept { return last_failure_; }
  /// Successful connects so far.
  std::size_t connects() const noexcept { return connects_; }
  const config& settings() const noexcept { return cfg_; }  ///< the settings it was made with

 private:
  error_code open();
  error_code open_socket(const address& target, std::chrono::steady_clock::time_point deadline);
  // Connected to an address the source has replaced since.
  bool stale() const noexcept;
  error_code handshake(std::chrono::steady_clock::time_point deadline);
  // A TLS session on the connected socket, and its handshake, by `deadline`.
  error_code start_tls(const address& target, std::chrono::steady_clock::time_point deadline);
  // One send or receive, on the socket or through the TLS session, with
  // send()'s and recv()'s results (errno EAGAIN: the socket's timeout).
  long send_some(const char* data, std::size_t size);
  long receive_some(char* into, std::size_t size);
  // Writes all of `data`; sets `wrote_any` when a byte may have left.
  error_code write_all(const std::string& data, bool& wrote_any);
  // Reads until `out` holds `n` replies or `deadline` passes.
  error_code read_replies(std::size_t n, response& out, std::chrono::steady_clock::time_point deadline);
  void close() noexcept;

  config cfg_;
  int fd_ = -1;
  std::shared_ptr<boost::asio::ssl::context> tls_context_;  // null: plain text
  ssl_st* ssl_ = nullptr;                // the TLS session of this socket
  unsigned long tls_error_ = 0;          // OpenSSL's error of the last failed TLS read
  bool certificate_requested_ = false;   // the session's server asked for a client certificate
  std::string last_failure_;
  std::size_t connects_ = 0;
  std::size_t owed_ = 0;  // replies of timed-out commands, still to come
  std::uint64_t generation_ = 0;  // the source's generation when it connected
  parser parser_;
  std::string buffer_;  // bytes read and not yet parsed
  detail::script_cache scripts_;
  std::chrono::steady_clock::time_point retry_after_{};
  std::chrono::steady_clock::time_point last_used_{};
  std::chrono::milliseconds next_wait_{0};
  detail::receive_deadline receive_;  // SO_RCVTIMEO within the read's deadline (also the TLS BIO's)
};

}  // namespace dlock::redis
