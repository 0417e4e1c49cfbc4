// Where a Redis server is and how to talk to it: the connection settings, and
// the parser for redis:// and unix:// URLs that fills them in.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <dlock/redis/resp.hpp>

namespace dlock::redis {

/// The TCP port a redis:// URL means when it names none (Redis's registered port).
inline constexpr std::uint16_t default_tcp_port{6379};

class address_source;  // redis/address_source.hpp

/// Replica acknowledgement of a lock's writes (config::acknowledge): after
/// each write that takes or extends a lock, `WAIT replicas timeout` on the
/// same connection, right behind it in the same pipeline. Redis replicates
/// asynchronously; WAIT only reports how many replicas have received the
/// write. A lock write that fewer than `replicas` replicas acknowledged
/// within `timeout` is given back (an acquire) or not counted (a renewal).
///
/// Only an owner-checked ownership (token, reentrant hash, queue,
/// semaphore, read-write) can give a write back without deleting someone
/// else's lock. SentinelBackend and ClusterBackend acknowledge by default
/// (by_default(): `if_any`, owner-checked locks only); a one-server
/// RedisBackend does not. The URL's `?acknowledge=` sets it too.
struct replica_ack {
  /// `replicas`: every replica the master lists as connected (ROLE's list,
  /// read in the same pipeline as each write), and at least one: a master
  /// without replicas acknowledges nothing.
  static constexpr int all = -1;
  /// `replicas`: every replica the master lists as connected, and at least
  /// one once the backend has seen this master list any. A master that
  /// never had a replica (a cluster or a test server without them) is not
  /// waited for (WAIT 0 answers at once); one whose replicas all dropped
  /// is, since a replica cut off for a moment can still be promoted
  /// without the write. A new master after a failover starts afresh. The
  /// default's choice.
  static constexpr int if_any = -2;
  /// `replicas`: acknowledgement off (turns a backend's default off).
  static constexpr int none = 0;
  /// How many replicas must acknowledge: a count of at least 1, `all`,
  /// `if_any` or `none`.
  int replicas = all;
  /// How long WAIT waits for them. Positive, and shorter than the
  /// connection's command_timeout (a WAIT that outlasts it would be read
  /// as an unanswered command). A lock's acquire can take this long once
  /// per try when replicas lag, and a lease must outlast it.
  std::chrono::milliseconds timeout{1000};
  /// What a lock whose ownership is not owner-checked (bare SETNX, GETSET
  /// expiry) does on this backend: false, Lock's constructor refuses it
  /// (invalid_argument); true, it runs without acknowledgement (and a
  /// failover can grant it twice). by_default() sets true; a setting made
  /// in code or in a URL is false unless it says otherwise.
  bool owner_checked_only = false;

  /// Sentinel's and Cluster's default: `if_any` within 1 s, for
  /// owner-checked locks only.
  static replica_ack by_default() noexcept {
    return replica_ack{.replicas = if_any, .timeout = std::chrono::milliseconds(1000), .owner_checked_only = true};
  }
};

/// TLS settings (config::tls; a rediss:// URL sets them). The server's
/// certificate is always verified, against the CAs named here (or, when
/// both are empty, the system's trust store), and must carry the name
/// checked; only `insecure_no_verify_for_tests_only` turns that off.
struct tls_settings {
  std::string ca_file;    ///< PEM file of the CA certificates to trust
  std::string ca_dir;     ///< folder of CA certificates named by hash (openssl rehash)
  std::string cert_file;  ///< this client's certificate chain, PEM (mutual TLS); with key_file
  std::string key_file;   ///< its private key, PEM (not encrypted)
  /// The name the server's certificate must carry: a host name (checked
  /// against its DNS names, and sent as SNI) or an IP address (checked
  /// against its IP addresses). Empty: the host connected to.
  std::string server_name;
  /// Accept any certificate from anyone: no chain check, no name check.
  /// For tests against throwaway servers only; a rediss:// URL cannot set it.
  bool insecure_no_verify_for_tests_only = false;
};

/// Connection settings. Every duration must be positive.
struct config {
  /// How a server is reached: TCP (host and port) or a unix socket (path).
  enum class transport : std::uint8_t { tcp, unix_socket };

  transport kind = transport::tcp;  ///< tcp or unix_socket
  std::string host = "127.0.0.1";     ///< tcp: a name or an address
  std::uint16_t port = default_tcp_port;  ///< tcp
  std::string path;                    ///< unix_socket: the socket's path
  std::string user;                    ///< ACL user; empty means "default"
  std::string password;                ///< empty means no AUTH
  int database = 0;                    ///< SELECT index; 0 sends no SELECT
  std::string client_name = "dlock";   ///< CLIENT SETNAME; empty sends none
  /// TLS on every connection (tcp only); empty: plain text.
  std::optional<tls_settings> tls;

