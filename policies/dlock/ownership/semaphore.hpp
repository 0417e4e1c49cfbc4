// ownership::Semaphore: at most N holders at once, each hold one permit
// with a lease of its own, counted from live entries by the server's clock.
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <dlock/ext.hpp>

namespace dlock::ownership {

/// A counting semaphore: `Semaphore{3}` lets at most three holds of the
/// lock exist at once, across threads and processes. Each hold is one
/// permit: an entry of its own, a 128-bit random token (ext::random_hex),
/// in a sorted set named after the lock, scored by the server time (ms) at
/// which its lease ends. Nothing counts permits in or out: the permits in
/// use are the entries whose lease has not ended, so a holder that crashes
/// leaks nothing; its permit comes back when its lease ends, never sooner.
///
/// - Expiry is decided by the server's clock alone (`TIME` inside the
///   scripts), never a client's: a client whose clock is wrong cannot
///   steal a permit or keep one. (The scores are the server's wall-clock
///   times, as Redis's own expiry is: a step of the server's clock, or a
///   failover to a server whose clock differs, moves every lease's end.)
/// - A set with permits in use but no stored count (deleted, evicted) is
///   refused with a server_error until those permits end: the next client
///   cannot tell how many may hold.
/// - The permit count is stored beside the set (`same_slot_key(name,
///   "permits")`, in the lock's cluster slot); a client that names another
///   count is refused with a server_error that says both, rather than
///   silently changing the bound.
/// - With renewal::None a permit has no lease (score `+inf`) and lasts until
///   released. The keys expire with the latest lease, and are kept while
///   any permit has none.
/// - Not reentrant: one owner (a thread, an async owner id) holds at most
///   one permit of a lock object; a second acquire fails with
///   already_held. To hold two permits, use two owners.
/// - A lost acquire reply is resolved by asking whether the set holds this
///   try's token; the release is an owner-checked ZREM (its retry reads as
///   Token's: the token is fresh for each hold, so it can act only once).
///
/// Fencing tokens (set `fencing`): each permit's acquire takes the next
/// number from a counter beside the set, so a permit's token is higher
/// than every permit granted before it. Permits do not exclude each other,
/// so the rule of an exclusive lock (refuse below the highest seen) would
/// refuse live holders. What a resource can do is refuse a token below the
/// `permits`-th highest it has seen: it then accepts at most `permits`
/// holders' tokens, and refuses a permit once it has seen `permits` later
/// tokens (a lapsed one for sure, but also a live one that has held for
/// that long: it should take a fresh permit).
///
/// A release publishes `0` on channel(name) (with SPUBLISH where the
/// backend listens on shard channels), so wait::PubSub wakes one waiter of
/// each client listening there; a permit whose lease ends wakes nobody, and
/// a waiter sleeps at most until the first permit in use ends. On one
/// server, Sentinel or a cluster; a quorum backend (RedlockBackend)
/// refuses it at compile time: a majority of nodes per hold does not bound
/// the holders to `permits` when it is 2 or more.
struct Semaphore {
  static constexpr const char* policy_name = "semaphore";  ///< its part of a combination's name
  static constexpr bool owner_checked = true;  ///< release and extend act only on this hold's own entry
  static constexpr bool publishes_on_release = true;  ///< the release publishes `0` on channel(name)
  static constexpr bool reentrant = false;  ///< a second acquire by the same owner fails with already_held
  static constexpr bool needs_lease = false;  ///< works without expiry (a permit kept until released)
  /// Several holds at once: a quorum backend refuses it (a majority per
  /// hold bounds one holder, not `permits`).
  static constexpr bool admits_many = true;

  /// The largest number of permits: 2^31 - 1 (a bound that any server and
  /// client agree on).
  static constexpr std::int64_t max_permits = std::numeric_limits<std::int32_t>::max();

  /// One permit: a mutex whose holds expire one by one.
  Semaphore() = default;
  /// `count` permits (validate() refuses a count below 1 or above
  /// max_permits when the lock is made).
  constexpr explicit Semaphore(std::int64_t count) : permits(count) {}

