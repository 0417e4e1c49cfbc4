// ownership::ReadWrite: Redisson's RReadWriteLock (many readers or one
// writer, both reentrant), with a waiting writer's intent that keeps new
// readers out so that a stream of readers cannot starve it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <dlock/ext.hpp>

namespace dlock::ownership {

/// A read-write lock: any number of shared holds (readers) or one
/// exclusive hold (a writer). With it, Lock gains the shared interface
/// (lock_shared, try_lock_shared_for, unlock_shared, acquire_shared,
/// async_acquire_shared...), so std::shared_lock works; lock() and the
/// other calls take it exclusively.
///
/// Wire-compatible with Redisson's RReadWriteLock: a hash at `name` whose
/// field `mode` is "read" or "write"; a reader's field `<client id>:<owner>`
/// and the writer's `<client id>:<owner>:write` hold reentrant counts; each
/// read acquisition also has a key of its own with its lease,
/// `{name}:<reader field>:rwlock_timeout:<n>`, so that a reader that died
/// stops counting when its lease ends although its field stays in the
/// hash. The hash lives as long as its longest lease. Releases publish on
/// `redisson_rwlock:{name}`: "1" (wake every waiter: readers may all enter)
/// when a writer lets go, "0" when the last reader does (or "1" when a
/// writer is waiting, so that it is among those woken).
///
/// Writer intent (dlock's addition, invisible to Redisson's clients): a
/// writer whose try fails while it means to wait leaves its field at
/// `{name}:write_intent` (for the longer of its lease and the holder's
/// time left, renewed by each of its tries); while it is there, no new
/// reader enters, only readers that already hold the lock re-enter (they
/// would otherwise wait for the writer that waits for them). The writer
/// that wins takes its intent away, and so does one that gives up (see
/// withdraw). A writer that dies waiting keeps new readers out until its
/// intent expires. Redisson's readers do not know of it and still enter.
///
/// Reentrancy as Redisson's: an owner may take the lock shared again, or
/// exclusively again, and a writer may also take it shared (a downgrade:
/// when its exclusive hold ends, the lock stays shared, and the waiters
/// are woken). An upgrade, an owner that holds the lock shared asking for
/// it exclusively, is refused with already_held: it would wait for itself.
///
/// A lost acquire reply is resolved from a marker key that a winning try
/// leaves (`{name}:acquire:<attempt id>`, release_memory.window); a retried
/// release after outcome_unknown is answered from the first attempt's
/// marker, as ReentrantHash's. On one server, Sentinel or a cluster (its
/// keys share the lock's slot); a quorum backend refuses it (readers are
/// several holders at once). No fencing tokens yet.
struct ReadWrite {
  static constexpr const char* policy_name = "rw";  ///< its part of a combination's name ("rw/watchdog/pubsub")
  static constexpr bool owner_checked = true;  ///< release and extend act only on this owner's field
  static constexpr bool publishes_on_release = true;  ///< releases publish on channel(name)
  static constexpr bool reentrant = true;  ///< the same owner may take it again, shared or exclusively
  static constexpr bool needs_lease = true;  ///< a hash without expiry would be held forever by a dead holder
  static constexpr bool admits_many = true;  ///< readers: several holds at once (a quorum refuses it)
  static constexpr bool shares = true;  ///< Lock gains lock_shared() and the rest of the shared interface

  /// What each hold's record keeps: whether a writer's failed try left its
  /// intent (so that giving up takes it away).
  struct hold_state {
    bool intent = false;  ///< this writer's field may be at the intent key
  };
  using record = ext::hold_record_with<hold_state>;  ///< the record its operations take

  /// How long markers of wins and releases live (10 s).
  ext::release_memory release_memory;

  /// Whether a waiting writer leaves its intent (true). False is
  /// Redisson's lock as it is: readers enter whenever the lock is shared,
  /// and a stream of them can keep a writer out for ever (see the tour's
  /// writer_starvation).
  bool writer_intent = true;

