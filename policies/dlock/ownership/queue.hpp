// ownership::Queue: a Token lock with a FIFO line of waiters, to which the
// release hands the lock in the same atomic step (with wait::HandOff).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <dlock/ext.hpp>
#include <dlock/ownership/queue_place.hpp>
#include <dlock/ownership/token.hpp>

namespace dlock::ownership {

/// The lock key is a Token key (`name` holds the holder's random 128-bit
/// token with a PX lease), so it excludes redis-py's `Lock` and Token on the
/// same name. Beside it, in the same cluster slot:
/// - `{name}:queue`, a sorted set of waiting tokens, scored by arrival
///   (`{name}:queue:seq` counts arrivals): the line, first come first;
/// - `{name}:queue:entries`, a hash from each waiting token to
///   "<expiry ms>:<lease ms>:<listener>": until when the waiter counts as
///   alive (server time; the waiter refreshes it), the lease its grant gets,
///   and the id of the backend that waits for the grant.
///
/// A try that fails while the waiter means to wait joins the line in the
/// same script. The release deletes the key and, in the same script, writes
/// the first live waiter's token with its lease and publishes that token on
/// `{name}:handoff:<listener>`, the channel of the waiter's backend: the
/// waiter's acquire completes on the message, with no
/// command of its own. Waiters whose entry expired (their process died) are
/// dropped on the way. When the key is free but the line is not (a holder
/// or a granted waiter died and its lease ran out), the next script that
/// sees it (any waiter's refresh, any newcomer's try) hands it on, so a
/// newcomer never takes the lock ahead of a live waiter.
///
/// Needs a lease (FixedLease or Watchdog) and wait::HandOff, which the rule
/// table enforces. Not reentrant: the same owner acquiring twice fails with
/// already_held.
struct Queue : Token {
  /// What a waiting hold keeps beside its record: its place in the line.
  using place_in_line = queue_place;
  using hold_state = place_in_line;  ///< each hold's own part of its record: its place in the line
  using record = ext::hold_record_with<place_in_line>;  ///< the record its operations take

  static constexpr const char* policy_name = "queue";  ///< its part of a combination's name ("queue/watchdog/handoff")
  static constexpr bool publishes_on_release = false;  ///< its messages are grants, addressed by token
  static constexpr bool needs_lease = true;  ///< a holder that dies must not stop the line: its lease runs out
  static constexpr bool queues = true;  ///< keeps a line of waiters, to which its release hands the lock

  /// How long a release remembers its result for a retry (10 s). Unlike
  /// Token's, a Queue release hands the lock on, so a retry is answered
  /// from this marker rather than resolved from the key.
  ext::release_memory release_memory;

  /// Token's check (fencing), then the release memory's.
  std::error_code validate() const {
    if (auto ec = Token::validate()) return ec;
    return release_memory.validate();
  }

  /// Where grants are published, followed by ":<listener>": each waiting
  /// backend (its client id is the listener) has a channel of its own, and
  /// the message is "<granted token>:<its place in the line>".
  static std::string channel(std::string_view name) { return ext::same_slot_key(name, "handoff"); }

  static std::string queue_key(std::string_view name) { return ext::same_slot_key(name, "queue"); }  ///< the line (a sorted set)
  static std::string entries_key(std::string_view name) { return ext::same_slot_key(name, "queue:entries"); }  ///< the entries (a hash)
  static std::string seq_key(std::string_view name) { return ext::same_slot_key(name, "queue:seq"); }  ///< the arrival counter
  /// Set by a leave: the try `rec.attempt_id` was given up, so if it reaches
  /// the server late (sent on a connection that stalled, delivered after
  /// the leave), it does nothing. Lives as long as the release memory.
  static std::string cancelled_key(const ext::hold_record& rec) {
    return ext::same_slot_key(rec.name, "cancelled:" + rec.attempt_id);
  }