  /// TCP (or unix) connect plus the handshake (TLS, AUTH, SELECT, SETNAME).
  std::chrono::milliseconds connect_timeout{2000};
  /// From the moment a command is queued until its reply. A command not
  /// written by then fails with command_timeout (it did not run); one written
  /// but not answered fails with outcome_unknown.
  std::chrono::milliseconds command_timeout{5000};
  /// A PING is sent this often when the connection is idle. The connection
  /// is taken for dead, closed (failing in-flight commands with
  /// outcome_unknown) and reconnected when its oldest unanswered command was
  /// written longer ago than command_timeout (or one interval, if longer)
  /// and not one byte arrived during the last interval: a slow command does
  /// not close it, a silent server does.
  std::chrono::milliseconds health_check_interval{1000};
  /// Reconnect backoff: the first wait, doubled per failure up to the cap.
  std::chrono::milliseconds reconnect_wait{50};
  std::chrono::milliseconds reconnect_wait_max{2000};  ///< the backoff's cap

  /// Bounds on each reply; a reply beyond them ends the connection, as a
  /// malformed one does (what was written on it: outcome_unknown).
  parser_limits limits{};

  /// Where to connect, when the address must be asked for (a Sentinel
  /// deployment's "where is the master now?"). Null: `host`, `port` and
  /// `path` say it. When set, every (re)connect asks it, and `host`,
  /// `port`, `path` and `kind` are not used.
  std::shared_ptr<address_source> source;
  /// Only a master will do: the handshake also sends ROLE and refuses a
  /// replica (error::not_master); a READONLY reply (a master demoted since)
  /// ends the connection as soon as what was written on it is answered,
  /// and the next connect asks `source` again. Without a `source` (a
  /// cluster node's connection) a refused replica fails the requests
  /// waiting for the connection, and those that come until its next
  /// connect attempt begins, with not_master at once (none of them was
  /// sent); with one, they wait for the next connect, within their command
  /// timeout.
  bool require_master = false;
  /// Subscribers use Redis 7's sharded pub/sub (SSUBSCRIBE, SUNSUBSCRIBE,
  /// "smessage"): on a cluster node, whose shard channels live in the slot
  /// of their name. ClusterBackend sets it; on a RedisBackend (a client of
  /// one cluster node) its locks' scripts then publish with SPUBLISH too.
  bool sharded_pubsub = false;
  /// Replica acknowledgement of lock writes (see replica_ack). Empty: the
  /// backend's default, which is off on RedisBackend and
  /// replica_ack::by_default() on SentinelBackend and ClusterBackend;
  /// `replicas` replica_ack::none: off. Used by the backends, not by a
  /// connection on its own; a URL's `?acknowledge=off|all|if_any|<n>`
  /// (and `acknowledge_timeout=<ms>`) sets it.
  std::optional<replica_ack> acknowledge;

  /// "redis://127.0.0.1:7000/2", "rediss://..." or "unix:///tmp/r.sock",
  /// without the password (and without the TLS file names).
  std::string describe() const;
};

/// Where one server listens: a TCP host and port, or a unix socket.
struct address {
  config::transport kind = config::transport::tcp;  ///< tcp or unix_socket
  std::string host;        ///< tcp: a name or an address
  std::uint16_t port = 0;  ///< tcp
  std::string path;  ///< unix socket

  /// The address `cfg` names itself.
  static address of(const config& cfg) { return {cfg.kind, cfg.host, cfg.port, cfg.path}; }
  /// "127.0.0.1:7000", "[::1]:7000" or "unix:/tmp/r.sock".
  std::string describe() const;
  /// Equal when every field is (a unix address compares its unused tcp fields too).
  friend bool operator==(const address&, const address&) = default;
};

/// Parses `redis://[user[:password]@]host[:port][/db]` (host may be an IPv6
/// address in brackets; user and password may be percent-encoded),
/// `rediss://` (the same over TLS, with an optional query of tls_settings'
/// file and name fields: `?ca_file=/etc/r/ca.pem&cert_file=...&key_file=...
/// &ca_dir=...&server_name=...`, values percent-encoded; no verification
/// opt-out) and
/// `unix://[user[:password]@]/path/to/socket[?db=N]` (a path of at most 107
/// bytes on Linux: what a unix socket address holds). The durations keep
/// their defaults. Throws std::system_error with error::invalid_url and a
/// message that names the bad part, but never quotes the user name or the
/// password. A '/', '?', '#' or '@' in a password should be percent-encoded;
/// in a redis:// URL the user info runs to the last '@' all the same.
/// Every form's query may also set replica acknowledgement:
/// `acknowledge=off|all|if_any|<n>` and `acknowledge_timeout=<ms>` (see
/// replica_ack); an unknown parameter is refused by name.
config parse_url(std::string_view url);

/// As above, without throwing: on failure sets `ec` to error::invalid_url and,
/// when given, `why` to the sentence that names the bad part.
config parse_url(std::string_view url, std::error_code& ec, std::string* why = nullptr);

/// The SHA-1 of `text` as 40 lowercase hex digits: the name Redis gives a
/// script in EVALSHA.
std::string sha1_hex(std::string_view text);

}  // namespace dlock::redis
