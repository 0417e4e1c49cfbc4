// The contracts of concepts.hpp as sentences: Lock instantiates policy_checks
// so that a policy missing an operation is named, with its family, in the
// first error a user sees.
#pragma once

#include <dlock/concepts.hpp>
#include <dlock/detail/named_wake.hpp>

namespace dlock::detail {

/// W's waiter on B, or void when W has none (its own check says so).
template <class W, class B>
struct waiter_of {
  using type = void;
};
template <class W, class B>
  requires requires { typename W::template waiter<B>; }
struct waiter_of<W, B> {
  using type = typename W::template waiter<B>;
};

template <class B, class O, class R, class W>
struct policy_checks {
  // Backend.
  static_assert(contract::backend_executor<B>, "dlock::Lock backend: lacks get_executor() returning an Asio executor (where lock operations run)");
  static_assert(contract::backend_client_id<B>, "dlock::Lock backend: lacks client_id() returning a string (the first part of owner ids)");
  static_assert(contract::backend_on_io_thread<B>, "dlock::Lock backend: lacks on_io_thread() returning bool (where blocking would deadlock)");
  static_assert(contract::backend_exec<B>, "dlock::Lock backend: lacks async_exec(key, redis::request, token) completing with (error_code, redis::response) (to send a pipeline routed by a key)");
  static_assert(contract::backend_eval<B>, "dlock::Lock backend: lacks async_eval(script, keys, args, token) completing with (error_code, redis::value) (to run a Lua script)");
  static_assert(contract::backend_eval_all<B>, "dlock::Lock backend: lacks async_eval_all(vector<script_call>, token) completing with (vector<redis::call_result>) (to run many scripts in one round trip, as the watchdog does)");
  static_assert(contract::backend_subscribe<B>, "dlock::Lock backend: lacks async_subscribe(key, channel, listener, token) completing with (error_code, redis::subscription) (for pub/sub waits)");
  static_assert(contract::backend_services<B>, "dlock::Lock backend: lacks use_service<S>() returning S& (one renewal timer and lease watch per backend)");

  // Ownership.
  static_assert(contract::ownership_traits<O>, "dlock::Lock ownership policy: lacks its traits (policy_name, owner_checked, publishes_on_release, reentrant, needs_lease) or is not nothrow-movable");
  static_assert(contract::ownership_validate<O>, "dlock::Lock ownership policy: lacks validate() returning std::error_code");
  static_assert(contract::ownership_make_owner<O>, "dlock::Lock ownership policy: lacks make_owner(client_id, owner_key) returning the owner value");
  static_assert(contract::ownership_try_acquire<O, B>, "dlock::Lock ownership policy: lacks try_acquire(backend, record&) returning awaitable<pair<error_code, attempt>>");
  static_assert(contract::ownership_release<O, B>, "dlock::Lock ownership policy: lacks release(backend, record&) returning awaitable<pair<error_code, release_outcome>>");
  static_assert(contract::ownership_resolve<O, B>, "dlock::Lock ownership policy: lacks resolve(backend, const record&) returning awaitable<pair<error_code, bool>> (answer an error when it cannot tell)");
  static_assert(contract::ownership_extend<O>, "dlock::Lock ownership policy: says owner_checked but lacks extend_call(const record&) returning script_call");
  static_assert(contract::ownership_channel<O>, "dlock::Lock ownership policy: lacks static channel(name) returning the release channel (empty when it publishes nothing)");

  // Renewal.
  static_assert(contract::renewal_traits<R>, "dlock::Lock renewal policy: lacks its traits (policy_name, expires, renews)");
  static_assert(contract::renewal_times<R>, "dlock::Lock renewal policy: lacks lease(), period() or margin() returning milliseconds");
  static_assert(contract::renewal_validate<R>, "dlock::Lock renewal policy: lacks validate() returning std::error_code");
  static_assert(contract::renewal_keeper<R, B>, "dlock::Lock renewal policy: lacks keeper<Backend> constructible from (const policy&, backend&) with pause(const hold_record*) and end(const hold_record*)");
  static_assert(contract::renewal_start<R, B, O>, "dlock::Lock renewal policy: its keeper lacks start(shared_ptr<hold_record>, const ownership&)");

  // Wait.
  static_assert(contract::wait_traits<W>, "dlock::Lock wait policy: lacks its traits (policy_name, needs_publish)");
  static_assert(contract::wait_validate<W>, "dlock::Lock wait policy: lacks validate() returning std::error_code");
  static_assert(contract::wait_waiter<W, B>, "dlock::Lock wait policy: lacks waiter<Backend> constructible from (const policy&, backend&, name, channel)");
  static_assert(contract::wait_prepare<W, B>, "dlock::Lock wait policy: its waiter lacks prepare() returning awaitable<error_code>");
  static_assert(contract::wait_wait<W, B>, "dlock::Lock wait policy: its waiter lacks wait(optional<milliseconds>, steady_clock::time_point) returning awaitable<error_code>");

