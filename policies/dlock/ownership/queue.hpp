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
/// - `{name}:queue`, a list of places, first come first: each place is
///   "<token>:<stay>", the stay a number the waiter picks afresh each time
///   it joins (so a grant's message that comes late, about an earlier
///   stay, is not mistaken for a later grant);
/// - `{name}:queue:<token>`, each waiter's entry, "<lease ms>:<stay>:
///   <listener>" with a PX life (the waiter refreshes it): the lease its
///   grant gets, its current stay, and the id of the backend that waits
///   for the grant. While the entry lives, the waiter is alive; a place
///   whose token has no entry, or whose stay is not the entry's, is void.
///
/// A try that fails while the waiter means to wait joins the line in the
/// same script. The release takes places off the head of the line until
/// one is alive, writes that waiter's token into the key with its lease
/// and publishes "<token>:<stay>" on `{name}:handoff:<listener>`, the
/// channel of the waiter's backend: the waiter's acquire completes on the
/// message, with no command of its own. Void places (dead waiters, waiters
/// that left) are dropped on the way. When the key is free but the line
/// is not (a holder or a granted waiter died and its lease ran out), the
/// next script that sees it (any waiter's refresh, any newcomer's try)
/// hands it on, so a newcomer never takes the lock ahead of a live waiter.
///
/// Needs a lease (FixedLease or Watchdog), wait::HandOff (which the rule
/// table enforces) and Redis 7.0 or later (its scripts use `PEXPIRE ...
/// GT`). Not reentrant: the same owner acquiring twice fails with
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

  /// How long a waiter that left the line is remembered (10 s): a try of
  /// its that reaches the server later (a stalled connection) does nothing.
  milliseconds leave_memory{10000};

  /// Token's check (fencing), then leave_memory's (above zero).
  std::error_code validate() const {
    if (auto ec = Token::validate()) return ec;
    return ext::validate_positive(leave_memory, error::invalid_interval);
  }

  /// Where grants are published, followed by ":<listener>": each waiting
  /// backend (its client id is the listener) has a channel of its own, and
  /// the message is "<granted token>:<its stay>".
  static std::string channel(std::string_view name) { return ext::same_slot_key(name, "handoff"); }

  static std::string queue_key(std::string_view name) { return ext::same_slot_key(name, "queue"); }  ///< the line (a list of places)
  /// What every waiter's entry key starts with: `{name}:queue:`.
  static std::string entry_prefix(std::string_view name) { return ext::same_slot_key(name, "queue:"); }
  /// The entry of the waiter with `token`: `{name}:queue:<token>`.
  static std::string entry_key(std::string_view name, std::string_view token) {
    return entry_prefix(name).append(token);
  }

  /// The helpers the scripts that hand the lock on share. KEYS[1] lock,
  /// KEYS[2] line; the grant channel is ARGV[channel_arg], the entries'
  /// prefix ARGV[prefix_arg]. `grant(place)` gives the lock to the place's
  /// waiter if the place is alive (its entry exists and names this stay),
  /// and publishes "<token>:<stay>" on "<channel>:<listener>", the channel
  /// of the waiter's own backend, so that one release wakes one
  /// subscriber. `hand_on(me)` takes places off the head of the line until
  /// one is granted (its token returned) or, given `me`, a place of `me`'s
  /// own comes first (`me` returned: the caller takes the lock itself).
  /// `sharded`: grants go out with SPUBLISH (a cluster's sharded pub/sub).
  static std::string prelude(int channel_arg, int prefix_arg, bool sharded) {
    return R"lua(
local function grant(place)
  local who, stay = string.match(place, '^(.*):(%d+)$')
  if not who then return false end
  local entry = redis.call('GET', ARGV[)lua" + std::to_string(prefix_arg) + R"lua(] .. who)
  if not entry then return false end
  local lease, at, listener = string.match(entry, '^(%d+):(%d+):(.*)$')
  if not lease or at ~= stay then return false end
  redis.call('SET', KEYS[1], who, 'PX', lease)
  redis.call(')lua" + std::string(ext::publish_verb(sharded)) + R"lua(', ARGV[)lua" +
           std::to_string(channel_arg) + R"lua(] .. ':' .. listener, who .. ':' .. stay)
  return who
end
local function hand_on(me)
  while true do
    local head = redis.call('LPOP', KEYS[2])
    if not head then return false end
    if me and string.sub(head, 1, #me + 1) == me .. ':' then return me end
    local who = grant(head)
    if who then return who end
  end
end
)lua";
  }

  /// The try: takes a free lock if no live waiter comes first, or finds it
  /// granted to ARGV[1]; else joins the line if asked. KEYS[1] lock, KEYS[2]
  /// line, KEYS[3] this waiter's entry, KEYS[4] fence counter; ARGV[1]
  /// token, ARGV[2] lease ms, ARGV[3] "1" to join the line on failure,
  /// ARGV[4] entry ttl ms, ARGV[5] channel, ARGV[6] the listener (the
  /// waiter's backend's id) its grant is published to, ARGV[7] fence idle ms
  /// ("0": none), ARGV[8] the stay a new place gets, ARGV[9] "1" when this
  /// hold has joined before (a leave may have come first), ARGV[10] the
  /// entries' prefix, ARGV[11] leave memory ms.
  /// {1, lease, fencing token or 0} taken now; {2, pttl} already ours
  /// (granted: the grant took no fencing token); {0, pttl, 0} held by
  /// another; {0, -3, stay} held by another, and this token waits in the
  /// line with this stay (its entry refreshed; the holder's PTTL is not
  /// asked: the waiter's refreshes notice a lease that ran out); {3, 0}
  /// cancelled: a leave came first, this try was given up and does nothing.
  /// A contended try that joins runs GET, SET ... GET, RPUSH, PEXPIRE. @{
  static const redis::script& acquire_script(bool sharded) { return sharded ? acquire_script<true>() : acquire_script<false>(); }
  template <bool Sharded = false>
  static const redis::script& acquire_script() {
    static const redis::script s(R"lua(
local lease = tonumber(ARGV[2])
local ttl = tonumber(ARGV[4])
local idle = tonumber(ARGV[7])
local stay = tonumber(ARGV[8])
local memory = tonumber(ARGV[11])
if not lease or lease < 1 or lease > 1e12 or lease % 1 ~= 0 or not ttl or ttl < 1 or ttl > 1e12 or ttl % 1 ~= 0
   or not idle or idle < 0 or idle > 1e12 or not stay or stay < 0 or stay > 1e12 or stay % 1 ~= 0
   or not memory or memory < 1 or memory > 1e12 or memory % 1 ~= 0 then
  return redis.error_reply('ERR dlock: lease out of range')
end)lua" + prelude(5, 10, Sharded) + std::string(ext::fence_lua) + R"lua(
local me = ARGV[1]
local joining = ARGV[3] == '1' and stay > 0
stay = ARGV[8]  -- as text from here: places and entries are text
local function entry_value(at) return ARGV[2] .. ':' .. at .. ':' .. ARGV[6] end
local holder = redis.call('GET', KEYS[1])
if holder == me then return {2, redis.call('PTTL', KEYS[1])} end
local old, written = false, false
if joining or ARGV[9] == '1' then
  if holder and joining then
    old = redis.call('SET', KEYS[3], entry_value(stay), 'PX', ttl, 'GET')
    written = true
  else
    old = redis.call('GET', KEYS[3])
  end
  if old == 'x' then
    if written then redis.call('SET', KEYS[3], 'x', 'PX', memory) end
    return {3, 0}
  end
end
if not holder then
  holder = hand_on(me)
  if not holder or holder == me then
    -- Free: taken. Any place of this token still in the line is made void.
    if old then redis.call('DEL', KEYS[3]) end
    redis.call('SET', KEYS[1], me, 'PX', lease)
    if idle > 0 then return {1, lease, next_fence(KEYS[4], idle)} end
    return {1, lease, 0}
  end
end
if not joining then return {0, redis.call('PTTL', KEYS[1]), 0} end
local prev = old and string.match(old, '^%d+:(%d+):')
if prev and redis.call('LPOS', KEYS[2], me .. ':' .. prev) then
  stay = prev  -- still in the line: it keeps its place, and the line lives on
  redis.call('SET', KEYS[3], entry_value(stay), 'PX', ttl)
  redis.call('PEXPIRE', KEYS[2], 2 * ttl, 'GT')
else
  if not written then redis.call('SET', KEYS[3], entry_value(stay), 'PX', ttl) end
  if redis.call('RPUSH', KEYS[2], me .. ':' .. stay) == 1 then
    redis.call('PEXPIRE', KEYS[2], 2 * ttl)
  else
    redis.call('PEXPIRE', KEYS[2], 2 * ttl, 'GT')
  end
end
return {0, -3, tonumber(stay)}
)lua");
    return s;
  }
  ///@}

  /// The release: if the key holds ARGV[1], hands the lock to the first live
  /// waiter (writing its token over ours) or, with none, deletes the key.
  /// KEYS[1] lock, KEYS[2] line; ARGV[1] token, ARGV[2] channel, ARGV[3]
  /// the entries' prefix. 1 released, 0 not ours; a lock found free (its
  /// lease ran out) is handed on too. One that hands on runs GET, LPOP,
  /// the entry's GET, SET and PUBLISH. @{
  static const redis::script& release_script(bool sharded) { return sharded ? release_script<true>() : release_script<false>(); }
  template <bool Sharded = false>
  static const redis::script& release_script() {
    static const redis::script s(prelude(2, 3, Sharded) + R"lua(
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  if not hand_on(nil) then redis.call('DEL', KEYS[1]) end
  return 1
end
if not holder then hand_on(nil) end
return 0
)lua");
    return s;
  }
  ///@}

  /// Leaves the line. KEYS[1] lock, KEYS[2] line, KEYS[3] this waiter's
  /// entry; ARGV[1] token, ARGV[2] channel, ARGV[3] the entries' prefix,
  /// ARGV[4] leave memory ms. 1: the lock was granted to this token before
  /// it could leave (it holds it now); 0: it left (and a free lock went
  /// on). Either way its entry becomes "x" for the leave memory: its places
  /// in the line are void (the next hand-on drops them), and a try of its
  /// that arrives later does nothing. @{
  static const redis::script& leave_script(bool sharded) { return sharded ? leave_script<true>() : leave_script<false>(); }
  template <bool Sharded = false>
  static const redis::script& leave_script() {
    static const redis::script s(prelude(2, 3, Sharded) + R"lua(
local memory = tonumber(ARGV[4])
if not memory or memory < 1 or memory > 1e12 or memory % 1 ~= 0 then
  return redis.error_reply('ERR dlock: marker ttl out of range')
end
redis.call('SET', KEYS[3], 'x', 'PX', memory)
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return 1 end
if not holder then hand_on(nil) end
return 0
)lua");
    return s;
  }
  ///@}

  /// Refreshes the entry of each given waiter still in the line, then hands
  /// a free lock on (its holder's lease ran out). KEYS[1] lock, KEYS[2]
  /// line; ARGV[1] channel, ARGV[2] the entries' prefix, then for each
  /// waiter of one backend its token and its entry's ttl ms. For each
  /// waiter: its stay (still waiting, entry refreshed), -1 (it holds the
  /// lock: granted, its message may be lost) or 0 (not in the line: its
  /// entry lapsed, or its place was taken off). @{
  static const redis::script& refresh_script(bool sharded) { return sharded ? refresh_script<true>() : refresh_script<false>(); }
  template <bool Sharded = false>
  static const redis::script& refresh_script() {
    static const redis::script s(prelude(1, 2, Sharded) + R"lua(
local longest = 0
for i = 4, #ARGV, 2 do  -- every ttl checked before anything is written
  local ttl = tonumber(ARGV[i])
  if not ttl or ttl < 1 or ttl > 1e12 or ttl % 1 ~= 0 then
    return redis.error_reply('ERR dlock: entry ttl out of range')
  end
  longest = math.max(longest, ttl)
end
-- Refresh first, so that a waiter whose entry was about to lapse is not
-- dropped by the hand-on below.
local places, line = {}, nil
for i = 3, #ARGV, 2 do
  local who = ARGV[i]
  local entry = redis.call('GET', ARGV[2] .. who)
  local stay = entry and string.match(entry, '^%d+:(%d+):')
  if stay then
    if not line then
      line = {}
      for _, place in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do line[place] = true end
    end
    if line[who .. ':' .. stay] then
      redis.call('PEXPIRE', ARGV[2] .. who, ARGV[i + 1])
      places[who] = tonumber(stay)
    end
  end
end
if next(places) then redis.call('PEXPIRE', KEYS[2], 2 * longest, 'GT') end
local holder = redis.call('GET', KEYS[1])
if not holder then holder = hand_on(nil) end
local out = {}
for i = 3, #ARGV, 2 do
  local who = ARGV[i]
  if holder == who then out[#out + 1] = -1 else out[#out + 1] = places[who] or 0 end
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
    script_call call{&refresh_script(sharded), {name, queue_key(name)}, {channel(name), entry_prefix(name)}};
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
    // Each try that joins offers a new stay; the reply says which one the
    // waiter has (an older one when it is still in the line).
    const std::int64_t stay = join ? ++line.stays : 0;
    std::vector<std::string> keys{rec.name, queue_key(rec.name), entry_key(rec.name, rec.owner),
                                  ext::fence_key(rec.name)};
    std::vector<std::string> args{rec.owner,
                                  std::to_string(rec.lease.count()),
                                  join ? "1" : "0",
                                  std::to_string(line.entry_ttl.count()),
                                  channel(rec.name),
                                  backend.client_id(),
                                  ext::fence_arg(fencing),
                                  std::to_string(stay),
                                  line.joined ? "1" : "0",
                                  entry_prefix(rec.name),
                                  std::to_string(leave_memory.count())};
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
        // -3: a try that joined does not ask the holder's PTTL (the
        // waiter's refreshes notice a lease that ran out).
        if (*left == -3) co_return std::pair{error_code{}, attempt{false, std::nullopt}};
        co_return std::pair{error_code{}, attempt{false, milliseconds(*left == -2 ? 0 : *left)}};
      }
      case 3:  // only a try its own waiter gave up (left after) can read this
        co_return std::pair{error_code(asio::error::operation_aborted), attempt{}};
      default:
        co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    }
  }

  /// Runs release_script(): released (1; the lock goes on to the next
  /// waiter) or lease_lost (0: not ours). A retry after outcome_unknown is
  /// resolved from the key, as Token's: the key can hold this token only
  /// until this hold's release runs, so a retry that finds it gone or
  /// another's reports released when its first attempt left while the hold
  /// was still safe to trust (a release that ran hands on only once: the
  /// retry finds the next waiter's token).
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend, record& rec) const {
    const bool retry = rec.release_retry;
    if (!retry) rec.state.first_release_in_lease = rec.remaining() > milliseconds::zero();
    std::vector<std::string> keys{rec.name, queue_key(rec.name)};
    std::vector<std::string> args{rec.owner, channel(rec.name), entry_prefix(rec.name)};
    auto [ec, v] = co_await ext::eval(backend, release_script(ext::sharded_pubsub(backend)), std::move(keys),
                                         std::move(args));
    ext::note(rec, ec, v);
    co_return ext::retried_release(retry, rec.state.first_release_in_lease, ext::deleted(ec, v));
  }

  /// Leaves the line (a wait that timed out, was cancelled or failed), in
  /// the same script that checks for a grant: true when the lock was
  /// granted first, and is held now. Its tries are cancelled on the way: one
  /// whose reply never came (in a stalled connection) could otherwise run
  /// later and take the lock for a waiter that is gone.
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> leave(B& backend, record& rec) const {
    std::vector<std::string> keys{rec.name, queue_key(rec.name), entry_key(rec.name, rec.owner)};
    std::vector<std::string> args{rec.owner, channel(rec.name), entry_prefix(rec.name),
                                  std::to_string(leave_memory.count())};
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