  /// The release memory's error, if any.
  std::error_code validate() const { return release_memory.validate(); }

  /// Redisson's prefix for the lock's companion keys: `{name}`, or the name
  /// itself when it holds a '{'.
  static std::string key_prefix(std::string_view name) {
    if (name.find('{') != std::string_view::npos) return std::string(name);
    return "{" + std::string(name) + "}";
  }

  /// Redisson's channel: `redisson_rwlock:` and the key prefix.
  static std::string channel(std::string_view name) { return "redisson_rwlock:" + key_prefix(name); }

  /// Where a waiting writer leaves its intent.
  static std::string intent_key(std::string_view name) { return key_prefix(name) + ":write_intent"; }

  /// A reader's timeout keys are this, ":" and the acquisition's number.
  static std::string timeout_prefix(std::string_view name, std::string_view reader_field) {
    return key_prefix(name) + ":" + std::string(reader_field) + ":rwlock_timeout";
  }

  /// The owner's field: "<client id>:<owner>" for a shared hold (owner keys
  /// of shared holds start with ext::shared_key_prefix, taken off here), and
  /// "<client id>:<owner>:write" for an exclusive one, as Redisson's.
  std::string make_owner(const std::string& client_id, const std::string& owner_key) const {
    std::string_view key = owner_key;
    if (key.starts_with(ext::shared_key_prefix)) return client_id + ":" + std::string(key.substr(ext::shared_key_prefix.size()));
    return client_id + ":" + owner_key + ":write";
  }

  /// The other field of the same owner: a reader's writer field, or a
  /// writer's reader field.
  static std::string other_field(const ext::hold_record& rec) {
    if (rec.shared) return rec.owner + ":write";
    return rec.owner.substr(0, rec.owner.size() - std::string_view(":write").size());
  }

  /// The shared try. KEYS[1] lock, KEYS[2] win marker, KEYS[3] intent;
  /// ARGV[1] lease ms, ARGV[2] reader field, ARGV[3] the owner's writer
  /// field, ARGV[4] marker ms, ARGV[5] this reader's timeout prefix. {1}
  /// taken; {0, ms} refused, ms the holder's (or the intent's) time left.
  static const redis::script& read_script() {
    static const redis::script s(R"lua(
local lease = tonumber(ARGV[1])
if not lease or lease < 1 or lease > 1e12 or lease % 1 ~= 0 then
  return redis.error_reply('ERR dlock: lease out of range')
end
local function take()
  local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('SET', ARGV[5] .. ':' .. n, 1, 'PX', lease)
  redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), lease))
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[4])
  return {1}
end
local mode = redis.call('HGET', KEYS[1], 'mode')
local intent = redis.call('GET', KEYS[3])
local writer_waits = intent and intent ~= ARGV[3]
if not mode then
  if writer_waits then return {0, redis.call('PTTL', KEYS[3])} end
  redis.call('HSET', KEYS[1], 'mode', 'read')
  return take()
end
if mode == 'read' and (not writer_waits or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1) then return take() end
if mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then return take() end
return {0, redis.call('PTTL', KEYS[1])}
)lua");
    return s;
  }

  /// The exclusive try. KEYS[1] lock, KEYS[2] win marker, KEYS[3] intent;
  /// ARGV[1] lease ms, ARGV[2] writer field, ARGV[3] the owner's reader
  /// field, ARGV[4] marker ms, ARGV[5] "1" when the acquire waits after a
  /// failed try (it then leaves its intent). {1} taken; {-1} refused: the
  /// owner holds it shared (an upgrade); {0, ms, 1 if it left its intent}.
  static const redis::script& write_script() {
    static const redis::script s(R"lua(
local lease = tonumber(ARGV[1])
if not lease or lease < 1 or lease > 1e12 or lease % 1 ~= 0 then
  return redis.error_reply('ERR dlock: lease out of range')
end
local function won()
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[4])
  if redis.call('GET', KEYS[3]) == ARGV[2] then redis.call('DEL', KEYS[3]) end
  return {1}
end
local mode = redis.call('HGET', KEYS[1], 'mode')
if not mode then
  redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], lease)
  return won()
