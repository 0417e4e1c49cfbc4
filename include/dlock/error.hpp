// dlock's error codes: one enum for the wire layer and the locks, so that every
// failure a caller can see is a std::error_code with a sentence behind it.
#pragma once

#include <string>
#include <system_error>

namespace dlock {

/// Every error dlock reports. "Not acquired", "lease lost" and "outcome
/// unknown" are different values on purpose: a caller must never read one as
/// another.
enum class error {
  // --- outcomes of lock operations ---------------------------------------
  /// The lock is held by someone else and the caller's deadline passed (or it
  /// asked to try once). Nothing was changed in Redis on the caller's behalf.
  not_acquired = 1,
  /// The caller believed it held the lock but Redis no longer has its hold:
  /// the lease ran out, or another client deleted or took the key.
  lease_lost,
  /// A command was written to the server but no reply came (connection lost,
  /// command timeout, server paused). It may or may not have run. Never read
  /// this as "not acquired" or "not released".
  outcome_unknown,
  /// Release or extend of a lock that the caller does not hold (Redisson's
  /// "attempt to unlock lock, not locked by current thread").
  not_owner,
  /// The owner already holds this lock and its ownership is not reentrant:
  /// waiting for itself would never end.
  already_held,

  // --- bad input, rejected before anything reaches Redis -----------------
  /// A lock name that is empty or longer than the limit (4 KiB).
  invalid_name,
  /// A lease that is zero or negative, longer than dlock::max_lease
  /// (10^12 ms), or too short for its loss margin.
  invalid_lease,
  /// A wait interval (spin, backoff, timeout) that is zero or negative.
  invalid_interval,
  /// A Redis URL that cannot be parsed; the exception text names the bad part.
  invalid_url,
  /// An argument that breaks a documented precondition (say, an empty owner id).
  invalid_argument,
  /// A blocking call on a thread that runs the backend's executor: it would
  /// wait for a reply that only that thread can read. Use the async
  /// interface there. (lock() and acquire() throw std::logic_error instead;
  /// unlock() and the destructors report this.)
  would_deadlock,

  // --- the connection ----------------------------------------------------
  /// The server refused the TCP or unix-socket connection.
  connection_refused,
  /// The host name did not resolve.
  resolve_failed,
  /// Connecting (TCP connect plus handshake) took longer than the connect timeout.
  connect_timeout,
  /// AUTH was rejected: wrong user name or password, or a password is
  /// required and none was given.
  auth_failed,
  /// SELECT of the database in the URL failed (index out of range).
  select_failed,
  /// The server answered the connection's handshake (AUTH, SELECT, CLIENT
  /// SETNAME, ROLE, PING) with a reply Redis never gives there: a wrong
  /// type or value, say an integer to AUTH. It may not be a Redis server,
  /// or something between changes its replies. The connection is closed
  /// and tried again; no command of the caller's was sent on it.
  unexpected_handshake_reply,
  /// The command was not written within the command timeout (the connection
  /// was down or busy the whole time). It definitely did not run.
  command_timeout,
  /// The connection could not be (re)established and the command was never
  /// written; it definitely did not run.
  not_connected,
  /// The backend or connection was shut down while the command was queued.
  shutting_down,

  // --- replies -------------------------------------------------------------
  /// The server answered with an error reply; its text travels with the error
  /// (in the exception message or the reply value).
  server_error,
  /// The byte stream from the server is not valid RESP.
  protocol_error,
  /// A reply exceeds the parser's limits (bulk length or element count).
  reply_too_large,
  /// A reply nests arrays deeper than the parser's limit.
  nesting_too_deep,
  /// A well-formed reply of a type or value the caller did not expect. The
  /// command may have run.
  unexpected_reply,

  // --- inside dlock ----------------------------------------------------------
  /// An exception where dlock cannot throw (a destructor, unlock()); the
  /// report that carries this code also carries the exception's text.
  unexpected_exception,

  // --- finding the server (Sentinel) -------------------------------------
  /// The server reached is not a master (ROLE says replica): Sentinel has
  /// not finished a failover, or named a demoted master. The connection
  /// asks again. Nothing was sent on it.
  not_master,
  /// Sentinels answered, and none of them knows the master name.
  unknown_master,
  /// None of the sentinels could be reached (refused, timed out, or
  /// refused the sentinel password).
  no_sentinel,

