// How policies talk to Redis from a lock coroutine: one completion token for
// every command, (error, reply) pairs, and the strict readings of replies
// that no policy may take for a verdict they do not carry.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <dlock/concepts.hpp>

namespace dlock::detail {

/// The completion token for every Redis command a lock coroutine sends: a
/// tuple, and no cancellation. Cancelling an acquire stops its waiting, never
/// a command half way: a try that was queued still runs and is answered, so
/// the acquire knows whether it won (and gives the lock back if it did).
inline auto uncancellable() {
  return asio::bind_cancellation_slot(asio::cancellation_slot(), asio::as_tuple(asio::use_awaitable));
}

/// Runs a script and gives (error, reply) to a coroutine (routed by its
/// first key). A blocking caller's command goes out on its own thread.
template <class B>
asio::awaitable<std::pair<error_code, redis::value>> eval(B& backend, const redis::script& s,
                                                          std::vector<std::string> keys,
                                                          std::vector<std::string> args) {
  if constexpr (contract::backend_blocking<B>) {
    if (auto out = backend.blocking_eval(s, keys, args)) co_return std::move(*out);
  }
  auto [ec, v] = co_await backend.async_eval(s, std::move(keys), std::move(args), uncancellable());
  co_return std::pair{ec, std::move(v)};
}

/// Sends a pipeline, routed by `key` (every command of it names keys in
/// that key's slot), and gives (error, replies) to a coroutine.
template <class B>
asio::awaitable<std::pair<error_code, redis::response>> exec(B& backend, std::string_view key, redis::request req) {
  if constexpr (contract::backend_blocking<B>) {
    if (auto out = backend.blocking_exec(key, req)) co_return std::move(*out);
  }
  auto [ec, r] = co_await backend.async_exec(key, std::move(req), uncancellable());
  co_return std::pair{ec, std::move(r)};
}

/// One command's reply, routed by `key`; an error reply becomes server_error.
template <class B>
asio::awaitable<std::pair<error_code, redis::value>> command(B& backend, std::string_view key, redis::request req) {
  auto [ec, r] = co_await exec(backend, key, std::move(req));
  auto out = redis::detail::single_reply(ec, r);
  co_return out;
}

/// Whether `backend` waits for replicas to acknowledge lock writes (see
/// contract::backend_acknowledging); false for a backend that cannot.
template <class B>
bool acknowledging(const B& backend) {
  if constexpr (contract::backend_acknowledging<B>) return backend.acknowledges();
  else return false;
}

/// Whether `backend` refuses a lock that cannot be acknowledged (not
/// owner-checked) rather than running it unacknowledged: its optional
/// `acknowledges_every_lock()`, else whether it acknowledges at all.
template <class B>
bool acknowledges_every_lock(const B& backend) {
  if constexpr (requires { { backend.acknowledges_every_lock() } -> std::convertible_to<bool>; })
    return backend.acknowledges_every_lock();
  else return acknowledging(backend);
}

/// A write that takes or extends a lock, routed by `key`. On a backend
/// that acknowledges writes it goes with `WAIT` right behind it, on a
/// connection where no other lock's commands wait (a blocking caller's own,
/// or an acknowledgement lane), and `acks` receives what the replicas
/// acknowledged; elsewhere it is exec() and `acks` says nothing was asked.
template <class B>
asio::awaitable<std::pair<error_code, redis::response>> acknowledged_exec(B& backend, std::string_view key,
                                                                          redis::replica_acks& acks,
                                                                          redis::request req) {
  acks = {};
  if constexpr (contract::backend_acknowledging<B>) {
    if (backend.acknowledges()) {
      if constexpr (contract::backend_blocking_acknowledging<B>) {
        if (auto out = backend.blocking_exec_acknowledged(key, req)) {
          auto& [ec, r, got] = *out;
          acks = got;
          co_return std::pair{ec, std::move(r)};
        }
      }
      auto [ec, r, got] = co_await backend.async_exec_acknowledged(key, std::move(req), uncancellable());
      acks = got;
      co_return std::pair{ec, std::move(r)};
    }
  }
  co_return co_await exec(backend, key, std::move(req));
}

/// A script that takes or extends a lock, as acknowledged_exec (routed by
/// its first key): by SHA, and once by its source after a NOSCRIPT reply.
/// An error reply is server_error with the reply as the value, as eval()
/// gives it.
template <class B>
asio::awaitable<std::pair<error_code, redis::value>> acknowledged_eval(B& backend, redis::replica_acks& acks,
                                                                       const redis::script& s,
                                                                       std::vector<std::string> keys,
                                                                       std::vector<std::string> args) {
  if (!acknowledging(backend)) {
    acks = {};
    co_return co_await eval(backend, s, std::move(keys), std::move(args));
  }
  const std::string key = keys.empty() ? std::string() : keys.front();
  redis::request req;
  redis::detail::push_eval(req, "EVALSHA", s.sha1(), keys, args);
  auto [ec, r] = co_await acknowledged_exec(backend, key, acks, std::move(req));
  if (!ec && r.size() == 1 && redis::detail::is_noscript(r[0])) {
    redis::request again;
    redis::detail::push_eval(again, "EVAL", s.source(), keys, args);
    std::tie(ec, r) = co_await acknowledged_exec(backend, key, acks, std::move(again));
  }
  co_return redis::detail::single_reply(ec, r);
}

/// Notes on `rec` the server's own words when a command's error `ec` is
/// server_error (its error reply `v`): the lock puts them in its error
/// message, where an ACL refusal ("NOPERM ...") says what was refused.
inline void note(hold_record& rec, const error_code& ec, const redis::value& v) {
  if (ec == error::server_error && v.is_error()) rec.server_reply = v.str;
}

/// `words` when `ec` is server_error, else nothing: the server's words go
/// with the error they explain, never with another one. dlock's own words
/// (own_words: a quorum naming the nodes that did not answer) go with any
/// error.
inline std::string words_for(const error_code& ec, std::string words) {
  if (ec && words.starts_with(own_words_prefix)) return words;
  return ec == error::server_error ? std::move(words) : std::string();
}

/// server_error for the error reply `reply` (one of a pipeline's), noting
/// the server's words on `rec` as note() does.
inline error_code refused(hold_record& rec, const redis::value& reply) {
  rec.server_reply = reply.str;
  return make_error_code(error::server_error);
}

/// The integer a reply carries, or nullopt when it is of another type (a
/// reply a policy does not expect is never read as a verdict).
inline std::optional<std::int64_t> integer_of(const redis::value& v) {
  if (v.type != redis::kind::integer) return std::nullopt;
  return v.integer;
}

/// What a release by `DEL name` found: 1 released, 0 the key was gone
/// (lost); any other reply is no verdict.
inline std::pair<error_code, release_outcome> deleted(const error_code& ec, const redis::value& v) {
  if (ec) return {ec, release_outcome::lease_lost};
  auto n = integer_of(v);
  if (n == 1) return {error_code{}, release_outcome::released};
  if (n == 0) return {error_code{}, release_outcome::lease_lost};
  return {make_error_code(error::unexpected_reply), release_outcome::lease_lost};
}

/// What a counting release script answered (ReentrantHash, ReadWrite): 0
/// still held (one reentrant hold ended), 1 released, 2 the key was gone
/// (lost), 3 another owner's; any other reply is no verdict.
inline std::pair<error_code, release_outcome> counted_release(const error_code& ec, const redis::value& v) {
  if (ec) return {ec, release_outcome::lease_lost};
  switch (integer_of(v).value_or(-1)) {
    case 0: return {error_code{}, release_outcome::still_held};
    case 1: return {error_code{}, release_outcome::released};
    case 2: return {error_code{}, release_outcome::lease_lost};
    case 3: return {error_code{}, release_outcome::not_owner};
    default: return {make_error_code(error::unexpected_reply), release_outcome::lease_lost};
  }
}

/// A compare-and-delete release's outcome, read as a retry must: the key
/// can hold the hold's token only until its release runs, so a retry
/// (after outcome_unknown) that finds it gone or another's reports
/// released when the first attempt left while the hold was still safe to
/// trust (`first_in_lease`), and lease_lost when it left later.
inline std::pair<error_code, release_outcome> retried_release(bool retry, bool first_in_lease,
                                                              std::pair<error_code, release_outcome> result) {
  if (retry && first_in_lease && !result.first && result.second == release_outcome::lease_lost)
    result.second = release_outcome::released;
  return result;
}

/// Whether a failed command may have run (see condition::may_have_run).
/// Every other error means it was never sent, or the server refused it and
/// changed nothing.
inline bool may_have_run(const error_code& ec) { return ec == std::error_condition(condition::may_have_run); }

/// The `resolve` of an ownership that cannot tell whether a try whose reply
/// was lost won: the try stays outcome_unknown (the host reports the
/// original error).
inline asio::awaitable<std::pair<error_code, bool>> cannot_resolve() {
  co_return std::pair{make_error_code(error::outcome_unknown), false};
}

}  // namespace dlock::detail
