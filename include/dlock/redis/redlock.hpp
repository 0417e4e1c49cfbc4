// Where a Redlock quorum's nodes are and how to talk to them: the settings
// of each node and the redis:// URL form that names them all.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/redis/config.hpp>

namespace dlock {

namespace redis {

/// Settings of a Redlock quorum.
struct redlock_config {
  /// Each node's connection settings (address, user, password, database,
  /// TLS, timeouts). An odd number, at least 3, of distinct servers, none
  /// with replica acknowledgement or an address source: Redlock's nodes
  /// are independent masters, not replicated ones.
  std::vector<config> nodes;
  /// How long a node's answer is waited for before its vote counts as lost
  /// (an acquire waits at most this, or the lease less its loss margin if
  /// shorter). Redis's description of Redlock suggests 5-50 ms for a 10 s
  /// lease; 100 ms leaves room for a loaded machine.
  std::chrono::milliseconds reply_timeout{100};

  /// "redis://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002", without passwords.
  std::string describe() const;
};

/// Parses `redis://[user[:password]@]host:port,host:port,...[/db]` (and
/// `rediss://...[?query]`): every node shares the user, password, database
/// and TLS settings, as `redis::parse_url` reads them for one node. Throws
/// std::system_error with error::invalid_url naming the bad node (never
/// quoting the user name or the password). The count of nodes is checked
/// by RedlockBackend.
redlock_config parse_redlock_url(std::string_view url);

/// As above, without throwing: on failure sets `ec` to error::invalid_url
/// and, when given, `why` to the sentence that names the bad part.
redlock_config parse_redlock_url(std::string_view url, std::error_code& ec, std::string* why = nullptr);

}  // namespace redis

}  // namespace dlock
