// Replica acknowledgement on the wire: a lock write framed as
// `ROLE; <write>; WAIT n timeout` in one pipeline, and what the replies say.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>

#include <dlock/error.hpp>
#include <dlock/redis/config.hpp>
#include <dlock/redis/error_code.hpp>
#include <dlock/redis/request.hpp>

namespace dlock::redis {

/// What the WAIT behind a write found: how many replicas it asked for and
/// how many acknowledged in time. `wanted` is 0 when no WAIT was sent.
struct replica_acks {
  int wanted = 0;  ///< replicas the WAIT asked for (0: no WAIT was sent)
  int acked = 0;   ///< replicas that acknowledged within its timeout
  /// At least `wanted` (and so at least one) replicas have the write.
  bool met() const noexcept { return wanted > 0 && acked >= wanted; }
};

namespace detail {

/// How many connected replicas a ROLE reply of a master lists, or -1 when
/// it is not a master's ("slave", "sentinel", an error).
inline int replicas_in_role(const value& role) {
  if (!role.is_array() || role.elements.size() < 3 || !role.elements[0].is_string() ||
      role.elements[0].str != "master" || !role.elements[2].is_array())
    return -1;
  return static_cast<int>(role.elements[2].elements.size());
}

/// How many replicas to ask for: the setting's count, or every replica the
/// master reported last (at least one); 0 when that is not known yet (ask
/// ROLE first).
inline int replicas_to_ask(const replica_ack& ack, int reported) {
  if (ack.replicas != replica_ack::all) return ack.replicas;
  if (reported < 0) return 0;
  return reported < 1 ? 1 : reported;
}

/// `ROLE; body...; WAIT wanted timeout`: ROLE first, so that the count of
/// replicas is read at the same moment as the write; WAIT last, so that it
/// covers every write of the body (WAIT waits for the offset of this
/// connection's last write).
inline request acknowledged_request(const request& body, int wanted, std::chrono::milliseconds timeout) {
  request req;
  req.push("ROLE");
  req.append(body);
  req.push("WAIT", wanted, timeout.count());
  return req;
}

/// The replies of an acknowledged_request, taken apart.
struct acknowledged_reply {
  error_code ec;            ///< the transport's error, or unexpected_reply
  response body;            ///< one reply per command of the body
  replica_acks acks;        ///< what WAIT found (acked 0 when it failed)
  int reported = -1;        ///< the replicas ROLE listed (-1: not a master)
};

inline acknowledged_reply split_acknowledged(error_code ec, response r, int wanted) {
  acknowledged_reply out;
  out.acks.wanted = wanted;
  if (ec) {
    out.ec = ec;
    return out;
  }
  if (r.size() < 2) {
    out.ec = error_code(error::unexpected_reply);
    return out;
  }
  out.reported = replicas_in_role(r.front());
  // A WAIT that failed (refused on a replica, a missing permission) or
  // answered something else acknowledges nothing.
  const value& wait = r.back();
  if (wait.type == kind::integer && wait.integer >= 0 && wait.integer <= INT32_MAX)
    out.acks.acked = static_cast<int>(wait.integer);
  r.pop_back();
  r.erase(r.begin());
  out.body = std::move(r);
  return out;
}

/// Throws std::system_error (invalid_argument) when `cfg.acknowledge` cannot
/// work: replicas below 1 (and not `all`), a timeout that is not positive or
/// not shorter than the command timeout.
void check_acknowledge(const config& cfg);

}  // namespace detail
}  // namespace dlock::redis