  /// How many holds may exist at once (1 to max_permits).
  std::int64_t permits = 1;

  /// The semaphore's own part of a hold's record (as Token's).
  struct hold_state {
    /// Whether the hold was still safe to trust when the first attempt of
    /// its release left (see Token).
    bool first_release_in_lease = false;
  };
  using record = ext::hold_record_with<hold_state>;  ///< the record its operations take

  /// Fencing tokens (see dlock::fencing_tokens and above); empty: off.
  std::optional<fencing_tokens> fencing;

  /// invalid_argument when `permits` is below 1 or above max_permits, or
  /// the fencing setting is out of range.
  std::error_code validate() const {
    if (permits < 1 || permits > max_permits) return make_error_code(error::invalid_argument);
    return fencing ? fencing->validate() : std::error_code{};
  }

  /// The channel its releases publish on: `{name}:released` (in the
  /// lock's cluster slot; a name with a hash tag keeps it,
  /// `app:{orders}:1:released`).
  static std::string channel(std::string_view name) { return ext::same_slot_key(name, "released"); }

  /// A fresh 128-bit random token for each hold: its entry in the set.
  std::string make_owner(const std::string&, const std::string&) const { return ext::random_hex(16); }

  /// The key that stores the permit count, in the lock's cluster slot.
  static std::string permits_key(const std::string& name) { return ext::same_slot_key(name, "permits"); }

  /// Lua shared by the scripts: the server's time in ms, and keeping both
  /// keys alive as long as their latest permit (PEXPIREAT its lease's end:
  /// the same clock as the scores, so never early).
  static constexpr const char* common_lua = R"lua(
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function keep(set, count)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', count)
  elseif last[2] == 'inf' then
    redis.call('PERSIST', set)
    redis.call('PERSIST', count)
  else
    redis.call('PEXPIREAT', set, last[2])
    redis.call('PEXPIREAT', count, last[2])
  end
end
)lua";

