// Replica acknowledgement on the wire: a lock write framed as
// `ROLE; <write>; WAIT n timeout` in one pipeline, and what the replies say.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include <dlock/error.hpp>
#include <dlock/redis/config.hpp>
#include <dlock/redis/error_code.hpp>
#include <dlock/redis/request.hpp>

namespace dlock::redis {

/// What the WAIT behind a write found: how many replicas it asked for and
/// how many acknowledged in time.
struct replica_acks {
  int wanted = 0;         ///< replicas the WAIT asked for (0 under replica_ack::if_any for a master that never had one)
  int acked = 0;          ///< replicas that acknowledged within its timeout
  bool sent = false;      ///< a WAIT went behind the write
  bool answered = false;  ///< and it answered with a count (`acked`)
  /// The server's words when it refused the WAIT itself; empty otherwise.
  /// A refusal for want of a permission ("NOPERM ...", a user without
  /// `+wait`) would come again on every try, so an acquire ends at once
  /// with server_error and these words.
  std::string refused;
  /// At least `wanted` replicas have the write: the WAIT answered, and
  /// with enough. (`wanted` is at least 1 unless the setting is
  /// replica_ack::if_any and the master never listed a replica.)
  bool met() const noexcept { return answered && acked >= wanted; }
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
/// master reported last (at least one under replica_ack::all, and under
/// replica_ack::if_any once `seen`: the master has listed one before); -1
/// when that is not known yet (ask ROLE first).
inline int replicas_to_ask(const replica_ack& ack, int reported, bool seen) {
  if (ack.replicas >= 1) return ack.replicas;
  if (reported < 0) return -1;
  if (ack.replicas == replica_ack::if_any && !seen) return reported;
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
  out.acks.sent = true;
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
  if (wait.type == kind::integer && wait.integer >= 0 && wait.integer <= INT32_MAX) {
    out.acks.acked = static_cast<int>(wait.integer);
    out.acks.answered = true;
  } else if (wait.is_error()) {
    out.acks.refused = wait.str;
  }
  r.pop_back();
  r.erase(r.begin());
  out.body = std::move(r);
  return out;
}

/// Throws std::system_error (invalid_argument) when `cfg.acknowledge` cannot
/// work: replicas below 1 (and not `all`, `if_any` or `none`), a timeout
/// that is not positive or not shorter than the command timeout. Then
/// settles it: empty when it is off (`none`), replica_ack::by_default()
/// when it is empty and the backend acknowledges by default (`deployment`:
/// Sentinel, Cluster).
void settle_acknowledge(config& cfg, bool deployment);

}  // namespace detail
}  // namespace dlock::redis
