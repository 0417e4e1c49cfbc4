// The four policy families as C++20 concepts and the vocabulary they share;
// with hooks.hpp (each family's optional hooks) and rules.hpp (which
// combinations can work), both included at its end.
#pragma once

#include <chrono>
#include <concepts>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <dlock/detail/hold_record.hpp>
#include <dlock/error.hpp>
#include <dlock/types.hpp>
#include <dlock/redis/acknowledged.hpp>
#include <dlock/redis/error_code.hpp>
#include <dlock/redis/request.hpp>
#include <dlock/redis/script_cache.hpp>
#include <dlock/redis/subscription.hpp>

namespace dlock {

namespace asio = boost::asio;
using redis::error_code;
using std::chrono::milliseconds;

// ---- The contracts ---------------------------------------------------------
//
// What the host (Lock) calls on each family, one concept per operation, so
// that a policy missing one is rejected by name where Lock is instantiated
// (detail/policy_checks.hpp turns each into a sentence). The family
// concepts below are their conjunctions.

namespace contract {

/// The token every command a lock sends completes with (see detail::uncancellable).
using command_token = asio::as_tuple_t<asio::use_awaitable_t<>>;

// Backend: an executor, a client id, commands, scripts, subscriptions, a
// way to tell its own threads, and one service of each type per backend.
// Every call names the key it routes by: a backend over several servers
// sends it to the server that holds that key (a request's commands, and a
// script's KEYS, all lie in the slot of that key; KEYS[0] routes a script).
template <class B>
concept backend_executor = requires(const B& b) {
  { b.get_executor() } -> std::convertible_to<asio::any_io_executor>;
};
template <class B>
concept backend_client_id = requires(const B& b) {
  { b.client_id() } -> std::convertible_to<std::string>;
};
template <class B>
concept backend_on_io_thread = requires(const B& b) {
  { b.on_io_thread() } -> std::convertible_to<bool>;
};
/// A pipeline routed by `key`: `void(error_code, redis::response)`.
template <class B>
concept backend_exec = requires(B& b, std::string_view key, redis::request req) {
  { b.async_exec(key, req, command_token{}) } -> std::same_as<asio::awaitable<std::tuple<error_code, redis::response>>>;
};
/// One script call, routed by its first key: `void(error_code, redis::value)`.
template <class B>
concept backend_eval = requires(B& b, const redis::script& s, std::vector<std::string> v) {
  { b.async_eval(s, v, v, command_token{}) } -> std::same_as<asio::awaitable<std::tuple<error_code, redis::value>>>;
};
/// Many script calls in one round trip per server, each routed by its first
/// key: `void(std::vector<redis::call_result>)`, one result per call, in
/// order, each with its own error (one unreachable server costs only its
/// own calls' verdicts).
template <class B>
concept backend_eval_all = requires(B& b, std::vector<script_call> calls) {
  { b.async_eval_all(calls, command_token{}) } -> std::same_as<asio::awaitable<std::tuple<std::vector<redis::call_result>>>>;
};
/// Subscribes to `channel`, whose messages are published by scripts on
/// `key`: `void(error_code, redis::subscription)`, completing once a
/// message published from then on cannot be missed.
template <class B>
concept backend_subscribe = requires(B& b, std::string_view key, std::string channel, redis::listener l) {
  { b.async_subscribe(key, channel, l, command_token{}) } -> std::same_as<asio::awaitable<std::tuple<error_code, redis::subscription>>>;
};
/// Optional: `static constexpr bool cross_slot_scripts`, true when one
/// script may name keys of any slots (one server holds them all: the
/// watchdog then merges renewals regardless of slot); without it, batches
/// are per slot (detail::cross_slot_scripts).
/// Optional: the blocking fast path. While a `B::blocking_scope` made from
/// the backend lives on a thread, the lock runs its operation on that
/// thread, and `blocking_exec`/`blocking_eval` send a command from it
/// directly (on connections of the backend's choosing), answering nullopt
/// when they cannot (no scope here, or nothing could be written: the
/// command then goes the asynchronous way).
template <class B>
concept backend_blocking =
    std::constructible_from<typename B::blocking_scope, B&> &&
    requires(B& b, std::string_view key, const redis::request& req, const redis::script& s,
             const std::vector<std::string>& v) {
      { b.blocking_exec(key, req) } -> std::same_as<std::optional<std::pair<error_code, redis::response>>>;
      { b.blocking_eval(s, v, v) } -> std::same_as<std::optional<std::pair<error_code, redis::value>>>;
    };
/// Optional: replica acknowledgement. `acknowledges()` says whether it is
/// on (a backend may have it off at run time); then a write that takes or
/// extends a lock goes through `async_exec_acknowledged(key, req, token)`
/// (`void(error_code, redis::response, redis::replica_acks)`: the replies
/// to `req` and what a WAIT right behind it found) and the watchdog's
/// batches through `async_eval_all_acknowledged(calls, token)`
/// (`void(std::vector<redis::call_result>, redis::replica_acks)`). A
/// backend without them never acknowledges.
template <class B>
concept backend_acknowledging = requires(B& b, const B& cb, std::string_view key, redis::request req,
                                         std::vector<script_call> calls) {
  { cb.acknowledges() } -> std::convertible_to<bool>;
  { b.async_exec_acknowledged(key, req, command_token{}) } -> std::same_as<asio::awaitable<std::tuple<error_code, redis::response, redis::replica_acks>>>;
  { b.async_eval_all_acknowledged(calls, command_token{}) } -> std::same_as<asio::awaitable<std::tuple<std::vector<redis::call_result>, redis::replica_acks>>>;
};
/// Optional: the blocking fast path of an acknowledged write (nullopt: send
/// it the asynchronous way).
template <class B>
concept backend_blocking_acknowledging = requires(B& b, std::string_view key, const redis::request& req) {
  { b.blocking_exec_acknowledged(key, req) } -> std::same_as<std::optional<std::tuple<error_code, redis::response, redis::replica_acks>>>;
};
/// Optional: a quorum of independent servers that decide by majority
/// (RedlockBackend). It offers its nodes, each a backend of `node_type` on
/// which an ownership runs as on one server: `node_count()` (odd, at least
/// 3), `node(i)`, `node_name(i)` (for errors: "127.0.0.1:7000"),
/// `node_available(i)` (false while its connection is known to be down:
/// its vote is lost at once, nothing is sent) and `reply_timeout()` (how
/// long a node's answer is waited for before its vote counts as lost). Its
/// own calls run on every node, and their replies hold one element per
/// node. It names the adapter the host runs in place of each ownership
/// (`template <class O> using ownership_for = ownership::Quorum<O>;`), and
/// the rule table holds it to what a quorum can do.
template <class B>
concept backend_quorum = requires(B& b, const B& cb, std::size_t i) {
  typename B::node_type;
  { cb.node_count() } -> std::convertible_to<std::size_t>;
  { b.node(i) } -> std::same_as<typename B::node_type&>;
  { cb.node_name(i) } -> std::convertible_to<std::string>;
  { cb.node_available(i) } -> std::convertible_to<bool>;
  { cb.reply_timeout() } -> std::convertible_to<milliseconds>;
};
/// A stand-in for the services the host keeps per backend (the watchdog's
/// renewals, the lease watch): made from the backend, returned by reference.
struct service_probe {
  /// Made from any backend, as a service is.
  template <class B>
  explicit service_probe(B&) {}
};
template <class B>
concept backend_services = requires(B& b) {
  { b.template use_service<service_probe>() } -> std::same_as<service_probe&>;
};

// Ownership: its traits, its owner value, and the three Redis operations.
template <class O>
concept ownership_traits = std::is_nothrow_move_constructible_v<O> && requires {
  { O::policy_name } -> std::convertible_to<std::string_view>;
  { O::owner_checked } -> std::convertible_to<bool>;
  { O::publishes_on_release } -> std::convertible_to<bool>;
  { O::reentrant } -> std::convertible_to<bool>;
  { O::needs_lease } -> std::convertible_to<bool>;
};
template <class O>
concept ownership_validate = requires(const O& o) {
  { o.validate() } -> std::same_as<std::error_code>;
};
template <class O>
concept ownership_make_owner = requires(const O& o, const std::string& id) {
  { o.make_owner(id, id) } -> std::convertible_to<std::string>;
};
// An ownership's operations take its record: detail::record_t<O>, the
// hold_record with the ownership's own `hold_state` when it names one.
template <class O, class B>
concept ownership_try_acquire = requires(const O& o, B& b, detail::record_t<O>& rec) {
  { o.try_acquire(b, rec) } -> std::same_as<asio::awaitable<std::pair<error_code, attempt>>>;
};
template <class O, class B>
concept ownership_release = requires(const O& o, B& b, detail::record_t<O>& rec) {
  { o.release(b, rec) } -> std::same_as<asio::awaitable<std::pair<error_code, release_outcome>>>;
};
/// Did the try whose reply was lost win? (An ownership that cannot tell
/// answers with an error: see detail::cannot_resolve.)
template <class O, class B>
concept ownership_resolve = requires(const O& o, B& b, const detail::record_t<O>& rec) {
  { o.resolve(b, rec) } -> std::same_as<asio::awaitable<std::pair<error_code, bool>>>;
};
/// Needed when `owner_checked`: the script the watchdog runs to extend.
/// Its reply is read by `O::read_extend(value)` when the ownership has one
/// (a renewal_verdict), else as the usual 1 (extended) or 0 (gone).
template <class O>
concept ownership_extend = !O::owner_checked || requires(const O& o, const detail::record_t<O>& rec) {
  { o.extend_call(rec) } -> std::same_as<script_call>;
};
template <class O>
concept ownership_reads_extend = requires(const redis::value& v) {
  { O::read_extend(v) } -> std::same_as<renewal_verdict>;
};
/// Optional, with `owner_checked`: many holds' extend_calls merged into one
/// script call (the watchdog renews a batch with it), its reply read by
/// `O::read_extend_batch(value, n)` when the ownership has one, else as an
/// array of n usual replies (detail::read_extend_replies).
template <class O>
concept ownership_extend_batch = requires(const std::vector<const script_call*>& calls) {
  { O::extend_batch(calls) } -> std::same_as<script_call>;
};
template <class O>
concept ownership_reads_extend_batch = requires(const redis::value& v, std::size_t n) {
  { O::read_extend_batch(v, n) } -> std::same_as<std::vector<renewal_verdict>>;
};
/// The channel a release publishes on (empty: it publishes nothing).
template <class O>
concept ownership_channel = requires(std::string_view name) {
  { O::channel(name) } -> std::convertible_to<std::string>;
};

// Renewal: its traits, its numbers, and its keeper (the behaviour).
template <class R>
concept renewal_traits = requires {
  { R::policy_name } -> std::convertible_to<std::string_view>;
  { R::expires } -> std::convertible_to<bool>;
  { R::renews } -> std::convertible_to<bool>;
};
template <class R>
concept renewal_times = requires(const R& r) {
  { r.lease() } -> std::same_as<milliseconds>;
  { r.period() } -> std::same_as<milliseconds>;
  { r.margin() } -> std::same_as<milliseconds>;
};
template <class R>
concept renewal_validate = requires(const R& r) {
  { r.validate() } -> std::same_as<std::error_code>;
};
/// A keeper per lock object, made from the policy and the backend (see
/// keepers.hpp), told when a hold pauses for its release and when it ends.
template <class R, class B>
concept renewal_keeper = std::constructible_from<typename R::template keeper<B>, const R&, B&> &&
                         requires(typename R::template keeper<B>& k, const detail::hold_record* rec) {
                           k.pause(rec);
                           k.end(rec);
                         };
/// ... and when a hold of ownership `O` starts.
template <class R, class B, class O>
concept renewal_start = requires(typename R::template keeper<B>& k, const std::shared_ptr<detail::hold_record>& rec,
                                 const O& o) { k.start(rec, o); };

// Wait: its traits, and a waiter per acquire operation, made from the
// policy, the backend, the lock's name and its ownership's release channel
// (empty when the ownership publishes nothing).
template <class W>
concept wait_traits = requires {
  { W::policy_name } -> std::convertible_to<std::string_view>;
  { W::needs_publish } -> std::convertible_to<bool>;
};
template <class W>
concept wait_validate = requires(const W& w) {
  { w.validate() } -> std::same_as<std::error_code>;
};
template <class W, class B>
concept wait_waiter =
    std::constructible_from<typename W::template waiter<B>, const W&, B&, const std::string&, const std::string&>;
template <class W, class B>
concept wait_prepare = requires(typename W::template waiter<B>& w) {
  { w.prepare() } -> std::same_as<asio::awaitable<error_code>>;
};
template <class W, class B>
concept wait_wait = requires(typename W::template waiter<B>& w, std::optional<milliseconds> held_for,
                             detail::steady::time_point deadline) {
  { w.wait(held_for, deadline) } -> std::same_as<asio::awaitable<error_code>>;
};

}  // namespace contract

/// Where the keys live: runs commands and scripts, subscribes to channels,
/// gives an executor, a client id and per-backend services, and tells its
/// own threads (where blocking would deadlock). RedisBackend is the one
/// server case.
///
/// Every completion follows one outcome model: a command never written is a
/// plain error (nothing ran); one written and not answered is
/// outcome_unknown. And one ordering rule, which the watchdog's safety rests
/// on: calls that route by the same key reach its server in the order they
/// were made, and complete in that order (after a renewal is taken off, the
/// release sent next cannot be overtaken by it).
template <class B>
concept Backend = contract::backend_executor<B> && contract::backend_client_id<B> &&
                  contract::backend_on_io_thread<B> && contract::backend_exec<B> && contract::backend_eval<B> &&
                  contract::backend_eval_all<B> && contract::backend_subscribe<B> && contract::backend_services<B>;

/// Who holds the lock, and the Redis side of acquiring, releasing and
/// extending it on backend `B`. Each ownership policy states what it can do:
/// - `owner_checked`: release and extend act only if the caller still owns
///   the key (so renewal is safe and a late release cannot delete another
///   owner's lock); it then gives `extend_call`;
/// - `publishes_on_release`: release publishes on `channel(name)` (which
///   is empty otherwise);
/// - `reentrant`: the same owner may acquire again and must release as often;
/// - `needs_lease`: the algorithm does not work without an expiry.
/// `resolve` tells whether a try whose reply was lost won, or answers with
/// an error when the ownership cannot tell (then the try stays
/// outcome_unknown).
template <class O, class B>
concept Ownership = contract::ownership_traits<O> && contract::ownership_validate<O> &&
                    contract::ownership_make_owner<O> && contract::ownership_try_acquire<O, B> &&
                    contract::ownership_release<O, B> && contract::ownership_resolve<O, B> &&
                    contract::ownership_extend<O> && contract::ownership_channel<O>;

/// How long a hold lasts and who extends it, on backend `B`: `expires`
/// says whether the key gets a lease at all, `lease()` is its time to live
/// (zero: none); `renews` says whether it is extended every `period()`
/// while held (the rule table then asks for an owner-checked ownership);
/// `margin()` is how long before the lease's end the hold counts as lost
/// (see loss_margin). Its `keeper<B>` does the work: the host calls its
/// start, pause and end (keepers.hpp has the three that dlock's policies
/// use).
template <class R, class B>
concept Renewal = contract::renewal_traits<R> && contract::renewal_times<R> && contract::renewal_validate<R> &&
                  contract::renewal_keeper<R, B>;

/// What to do after a failed try: `needs_publish` says it waits for the
/// release message (the rule table then asks for an ownership that
/// publishes). Its `waiter<B>` is made once per acquire; `prepare()` runs
/// before the first wait (and only if the first try failed), then
/// `wait(held_for, deadline)` between tries; a wait that gives up (TryOnce)
/// returns not_acquired. A waiter may also have hooks around each try (see
/// "Waiter hooks" below).
template <class W, class B>
concept Wait = contract::wait_traits<W> && contract::wait_validate<W> && contract::wait_waiter<W, B> &&
               contract::wait_prepare<W, B> && contract::wait_wait<W, B>;

}  // namespace dlock

// The hooks beyond each family's contract, which build on the contracts
// above (and include the rule table, which builds on them).
#include <dlock/hooks.hpp>
