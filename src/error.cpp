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
               "margin (a watchdog's margin may be at most a third of its timeout)";
      case error::invalid_interval: return "invalid interval: must be positive";
      case error::invalid_url: return "invalid Redis URL";
      case error::invalid_argument: return "invalid argument";
      case error::connection_refused: return "connection refused by the Redis server";
      case error::resolve_failed: return "the Redis host name did not resolve";
      case error::connect_timeout: return "connecting to Redis timed out";
      case error::auth_failed: return "Redis authentication failed (wrong user or password)";
      case error::select_failed: return "Redis SELECT of the database failed";
      case error::command_timeout:
        return "command timed out before it was sent; it did not run";
      case error::not_connected: return "not connected to Redis; the command was not sent";
      case error::shutting_down: return "the Redis connection is shutting down";
      case error::server_error: return "the Redis server replied with an error";
      case error::protocol_error: return "malformed reply from the Redis server";
      case error::reply_too_large: return "reply exceeds the parser's size limits";
      case error::nesting_too_deep: return "reply nests deeper than the parser's limit";
      case error::unexpected_reply: return "unexpected reply from the Redis server";
    }
    return "unknown dlock error";
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const category instance;
  return instance;
}

}  // namespace dlock
