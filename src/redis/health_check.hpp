// The health check: when a connection is dead (a paused server, a half-open
// socket), when it is merely slow, and when it wants a PING; and that PING.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>

#include <boost/system/error_code.hpp>

#include <dlock/redis/detail/exec_op.hpp>
#include <dlock/redis/request.hpp>

namespace dlock::redis::detail {

enum class health : unsigned char {
  healthy,  // nothing to do
  ping,     // idle: send a PING, so that a silent server is noticed
  dead,     // close it; what it had written is outcome_unknown
};

// What the health check sees of a connection at one tick.
struct link_activity {
  using time_point = std::chrono::steady_clock::time_point;

  std::optional<time_point> oldest_unanswered;  // when the oldest unanswered request was written
  bool writes_pending = false;                  // requests wait to be written
  time_point last_byte{};                       // when the last byte arrived
};

// Dead when the oldest unanswered request was written longer ago than any
// reply may take (the command timeout, or one interval if that is longer)
// and not one byte arrived for a whole interval. A slow command (a 2 s
// BLPOP, another client's long script) is not a dead connection, and new
// writes do not hide an old silence.
inline health judge_health(std::chrono::steady_clock::duration interval,
                           std::chrono::steady_clock::duration command_timeout, const link_activity& seen,
                           std::chrono::steady_clock::time_point now) {
  const auto patience = std::max(command_timeout, interval);
  bool overdue = seen.oldest_unanswered && now - *seen.oldest_unanswered >= patience;
  if (overdue && now - seen.last_byte >= interval) return health::dead;
  if (!seen.oldest_unanswered && !seen.writes_pending) return health::ping;
  return health::healthy;
}

// The PING sent on health::ping. Nobody waits for its reply: that any byte
// came back is what counts.
struct health_ping final : exec_op {
  health_ping() {
    expected = 1;
    payload = request().push("PING").payload();
  }
  void complete(boost::system::error_code, response) override {}
};

}  // namespace dlock::redis::detail
