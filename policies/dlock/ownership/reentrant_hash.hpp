// ownership::ReentrantHash: Redisson's RLock (A4): a hash of owner fields
// holding reentrant counts, an unlock message on release, all in Lua.
#pragma once

#include <optional>
#include <string>

#include <dlock/ext.hpp>

namespace dlock::ownership {

/// Wire-compatible with Redisson's RLock: the lock is a hash at `name`
/// whose field `<client id>:<thread id>` holds the hold count; release
/// publishes on `redisson_lock__channel:{name}`. The acquire script
/// answers nil (acquired or re-entered) or the holder's PTTL.
///
/// Named wake-ups (with wait::PubSub): a try that fails while its waiter
/// means to sleep puts the waiter's entry (`<number>:<tag>`: a random
/// decimal, see ext::waiter_number, and its client's tag) at the end of
/// `{name}:waiters`, a list in the lock's slot. The release takes the first
/// entry off the list and publishes its number on that client's own channel
/// (the lock's channel, ":", the tag), so one waiter tries and one client
/// hears it, wherever the waiters are. Then, if the lock's channel has
/// subscribers that are not dlock's (more than its presence channel
/// `<channel>:dlock` has; where a script cannot count them, always), it
/// publishes `00` there, which Redisson's waiters read as their unlock
/// message (a Java long: 0) and dlock's ignore. With no entry in the list
/// it publishes `0` on the lock's channel, as Redisson does: each dlock
/// client wakes one of its waiters. A waiter that
/// gives up takes its number out (forget_waiter). The list expires
/// `waiter_line_life` after it was started, so numbers of waiters that died
/// do not stay; a waiter woken for nothing is recovered by wait::PubSub's
/// bounded re-check.
///
/// Differences from Redisson, all on dlock's side of the wire: a release
/// that finds the key gone still publishes (as Redisson does) but reports
/// lease_lost rather than success; a retried release after outcome_unknown
/// is answered from a short-lived marker key, so it never decrements twice;
/// a winning acquire leaves a marker too, so that a lost acquire reply is
/// resolved exactly: a re-entry as a key of its own, a first acquire as a
/// second field of the new hash (`{name}:acquire:<attempt id>` = 1, gone
/// with the hash), which costs no command of its own. Marker keys live
/// `release_memory.window` (10 s) and share the lock's cluster slot.
struct ReentrantHash {
  static constexpr const char* policy_name = "hash";  ///< its part of a combination's name ("hash/watchdog/pubsub")
  static constexpr bool owner_checked = true;  ///< release and extend act only on this owner's field
  static constexpr bool publishes_on_release = true;  ///< the release publishes unlock_message on channel(name)
  static constexpr bool reentrant = true;  ///< the same owner may acquire again, and must release as often
  static constexpr bool needs_lease = true;  ///< its scripts refuse a zero lease (a hash without expiry is held forever)

  /// The unlock message Redisson's waiters expect.
  static constexpr const char* unlock_message = "0";

  using hold_state = ext::named_waiter;  ///< each hold's own part of its record: its waiter's number and how it registers
  using record = ext::hold_record_with<ext::named_waiter>;  ///< the record its operations take

  /// How long the line of waiter entries lives after it was started (60 s):
  /// numbers of waiters that died do not stay longer. A line that outlives
  /// it under constant contention starts again, its waiters re-registering
  /// at their next wake.
  static constexpr milliseconds waiter_line_life{60000};

  /// The line of waiter entries (a list), in the lock's cluster slot.
  static std::string waiters_key(std::string_view name) { return ext::same_slot_key(name, "waiters"); }

  /// How long a release remembers its result for a retry (10 s).
  ext::release_memory release_memory;

  /// Fencing tokens (see dlock::fencing_tokens); empty: off. A reentrant
  /// acquire keeps the token of the first.
  std::optional<fencing_tokens> fencing;

  /// The fencing setting's error, if any; else the release memory's.
  std::error_code validate() const {
    if (fencing)
      if (auto ec = fencing->validate()) return ec;
    return release_memory.validate();
  }

