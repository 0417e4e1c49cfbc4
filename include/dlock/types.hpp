// The vocabulary the policy families share: leases and their limits, what
// a try found, what a release found, what a renewal's reply says.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string_view>
#include <system_error>
#include <vector>

#include <dlock/error.hpp>
#include <dlock/redis/error_code.hpp>
#include <dlock/redis/resp.hpp>
#include <dlock/redis/script_cache.hpp>

namespace dlock {

namespace asio = boost::asio;
using redis::error_code;
using std::chrono::milliseconds;

/// The longest lock name dlock accepts, in bytes.
inline constexpr std::size_t max_name_length = 4096;

/// The longest lease dlock accepts: 10^12 ms, about 31.7 years. Redis itself
/// refuses an expiry only when "now + lease" overflows, but a script that
/// writes a key and then has its expiry refused leaves a key that never
/// expires; dlock refuses such leases before anything is sent, and keeps
/// its own steady-clock arithmetic (64-bit nanoseconds) far from overflow.
inline constexpr milliseconds max_lease{1'000'000'000'000};

/// How long before a lease could end, as the holder's own clock measures
/// it, a hold counts as lost (its loss signal fires) unless a renewal was
/// confirmed first: `delay + lease * drift`. The server cannot expire the
/// key before the command that set it was sent plus the lease; the margin
/// covers what that reasoning leaves out:
/// - `drift`: the client's and the server's clocks running at different
///   rates (1%, Redlock's clock drift factor; real clocks differ by parts
///   per million, virtual machines and NTP slewing by more);
/// - `delay`: this process noticing late (timer and thread scheduling).
/// Defaults: 5 ms + 1%, so 12 ms for a 700 ms lease and 305 ms for 30 s.
struct loss_margin {
  double drift = 0.01;  ///< the fraction of the lease allowed for clock drift
  milliseconds delay{5};  ///< the fixed part, for this process noticing late

  /// The margin for `lease`: `delay + lease * drift`, the second term rounded
  /// up to whole milliseconds.
  milliseconds of(milliseconds lease) const {
    return delay + std::chrono::ceil<milliseconds>(std::chrono::duration<double, std::milli>(lease) * drift);
  }
  /// invalid_argument unless 0 <= drift < 1 and delay >= 0.
  std::error_code validate() const {
    if (!(drift >= 0.0 && drift < 1.0) || delay < milliseconds::zero()) return make_error_code(error::invalid_argument);
    return {};
  }
};

/// What one acquire attempt found.
struct attempt {
  bool acquired = false;  ///< the try took the lock (or re-entered it)
  /// When held by someone else: the holder's remaining lease if the
  /// algorithm can tell (PTTL); negative when the key never expires;
  /// nullopt when unknown. Wait policies use it to bound a wait.
  std::optional<milliseconds> held_for;
};

/// What a release found in Redis.
enum class release_outcome {
  released,    ///< the key is gone (or the last reentrant hold ended)
  still_held,  ///< one reentrant hold ended; the owner still holds the lock
  lease_lost,  ///< the key had expired, or belongs to someone else now
  not_owner,   ///< the key exists and this owner never held it
};

/// A script call: what a renewal sends, batched with others.
using script_call = redis::script_call;

/// What the reply to one hold's renewal (or one waiting hold's refresh)
/// says. The batching engines schedule by it; the ownership reads it.
enum class renewal_verdict {
  renewed,     ///< extended (or, for a waiter, still in the line) when the call ran
  gone,        ///< the key is gone or someone else's (a waiter: granted, or out of the line)
  no_verdict,  ///< an answer the ownership cannot read: try again soon
};

/// How a renewal's reply reads: one function per ownership, so that the
/// engine that batches renewals of many ownerships never reads a reply.
using renewal_reader = renewal_verdict (*)(const redis::value&);

/// Many holds' renewals as one script call (an ownership's `extend_batch`):
/// made from their own extend_calls, all with the same script.
using renewal_merger = script_call (*)(const std::vector<const script_call*>&);
/// How such a call's reply reads: one verdict per hold, in the order of
/// the calls merged (an ownership's `read_extend_batch`).
using renewal_batch_reader = std::vector<renewal_verdict> (*)(const redis::value&, std::size_t);

}  // namespace dlock
