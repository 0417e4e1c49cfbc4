// The extension API: what a policy written outside dlock uses, under names
// that stay put (dlock::detail is dlock's own and may move). See
// docs/writing-a-policy.md.
#pragma once

#include <dlock/concepts.hpp>
#include <dlock/detail/background.hpp>
#include <dlock/detail/commands.hpp>
#include <dlock/detail/fencing.hpp>
#include <dlock/detail/hold_record.hpp>
#include <dlock/detail/key_slot.hpp>
#include <dlock/detail/named_wake.hpp>
#include <dlock/detail/owner_gate.hpp>
#include <dlock/detail/publishing.hpp>
#include <dlock/detail/quorum.hpp>
#include <dlock/detail/random.hpp>
#include <dlock/detail/release_memory.hpp>
#include <dlock/detail/sleep.hpp>
#include <dlock/detail/through_function.hpp>
#include <dlock/keepers.hpp>

namespace dlock::ext {

/// The clock of leases, deadlines and renewals.
using steady = detail::steady;
/// What the lock knows about one hold: the key, the owner, the lease, the
/// ids of the release and the try being sent (see detail::hold_record).
using hold_record = detail::hold_record;
/// A hold record with an ownership's own per-hold state, `state`.
template <class State>
using hold_record_with = detail::hold_record_with<State>;
/// The record the host makes for ownership `O` (with `O::hold_state`, if
/// it names one): what O's operations and a waiter's hooks receive.
template <class O>
using record_of = detail::record_t<O>;
/// A lock object's work that outlives a call (a waiter's retried leave):
/// spawn(executor, task, what), report(ec, what).
using background = detail::background_work;
/// A release that remembers its result for a retry (a marker key).
using release_memory = detail::release_memory;

// Checking a policy's numbers (error codes, nothing thrown).
using detail::validate_lease;     ///< invalid_lease unless 0 < lease <= max_lease and the margin leaves some
using detail::validate_positive;  ///< the given error unless the duration is above zero

// Talking to Redis from a policy's coroutine: never cut short by a
// cancellation, on the calling thread's blocking connection when the call
// is a blocking one.
using detail::command;  ///< one command, its reply (an error reply is server_error)
using detail::eval;     ///< one script by SHA, NOSCRIPT handled
using detail::exec;     ///< a pipeline, one reply per command
// A write that takes a lock: with WAIT behind it when the backend
// acknowledges writes, what the replicas acknowledged in `acks`.
using detail::acknowledged_eval;  ///< acknowledged_eval(backend, acks, script, keys, args): a script, as eval
using detail::acknowledged_exec;  ///< acknowledged_exec(backend, key, acks, request): a pipeline, routed by key
// Keeping the server's words of a server_error for the lock's message.
using detail::note;               ///< note(rec, ec, reply): after a command or script
using detail::refused;            ///< refused(rec, reply): one error reply of a pipeline, as server_error
using detail::words_for;          ///< words_for(ec, words): the words when ec is server_error, else ""
using detail::with_server_reply;  ///< with_server_reply(what, words): "what (Redis replied: words)", cut at 512 bytes
using detail::own_words;          ///< own_words(text): words of dlock's own for an error (with_server_reply: "what (text)")

// Shared holds (an ownership that `shares`, ReadWrite).
using detail::shared_key_prefix;  ///< how the lock's key of a shared hold starts ("shared:", then the owner's key)
using detail::shares;             ///< shares<O>(): whether O has shared holds (Lock then offers SharedInterface)

// Keys: where a key lives on a cluster, and companions in the lock's slot.
using detail::key_slot;       ///< the cluster slot of a key (0 to 16383), hash tags honoured
using detail::same_slot_key;  ///< same_slot_key(name, suffix): "<name-or-tag>:<suffix>" in name's slot

// Ids. Owner tokens must be unguessable: random_hex(16) is 128 bits from a
// CSPRNG keyed by the OS (re-keyed after fork). unique_id() is unique but
// guessable: for names of short-lived marker keys only.
using detail::random_hex;  ///< random_hex(bytes): that many random bytes as hex, for owner tokens
using detail::unique_id;   ///< a process-unique id: for marker keys, never for tokens

// Fencing tokens (see dlock::fencing_tokens).
using detail::fence_arg;  ///< a fencing setting as a script argument: its idle ms, "0" when off
using detail::fence_key;  ///< the counter's key, in the lock's slot
using detail::fence_lua;  ///< Lua defining next_fence(key, idle_ms), to prepend to a script
using detail::fence_of;   ///< a token in a reply: a positive integer, else nullopt
using detail::field_fence_script;  ///< fence_call's script where each holder is a field of the lock's hash

// Publishing from a script the way the backend's waiters listen.
using detail::publish_verb;     ///< "SPUBLISH" on sharded pub/sub, else "PUBLISH"
using detail::counts_subscribers;  ///< whether a script on B can count a release channel's subscribers
using detail::presence_suffix;  ///< the suffix of a release channel's presence channel (dlock's waiting clients)
using detail::release_channel;  ///< O's channel on B, in the lock's slot on sharded pub/sub
using detail::sharded_pubsub;   ///< whether backend B listens on shard channels

// Reading replies strictly.
using detail::cannot_resolve;     ///< for an ownership that cannot tell whether a lost try won
using detail::deleted;            ///< a DEL-like reply (1 released, 0 not ours) as a release's outcome
using detail::counted_release;    ///< a counting release's reply (0 still held, 1 released, 2 gone, 3 another's) as its outcome
using detail::retried_release;    ///< a compare-and-delete release's outcome, a retry read from the key (Token, Queue)
using detail::integer_of;         ///< the integer a reply carries, or nullopt
using detail::may_have_run;       ///< whether a failed command may have run
using detail::read_extend_reply;  ///< an extend script's usual reply: 1 renewed, 0 gone
using detail::read_extend_replies;  ///< a batch extend script's usual reply: an array of those, one per hold

// Renewing in batches.
using detail::merged_call;  ///< several extend_calls as one call of a batch script (keys, then arguments, in order)
using detail::extend_reader;    ///< extend_reader<O>(): how O's extend reply reads (its read_extend, or the usual one)
using detail::extend_batching;  ///< extend_batching<O>(): O's merger and batch reader (merge null when it has none)

// Quorums over independent servers (see ownership::Quorum, RedlockBackend).
using detail::adapted_t;        ///< adapted_t<B, O>: what the host runs for O on B (B's ownership_for<O>, else O)
using detail::fan_in;           ///< fan_in<T>(executor, n, done): one result per node, from any thread, gathered with a deadline
using detail::majority_of;      ///< majority_of(n): n / 2 + 1
using detail::on_each_node;     ///< on_each_node<T>(executor, n, deadline, make): make(i) on every node at once, gathered
/// Coroutines that take turns, first come first served (an owner's tries
/// and releases; a quorum node's operations for one hold): `co_await
/// t.enter()`, then a `turn_pass` ends the turn at the end of its scope.
/// Each caller runs on a strand.
using turns = detail::owner_gate;
using turn_pass = detail::gate_pass;  ///< ends a turn of `turns` at the end of its scope
using detail::quorum_backend;   ///< a backend that offers nodes (node_count, node, node_name, node_available, reply_timeout)

// Waiting.
using detail::sleep_until;  ///< a cancellable sleep until a steady time point
// Named wake-ups: a pub/sub waiter's number in its lock's line, which the
// release reads to wake one waiter across all clients (wait::PubSub).
using detail::names_waiters;  ///< whether ownership O names the waiter its release wakes (hold_state named_waiter)
using detail::named_waiter;   ///< the hold_state of an ownership whose release names the waiter it wakes
using detail::read_wake;      ///< what a release message asks: wake_kind
using detail::wake_kind;      ///< one_per_client ("0"), named (a waiter number), none
using detail::waiter_number;  ///< a random waiter number (decimal; a Java long, never 0 or 1)

// Writing a backend.
using detail::initiate_through_function;  ///< an Asio operation completed through a std::function callback
using redis::detail::call_results;         ///< a batch's replies (or its one error) as one call_result per call

}  // namespace dlock::ext