  /// Redisson's channel for a lock's release messages: its prefixName,
  /// which puts braces around the name unless the name holds a '{'.
  static std::string channel(std::string_view name) {
    if (name.find('{') != std::string_view::npos) return "redisson_lock__channel:" + std::string(name);
    return "redisson_lock__channel:{" + std::string(name) + "}";
  }

  /// The owner's hash field, "<client id>:<owner id>" (Redisson's "<client id>:<thread id>").
  std::string make_owner(const std::string& client_id, const std::string& owner_id) const {
    return client_id + ":" + owner_id;
  }

  /// The acquire: a free lock becomes a hash with this owner's count at 1,
  /// one this owner holds gets 1 more, and either way the lease is reset;
  /// a lock held by another is left alone.
  /// KEYS[1] lock, KEYS[2] acquire marker (a first acquire writes its name
  /// as a field of the hash, a re-entry as a key), KEYS[3] fence counter, KEYS[4]
  /// the line of waiter numbers; ARGV[1] lease ms, ARGV[2] owner field,
  /// ARGV[3] marker ttl ms, ARGV[4] the counter's idle ms ("0": no
  /// fencing), ARGV[5] the waiter's entry, ARGV[6] what a failed try does
  /// with it: "1" appends it to the line, "2" appends it unless it is there
  /// (and a win takes it out), "0" or absent: nothing; ARGV[7] the line's
  /// life ms, set when a number starts it.
  /// nil: acquired or re-entered (and the marker remembers it), without
  /// fencing; {fencing token}: the same with fencing (a re-entry reads the
  /// counter: nobody else can have taken a number since the first acquire;
  /// {0} if it is gone); otherwise the holder's PTTL (-1: no expiry), or
  /// with mode "2" {PTTL, 1 if it appended the number, else 0}.
  /// PTTL comes first: it tells a free lock from a held one, and gives a
  /// failed try its answer, in one question.
  /// The lease is checked before anything is written: Redis does not undo a
  /// script's HSET when a later PEXPIRE is refused, and a hash without expiry
  /// would be a lock held forever. 1e12 is dlock::max_lease.
  static const redis::script& acquire_script() {
    static const redis::script s(std::string(ext::fence_lua) + R"lua(
local lease = tonumber(ARGV[1])
local idle = tonumber(ARGV[4] or '0')
if not lease or lease < 1 or lease > 1e12 or lease % 1 ~= 0 or not idle or idle < 0 or idle > 1e12 then
  return redis.error_reply('ERR dlock: lease out of range')
end
local mode = ARGV[6] or '0'
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then
  redis.call('HSET', KEYS[1], ARGV[2], 1, KEYS[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  if mode == '2' then redis.call('LREM', KEYS[4], 0, ARGV[5]) end
  if idle > 0 then return {next_fence(KEYS[3], idle)} end
  return nil
end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[3])
  if mode == '2' then redis.call('LREM', KEYS[4], 0, ARGV[5]) end
  if idle > 0 then return {tonumber(redis.call('GET', KEYS[3]) or '0') or 0} end
  return nil
end
local appended = 0
if mode == '1' or (mode == '2' and not redis.call('LPOS', KEYS[4], ARGV[5])) then
  if redis.call('RPUSH', KEYS[4], ARGV[5]) == 1 then redis.call('PEXPIRE', KEYS[4], ARGV[7]) end
  appended = 1
end
if mode == '2' then return {ttl, appended} end
return ttl
)lua");
    return s;
  }

  /// How a script wakes the lock's next waiter (KEYS[waiters] the line of
  /// entries, ARGV[channel] the channel, ARGV[unlock] the unlock message,
  /// ARGV[count] "1" when the script can count the channel's subscribers):
  /// the first entry's number on its client's channel, then "00" on the
  /// lock's channel when that has listeners that are not dlock's; or, with
  /// nobody in the line, the unlock message. An entry not of the form
  /// "<number>:<tag>" (an older dlock's) is published as it is, on the
  /// lock's channel. The indices are the script's own constants.
  static std::string wake_lua(int waiters, int channel, int unlock, int count, bool sharded) {
    const std::string verb = "redis.call('" + std::string(ext::publish_verb(sharded)) + "', ";
    const std::string ch = "ARGV[" + std::to_string(channel) + "]";
    return "local function wake()\n"
           "  local next = redis.call('LPOP', KEYS[" + std::to_string(waiters) + "])\n"
           "  if not next then\n"
           "    " + verb + ch + ", ARGV[" + std::to_string(unlock) + "])\n"
           "    return\n"
           "  end\n"
           "  local number, tag = string.match(next, '^(%d+):(%x+)$')\n"
           "  if not number then\n"
           "    " + verb + ch + ", next)\n"
           "  else\n"
           "    " + verb + ch + " .. ':' .. tag, number)\n"
           "    if ARGV[" + std::to_string(count) + "] == '1' then\n"
           "      local n = redis.call('PUBSUB', '" + (sharded ? "SHARDNUMSUB" : "NUMSUB") + "', " + ch + ", " + ch +
           " .. '" + std::string(ext::presence_suffix) + "')\n"
           "      if n[2] <= n[4] then return end\n"
           "    end\n"
           "  end\n"
           "  " + verb + ch + ", '00')\n"
           "end\n";
  }

  /// The release: takes 1 from this owner's count (resetting the lease
  /// while some are left), and at 0 deletes the key and wakes the next
  /// waiter (wake_lua); its result is remembered for a retry
  /// (release_memory).
  /// KEYS[1] lock, KEYS[2] release marker, KEYS[3] the line of waiter
  /// numbers; ARGV[1] unlock message, ARGV[2]
  /// lease ms, ARGV[3] owner field, ARGV[4] marker ttl ms, ARGV[5] "1" for a
  /// retry, ARGV[6] channel, ARGV[7] "1" when the script can count the
  /// channel's subscribers (ext::counts_subscribers). The channel is not a key: for some names with
  /// braces ("x}y", "q{"), Redisson's channel name hashes to another cluster
  /// slot than the lock, and a script's KEYS must share one slot. `sharded`
  /// (`Sharded`): it publishes with SPUBLISH (a cluster's sharded pub/sub;
  /// see ext::release_channel for the channel there).
  /// 0 still held, 1 released, 2 key gone (lost; it wakes a waiter all the
  /// same), 3 not this owner's.
  /// The held case, the usual one, asks one question (HEXISTS on a missing
  /// key is 0 too, so EXISTS only tells "gone" from "another's").
  ///@{
  static const redis::script& release_script(bool sharded) { return sharded ? release_script<true>() : release_script<false>(); }
  template <bool Sharded = false>
  static const redis::script& release_script() {
    static const redis::script s(ext::release_memory::remembered(wake_lua(3, 6, 1, 7, Sharded) + R"lua(
local lease = tonumber(ARGV[2])
if not lease or lease < 1 or lease > 1e12 or lease % 1 ~= 0 then
  return redis.error_reply('ERR dlock: lease out of range')
end
local left = redis.call('HINCRBY', KEYS[1], ARGV[3], -1)
if left > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  result = 0
elseif left == 0 then
  redis.call('DEL', KEYS[1])
  wake()
  result = 1
else
  -- Not this owner's: the HINCRBY made the field (-1). Take it out again;
  -- Redis deletes a hash left empty, so a key that was missing stays missing.
  redis.call('HDEL', KEYS[1], ARGV[3])
  if redis.call('EXISTS', KEYS[1]) == 0 then
    wake()
    result = 2
  else
    result = 3
  end
end
)lua", 2, 4, 5));
    return s;
  }
  ///@}

  /// A waiter gives up: takes its number out of the line, and wakes the
  /// next waiter if the lock is free and this waiter may have been woken
  /// for it (its number was taken already, or it holds a wake it did not
  /// use), so that the turn is not lost with it. KEYS[1] lock, KEYS[2] the
  /// line of waiter entries; ARGV[1] unlock message, ARGV[2] the waiter's
  /// entry, ARGV[3] channel, ARGV[4] "1" when it holds an unused wake,
  /// ARGV[5] "1" when the script can count the channel's subscribers.
  /// The count of numbers it took out (0 or 1).
  ///@{
  static const redis::script& forget_script(bool sharded) { return sharded ? forget_script<true>() : forget_script<false>(); }
  template <bool Sharded = false>
  static const redis::script& forget_script() {
    static const redis::script s(wake_lua(2, 3, 1, 5, Sharded) + R"lua(
local removed = redis.call('LREM', KEYS[2], 0, ARGV[2])
if (removed == 0 or ARGV[4] == '1') and redis.call('EXISTS', KEYS[1]) == 0 then wake() end
return removed
)lua");
    return s;
  }
  ///@}

  /// For a hold won without a fencing token in the reply (a lost reply
  /// found to have won): the owner-checked call that takes one.
  script_call fence_call(const ext::hold_record& rec) const {
    return {&ext::field_fence_script(), {rec.name, ext::fence_key(rec.name)}, {rec.owner, ext::fence_arg(fencing)}};
  }

  /// Resets the lease only while the hash has this owner's field (the
  /// watchdog's renewal). KEYS[1] lock; ARGV[1] lease ms, ARGV[2] owner
  /// field. 1 extended, 0 gone (or another owner's).
  static const redis::script& extend_script() {
    static const redis::script s(R"lua(
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
)lua");
    return s;
  }

  /// extend_script() for many holds in one call (the watchdog's batch).
  /// KEYS[i] the i-th lock; ARGV[2i-1] its lease ms, ARGV[2i] its owner
  /// field. An array with each lock's 1 (extended) or 0 (gone or
  /// another's). A key that is not a hash reads as not ours rather than
  /// failing the whole call.
  static const redis::script& extend_batch_script() {
    static const redis::script s(R"lua(
local out = {}
for i = 1, #KEYS do
  if redis.pcall('HEXISTS', KEYS[i], ARGV[2 * i]) == 1 then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i - 1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
)lua");
    return s;
  }

  /// One try: acquire_script() (with WAIT behind it on an acknowledging
  /// backend), registering the waiter's number as `rec.state` says. Won or
  /// re-entered: the lease counts from the send, and with fencing
  /// `rec.fence` is set unless the hold has one. Lost: held_for is the
  /// holder's PTTL (0 if the key just vanished, -1 if it has no expiry).
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend, record& rec) const {
    auto sent = ext::steady::now();
    const auto& w = rec.state;
    const char* mode = w.number.empty() || w.mode == ext::named_waiter::join_mode::none ? "0"
                       : w.mode == ext::named_waiter::join_mode::join                 ? "1"
                                                                                       : "2";
    // Named vectors, not braced lists: g++ 12 miscompiles initializer lists
    // inside co_await expressions ("array used as initializer").
    std::vector<std::string> keys{rec.name, ext::release_memory::acquire_key(rec), ext::fence_key(rec.name),
                                  waiters_key(rec.name)};
    std::vector<std::string> args{std::to_string(rec.lease.count()), rec.owner, release_memory.ttl(),
                                  ext::fence_arg(fencing), w.number, mode,
                                  std::to_string(waiter_line_life.count())};
    rec.state.appended = false;
    auto [ec, v] = co_await ext::acknowledged_eval(backend, rec.acks, acquire_script(), std::move(keys), std::move(args));
    ext::note(rec, ec, v);
    if (ec) co_return std::pair{ec, attempt{}};
    if (v.is_null() && !fencing) {
      rec.confirm(sent);
      co_return std::pair{error_code{}, attempt{true, std::nullopt}};
    }
    const redis::value* ttl = &v;
    if (mode[0] == '2' && v.is_array() && v.elements.size() == 2) {  // lost: {PTTL, appended}
      if (!ext::integer_of(v.elements[1])) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
      rec.state.appended = v.elements[1].integer == 1;
      ttl = &v.elements[0];
    } else if (fencing && v.is_array()) {
      if (v.elements.size() != 1 || v.elements[0].type != redis::kind::integer)
        co_return std::pair{error_code(error::unexpected_reply), attempt{}};
      // A hold already counted keeps its token; a re-entry that found the
      // counter gone ({0}) leaves it to the lock to take one.
      if (!rec.fence) rec.fence = ext::fence_of(v.elements[0]);
      rec.confirm(sent);
      co_return std::pair{error_code{}, attempt{true, std::nullopt}};
    }
    if (ttl->type != redis::kind::integer) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    co_return std::pair{error_code{}, attempt{false, milliseconds(ttl->integer == -2 ? 0 : ttl->integer)}};
  }

  /// Runs release_script(): still_held (one reentrant hold ended), released,
  /// lease_lost (the key was gone) or not_owner (the key is another
  /// owner's). A retry after outcome_unknown is answered from the first
  /// attempt's marker when that attempt ran, so the count never drops twice.
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend,
                                                                  ext::hold_record& rec) const {
    std::vector<std::string> keys{rec.name, ext::release_memory::key(rec), waiters_key(rec.name)};
    std::vector<std::string> args{unlock_message, std::to_string(rec.lease.count()), rec.owner,
                                  release_memory.ttl(), ext::release_memory::retry_flag(rec),
                                  ext::release_channel<ReentrantHash>(backend, rec.name),
                                  ext::counts_subscribers(backend) ? "1" : "0"};
    auto [ec, v] = co_await ext::eval(backend, release_script(ext::sharded_pubsub(backend)), std::move(keys),
                                         std::move(args));
    ext::note(rec, ec, v);
    co_return ext::counted_release(ec, v);
  }

