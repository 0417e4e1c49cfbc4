// Where a Sentinel deployment is and how to talk to it: the sentinels, the
// master's name, the credentials of each side, and the parser for
// redis-sentinel:// URLs that fills them in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/redis/config.hpp>

namespace dlock::redis {

/// The TCP port a sentinel listens on when its URL names none.
inline constexpr std::uint16_t default_sentinel_port{26379};

/// Settings of a Sentinel deployment.
struct sentinel_config {
  /// The sentinels to ask, in order (the first that answers is asked first
  /// from then on). At least one.
  std::vector<address> sentinels;
  /// The name the sentinels monitor the master under (`sentinel monitor
  /// <name> ...`).
  std::string master_name;
  ///@{
  /// Sentinel's own credentials (its `requirepass`, or an ACL user of the
  /// sentinels); empty: none.
  std::string sentinel_user;
  std::string sentinel_password;
  ///@}
  /// TLS to the sentinels (their tls-port); empty: plain text. The
  /// master's and replicas' TLS is `master.tls`. A rediss-sentinel:// URL
  /// sets both to its query's settings.
  std::optional<tls_settings> sentinel_tls;
  /// The master's settings: user, password, database, client name and
  /// every timeout. Its host, port and path are not used (the sentinels
  /// say where the master is); its `source` and `require_master` are set
  /// by the backend.
  config master;

  /// "redis-sentinel://127.0.0.1:26379,127.0.0.1:26380/2#mymaster", without
  /// the password.
  std::string describe() const;
};

/// Parses `redis-sentinel://[[user:]password@]host[:port][,host[:port]...][/db][?query]#master-name`,
/// the form Lettuce established: one or more sentinels (26379 when a port
/// is not given; IPv6 hosts in brackets), the master's database, and the
/// master's name after '#' (required; percent-encoded if it holds '%' or
/// '?'). The query may set replica acknowledgement (`acknowledge=`,
/// `acknowledge_timeout=`: see replica_ack; unset, the backend's default).
/// `rediss-sentinel://...[/db][?query]#master-name` is the same over TLS,
/// to the sentinels and to the master alike, with rediss://'s query too.
/// The user and password are the master's (and its replicas'); Sentinel's
/// own are set in the settings (sentinel_user, sentinel_password). Throws
/// std::system_error with error::invalid_url and a message that names the
/// bad part, never quoting the user name or the password.
sentinel_config parse_sentinel_url(std::string_view url);

/// As above, without throwing: on failure sets `ec` to error::invalid_url
/// and, when given, `why` to the sentence that names the bad part.
sentinel_config parse_sentinel_url(std::string_view url, std::error_code& ec, std::string* why = nullptr);

}  // namespace dlock::redis