  /// The helpers every Queue script starts with. KEYS[1] lock, KEYS[2] line,
  /// KEYS[3] entries; the grant channel is ARGV[channel_arg]. `grant(who)`
  /// takes `who` out of the line and, if its entry is alive, gives it the
  /// lock and publishes "<token>:<place>" (its arrival number, which names
  /// this stay in the line: a waiter that joins again gets a new one, so a
  /// grant's message that comes late is not mistaken for a later grant) on
  /// "<channel>:<listener>", the channel of the waiter's own backend, so
  /// that one release wakes one subscriber. `hand_on()` grants to the first
  /// live waiter. `now()` reads the server's clock only when an entry is
  /// looked at (an uncontended script never calls TIME). `sharded`: grants
  /// go out with SPUBLISH (a cluster's sharded pub/sub).
  static std::string prelude(int channel_arg, bool sharded) {
    return R"lua(
local now_ms
local function now()
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now_ms
end
local function grant(who)
  local place = redis.call('ZSCORE', KEYS[2], who)
  redis.call('ZREM', KEYS[2], who)
  local entry = redis.call('HGET', KEYS[3], who)
  redis.call('HDEL', KEYS[3], who)
  if not entry or not place then return false end
  local expiry, lease, listener = string.match(entry, '^(%d+):(%d+):(.*)$')
  if not expiry or tonumber(expiry) <= now() then return false end
  redis.call('SET', KEYS[1], who, 'PX', lease)
  redis.call(')lua" + std::string(ext::publish_verb(sharded)) + R"lua(', ARGV[)lua" +
           std::to_string(channel_arg) + R"lua(] .. ':' .. listener, who .. ':' .. place)
  return true
end
local function hand_on()
  while true do
    local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not head then return false end
    if grant(head) then return head end
  end
end
)lua";
  }

  /// The try: takes a free lock if no live waiter comes first, or finds it
  /// granted to ARGV[1]; else joins the line if asked. KEYS[1] lock, KEYS[2]
  /// line, KEYS[3] entries, KEYS[4] arrival counter, KEYS[5] fence counter,
  /// KEYS[6] this try's cancellation marker (cancelled_key); ARGV[1] token, ARGV[2] lease ms, ARGV[3] "1" to join the line on
  /// failure, ARGV[4] entry ttl ms, ARGV[5] channel, ARGV[6] the listener
  /// (the waiter's backend's id) its grant is published to, ARGV[7] fence
  /// idle ms ("0": none). {1, lease, fencing token or 0} taken now; {2, pttl}
  /// already ours (granted: the grant took no fencing token); {0, pttl,
  /// place} held by another (and, with ARGV[3], this token is in the line at
  /// arrival number `place`, its entry refreshed; place 0: not in it); {3, 0}
  /// cancelled: a leave came first, this try was given up and does nothing. @{
  static const redis::script& acquire_script(bool sharded) { return sharded ? acquire_script<true>() : acquire_script<false>(); }
  template <bool Sharded = false>
  static const redis::script& acquire_script() {
    static const redis::script s(R"lua(
local lease = tonumber(ARGV[2])
local ttl = tonumber(ARGV[4])
local idle = tonumber(ARGV[7])
if not lease or lease < 1 or lease > 1e12 or lease % 1 ~= 0 or not ttl or ttl < 1 or ttl > 1e12
   or not idle or idle < 0 or idle > 1e12 then
  return redis.error_reply('ERR dlock: lease out of range')
end
if redis.call('EXISTS', KEYS[6]) == 1 then return {3, 0} end)lua" + prelude(5, Sharded) + std::string(ext::fence_lua) + R"lua(
local function taken()
  if idle > 0 then return {1, lease, next_fence(KEYS[5], idle)} end
  return {1, lease, 0}
end
local holder = redis.call('GET', KEYS[1])
if not holder and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', lease)  -- free, nobody in line: the uncontended path
  return taken()
end
if holder == ARGV[1] then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  return {2, redis.call('PTTL', KEYS[1])}
end
if not holder then
  while true do
    local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not head or head == ARGV[1] then break end
    if grant(head) then holder = head break end
  end
  if not holder then
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('HDEL', KEYS[3], ARGV[1])
    redis.call('SET', KEYS[1], ARGV[1], 'PX', lease)
    return taken()
  end
end
local place = 0
if ARGV[3] == '1' then
  place = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if not place then
    place = redis.call('INCR', KEYS[4])
    redis.call('ZADD', KEYS[2], place, ARGV[1])
  end
  redis.call('HSET', KEYS[3], ARGV[1], (now() + ttl) .. ':' .. lease .. ':' .. ARGV[6])
  for i = 2, 4 do
    if redis.call('PTTL', KEYS[i]) < 2 * ttl then redis.call('PEXPIRE', KEYS[i], 2 * ttl) end
  end
end
return {0, redis.call('PTTL', KEYS[1]), tonumber(place)}
)lua");
    return s;
  }
  ///@}