  /// The waiter of `rec` gives up (wait::PubSub): forget_script() with its
  /// number; `owed`: it holds a wake it did not use. Completes with the
  /// script's error, if any (the number then stays until a release takes
  /// it, and that release's wake is recovered by the bounded re-check).
  template <class B>
  asio::awaitable<error_code> forget_waiter(B& backend, const record& rec, bool owed) const {
    std::vector<std::string> keys{rec.name, waiters_key(rec.name)};
    std::vector<std::string> args{unlock_message, rec.state.number, ext::release_channel<ReentrantHash>(backend, rec.name),
                                  owed ? "1" : "0", ext::counts_subscribers(backend) ? "1" : "0"};
    auto [ec, v] = co_await ext::eval(backend, forget_script(ext::sharded_pubsub(backend)), std::move(keys),
                                      std::move(args));
    if (!ec && !ext::integer_of(v)) ec = error::unexpected_reply;
    co_return ec;
  }

  /// Whether an acquire try won, from the marker it leaves: a field of the
  /// hash (a first acquire) or a key (a re-entry). KEYS[1] lock, KEYS[2]
  /// the try's marker. 1 or 0; a key that is not a hash has no field.
  static const redis::script& resolve_script() {
    static const redis::script s(R"lua(
if redis.call('EXISTS', KEYS[2]) == 1 then return 1 end
local field = redis.pcall('HEXISTS', KEYS[1], KEYS[2])
if type(field) == 'number' then return field end
return 0
)lua");
    return s;
  }

