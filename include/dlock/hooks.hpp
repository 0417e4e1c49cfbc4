// The hooks a policy may give beyond its family's contract: a waiter's hooks
// around each try, the hand-off between a queueing ownership and its wait,
// and an ownership's optional operations. Each is called only when it
// matches its contract, and a member of a hook's name that does not match
// is a compile error (policy_checks.hpp), never a silently skipped hook.
#pragma once

#include <concepts>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <dlock/concepts.hpp>

namespace dlock {

// ---- Waiter hooks, and the hand-off -------------------------------------------
//
// Around each try the host calls a waiter's hooks, if it has them (the
// defaults do nothing; detail::wait_steps calls them). Each hook gets the
// lock's ownership and the hold's record (detail::record_t<O>):
// - `before_try(o, rec, deadline)` -> awaitable<void>: before each try;
// - `granted(o, rec)` -> bool: after a wait, whether the lock was handed to
//   this waiter (it then confirms the lease; the host completes the acquire
//   without a command);
// - `after_try(o, rec_ptr, attempt)`: what a try found;
// - `leave(o, rec_ptr, background)` -> awaitable<bool>: the acquire ends
//   without the lock (inside the owner's gate); true when the lock is held
//   after all. Work that must outlive the operation (a retried leave) is
//   spawned on `background`, which the lock object waits for;
// - `done()`: the acquire is over;
// - `server_reply() const` -> a string: after `prepare()` or `wait()` failed
//   with server_error, the server's words (PubSub and HandOff: a refused
//   SUBSCRIBE), for the lock's error message.
// A waiter that hands off (`W::hands_off`) must have them all but
// `server_reply`. A hook is found by its name: a member of a hook's name
// whose signature does not match the one above does not compile (Lock says
// which hook and what it expects), since a hook the host cannot call would
// be skipped silently (a hand-off turned into a spin by a typo).
//
// The hand-off: an ownership that `queues` keeps a line of waiters and its
// release grants the lock to the first live one (ownership::Queue); a wait
// that `hands_off` completes on that grant (wait::HandOff). A queueing
// ownership gives `leave(backend, rec)` (leaves the line; true when a grant
// came first and the lock is held) and `refresh_call(name, waiters)`, one
// script that refreshes the entries of several waiters of one lock
// (detail::queue_refresher batches them), with `read_refresh(reply, n)`,
// which reads that script's reply as one renewal_verdict per waiter.
// Optionally, any ownership may give
// - `static earliest_start(rec, sent)` -> steady::time_point: when the
//   lease of a try found won by resolve() can have begun at the earliest
//   (default: when the try was sent);
// - `static read_extend(reply)` -> renewal_verdict: how its extend script's
//   reply reads (default: read_extend_reply);
// - `static extend_batch(calls)` -> script_call: several holds' extend_calls
//   (a std::vector<const script_call*>, each made by extend_call, all with
//   one script and keys the backend lets one script name) as one script
//   call, so the watchdog renews a batch of holds with one call; with
//   `static read_extend_batch(reply, n)` -> std::vector<renewal_verdict>,
//   one verdict per call merged (default: read_extend_replies). A hold
//   whose key is gone or wrong must cost no other hold its verdict;
// - `fencing` (std::optional<fencing_tokens>) with `fence_call(rec)` ->
//   script_call: fencing tokens (see detail::fencing_ownership);
// - `static constexpr bool admits_many`: true when several holds may exist
//   at once (ownership::Semaphore, ReadWrite); a quorum refuses it (see
//   quorum_rules);
// - `static constexpr bool shares`: shared holds besides exclusive ones
//   (ReadWrite): Lock gains SharedInterface, and a shared hold's record
//   has `shared` set;
// - `withdraw(backend, record&)` -> awaitable<error_code>: called when an
//   acquire that made tries ends without the lock, with the record of its
//   last try (a fresh hold's, or a held one's for a re-entry), to undo what
//   its failed tries left in Redis for the waiter (a writer's intent); its
//   error goes to the lock's error handler.
// As with a waiter's hooks, a member of one of these names that does not
// match does not compile, and neither does a `leave`, `refresh_call` or
// `read_refresh` on an ownership that does not say `queues`.

namespace contract {

/// An ownership's own earliest_start (see above).
template <class O>
concept ownership_earliest_start = requires(const detail::record_t<O>& rec, detail::steady::time_point sent) {
  { O::earliest_start(rec, sent) } -> std::same_as<detail::steady::time_point>;
};

}  // namespace contract

namespace detail {

class background_work;

template <class O>
constexpr bool queues() {
  if constexpr (requires { O::queues; }) return static_cast<bool>(O::queues);
  else return false;
}

/// Whether ownership O lets several holds exist at once (`O::admits_many`).
template <class O>
constexpr bool admits_many() {
  if constexpr (requires { O::admits_many; }) return static_cast<bool>(O::admits_many);
  else return false;
}

/// Whether one script may name keys of different cluster slots on backend
/// B: `B::cross_slot_scripts` (true for one server, where every key is in
/// one keyspace), else false (a key-routed backend sends a script to the
/// server of its first key's slot, so its keys must share that slot).
/// Whether ownership O has shared holds besides exclusive ones (`O::shares`,
/// ownership::ReadWrite): Lock then offers SharedInterface.
template <class O>
constexpr bool shares() {
  if constexpr (requires { O::shares; }) return static_cast<bool>(O::shares);
  else return false;
}

/// An ownership's `withdraw(backend, record&)`: after an acquire ends
/// without the lock, it undoes what its failed tries left for this waiter
/// in Redis (ReadWrite: a writer's intent).
template <class O, class B>
concept ownership_withdraw = requires(const O& o, B& b, record_t<O>& rec) {
  { o.withdraw(b, rec) } -> std::same_as<asio::awaitable<error_code>>;
};

template <class B>
constexpr bool cross_slot_scripts() {
  if constexpr (requires { B::cross_slot_scripts; }) return static_cast<bool>(B::cross_slot_scripts);
  else return false;
}

template <class W>
constexpr bool hands_off() {
  if constexpr (requires { W::hands_off; }) return static_cast<bool>(W::hands_off);
  else return false;
}

/// The usual reading of an extend script's reply: 1 extended, 0 gone;
/// anything else (a status, an error, another number) no verdict.
inline renewal_verdict read_extend_reply(const redis::value& v) {
  if (v.type != redis::kind::integer) return renewal_verdict::no_verdict;
  if (v.integer == 1) return renewal_verdict::renewed;
  if (v.integer == 0) return renewal_verdict::gone;
  return renewal_verdict::no_verdict;
}

/// O's reader of its extend replies: its own `read_extend`, or the usual one.
template <class O>
constexpr renewal_reader extend_reader() {
  if constexpr (contract::ownership_reads_extend<O>) return &O::read_extend;
  else return &read_extend_reply;
}

/// The usual reading of a batch extend script's reply: an array of `n`
/// usual replies (read_extend_reply), one per hold in the order merged.
/// Any other shape is no verdict for all of them.
inline std::vector<renewal_verdict> read_extend_replies(const redis::value& v, std::size_t n) {
  std::vector<renewal_verdict> out(n, renewal_verdict::no_verdict);
  if (v.type != redis::kind::array || v.elements.size() != n) return out;
  for (std::size_t i = 0; i < n; ++i) out[i] = read_extend_reply(v.elements[i]);
  return out;
}

/// How an ownership's renewals merge into batches: its `extend_batch` and
/// the reader of that call's reply.
struct renewal_batching {
  renewal_merger merge = nullptr;
  renewal_batch_reader read = nullptr;
};

/// O's batching, or an empty one (merge null: each hold its own call).
template <class O>
constexpr renewal_batching extend_batching() {
  if constexpr (contract::ownership_extend_batch<O>) {
    if constexpr (contract::ownership_reads_extend_batch<O>) return {&O::extend_batch, &O::read_extend_batch};
    else return {&O::extend_batch, &read_extend_replies};
  } else {
    return {};
  }
}

/// One script call with the keys and arguments of `calls` in order, each
/// call's keys then its arguments appended: what an `extend_batch` of an
/// ownership whose extend_call has one key and a fixed number of arguments
/// sends to its batch script (KEYS[i] the i-th hold's key; its arguments at
/// ARGV[(i-1)*k+1 .. i*k], k the number each call has).
inline script_call merged_call(const redis::script& batch_script, const std::vector<const script_call*>& calls) {
  script_call out{&batch_script, {}, {}};
  out.keys.reserve(calls.size());
  for (auto* c : calls) {
    out.keys.insert(out.keys.end(), c->keys.begin(), c->keys.end());
    out.args.insert(out.args.end(), c->args.begin(), c->args.end());
  }
  return out;
}

/// When the lease of a try found won by resolve() can have begun: O's own
/// `earliest_start`, or the try's send time.
template <class O>
steady::time_point earliest_start(const record_t<O>& rec, steady::time_point sent) {
  if constexpr (contract::ownership_earliest_start<O>)
    return O::earliest_start(rec, sent);
  else return sent;
}

}  // namespace detail

namespace contract {

template <class W, class B, class O>
concept waiter_before_try = requires(typename W::template waiter<B>& w, const O& o, detail::record_t<O>& rec,
                                     detail::steady::time_point deadline) {
  { w.before_try(o, rec, deadline) } -> std::same_as<asio::awaitable<void>>;
};
template <class W, class B, class O>
concept waiter_granted = requires(typename W::template waiter<B>& w, const O& o, detail::record_t<O>& rec) {
  { w.granted(o, rec) } -> std::convertible_to<bool>;
};
template <class W, class B, class O>
concept waiter_after_try = requires(typename W::template waiter<B>& w, const O& o,
                                    const std::shared_ptr<detail::record_t<O>>& rec, const attempt& at) {
  w.after_try(o, rec, at);
};
template <class W, class B, class O>
concept waiter_leave = requires(typename W::template waiter<B>& w, const O& o,
                                const std::shared_ptr<detail::record_t<O>>& rec, detail::background_work& bg) {
  { w.leave(o, rec, bg) } -> std::same_as<asio::awaitable<bool>>;
};
template <class W, class B>
concept waiter_done = requires(typename W::template waiter<B>& w) { w.done(); };
template <class W, class B>
concept waiter_server_reply = requires(const typename W::template waiter<B>& w) {
  { w.server_reply() } -> std::convertible_to<std::string_view>;
};

/// A waiter the lock is handed to has every hook.
template <class W, class B, class O>
concept wait_hand_off = waiter_before_try<W, B, O> && waiter_granted<W, B, O> && waiter_after_try<W, B, O> &&
                        waiter_leave<W, B, O> && waiter_done<W, B>;
template <class O, class B>
concept ownership_leave = requires(const O& o, B& b, detail::record_t<O>& rec) {
  { o.leave(b, rec) } -> std::same_as<asio::awaitable<std::pair<error_code, bool>>>;
};
/// An ownership that names waiters (hold_state named_waiter) takes a
/// waiter's number out of its line when the waiter gives up.
template <class O, class B>
concept ownership_forget_waiter = requires(const O& o, B& b, const detail::record_t<O>& rec, bool owed) {
  { o.forget_waiter(b, rec, owed) } -> std::same_as<asio::awaitable<error_code>>;
};
template <class O>
concept ownership_refresh = requires(const std::string& name,
                                     const std::vector<std::pair<std::string, milliseconds>>& waiters,
                                     const redis::value& reply) {
  { O::refresh_call(name, waiters) } -> std::same_as<script_call>;
  { O::read_refresh(reply, waiters.size()) } -> std::same_as<std::vector<renewal_verdict>>;
};

}  // namespace contract

namespace detail {

/// An ownership that can hand out fencing tokens: a `fencing` setting
/// (std::optional<fencing_tokens>) and `fence_call(rec)`, the owner-checked
/// script that takes the next token for a hold that won without one.
template <class O>
concept fencing_ownership = requires(const O& o, const hold_record& rec) {
  { o.fencing.has_value() } -> std::convertible_to<bool>;
  { o.fence_call(rec) } -> std::same_as<script_call>;
};

}  // namespace detail

// ---- Finding a hook by its name ---------------------------------------------
//
// Whether a class has a member of a hook's name, whatever its kind or
// signature (a function, an overload set, a template, a data member): a
// class derived from it and from a probe that has a member of that name
// finds the name ambiguous exactly when the class has one too. (A final
// class cannot be derived from: there only a single, non-template member
// function or a data member is found.)
namespace detail::hook_names {

template <class T, class Probe>
struct both : T, Probe {};
template <class T>
concept derivable = std::is_class_v<T> && !std::is_final_v<T>;

struct before_try_probe { void before_try(); };
template <class T>
concept has_before_try = (derivable<T> && !requires { &both<T, before_try_probe>::before_try; }) ||
    (!derivable<T> && requires { &T::before_try; });
struct granted_probe { void granted(); };
template <class T>
concept has_granted = (derivable<T> && !requires { &both<T, granted_probe>::granted; }) ||
    (!derivable<T> && requires { &T::granted; });
struct after_try_probe { void after_try(); };
template <class T>
concept has_after_try = (derivable<T> && !requires { &both<T, after_try_probe>::after_try; }) ||
    (!derivable<T> && requires { &T::after_try; });
struct leave_probe { void leave(); };
template <class T>
concept has_leave = (derivable<T> && !requires { &both<T, leave_probe>::leave; }) ||
    (!derivable<T> && requires { &T::leave; });
struct done_probe { void done(); };
template <class T>
concept has_done = (derivable<T> && !requires { &both<T, done_probe>::done; }) ||
    (!derivable<T> && requires { &T::done; });
struct server_reply_probe { void server_reply(); };
template <class T>
concept has_server_reply = (derivable<T> && !requires { &both<T, server_reply_probe>::server_reply; }) ||
    (!derivable<T> && requires { &T::server_reply; });
struct earliest_start_probe { void earliest_start(); };
template <class T>
concept has_earliest_start = (derivable<T> && !requires { &both<T, earliest_start_probe>::earliest_start; }) ||
    (!derivable<T> && requires { &T::earliest_start; });
struct read_extend_probe { void read_extend(); };
template <class T>
concept has_read_extend = (derivable<T> && !requires { &both<T, read_extend_probe>::read_extend; }) ||
    (!derivable<T> && requires { &T::read_extend; });
struct extend_batch_probe { void extend_batch(); };
template <class T>
concept has_extend_batch = (derivable<T> && !requires { &both<T, extend_batch_probe>::extend_batch; }) ||
    (!derivable<T> && requires { &T::extend_batch; });
struct read_extend_batch_probe { void read_extend_batch(); };
template <class T>
concept has_read_extend_batch = (derivable<T> && !requires { &both<T, read_extend_batch_probe>::read_extend_batch; }) ||
    (!derivable<T> && requires { &T::read_extend_batch; });
struct withdraw_probe { void withdraw(); };
template <class T>
concept has_withdraw = (derivable<T> && !requires { &both<T, withdraw_probe>::withdraw; }) ||
    (!derivable<T> && requires { &T::withdraw; });
struct fence_call_probe { void fence_call(); };
template <class T>
concept has_fence_call = (derivable<T> && !requires { &both<T, fence_call_probe>::fence_call; }) ||
    (!derivable<T> && requires { &T::fence_call; });
struct refresh_call_probe { void refresh_call(); };
template <class T>
concept has_refresh_call = (derivable<T> && !requires { &both<T, refresh_call_probe>::refresh_call; }) ||
    (!derivable<T> && requires { &T::refresh_call; });
struct read_refresh_probe { void read_refresh(); };
template <class T>
concept has_read_refresh = (derivable<T> && !requires { &both<T, read_refresh_probe>::read_refresh; }) ||
    (!derivable<T> && requires { &T::read_refresh; });

}  // namespace detail::hook_names

namespace contract {

template <class O>
concept ownership_fencing = detail::fencing_ownership<O>;

}  // namespace contract
}  // namespace dlock

// The rule table builds on the hooks (queues(), hands_off()).
#include <dlock/rules.hpp>