end
if mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), lease))
  return won()
end
if mode == 'read' and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then return {-1} end
local ttl = redis.call('PTTL', KEYS[1])
local left = 0
if ARGV[5] == '1' then
  local intent = redis.call('GET', KEYS[3])
  if not intent or intent == ARGV[2] then
    redis.call('SET', KEYS[3], ARGV[2], 'PX', math.max(ttl, lease))
    left = 1
  end
end
return {0, ttl, left}
)lua");
    return s;
  }

  /// The shared release (with release memory). KEYS[1] lock, KEYS[2]
  /// release marker, KEYS[3] intent; ARGV[1] reader field, ARGV[2]
  /// channel, ARGV[3] marker ms, ARGV[4] "1" for a retry, ARGV[5] this
  /// reader's timeout prefix, ARGV[6] the key prefix. Ends this
  /// acquisition's timeout key; the last live reader frees the lock (the
  /// fields of readers whose leases ended go with it); while others live,
  /// the hash lives as long as their longest lease. 0 still held
  /// (re-entered), 1 released, 2 the lock was gone, 3 not this owner's.
  static const redis::script& read_release_script(bool sharded) {
    auto make = [](std::string_view verb) {
      const std::string pub = "redis.call('" + std::string(verb) + "', ARGV[2], ";
      return ext::release_memory::remembered(R"lua(
local mode = redis.call('HGET', KEYS[1], 'mode')
if not mode then
  )lua" + pub + R"lua('0')
  result = 2
elseif redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  result = 3
else
  local n = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
  if n == 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
  redis.call('DEL', ARGV[5] .. ':' .. (n + 1))
  result = n > 0 and 0 or 1
  local live = 0
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    local count = tonumber(redis.call('HGET', KEYS[1], field))
    if count then
      for i = count, 1, -1 do
        live = math.max(live, redis.call('PTTL', ARGV[6] .. ':' .. field .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if live > 0 then
    redis.call('PEXPIRE', KEYS[1], live)
  elseif mode ~= 'write' then
    redis.call('DEL', KEYS[1])
    if redis.call('EXISTS', KEYS[3]) == 1 then )lua" + pub + R"lua('1') else )lua" + pub + R"lua('0') end
  end
end
)lua", 2, 3, 4);
    };
    static const redis::script plain(make(ext::publish_verb(false))), shard(make(ext::publish_verb(true)));
    return sharded ? shard : plain;
  }

  /// The exclusive release (with release memory). KEYS[1] lock, KEYS[2]
  /// release marker; ARGV[1] writer field, ARGV[2] channel, ARGV[3] marker
  /// ms, ARGV[4] "1" for a retry, ARGV[5] lease ms. At 0 the field goes;
  /// the lock is freed, or stays shared when the owner also reads (a
  /// downgrade); either way "1" is published. Results as the shared
  /// release's.
  static const redis::script& write_release_script(bool sharded) {
    auto make = [](std::string_view verb) {
      const std::string pub = "redis.call('" + std::string(verb) + "', ARGV[2], '1')\n";
      return ext::release_memory::remembered(R"lua(
local mode = redis.call('HGET', KEYS[1], 'mode')
if not mode then
  )lua" + pub + R"lua(
  result = 2
elseif mode ~= 'write' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  result = 3
elseif redis.call('HINCRBY', KEYS[1], ARGV[1], -1) > 0 then
  redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[5]) or 1))
  result = 0
