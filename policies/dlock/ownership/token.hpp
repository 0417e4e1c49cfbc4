// ownership::Token: SET NX PX with a random owner token, released and
// extended by owner-checked Lua (A2); the layout of redis-py's Lock.
#pragma once

#include <optional>
#include <string>

#include <dlock/ext.hpp>

namespace dlock::ownership {

/// `SET name token NX PX lease` to acquire; release and extend act only if
/// the key still holds this hold's token. The token is 128 bits, fresh for
/// every acquisition, from a per-thread ChaCha20 generator keyed from the
/// OS (ext::random_hex). The key holds nothing but the
/// token, as with redis-py's `Lock` and node-redlock, so their locks and
/// this one exclude each other on the same name.
///
/// With renewal::None it is `SET name token NX`, no expiry: redis-py's
/// default `Lock(name)` (A2n). A crashed holder keeps it forever, but only
/// its owner's release deletes it.
///
/// Not reentrant: the same owner acquiring twice fails with already_held.
/// A lost acquire reply is resolved by asking whether the key holds our
/// token.
///
/// The release is redis-py's compare-and-delete and writes nothing else. A
/// release retried after outcome_unknown (the same Hold, or the same
/// thread's next unlock) cannot act twice: the token is fresh for each
/// acquisition, so the script can only ever delete this hold's own key. The
/// retry is resolved from the key: still ours, it deletes it (the first
/// attempt did not run); gone or someone else's, either the first attempt
/// deleted it or the lease ran out, which the retry cannot tell apart. It
/// reports success if the first attempt was sent while the hold was still
/// safe to trust (remaining() above zero: within the lease, less the loss
/// margin), since the caller's critical section ended inside its lease
/// either way; lease_lost if it was sent later or the hold was signalled
/// lost. (ReentrantHash's counted release is not idempotent, so it keeps a
/// marker key instead.)
struct Token {
  static constexpr const char* policy_name = "token";  ///< its part of a combination's name ("token/watchdog/spin")
  static constexpr bool owner_checked = true;  ///< release and extend act only while the key holds this hold's token
  static constexpr bool publishes_on_release = false;  ///< the release publishes nothing
  static constexpr bool reentrant = false;  ///< a second acquire by the same owner fails with already_held
  static constexpr bool needs_lease = false;  ///< works without expiry (renewal::None: `SET NX`, kept until released)

  /// Fencing tokens (see dlock::fencing_tokens); empty: off.
  std::optional<fencing_tokens> fencing;

  /// Token's own part of a hold's record.
  struct hold_state {
    /// Whether the hold was still safe to trust (remaining() above zero)
    /// when the first attempt of its release left: a retry that finds the
    /// key gone reads it by this, having no release memory.
    bool first_release_in_lease = false;
  };
  using record = ext::hold_record_with<hold_state>;  ///< the record its operations take: the shared part plus hold_state

  /// invalid_argument if the fencing setting is out of range; else no error.
  std::error_code validate() const { return fencing ? fencing->validate() : std::error_code{}; }

  /// Its release publishes nothing (no wait::PubSub with it).
  static std::string channel(std::string_view) { return {}; }

  /// A fresh 128-bit random token (hex) for each hold: the key's value.
  std::string make_owner(const std::string&, const std::string&) const {
    return ext::random_hex(16);
  }

  /// Compare-and-delete: deletes the key only if it holds the token.
  /// KEYS[1] lock; ARGV[1] token. 1 released, 0 the key is not ours (gone,
  /// or another owner's): redis-py's release script.
  static const redis::script& release_script() {
    static const redis::script s(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
)lua");
    return s;
  }

  /// Resets the key's lease only if it holds the token (the watchdog's
  /// renewal). KEYS[1] lock; ARGV[1] token, ARGV[2] lease ms. 1 extended,
  /// 0 not ours.
  static const redis::script& extend_script() {
    static const redis::script s(R"lua(
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
)lua");
    return s;
  }

