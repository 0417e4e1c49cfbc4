// ownership::ReadWrite's scripts: Redisson's RReadWriteLock layout, with
// dlock's writer intent and lapsed readers (see read_write.hpp).
#pragma once

#include <string>
#include <string_view>

#include <dlock/ext.hpp>

namespace dlock::ownership {

/// The Lua of ownership::ReadWrite, each script with its keys, arguments
/// and replies (the ownership's own documentation says what they do
/// together).
struct ReadWriteScripts {
  /// Lua shared by the tries: `mine(field, prefix)`, this owner's live
  /// read count, or false. A reader field whose newest lease key has
  /// expired is a lapsed hold's (a pause past the lease, a crash): it is
  /// dropped here, with its keys, and the lock with it if nothing else is
  /// left, so that it neither passes for a re-entry nor keeps the lock.
  static constexpr const char* lapsed_lua = R"lua(
local function mine(field, prefix)
  local count = tonumber(redis.call('HGET', KEYS[1], field))
  if not count then return false end
  if redis.call('EXISTS', prefix .. ':' .. count) == 1 then return count end
  redis.call('HDEL', KEYS[1], field)
  for i = 1, count do redis.call('DEL', prefix .. ':' .. i) end
  if redis.call('HLEN', KEYS[1]) <= 1 then redis.call('DEL', KEYS[1]) end
  return false
end
)lua";

  /// Lua shared by the tries and fence_script, after ext::fence_lua:
  /// `arguments(idle_at)`, the lease ARGV[1] and the fence counter's idle
  /// ms ARGV[idle_at] ("0": no fencing), checked before anything is
  /// written (nil for a bad one); `writer_token(key, idle)`, a writer's
  /// token: the counter as it is (nobody else can take a token while it
  /// writes), kept `idle` longer so that it outlives a long write; a fresh
  /// one if the counter is gone.
  static constexpr const char* arguments_lua = R"lua(
local function arguments(idle_at)
  local lease, idle = tonumber(ARGV[1]), tonumber(ARGV[idle_at] or '0')
  if not lease or lease < 1 or lease > 1e12 or lease % 1 ~= 0 or not idle or idle < 0 or idle > 1e12
     or idle % 1 ~= 0 then
    return nil
  end
  return lease, idle
end
local function writer_token(key, idle)
  local counter = tonumber(redis.call('GET', key))
  if not counter then return next_fence(key, idle) end
  redis.call('PEXPIRE', key, idle)
  return counter
end
)lua";

  /// The three Lua parts every try starts with.
  static std::string try_lua() { return std::string(ext::fence_lua) + arguments_lua + lapsed_lua; }

  /// The shared try. KEYS[1] lock, KEYS[2] win marker, KEYS[3] intent,
  /// KEYS[4] fence counter; ARGV[1] lease ms, ARGV[2] reader field, ARGV[3]
  /// the owner's writer field, ARGV[4] marker ms, ARGV[5] this reader's
  /// timeout prefix, ARGV[6] the counter's idle ms ("0": no fencing).
  /// Every lease key of this owner gets the new lease (the hold is trusted
  /// for the newest). {1} taken without fencing, or a reader's re-entry
  /// (readers take tokens meanwhile, so it cannot tell its first's); {1,
  /// token} with fencing: a first read's next token, or any read of an
  /// owner that holds the write (a downgrade) its writer_token; {0, ms}
  /// refused, ms the holder's
  /// time left, or the intent's when a waiting writer is what refuses it.
  static const redis::script& read_script() {
    static const redis::script s(try_lua() + R"lua(
local lease, idle = arguments(6)
if not lease then return redis.error_reply('ERR dlock: lease or fencing idle time out of range') end
local held = mine(ARGV[2], ARGV[5])
local mode = redis.call('HGET', KEYS[1], 'mode')
local writes = mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1
local function take()
  local n = redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  for i = 1, n do redis.call('SET', ARGV[5] .. ':' .. i, 1, 'PX', lease) end
  redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), lease))
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[4])
  if idle == 0 then return {1} end
  if writes then return {1, writer_token(KEYS[4], idle)} end
  if n > 1 then return {1} end
  return {1, next_fence(KEYS[4], idle)}