  /// The release: deletes the key if it holds ARGV[1], then hands the lock
  /// to the first live waiter. KEYS[1] lock, KEYS[2] line, KEYS[3] entries,
  /// KEYS[4] release marker; ARGV[1] token, ARGV[2] marker ttl ms, ARGV[3]
  /// channel, ARGV[4] "1" for a retry (answered from the marker). 1 released,
  /// 0 not ours; a lock found free (its lease ran out) is handed on too. @{
  static const redis::script& release_script(bool sharded) { return sharded ? release_script<true>() : release_script<false>(); }
  template <bool Sharded = false>
  static const redis::script& release_script() {
    static const redis::script s(ext::release_memory::remembered(prelude(3, Sharded) + R"lua(
result = 0
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  result = 1
end
if result == 1 or not holder then hand_on() end
)lua", 4, 2, 4));
    return s;
  }
  ///@}

  /// Leaves the line. KEYS[1] lock, KEYS[2] line, KEYS[3] entries, KEYS[4]
  /// the last try's cancellation marker (cancelled_key); ARGV[1] token,
  /// ARGV[2] channel, ARGV[3] the marker's ttl ms. 1: the lock was granted
  /// to this token before it could leave (it holds it now); 0: it left (and
  /// a free lock went on). Either way the marker is set first, so that the
  /// last try, if it is still on its way, finds it and does nothing. @{
  static const redis::script& leave_script(bool sharded) { return sharded ? leave_script<true>() : leave_script<false>(); }
  template <bool Sharded = false>
  static const redis::script& leave_script() {
    static const redis::script s(prelude(2, Sharded) + R"lua(
local marker = tonumber(ARGV[3])
if not marker or marker < 1 or marker > 1e12 or marker % 1 ~= 0 then
  return redis.error_reply('ERR dlock: marker ttl out of range')
end
redis.call('SET', KEYS[4], '1', 'PX', marker)
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return 1 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if not holder then hand_on() end
return 0
)lua");
    return s;
  }
  ///@}

  /// Refreshes the entry of each given waiter still in the line, then hands
  /// a free lock on (its holder's lease ran out). KEYS[1] lock, KEYS[2]
  /// line, KEYS[3] entries, KEYS[4] arrival counter; ARGV[1] channel, then
  /// for each waiter of one backend its token and its entry's ttl ms. For
  /// each waiter: its place (still waiting, entry refreshed), -1 (it holds
  /// the lock: granted, its message may be lost) or 0 (not in the line). @{
  static const redis::script& refresh_script(bool sharded) { return sharded ? refresh_script<true>() : refresh_script<false>(); }
  template <bool Sharded = false>
  static const redis::script& refresh_script() {
    static const redis::script s(prelude(1, Sharded) + R"lua(
local longest = 0
for i = 3, #ARGV, 2 do  -- every ttl checked before anything is written
  local ttl = tonumber(ARGV[i])
  if not ttl or ttl < 1 or ttl > 1e12 or ttl % 1 ~= 0 then
    return redis.error_reply('ERR dlock: entry ttl out of range')
  end
  longest = math.max(longest, ttl)
end
-- Refresh first, so that a waiter whose entry was about to lapse is not
-- dropped by the hand-on below.
local places, refreshed = {}, false
for i = 2, #ARGV, 2 do
  local who = ARGV[i]
  local place = redis.call('ZSCORE', KEYS[2], who)
  local entry = place and redis.call('HGET', KEYS[3], who)
  local rest = entry and string.match(entry, '^%d+:(.*)$')
  if rest then
    redis.call('HSET', KEYS[3], who, (now() + tonumber(ARGV[i + 1])) .. ':' .. rest)
    places[who] = tonumber(place)
    refreshed = true
  end
end
local holder = redis.call('GET', KEYS[1])
if not holder then holder = hand_on() end
local out = {}
for i = 2, #ARGV, 2 do
  local who = ARGV[i]
  if holder == who then out[#out + 1] = -1 else out[#out + 1] = places[who] or 0 end
end
if refreshed then
  for i = 2, 4 do
    if redis.call('PTTL', KEYS[i]) < 2 * longest then redis.call('PEXPIRE', KEYS[i], 2 * longest) end
  end
end
return out
)lua");
    return s;
  }
  ///@}

  /// One batched refresh of the entries of `waiters` (token, entry ttl), all
  /// in the line of lock `name` (ext::queue_refresher sends it);
  /// `sharded`: for a backend on sharded pub/sub (ext::sharded_pubsub).
  static script_call refresh_call(const std::string& name,
                                  const std::vector<std::pair<std::string, milliseconds>>& waiters,
                                  bool sharded = false) {
    script_call call{&refresh_script(sharded),
                     {name, queue_key(name), entries_key(name), seq_key(name)},
                     {channel(name)}};
    for (auto& [token, ttl] : waiters) {
      call.args.push_back(token);
      call.args.push_back(std::to_string(ttl.count()));
    }
    return call;
  }

  /// How a refresh_call's reply reads, one verdict per waiter in the order
  /// given: renewed (still in the line: its entry was refreshed), gone
  /// (granted, its message perhaps lost, or out of the line: its own try
  /// settles which). Empty when the reply is not one answer per waiter.
  static std::vector<renewal_verdict> read_refresh(const redis::value& v, std::size_t waiters) {
    std::vector<renewal_verdict> out;
    if (v.type != redis::kind::array || v.elements.size() != waiters) return out;
    out.reserve(waiters);
    for (auto& e : v.elements) {
      if (e.type != redis::kind::integer) out.push_back(renewal_verdict::no_verdict);
      else out.push_back(e.integer > 0 ? renewal_verdict::renewed : renewal_verdict::gone);
    }
    return out;
  }

  /// One try, acquire_script(): taken, found granted (confirm_grant()), or lost (joining the line if asked).
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend, record& rec) const {
    auto& line = rec.state;
    auto sent = ext::steady::now();
    bool join = line.join && line.entry_ttl > milliseconds::zero();
    if (join && !line.joined) {
      line.joined = true;  // from here the entry may exist, whatever the reply
      line.since = sent;
    }
    std::vector<std::string> keys{rec.name, queue_key(rec.name), entries_key(rec.name), seq_key(rec.name),
                                  ext::fence_key(rec.name), cancelled_key(rec)};
    std::vector<std::string> args{rec.owner, std::to_string(rec.lease.count()), join ? "1" : "0",
                                  std::to_string(line.entry_ttl.count()), channel(rec.name),
                                  backend.client_id(), ext::fence_arg(fencing)};
    auto [ec, v] = co_await ext::acknowledged_eval(backend, rec.acks, acquire_script(ext::sharded_pubsub(backend)),
                                                        std::move(keys), std::move(args));
    ext::note(rec, ec, v);
    if (ec) co_return std::pair{ec, attempt{}};
    if (v.type != redis::kind::array || v.elements.size() < 2) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    auto verdict = ext::integer_of(v.elements[0]);
    auto left = ext::integer_of(v.elements[1]);
    if (!verdict || !left) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    switch (*verdict) {
      case 1:
        if (fencing) {
          auto fence = v.elements.size() == 3 ? ext::fence_of(v.elements[2]) : std::nullopt;
          if (!fence) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
          rec.fence = fence;
        }
        rec.confirm(sent);
        line.reset();
        co_return std::pair{error_code{}, attempt{true, std::nullopt}};
      case 2:
        // Granted before this try: the grant came after `since`, and the
        // key had `left` ms to live when this try ran.
        confirm_grant(rec, sent, milliseconds(*left));
        line.reset();
        co_return std::pair{error_code{}, attempt{true, std::nullopt}};
      case 0: {
        auto place = v.elements.size() == 3 ? ext::integer_of(v.elements[2]) : std::nullopt;
        if (!place) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
        if (join) {
          line.since = sent;  // no grant of this place before this try ran
          line.place = *place;
        }
        co_return std::pair{error_code{}, attempt{false, milliseconds(*left == -2 ? 0 : *left)}};
      }
      case 3:  // only a try its own waiter gave up (left after) can read this
        co_return std::pair{error_code(asio::error::operation_aborted), attempt{}};
      default:
        co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    }
  }

  /// Runs release_script(): released (1; the lock goes on to the next waiter) or lease_lost (0: not ours).
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend, ext::hold_record& rec) const {
    std::vector<std::string> keys{rec.name, queue_key(rec.name), entries_key(rec.name),
                                  ext::release_memory::key(rec)};
    std::vector<std::string> args{rec.owner, release_memory.ttl(), channel(rec.name),
                                  ext::release_memory::retry_flag(rec)};
    auto [ec, v] = co_await ext::eval(backend, release_script(ext::sharded_pubsub(backend)), std::move(keys),
                                         std::move(args));
    ext::note(rec, ec, v);
    co_return ext::deleted(ec, v);  // 1 deleted, 0 not ours: as a DEL answers
  }