  /// extend_script() for many holds in one call (the watchdog's batch).
  /// KEYS[i] the i-th lock; ARGV[2i-1] its token, ARGV[2i] its lease ms.
  /// An array with each lock's 1 (extended) or 0 (not ours). A key that is
  /// not a string (someone else's, of another type) reads as not ours
  /// rather than failing the whole call.
  static const redis::script& extend_batch_script() {
    static const redis::script s(R"lua(
local out = {}
for i = 1, #KEYS do
  if redis.pcall('GET', KEYS[i]) == ARGV[2 * i - 1] then
    out[i] = redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
  else
    out[i] = 0
  end
end
return out
)lua");
    return s;
  }

  /// The acquire with fencing tokens: `SET NX` and, on a win, the next
  /// token from the counter, in one script. KEYS[1] lock, KEYS[2] fence
  /// counter; ARGV[1] token, ARGV[2] lease ms (0: none), ARGV[3] counter
  /// idle ms. {1, fencing token} taken; {0, pttl} held by another. The
  /// arguments are checked before anything is written (an error reply,
  /// "lease out of range", for a bad lease or idle time).
  static const redis::script& fenced_acquire_script() {
    static const redis::script s(std::string(ext::fence_lua) + R"lua(
local lease = tonumber(ARGV[2])
local idle = tonumber(ARGV[3])
if not lease or lease < 0 or lease > 1e12 or lease % 1 ~= 0 or not idle or idle < 1 or idle > 1e12 then
  return redis.error_reply('ERR dlock: lease out of range')
end
local taken
if lease > 0 then
  taken = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', lease)
else
  taken = redis.call('SET', KEYS[1], ARGV[1], 'NX')
end
if taken then return {1, next_fence(KEYS[2], idle)} end
return {0, redis.call('PTTL', KEYS[1])}
)lua");
    return s;
  }

  /// Takes a fencing token for a hold that won without one (fence_call).
  /// KEYS[1] lock, KEYS[2] fence counter; ARGV[1] token, ARGV[2] counter
  /// idle ms. The next fencing token if the key holds ARGV[1], else 0.
  static const redis::script& fence_script() {
    static const redis::script s(std::string(ext::fence_lua) + R"lua(
local idle = tonumber(ARGV[2])
if not idle or idle < 1 or idle > 1e12 then return redis.error_reply('ERR dlock: idle out of range') end
if redis.call('GET', KEYS[1]) == ARGV[1] then return next_fence(KEYS[2], idle) end
return 0
)lua");
    return s;
  }

  /// For a hold won without a fencing token in the reply (a hand-off's
  /// grant, a lost reply found to have won): the owner-checked call that
  /// takes one (a positive integer; 0 when the key is not ours).
  script_call fence_call(const ext::hold_record& rec) const {
    return {&fence_script(), {rec.name, ext::fence_key(rec.name)}, {rec.owner, ext::fence_arg(fencing)}};
  }

  /// One try: `SET name token NX [PX lease]` and `PTTL name` in one
  /// pipeline (with WAIT behind it on an acknowledging backend), or
  /// fenced_try() with fencing on. Won: the lease counts from the send.
  /// Lost: held_for is the holder's PTTL (0 if the key just vanished,
  /// negative if it never expires). A reply of another shape is
  /// unexpected_reply, an error reply server_error with the server's words.
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend,
                                                              ext::hold_record& rec) const {
    auto sent = ext::steady::now();
    if (fencing) co_return co_await fenced_try(backend, rec, sent);
    redis::request req;
    if (rec.lease > milliseconds::zero()) req.push("SET", rec.name, rec.owner, "NX", "PX", rec.lease.count());
    else req.push("SET", rec.name, rec.owner, "NX");
    req.push("PTTL", rec.name);
    auto [ec, r] = co_await ext::acknowledged_exec(backend, rec.name, rec.acks, std::move(req));
    if (ec) co_return std::pair{ec, attempt{}};
    if (r.size() != 2) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    if (r[0].is_error()) co_return std::pair{ext::refused(rec, r[0]), attempt{}};  // refused: not run
    // Not taken, and the PTTL refused (an ACL without it): the SET did not run.
    if (r[0].is_null() && r[1].is_error()) co_return std::pair{ext::refused(rec, r[1]), attempt{}};
    if (r[0].type == redis::kind::simple_string && r[0].str == "OK") {
      rec.confirm(sent);
      co_return std::pair{error_code{}, attempt{true, std::nullopt}};
    }
    auto left = ext::integer_of(r[1]);
    // Anything but nil (held) with an integer PTTL is no verdict: it may have run.
    if (!r[0].is_null() || !left) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    co_return std::pair{error_code{}, attempt{false, milliseconds(*left == -2 ? 0 : *left)}};
  }