  /// One try. KEYS[1] the set, KEYS[2] the count, KEYS[3] the fence
  /// counter; ARGV[1] token, ARGV[2] lease ms (0: none), ARGV[3] permits,
  /// ARGV[4] the counter's idle ms ("0": no fencing). Drops the entries
  /// whose lease has ended, then adds ours if fewer than `permits` remain:
  /// {1, 0} taken, {1, fencing token} with fencing; {0, ms} all in use, ms
  /// until the first of them ends (-1: none ends). An error reply when the
  /// stored count differs, or a bad argument.
  static const redis::script& acquire_script() {
    static const redis::script s(std::string(common_lua) + std::string(ext::fence_lua) + R"lua(
local lease = tonumber(ARGV[2])
local permits = tonumber(ARGV[3])
local idle = tonumber(ARGV[4] or '0')
if not lease or lease < 0 or lease > 1e12 or lease % 1 ~= 0 or not idle or idle < 0 or idle > 1e12
   or idle % 1 ~= 0 then
  return redis.error_reply('ERR dlock: lease or fencing idle time out of range')
end
if not permits or permits < 1 or permits > 2147483647 or permits % 1 ~= 0 then
  return redis.error_reply('ERR dlock: permits out of range')
end
local stored = redis.call('GET', KEYS[2])
if stored and stored ~= ARGV[3] then
  return redis.error_reply('ERR dlock: the semaphore has ' .. stored .. ' permits, this client asks for ' .. ARGV[3])
end
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local used = redis.call('ZCARD', KEYS[1])
if not stored and used > 0 then
  return redis.error_reply('ERR dlock: the semaphore has ' .. used .. ' permits in use but no stored count (deleted or evicted); it cannot tell how many may hold')
end
if used < permits then
  if lease > 0 then
    redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
  else
    redis.call('ZADD', KEYS[1], '+inf', ARGV[1])
  end
  redis.call('SET', KEYS[2], ARGV[3])
  keep(KEYS[1], KEYS[2])
  if idle > 0 then return {1, next_fence(KEYS[3], idle)} end
  return {1, 0}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] == 'inf' then return {0, -1} end
return {0, tonumber(first[2]) - now}
)lua");
    return s;
  }

  /// Takes a fencing token for a permit won without one (fence_call).
  /// KEYS[1] the set, KEYS[2] the fence counter; ARGV[1] token, ARGV[2]
  /// counter idle ms. The next token if the set holds the permit with its
  /// lease not ended, else 0.
  static const redis::script& fence_script() {
    static const redis::script s(std::string(common_lua) + std::string(ext::fence_lua) + R"lua(
local idle = tonumber(ARGV[2])
if not idle or idle < 1 or idle > 1e12 or idle % 1 ~= 0 then
  return redis.error_reply('ERR dlock: fencing idle time out of range')
end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and (score == 'inf' or tonumber(score) > now_ms()) then return next_fence(KEYS[2], idle) end
return 0
)lua");
    return s;
  }

  /// For a permit won without a fencing token in the reply (a lost reply
  /// found to have won): the owner-checked call that takes one.
  script_call fence_call(const ext::hold_record& rec) const {
    return {&fence_script(), {rec.name, ext::fence_key(rec.name)}, {rec.owner, ext::fence_arg(fencing)}};
  }

  /// Owner-checked release. KEYS[1] the set, KEYS[2] the count; ARGV[1]
  /// token, ARGV[2] the channel. Removes this hold's entry and, if there
  /// was one, publishes `0` on the channel (PUBLISH, or SPUBLISH when
  /// `sharded`). 1 released (the entry was ours and live), 0 not ours
  /// (gone, or its lease had ended).
  static const redis::script& release_script(bool sharded) {
    auto make = [](std::string_view verb) {
      return std::string(common_lua) + R"lua(
local now = now_ms()
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
keep(KEYS[1], KEYS[2])
redis.call(')lua" + std::string(verb) + R"lua(', ARGV[2], '0')
if score ~= 'inf' and tonumber(score) <= now then return 0 end
return 1
)lua";
    };
    static const redis::script plain(make(ext::publish_verb(false))), shard(make(ext::publish_verb(true)));
    return sharded ? shard : plain;
  }

  /// Owner-checked renewal of one or more permits: for each i, KEYS[2i-1]
  /// the set, KEYS[2i] the count; ARGV[2i-1] token, ARGV[2i] lease ms. An
  /// array with 1 (renewed) or 0 (gone, or its lease already ended) per
  /// permit. A key of another type reads as 0 rather than failing the call.
  static const redis::script& extend_script() {
    static const redis::script s(std::string(common_lua) + R"lua(
local now = now_ms()
local out = {}
for i = 1, #KEYS / 2 do
  local set, count = KEYS[2 * i - 1], KEYS[2 * i]
  local score = redis.pcall('ZSCORE', set, ARGV[2 * i - 1])
  local lease = tonumber(ARGV[2 * i])
  if type(score) == 'string' and lease and lease > 0 and lease <= 1e12 and lease % 1 == 0
     and (score == 'inf' or tonumber(score) > now) then
    redis.call('ZADD', set, 'XX', now + lease, ARGV[2 * i - 1])
    keep(set, count)
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
)lua");
    return s;
  }

  /// Runs acquire_script(). Won: the lease counts from the send. Lost:
  /// held_for is the time until the first permit in use ends (negative if
  /// none ends).
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend, ext::hold_record& rec) const {
    const auto sent = ext::steady::now();
    std::vector<std::string> keys{rec.name, permits_key(rec.name), ext::fence_key(rec.name)};
    std::vector<std::string> args{rec.owner, std::to_string(rec.lease.count()), std::to_string(permits),
                                  ext::fence_arg(fencing)};
    auto [ec, v] = co_await ext::acknowledged_eval(backend, rec.acks, acquire_script(), std::move(keys), std::move(args));
    ext::note(rec, ec, v);
    if (ec) co_return std::pair{ec, attempt{}};
    if (v.type != redis::kind::array || v.elements.size() != 2) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    auto verdict = ext::integer_of(v.elements[0]);
    auto left = ext::integer_of(v.elements[1]);
    if (!verdict || !left || (*verdict != 0 && *verdict != 1)) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    if (*verdict == 1) {
      if (fencing) {
        rec.fence = ext::fence_of(v.elements[1]);
        if (!rec.fence) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
      }
      rec.confirm(sent);
      co_return std::pair{error_code{}, attempt{true, std::nullopt}};
    }
    co_return std::pair{error_code{}, attempt{false, milliseconds(*left)}};
  }

  /// Runs release_script() with the backend's channel: released, or lease_lost (the entry is gone or
  /// its lease ended). A retry after outcome_unknown reads as Token's.
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend, record& rec) const {
    const bool retry = rec.release_retry;
    if (!retry) rec.state.first_release_in_lease = rec.remaining() > milliseconds::zero();
    std::vector<std::string> keys{rec.name, permits_key(rec.name)};
    std::vector<std::string> args{rec.owner, ext::release_channel<Semaphore>(backend, rec.name)};
    auto [ec, v] = co_await ext::eval(backend, release_script(ext::sharded_pubsub(backend)), std::move(keys),
                                      std::move(args));
    ext::note(rec, ec, v);
    co_return ext::retried_release(retry, rec.state.first_release_in_lease, ext::deleted(ec, v));
  }

  /// After an acquire whose reply was lost: whether the set holds this
  /// try's token with its lease not yet ended (only our try can have put
  /// the fresh token there).
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> resolve(B& backend, const ext::hold_record& rec) const {
    redis::request req;
    req.push("ZSCORE", rec.name, rec.owner).push("TIME");
    auto [ec, r] = co_await ext::exec(backend, rec.name, std::move(req));
    if (ec) co_return std::pair{ec, false};
    if (r.size() != 2 || r[1].type != redis::kind::array || r[1].elements.size() != 2) {
      co_return std::pair{error_code(error::unexpected_reply), false};
    }
    if (r[0].is_null()) co_return std::pair{error_code{}, false};
    if (r[0].type != redis::kind::bulk_string) co_return std::pair{error_code(error::unexpected_reply), false};
    if (r[0].str == "inf") co_return std::pair{error_code{}, true};
    // TIME answers two bulk strings (seconds, microseconds); the score is
    // an integer of ms.
    auto secs = whole(r[1].elements[0]), micros = whole(r[1].elements[1]), ends = whole(r[0]);
    if (!secs || !micros || !ends) co_return std::pair{error_code(error::unexpected_reply), false};
    co_return std::pair{error_code{}, *ends > *secs * 1000 + *micros / 1000};
  }

  /// The whole number a bulk string reply holds, or nullopt.
  static std::optional<std::int64_t> whole(const redis::value& v) {
    if (v.type != redis::kind::bulk_string) return std::nullopt;
    std::int64_t n = 0;
    auto [end, ec] = std::from_chars(v.str.data(), v.str.data() + v.str.size(), n);
    if (ec != std::errc{} || end != v.str.data() + v.str.size()) return std::nullopt;
    return n;
  }

  /// An extend reply of one permit: the one-element array extend_script()
  /// gives.
  static renewal_verdict read_extend(const redis::value& v) {
    if (v.type != redis::kind::array || v.elements.size() != 1) return renewal_verdict::no_verdict;
    return ext::read_extend_reply(v.elements[0]);
  }

  /// The watchdog's renewal of this permit.
  script_call extend_call(const ext::hold_record& rec) const {
    return {&extend_script(), {rec.name, permits_key(rec.name)}, {rec.owner, std::to_string(rec.lease.count())}};
  }

  /// Several permits' extend_call()s as one call of the same script (it
  /// takes any number); its reply reads as ext::read_extend_replies.
  static script_call extend_batch(const std::vector<const script_call*>& calls) {
    return ext::merged_call(extend_script(), calls);
  }
};

}  // namespace dlock::ownership