  /// Leaves the line (a wait that timed out, was cancelled or failed), in
  /// the same script that checks for a grant: true when the lock was
  /// granted first, and is held now. The last try is cancelled on the way:
  /// a try whose reply never came may still be in the network (or in a
  /// stalled connection's buffers), and if it ran after this leave it could
  /// take the lock for a waiter that is gone.
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> leave(B& backend, record& rec) const {
    std::vector<std::string> keys{rec.name, queue_key(rec.name), entries_key(rec.name), cancelled_key(rec)};
    std::vector<std::string> args{rec.owner, channel(rec.name), release_memory.ttl()};
    auto [ec, v] = co_await ext::eval(backend, leave_script(ext::sharded_pubsub(backend)), std::move(keys),
                                         std::move(args));
    ext::note(rec, ec, v);
    if (ec) co_return std::pair{ec, false};
    auto n = ext::integer_of(v);
    if (n != 0 && n != 1) co_return std::pair{error_code(error::unexpected_reply), false};
    if (*n == 1) {
      rec.confirm(rec.state.queued_since());
      rec.state.reset();
    }
    rec.state.joined = false;
    co_return std::pair{error_code{}, *n == 1};
  }

  /// A try whose reply was lost, found won by resolve(): when its lease can
  /// have begun at the earliest. A waiter in the line may have been granted
  /// before that try was sent, but not before it was last seen queued.
  static ext::steady::time_point earliest_start(const record& rec, ext::steady::time_point sent) {
    return rec.state.joined ? std::min(sent, rec.state.queued_since()) : sent;
  }

  /// A grant's lease, as far as this process can bound it: it began after
  /// `queued_since()`, and (when a try saw the key) ends no earlier than
  /// that try's send time plus the PTTL it read.
  static void confirm_grant(record& rec, ext::steady::time_point sent, milliseconds left) {
    rec.confirm(rec.state.queued_since());
    if (left > milliseconds::zero() && left <= rec.lease) rec.confirm(sent + left - rec.lease);
  }
};

}  // namespace dlock::ownership