  /// try_acquire() with fencing on: fenced_acquire_script(), whose win sets
  /// `rec.fence`; `sent` is when the try began, from which the lease counts.
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> fenced_try(B& backend, ext::hold_record& rec,
                                                             ext::steady::time_point sent) const {
    std::vector<std::string> keys{rec.name, ext::fence_key(rec.name)};
    std::vector<std::string> args{rec.owner, std::to_string(rec.lease.count()), ext::fence_arg(fencing)};
    auto [ec, v] =
        co_await ext::acknowledged_eval(backend, rec.acks, fenced_acquire_script(), std::move(keys), std::move(args));
    ext::note(rec, ec, v);
    if (ec) co_return std::pair{ec, attempt{}};
    if (v.type != redis::kind::array || v.elements.size() != 2) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    auto verdict = ext::integer_of(v.elements[0]);
    if (verdict == 1) {
      auto fence = ext::fence_of(v.elements[1]);
      if (!fence) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
      rec.fence = fence;
      rec.confirm(sent);
      co_return std::pair{error_code{}, attempt{true, std::nullopt}};
    }
    auto left = ext::integer_of(v.elements[1]);
    if (verdict != 0 || !left) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    co_return std::pair{error_code{}, attempt{false, milliseconds(*left == -2 ? 0 : *left)}};
  }

  /// Runs release_script(): released (1) or lease_lost (0: the key is gone
  /// or another's). A retry after outcome_unknown that finds the key not
  /// ours reports released if its first attempt left while the hold was
  /// still safe to trust (see the class comment).
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend, record& rec) const {
    // The first attempt of this release notes whether the hold was still
    // safe to trust when it left; a retry reads a vanished key by it.
    const bool retry = rec.release_retry;
    if (!retry) rec.state.first_release_in_lease = rec.remaining() > milliseconds::zero();
    std::vector<std::string> keys{rec.name};
    std::vector<std::string> args{rec.owner};
    auto [ec, v] = co_await ext::eval(backend, release_script(), std::move(keys), std::move(args));
    ext::note(rec, ec, v);
    co_return ext::retried_release(retry, rec.state.first_release_in_lease, ext::deleted(ec, v));
  }

  /// After an acquire whose reply was lost: whether the key holds this
  /// try's token (the token is fresh per acquisition, so only our SET can
  /// have put it there).
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> resolve(B& backend, const ext::hold_record& rec) const {
    auto [ec, v] = co_await ext::command(backend, rec.name, redis::request().push("GET", rec.name));
    if (ec) co_return std::pair{ec, false};
    if (v.is_null()) co_return std::pair{error_code{}, false};
    if (v.type != redis::kind::bulk_string) co_return std::pair{error_code(error::unexpected_reply), false};
    co_return std::pair{error_code{}, v.str == rec.owner};
  }

  /// An extend reply: 1 extended, 0 the key is gone or not ours; anything
  /// else is no verdict (the renewal is tried again soon).
  static renewal_verdict read_extend(const redis::value& v) { return ext::read_extend_reply(v); }

  /// The watchdog's renewal of this hold: extend_script() with its token and lease.
  script_call extend_call(const ext::hold_record& rec) const {
    return {&extend_script(), {rec.name}, {rec.owner, std::to_string(rec.lease.count())}};
  }

  /// Several holds' extend_call()s as one extend_batch_script() call; its
  /// reply reads as ext::read_extend_replies.
  static script_call extend_batch(const std::vector<const script_call*>& calls) {
    return ext::merged_call(extend_batch_script(), calls);
  }
};

}  // namespace dlock::ownership
