// How a lock's release and hand-off messages travel on a backend: classic
// pub/sub (PUBLISH, SUBSCRIBE: on a cluster, every node gets every message)
// or Redis 7's sharded pub/sub (SPUBLISH, SSUBSCRIBE: a message stays on
// the shard that owns its channel's slot), and on which channel.
#pragma once

#include <concepts>
#include <string>
#include <string_view>

#include <dlock/detail/key_slot.hpp>

namespace dlock::detail {

/// Whether `backend` carries a lock's messages on sharded pub/sub: its
/// `sharded_pubsub()` member (ClusterBackend's and RedisBackend's say what
/// their settings say: true on ClusterBackend, false on RedisBackend unless
/// told otherwise); a backend without one uses classic pub/sub.
template <class B>
bool sharded_pubsub(const B& backend) {
  if constexpr (requires { { backend.sharded_pubsub() } -> std::convertible_to<bool>; })
    return static_cast<bool>(backend.sharded_pubsub());
  else return false;
}

/// The command a script publishes with: SPUBLISH or PUBLISH.
constexpr std::string_view publish_verb(bool sharded) { return sharded ? "SPUBLISH" : "PUBLISH"; }

/// Whether a script can count a release channel's subscribers (PUBSUB
/// NUMSUB, or SHARDNUMSUB on sharded pub/sub) on the node it runs on: true
/// on one server and on Sentinel's master; on a cluster only with sharded
/// pub/sub, where a shard channel's subscribers are all on its slot's
/// node. With classic pub/sub on a cluster, every node counts only its own
/// subscribers. The backend's `counts_subscribers()` member says so (a
/// RedisBackend's: true); without one, a backend that has a
/// `sharded_pubsub()` member is taken for a cluster, and one that has
/// neither for one server.
template <class B>
bool counts_subscribers(const B& backend) {
  if constexpr (requires { { backend.counts_subscribers() } -> std::convertible_to<bool>; })
    return static_cast<bool>(backend.counts_subscribers());
  else if constexpr (requires { { backend.sharded_pubsub() } -> std::convertible_to<bool>; })
    return static_cast<bool>(backend.sharded_pubsub());
  else return true;
}

/// The suffix of a release channel's presence channel, to which every dlock
/// client that waits on the channel subscribes too (before the channel
/// itself is left, after it is joined): the channel's subscribers less the
/// presence channel's are the listeners that are not dlock's (Redisson's
/// waiters), the only ones a named wake must still publish "00" for.
inline constexpr std::string_view presence_suffix = ":dlock";

/// The channel where ownership `O`'s releases publish on `backend`:
/// `O::channel(name)`, except on sharded pub/sub when that channel lies in
/// another cluster slot than the lock. A shard channel lives in the slot
/// of its name, and a script may publish only in its keys' slot (a node
/// accepts an SPUBLISH to another of its own slots, which breaks once that
/// slot moves), so there the channel is the lock's own: "<name>:<channel>"
/// in the lock's slot. Only names with braces get there (Redisson's
/// "redisson_lock__channel:{a{b}c}" hashes "a{b", not the lock's "b").
/// A channel there also needs a hash tag of its own (a name such as "}x"
/// leaves Redisson's channel without one): the channels that are its name
/// plus a suffix (a client's own channel, the presence channel) then stay
/// in its slot.
template <class O, class B>
std::string release_channel(const B& backend, std::string_view name) {
  std::string channel = O::channel(name);
  if (sharded_pubsub(backend) && !channel.empty() &&
      (key_slot(channel) != key_slot(name) || hashed_part(channel).size() == channel.size()))
    return same_slot_key(name, channel);
  return channel;
}

}  // namespace dlock::detail