end
local intent = redis.call('GET', KEYS[3])
if intent and intent ~= ARGV[3] and not held and not writes then return {0, redis.call('PTTL', KEYS[3])} end
if not mode then
  redis.call('HSET', KEYS[1], 'mode', 'read')
  return take()
end
if mode == 'read' or writes then return take() end
return {0, redis.call('PTTL', KEYS[1])}
)lua");
    return s;
  }

  /// The exclusive try. KEYS[1] lock, KEYS[2] win marker, KEYS[3] intent,
  /// KEYS[4] fence counter; ARGV[1] lease ms, ARGV[2] writer field, ARGV[3]
  /// the owner's reader field, ARGV[4] marker ms, ARGV[5] "1" when the
  /// acquire waits after a failed try (it then leaves its intent, for the
  /// holder's time left and one lease more), ARGV[6] the owner's reader
  /// timeout prefix, ARGV[7] the counter's idle ms ("0": no fencing). {1}
  /// taken without fencing; {1, token} with fencing: a first write's next
  /// token, a re-entry's writer_token (its first's); {-1} refused: the owner holds it shared (an upgrade); {0, ms,
  /// 1 if it left its intent}.
  static const redis::script& write_script() {
    static const redis::script s(try_lua() + R"lua(
local lease, idle = arguments(7)
if not lease then return redis.error_reply('ERR dlock: lease or fencing idle time out of range') end
local function won(first)
  redis.call('SET', KEYS[2], 1, 'PX', ARGV[4])
  if redis.call('GET', KEYS[3]) == ARGV[2] then redis.call('DEL', KEYS[3]) end
  if idle == 0 then return {1} end
  if first then return {1, next_fence(KEYS[4], idle)} end
  return {1, writer_token(KEYS[4], idle)}
end
if mine(ARGV[3], ARGV[6]) then return {-1} end
local mode = redis.call('HGET', KEYS[1], 'mode')
if not mode then
  redis.call('HSET', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], lease)
  return won(true)
end
if mode == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], math.max(redis.call('PTTL', KEYS[1]), lease))
  return won(false)
end
local ttl = redis.call('PTTL', KEYS[1])
local left = 0
if ARGV[5] == '1' then
  local intent = redis.call('GET', KEYS[3])
  if not intent or intent == ARGV[2] then
    redis.call('SET', KEYS[3], ARGV[2], 'PX', math.max(ttl, 0) + lease)
    left = 1
  end
end
return {0, ttl, left}
)lua");
    return s;
  }

  /// Takes a fencing token for a hold that won without one (fence_call).
  /// KEYS[1] lock, KEYS[2] fence counter; ARGV[1] the hold's field,
  /// ARGV[2] counter idle ms, ARGV[3] the owner's writer field. 0 if the
  /// hash does not have the field; the writer_token while the owner holds
  /// the write (its reads included: they carry the write's token); else
  /// the next token.
  static const redis::script& fence_script() {
    static const redis::script s(std::string(ext::fence_lua) + arguments_lua + R"lua(
local idle = tonumber(ARGV[2])
if not idle or idle < 1 or idle > 1e12 or idle % 1 ~= 0 then
  return redis.error_reply('ERR dlock: fencing idle time out of range')
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[1], 'mode') == 'write' and redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then
  return writer_token(KEYS[2], idle)
end
return next_fence(KEYS[2], idle)
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
  local live = 0  -- the longest lease key left, any reader's
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    local count = tonumber(redis.call('HGET', KEYS[1], field))
    if count then
      for i = count, 1, -1 do
        live = math.max(live, redis.call('PTTL', ARGV[6] .. ':' .. field .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if live > 0 then
    if mode == 'read' then redis.call('PEXPIRE', KEYS[1], live) end
  elseif mode ~= 'write' then
    redis.call('DEL', KEYS[1])
    if redis.call('EXISTS', KEYS[3]) == 1 then )lua" + pub + R"lua('1') else )lua" + pub + R"lua('0') end
    if n > 0 then result = 2 end  -- this owner's other reads had lapsed too
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
};

}  // namespace dlock::ownership