  // A member named as a hook must match the hook (see hooks.hpp): the host
  // would skip one it cannot call, silently.
  using waiter = typename waiter_of<W, B>::type;
  static_assert(!hook_names::has_before_try<waiter> || contract::waiter_before_try<W, B, O>, "dlock::Lock wait policy: its waiter's before_try does not match the hook, so it would never be called; expected before_try(const Ownership&, record&, steady_clock::time_point deadline) returning asio::awaitable<void>");
  static_assert(!hook_names::has_granted<waiter> || contract::waiter_granted<W, B, O>, "dlock::Lock wait policy: its waiter's granted does not match the hook, so it would never be called; expected granted(const Ownership&, record&) returning bool");
  static_assert(!hook_names::has_after_try<waiter> || contract::waiter_after_try<W, B, O>, "dlock::Lock wait policy: its waiter's after_try does not match the hook, so it would never be called; expected after_try(const Ownership&, const std::shared_ptr<record>&, const attempt&)");
  static_assert(!hook_names::has_leave<waiter> || contract::waiter_leave<W, B, O>, "dlock::Lock wait policy: its waiter's leave does not match the hook, so it would never be called; expected leave(const Ownership&, const std::shared_ptr<record>&, ext::background&) returning asio::awaitable<bool>");
  static_assert(!hook_names::has_done<waiter> || contract::waiter_done<W, B>, "dlock::Lock wait policy: its waiter's done does not match the hook, so it would never be called; expected done() callable with no arguments");
  static_assert(!hook_names::has_server_reply<waiter> || contract::waiter_server_reply<W, B>, "dlock::Lock wait policy: its waiter's server_reply does not match the hook, so it would never be called; expected server_reply() const returning a string (the server's words after a refused prepare() or wait())");
  static_assert(!hook_names::has_earliest_start<O> || contract::ownership_earliest_start<O>, "dlock::Lock ownership policy: its earliest_start does not match the hook, so it would never be called; expected static earliest_start(const record&, steady_clock::time_point sent) returning steady_clock::time_point");
  static_assert(!hook_names::has_read_extend<O> || contract::ownership_reads_extend<O>, "dlock::Lock ownership policy: its read_extend does not match the hook, so it would never be called; expected static read_extend(const redis::value&) returning renewal_verdict");
  static_assert(!hook_names::has_extend_batch<O> || contract::ownership_extend_batch<O>, "dlock::Lock ownership policy: its extend_batch does not match the hook, so renewals would never be batched; expected static extend_batch(const std::vector<const script_call*>&) returning script_call");
  static_assert(!hook_names::has_read_extend_batch<O> || contract::ownership_reads_extend_batch<O>, "dlock::Lock ownership policy: its read_extend_batch does not match the hook, so it would never be called; expected static read_extend_batch(const redis::value&, std::size_t n) returning std::vector<renewal_verdict>");
  static_assert(!hook_names::has_read_extend_batch<O> || hook_names::has_extend_batch<O>, "dlock::Lock ownership policy: has read_extend_batch but no extend_batch, so it would never be called");
  static_assert(!hook_names::has_extend_batch<O> || O::owner_checked, "dlock::Lock ownership policy: has extend_batch but is not owner_checked, so nothing would renew with it");
  static_assert(!hook_names::has_fence_call<O> || contract::ownership_fencing<O>, "dlock::Lock ownership policy: its fence_call does not match the hook, so fencing tokens would never be taken; expected a `fencing` member (std::optional<fencing_tokens>) and fence_call(const hold_record&) const returning script_call");
  static_assert(!hook_names::has_withdraw<O> || ownership_withdraw<O, B>, "dlock::Lock ownership policy: its withdraw does not match the hook, so it would never be called; expected withdraw(backend&, record&) const returning asio::awaitable<error_code>");
  static_assert(!names_waiters<O> || contract::ownership_forget_waiter<O, B>, "dlock::Lock ownership policy: its hold_state is a named_waiter but it lacks forget_waiter(backend, const record&, bool owed) const returning asio::awaitable<error_code>, so a waiter that gives up would leave its number in the line");
  static_assert(queues<O>() || !(hook_names::has_leave<O> || hook_names::has_refresh_call<O> || hook_names::has_read_refresh<O>), "dlock::Lock ownership policy: has leave, refresh_call or read_refresh, which only a queueing ownership's line uses, but does not say `static constexpr bool queues = true`, so they would never be called");

  // The hand-off: a queueing ownership's line, a handing-off waiter's hooks.
  static_assert(!queues<O>() || contract::ownership_leave<O, B>, "dlock::Lock ownership policy: says queues but lacks leave(backend, record&) returning awaitable<pair<error_code, bool>>");
  static_assert(!queues<O>() || contract::ownership_refresh<O>, "dlock::Lock ownership policy: says queues but lacks static refresh_call(name, waiters) returning script_call and read_refresh(reply, n) returning vector<renewal_verdict>");
  static_assert(!hands_off<W>() || contract::wait_hand_off<W, B, O>, "dlock::Lock wait policy: says hands_off but its waiter lacks one of before_try(o, rec, deadline), granted(o, rec), after_try(o, rec_ptr, attempt), leave(o, rec_ptr, background) and done() (see concepts.hpp, Waiter hooks)");

  static constexpr bool ok = Backend<B> && Ownership<O, B> && Renewal<R, B> && contract::renewal_start<R, B, O> && Wait<W, B> &&
                            (!queues<O>() || (contract::ownership_leave<O, B> && contract::ownership_refresh<O>)) &&
                            (!hands_off<W>() || contract::wait_hand_off<W, B, O>);
};

}  // namespace dlock::detail
