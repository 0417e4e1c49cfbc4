// The "dlock" error category: the sentence behind each dlock::error value.
#include <dlock/error.hpp>

namespace dlock {
namespace {

class category final : public std::error_category {
 public:
  const char* name() const noexcept override { return "dlock"; }

  std::string message(int value) const override {
    switch (static_cast<error>(value)) {
      case error::not_acquired: return "lock not acquired: held by another owner";
      case error::lease_lost: return "lease lost: the lock is no longer held by this owner";
      case error::outcome_unknown:
        return "outcome unknown: the command was sent but no reply came";
      case error::not_owner: return "not the owner: the lock is not held by this owner";
      case error::already_held:
        return "already held by this owner, and the ownership is not reentrant";
      case error::invalid_name: return "invalid lock name: empty or longer than 4096 bytes";
      case error::invalid_lease:
        return "invalid lease: must be positive, at most 10^12 ms (about 31.7 years), and longer than its loss "
               "margin (a watchdog's margin may be at most a third of its timeout, which must be at least 3 ms)";
      case error::invalid_interval: return "invalid interval: must be positive and at most 10^12 ms";
      case error::invalid_url: return "invalid Redis URL";
      case error::invalid_argument: return "invalid argument";
      case error::would_deadlock:
        return "a blocking call on a thread that runs the backend's executor would wait for itself";
      case error::unexpected_exception: return "an exception where dlock could not throw it";
      case error::connection_refused: return "connection refused by the Redis server";
      case error::resolve_failed: return "the Redis host name did not resolve";
      case error::connect_timeout: return "connecting to Redis timed out";
      case error::auth_failed: return "Redis authentication failed (wrong user or password)";
      case error::select_failed: return "Redis SELECT of the database failed";
      case error::unexpected_handshake_reply:
        return "the server answered the connection's handshake with a reply Redis never gives there (not Redis?)";
      case error::command_timeout:
        return "command timed out before it was sent; it did not run";
      case error::not_connected: return "not connected to Redis; the command was not sent";
      case error::shutting_down: return "the Redis connection is shutting down";
      case error::server_error: return "the Redis server replied with an error";
      case error::protocol_error: return "malformed reply from the Redis server";
      case error::reply_too_large: return "reply exceeds the parser's size limits";
      case error::nesting_too_deep: return "reply nests deeper than the parser's limit";
      case error::unexpected_reply: return "unexpected reply from the Redis server";
      case error::not_master:
        return "the server reached is not a master (a replica, or a master demoted by a failover)";
      case error::unknown_master: return "no sentinel knows a master of that name";
      case error::no_sentinel: return "no sentinel could be reached";
      case error::not_acknowledged:
        return "fewer replicas than required acknowledged the lock's write in time (the write was given back)";
      case error::cross_slot: return "the call's keys lie in different Redis Cluster slots (nothing was sent)";
      case error::cluster_down:
        return "the Redis Cluster cannot serve the key's slot now (CLUSTERDOWN, no slot map, or redirections "
               "that did not settle); the command did not run";
      case error::slot_moved: return "the cluster node does not serve the key's slot (MOVED or ASK)";
      case error::tls_handshake_failed:
        return "the TLS handshake failed (is the port a TLS port? no protocol or cipher in common?)";
      case error::tls_certificate_rejected:
        return "the server's TLS certificate failed verification (not signed by a trusted CA, expired, ...)";
      case error::tls_hostname_mismatch:
        return "the server's TLS certificate is not for the name checked (hostname or IP address mismatch)";
      case error::tls_client_certificate_rejected:
        return "the server refused this client's TLS certificate, or its lack of one (mutual TLS)";
      case error::no_quorum:
        return "fewer than a majority of the quorum's nodes answered (the message names the others)";
    }
    return "unknown dlock error";
  }
};

class condition_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "dlock.condition"; }

  std::string message(int value) const override {
    switch (static_cast<condition>(value)) {
      case condition::not_sent: return "the command never reached Redis; retrying is safe";
      case condition::may_have_run: return "the command may have run";
      case condition::lock_lost: return "the lock is lost";
    }
    return "unknown dlock condition";
  }

  bool equivalent(const std::error_code& code, int value) const noexcept override {
    if (code.category() != dlock::error_category()) return false;
    auto e = static_cast<error>(code.value());
    switch (static_cast<condition>(value)) {
      case condition::not_sent:
        return e == error::connection_refused || e == error::resolve_failed || e == error::connect_timeout ||
               e == error::auth_failed || e == error::select_failed || e == error::unexpected_handshake_reply ||
               e == error::command_timeout ||
               e == error::not_connected || e == error::shutting_down || e == error::not_master ||
               e == error::unknown_master || e == error::no_sentinel || e == error::cross_slot ||
               e == error::cluster_down || e == error::slot_moved || e == error::tls_handshake_failed ||
               e == error::tls_certificate_rejected || e == error::tls_hostname_mismatch ||
               e == error::tls_client_certificate_rejected;
      case condition::may_have_run: return e == error::outcome_unknown || e == error::unexpected_reply;
      case condition::lock_lost: return e == error::lease_lost;
    }
    return false;
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const category instance;
  return instance;
}

const std::error_category& condition_category() noexcept {
  static const condition_category_impl instance;
  return instance;
}

}  // namespace dlock