  // --- replica acknowledgement (WAIT) ---------------------------------------
  /// Replica acknowledgement is on, and fewer replicas than required
  /// acknowledged the lock's write within the WAIT timeout, on every try
  /// before the deadline. Each such write was given back (the lock is not
  /// held); the master may be fine, but a failover now could lose a hold,
  /// so none was granted.
  not_acknowledged,

  // --- Redis Cluster ---------------------------------------------------------
  /// A call's keys lie in different cluster slots, which no cluster node
  /// runs: a programming error, caught before anything is sent (the
  /// blocking forms' exception names the keys and their slots).
  cross_slot,
  /// The cluster cannot serve the key's slot now: a node answered
  /// CLUSTERDOWN, no node could say where the slot is, or redirections did
  /// not settle within the redirect limit. The command did not run.
  cluster_down,
  /// The node reached does not serve the key's slot (a MOVED or ASK reply,
  /// say to SSUBSCRIBE). ClusterBackend follows these itself; only code
  /// that talks to one node directly sees this. The command did not run.
  slot_moved,

  // --- TLS (rediss://) ---------------------------------------------------------
  /// The TLS handshake failed for a reason other than the three below: the
  /// port does not speak TLS (a plain-text Redis port), no protocol version
  /// or cipher in common, or the stream broke mid-handshake. Nothing was sent.
  tls_handshake_failed,
  /// The server's certificate failed verification: not signed by a CA the
  /// settings trust, expired, not yet valid, or otherwise unusable. The
  /// exception of a failed first connect gives OpenSSL's reason. Nothing
  /// was sent.
  tls_certificate_rejected,
  /// The server's certificate is trusted but not for the name checked
  /// (tls_settings::server_name, by default the host connected to): the
  /// hostname or IP address does not match. Nothing was sent.
  tls_hostname_mismatch,
  /// The server refused this client's certificate, or its lack of one
  /// (mutual TLS: tls-auth-clients yes). Under TLS 1.3 the server says so
  /// only after the handshake, at the first read; dlock reads that as this
  /// error too. Nothing of the caller's was sent.
  tls_client_certificate_rejected,

  // --- a quorum of independent servers (Redlock) ------------------------------
  /// Fewer than a majority of a quorum's nodes answered (they are down,
  /// refused the command, or answered after the vote's deadline), so no
  /// verdict can be reached either way. The message names the nodes that
  /// did not answer, and why. Whatever the try may have won was given back.
  no_quorum,
};

/// Questions a caller asks of any error, instead of listing codes:
/// `if (ec == dlock::condition::may_have_run) ...`. Works with
/// std::error_code and with the boost::system::error_code of async
/// completions.
enum class condition {
  /// The command never reached Redis (connect failures, command_timeout,
  /// not_connected, shutting_down): nothing changed, retrying is safe.
  not_sent = 1,
  /// The command may have run: outcome_unknown (sent, never answered) or
  /// unexpected_reply (answered in a way the algorithm cannot read). Ask
  /// Redis, or retry an operation that is safe to repeat (a release).
  may_have_run,
  /// The caller's hold is gone (lease_lost): someone else may hold the
  /// lock, and work done under it may have overlapped theirs.
  lock_lost,
};

/// The category of dlock::error values; its name is "dlock".
const std::error_category& error_category() noexcept;
/// The category of dlock::condition values; its name is "dlock.condition".
const std::error_category& condition_category() noexcept;

inline std::error_code make_error_code(error e) noexcept {
  return {static_cast<int>(e), error_category()};
}
inline std::error_condition make_error_condition(condition c) noexcept {
  return {static_cast<int>(c), condition_category()};
}

}  // namespace dlock

// std's traits that make the enums above error codes: not dlock's names,
// so not in the API reference.
/// @cond
template <>
struct std::is_error_code_enum<dlock::error> : std::true_type {};
template <>
struct std::is_error_condition_enum<dlock::condition> : std::true_type {};
/// @endcond
