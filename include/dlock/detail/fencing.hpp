// Fencing tokens: a counter beside each lock, in its cluster slot, whose
// value only ever grows; each first acquire of the lock takes the next one.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include <dlock/detail/key_slot.hpp>
#include <dlock/error.hpp>
#include <dlock/redis/resp.hpp>
#include <dlock/redis/script_cache.hpp>
#include <dlock/types.hpp>

namespace dlock {

/// Fencing tokens for an owner-checked ownership (Token, ReentrantHash,
/// Queue, Semaphore and ReadWrite have a `fencing` member; set it to turn
/// them on; the last two order holds that may overlap: see their own
/// documentation for what a resource checks). Each first
/// acquire of a lock (not a reentrant one) takes a number from a counter
/// beside the lock and hands it out with the hold
/// (Hold::fencing_token()). A resource that remembers the highest number it
/// has seen and refuses writes that carry a lower one cannot be damaged by
/// a holder that lost its lock without knowing (a pause longer than the
/// lease, a failover): the newer holder's number is higher.
///
/// The number is max(counter + 1, the server's TIME in microseconds), and
/// the counter key expires after `idle` without an acquire (so that names
/// locked once do not leave keys forever). It only grows as long as:
/// - the counter is there (the usual case: it lives `idle` past the last
///   acquire, and replicates and persists with the lock's own key); or
/// - when it is not (it expired, a restart lost it, a failover promoted a
///   replica that never got it), the clock of the server that hands out the
///   next number is ahead of the last number handed out: true when the
///   clocks of the nodes that can become master agree to better than the
///   time the loss took (seconds for a failover or a restart; `idle` for an
///   expiry), and no clock is stepped back by more.
/// With replica acknowledgement on, a number is only handed out once the
/// replicas have it, so a failover needs no clock at all.
struct fencing_tokens {
  /// How long the counter key outlives the last acquire. It should be far
  /// longer than any lease.
  milliseconds idle{std::chrono::hours(24)};

  /// invalid_argument unless 0 < idle <= max_lease.
  std::error_code validate() const {
    if (idle <= milliseconds::zero() || idle > max_lease) return make_error_code(error::invalid_argument);
    return {};
  }
};

namespace detail {

/// The counter's key: "<name>:fence", in the lock's cluster slot.
inline std::string fence_key(std::string_view name) { return same_slot_key(name, "fence"); }

/// The idle time a script is given: "0" when fencing is off.
inline std::string fence_arg(const std::optional<fencing_tokens>& f) {
  return f ? std::to_string(f->idle.count()) : std::string("0");
}

/// Lua, for the scripts that hand out numbers: `next_fence(key, idle_ms)`
/// takes the next one (see fencing_tokens) and keeps the counter `idle_ms`.
/// Microseconds since 1970 stay below 2^53 until the year 2255, so a Lua
/// number (a double) holds them exactly; string.format writes them out
/// without an exponent.
inline constexpr std::string_view fence_lua = R"lua(
local function next_fence(key, idle)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', key) or '0') or 0
  local token = math.max(last + 1, now)
  redis.call('SET', key, string.format('%.0f', token), 'PX', idle)
  return token
end
)lua";

/// The owner check and next token of an ownership whose holders are fields
/// of a hash (ReentrantHash's), for a win whose reply carried no token
/// (fence_call). KEYS[1] lock, KEYS[2] fence counter; ARGV[1] the
/// hold's field, ARGV[2] counter idle ms. The next token if the hash has
/// the field, else 0.
inline const redis::script& field_fence_script() {
  static const redis::script s(std::string(fence_lua) + R"lua(
local idle = tonumber(ARGV[2])
if not idle or idle < 1 or idle > 1e12 or idle % 1 ~= 0 then
  return redis.error_reply('ERR dlock: fencing idle time out of range')
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return next_fence(KEYS[2], idle) end
return 0
)lua");
  return s;
}

/// A fencing number in a reply: a positive integer, else nullopt.
inline std::optional<std::uint64_t> fence_of(const redis::value& v) {
  if (v.type != redis::kind::integer || v.integer <= 0) return std::nullopt;
  return static_cast<std::uint64_t>(v.integer);
}

}  // namespace detail
}  // namespace dlock