  /// After an acquire whose reply was lost: whether that try won, read from
  /// the marker a winning try leaves (a count comparison would be fooled by
  /// another Lock object sharing this owner's field). A first acquire's
  /// marker goes with the hash: if its lease ran out before this question,
  /// the try reads as not won, which is what it is by then.
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> resolve(B& backend, const ext::hold_record& rec) const {
    std::vector<std::string> keys{rec.name, ext::release_memory::acquire_key(rec)};
    auto [ec, v] = co_await ext::eval(backend, resolve_script(), std::move(keys), std::vector<std::string>{});
    if (ec) co_return std::pair{ec, false};
    auto n = ext::integer_of(v);
    if (n != 0 && n != 1) co_return std::pair{error_code(error::unexpected_reply), false};
    co_return std::pair{error_code{}, n == 1};
  }

  /// An extend reply: 1 extended, 0 the key is gone or not ours; anything
  /// else is no verdict (the renewal is tried again soon).
  static renewal_verdict read_extend(const redis::value& v) { return ext::read_extend_reply(v); }

  /// The watchdog's renewal of this hold: extend_script() with its lease and field.
  script_call extend_call(const ext::hold_record& rec) const {
    return {&extend_script(), {rec.name}, {std::to_string(rec.lease.count()), rec.owner}};
  }

  /// Several holds' extend_call()s as one extend_batch_script() call; its
  /// reply reads as ext::read_extend_replies.
  static script_call extend_batch(const std::vector<const script_call*>& calls) {
    return ext::merged_call(extend_batch_script(), calls);
  }
};

}  // namespace dlock::ownership