else
  redis.call('HDEL', KEYS[1], ARGV[1])
  if redis.call('HLEN', KEYS[1]) <= 1 then
    redis.call('DEL', KEYS[1])
  else
    redis.call('HSET', KEYS[1], 'mode', 'read')
  end
  )lua" + pub + R"lua(
  result = 1
end
)lua", 2, 3, 4);
    };
    static const redis::script plain(make(ext::publish_verb(false))), shard(make(ext::publish_verb(true)));
    return sharded ? shard : plain;
  }

  /// Renews holds while the hash has their fields: for each i, KEYS[i] a
  /// lock; ARGV[3i-2] lease ms, ARGV[3i-1] the field, ARGV[3i] a reader's
  /// timeout prefix ("" for a writer), whose keys 1..count get the lease
  /// again. The hash lives at least the lease. An array of 1 (renewed) or 0
  /// (gone, or not a hash) per hold.
  static const redis::script& extend_script() {
    static const redis::script s(R"lua(
local out = {}
for i = 1, #KEYS do
  local lease, field, prefix = tonumber(ARGV[3 * i - 2]), ARGV[3 * i - 1], ARGV[3 * i]
  local count = redis.pcall('HGET', KEYS[i], field)
  if type(count) == 'string' and tonumber(count) and lease and lease >= 1 and lease <= 1e12 and lease % 1 == 0 then
    if prefix ~= '' then
      for c = tonumber(count), 1, -1 do redis.call('SET', prefix .. ':' .. c, 1, 'PX', lease) end
    end
    redis.call('PEXPIRE', KEYS[i], math.max(redis.call('PTTL', KEYS[i]), lease))
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
)lua");
    return s;
  }

  /// A writer that gives up takes its intent away, and wakes the waiters
  /// if the lock is not held exclusively (readers it kept out). KEYS[1]
  /// lock, KEYS[2] intent; ARGV[1] writer field, ARGV[2] channel. 1 if it
  /// took its intent away, else 0.
  static const redis::script& withdraw_script(bool sharded) {
    auto make = [](std::string_view verb) {
      return std::string(R"lua(
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
if redis.call('HGET', KEYS[1], 'mode') ~= 'write' then redis.call(')lua") + std::string(verb) + R"lua(', ARGV[2], '1') end
return 1
)lua";
    };
    static const redis::script plain(make(ext::publish_verb(false))), shard(make(ext::publish_verb(true)));
    return sharded ? shard : plain;
  }

  /// One try, shared or exclusive as the record says (rec.shared). Won: the
  /// lease counts from the send. Lost: held_for is the holder's time left.
  /// An exclusive try by an owner that holds the lock shared ends with
  /// already_held.
  template <class B>
  asio::awaitable<std::pair<error_code, attempt>> try_acquire(B& backend, record& rec) const {
    const auto sent = ext::steady::now();
    std::vector<std::string> keys{rec.name, ext::release_memory::acquire_key(rec), intent_key(rec.name)};
    std::vector<std::string> args{std::to_string(rec.lease.count()), rec.owner, other_field(rec), release_memory.ttl(),
                                  rec.shared ? timeout_prefix(rec.name, rec.owner) : (rec.may_wait && writer_intent ? "1" : "0")};
    const auto& script = rec.shared ? read_script() : write_script();
    auto [ec, v] = co_await ext::acknowledged_eval(backend, rec.acks, script, std::move(keys), std::move(args));
    ext::note(rec, ec, v);
    if (ec) co_return std::pair{ec, attempt{}};
    const auto n = v.type == redis::kind::array ? v.elements.size() : 0;
    auto verdict = n >= 1 ? ext::integer_of(v.elements[0]) : std::nullopt;
    if (verdict == 1 && n == 1) {
      rec.state.intent = false;
      rec.confirm(sent);
      co_return std::pair{error_code{}, attempt{true, std::nullopt}};
    }
    if (verdict == -1 && n == 1 && !rec.shared) {
      rec.server_reply = ext::own_words("this owner holds the lock shared; an upgrade would wait for itself");
      co_return std::pair{error_code(error::already_held), attempt{}};
    }
    auto left = n >= 2 ? ext::integer_of(v.elements[1]) : std::nullopt;
    if (verdict != 0 || !left || n != (rec.shared ? 2u : 3u)) co_return std::pair{error_code(error::unexpected_reply), attempt{}};
    if (!rec.shared && v.elements[2].type == redis::kind::integer && v.elements[2].integer == 1) rec.state.intent = true;
    co_return std::pair{error_code{}, attempt{false, milliseconds(*left == -2 ? 0 : *left)}};
  }

  /// The shared or exclusive release: still_held, released, lease_lost (the
  /// lock was gone) or not_owner.
  template <class B>
  asio::awaitable<std::pair<error_code, release_outcome>> release(B& backend, record& rec) const {
    std::vector<std::string> keys{rec.name, ext::release_memory::key(rec)};
    std::vector<std::string> args{rec.owner, ext::release_channel<ReadWrite>(backend, rec.name), release_memory.ttl(),
                                  ext::release_memory::retry_flag(rec)};
    const bool sharded = ext::sharded_pubsub(backend);
    if (rec.shared) {
      keys.push_back(intent_key(rec.name));
      args.push_back(timeout_prefix(rec.name, rec.owner));
      args.push_back(key_prefix(rec.name));
    } else {
      args.push_back(std::to_string(rec.lease.count()));
    }
    const auto& script = rec.shared ? read_release_script(sharded) : write_release_script(sharded);
    auto [ec, v] = co_await ext::eval(backend, script, std::move(keys), std::move(args));
    ext::note(rec, ec, v);
    co_return ext::counted_release(ec, v);
  }

  /// The acquire ends without the lock: a writer that left its intent takes
  /// it away (withdraw_script). If that fails, the intent expires on its
  /// own (keeping new readers out until then): only time is lost.
  template <class B>
  asio::awaitable<error_code> withdraw(B& backend, record& rec) const {
    if (rec.shared || !rec.state.intent) co_return error_code{};
    std::vector<std::string> keys{rec.name, intent_key(rec.name)};
    std::vector<std::string> args{rec.owner, ext::release_channel<ReadWrite>(backend, rec.name)};
    auto [ec, v] = co_await ext::eval(backend, withdraw_script(ext::sharded_pubsub(backend)), std::move(keys),
                                      std::move(args));
    if (!ec && !ext::integer_of(v)) ec = error::unexpected_reply;
    if (!ec) rec.state.intent = false;
    co_return ec;
  }

  /// Whether a try whose reply was lost won: its marker is there and the
  /// hash still has this owner's field.
  template <class B>
  asio::awaitable<std::pair<error_code, bool>> resolve(B& backend, const ext::hold_record& rec) const {
    redis::request req;
    req.push("EXISTS", ext::release_memory::acquire_key(rec)).push("HEXISTS", rec.name, rec.owner);
    auto [ec, r] = co_await ext::exec(backend, rec.name, std::move(req));
    if (ec) co_return std::pair{ec, false};
    if (r.size() != 2) co_return std::pair{error_code(error::unexpected_reply), false};
    if (r[1].is_error()) co_return std::pair{error_code{}, false};  // not a hash: not ours
    auto marker = ext::integer_of(r[0]), field = ext::integer_of(r[1]);
    if (!marker || !field) co_return std::pair{error_code(error::unexpected_reply), false};
    co_return std::pair{error_code{}, *marker == 1 && *field == 1};
  }

  /// One hold's extend reply: the one-element array extend_script() gives.
  static renewal_verdict read_extend(const redis::value& v) {
    if (v.type != redis::kind::array || v.elements.size() != 1) return renewal_verdict::no_verdict;
    return ext::read_extend_reply(v.elements[0]);
  }

  /// The watchdog's renewal of this hold.
  script_call extend_call(const ext::hold_record& rec) const {
    return {&extend_script(),
            {rec.name},
            {std::to_string(rec.lease.count()), rec.owner, rec.shared ? timeout_prefix(rec.name, rec.owner) : ""}};
  }

  /// Several holds' extend_call()s as one call (the script takes any number).
  static script_call extend_batch(const std::vector<const script_call*>& calls) {
    return ext::merged_call(extend_script(), calls);
  }
};

}  // namespace dlock::ownership
